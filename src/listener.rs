//! The accept loop both listeners share (MySQL clients in [`crate::server`],
//! Redis-protocol clients in [`crate::resp::server`]): a connection limit,
//! a backoff on accept errors, and graceful shutdown; and the listening
//! socket itself ([`bind`], [`set_nodelay`]).
//!
//! [`serve`] accepts until `shutdown` resolves, then stops accepting, tells
//! every connection to finish (the `watch` flag each connection gets turns
//! true) and waits up to the drain timeout before cutting the rest.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use crate::workers::Workers;

/// Listens on `addr` with room in the kernel's accept queue for `backlog`
/// connections (capped at `net.core.somaxconn`; at least 128, std's).
/// Given the listener's connection limit, a burst of that many clients
/// connecting at once is queued instead of overflowing: a connection the
/// kernel then completes with a SYN cookie but cannot queue is never
/// accepted, and its client, which waits for the server to speak first
/// (the MySQL greeting), hangs (seen with 4000 clients at once and std's
/// backlog of 128).
pub fn bind(addr: SocketAddr, backlog: usize) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As std and tokio bind: a restarted server gets its port back at once.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog.clamp(128, 65535) as u32)
}

/// Sets TCP_NODELAY on the listening socket (replies are small and
/// latency-bound); `true` when the sockets it accepts inherit it, as on
/// Linux, so that they need no `setsockopt` of their own.
pub fn set_nodelay(listener: &TcpListener) -> bool {
    let set = socket2::SockRef::from(listener).set_tcp_nodelay(true);
    cfg!(target_os = "linux") && set.is_ok()
}

/// How often finished connections are reaped when no new one comes.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// Takes the connections that ended off `conns` (logging a panic).
fn reap_finished(conns: &mut JoinSet<()>, name: &str) {
    while let Some(done) = conns.try_join_next() {
        if let Err(e) = done {
            if e.is_panic() {
                error!(listener = name, "a connection panicked: {e}");
            }
        }
    }
}

/// What a listener is allowed.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; one more is refused.
    pub max_connections: usize,
    /// How long shutdown waits for connections to finish.
    pub drain: Duration,
    /// The listener's name in log lines (`mysql`, `resp`).
    pub name: &'static str,
}

/// An accepted connection, not yet registered with a runtime: the task
/// that serves it registers it ([`Accepted::register`]) on the thread it
/// runs on, so that its events are waited for there.
#[derive(Debug)]
pub struct Accepted(std::net::TcpStream);

impl Accepted {
    /// The connection as a tokio stream of the current runtime.
    pub fn register(self) -> io::Result<TcpStream> {
        TcpStream::from_std(self.0)
    }

    /// [`Accepted::register`] for a connection to serve: a failure is
    /// logged with the peer's address, and the connection closed.
    pub fn register_or_log(self, peer: SocketAddr) -> Option<TcpStream> {
        match self.register() {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(%peer, "cannot serve a connection: {e}");
                None
            }
        }
    }
}

/// Accepts one connection, non-blocking and close-on-exec from the start
/// (`accept4`), without registering it with this runtime.
async fn accept(listener: &AsyncFd<std::net::TcpListener>) -> io::Result<(Accepted, SocketAddr)> {
    loop {
        let mut ready = listener.readable().await?;
        let accepted = ready.try_io(|l| {
            let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
            socket2::SockRef::from(l.get_ref()).accept4(flags)
        });
        let Ok(accepted) = accepted else {
            // Not ready after all: readiness cleared, wait again.
            continue;
        };
        let (socket, addr) = accepted?;
        let peer = addr
            .as_socket()
            .ok_or_else(|| io::Error::other("accepted a connection that is not TCP/IP"))?;
        return Ok((Accepted(socket.into()), peer));
    }
}

/// The listening socket, registered for readability with this runtime.
fn wait_on(listener: std::net::TcpListener) -> io::Result<AsyncFd<std::net::TcpListener>> {
    // SAFETY: the AsyncFd owns the listener, whose descriptor stays open
    // and the same until the AsyncFd is dropped.
    unsafe { AsyncFd::register_with_interest(listener, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// Serves connections on `listener` until `shutdown` completes: `serve`
/// for each one within the limit (with the peer's address accept returned,
/// so that no connection asks the kernel for it again; its slot is the
/// permit, given back when the connection drops it), `refuse` for one
/// over it. Without `workers` one loop on this runtime accepts and serves
/// them; with `workers`, every session thread runs a loop of its own on
/// the listening socket and serves what it accepts itself, or hands it to
/// the least loaded thread ([`crate::workers`], [`Workers::place`]).
pub async fn serve<S, SF, R, RF>(
    listener: TcpListener,
    limits: Limits,
    workers: Option<Arc<Workers>>,
    shutdown: impl Future<Output = ()>,
    serve: S,
    refuse: R,
) where
    S: Fn(Accepted, SocketAddr, OwnedSemaphorePermit, watch::Receiver<bool>) -> SF
        + Clone
        + Send
        + 'static,
    SF: Future<Output = ()> + Send + 'static,
    R: Fn(Accepted) -> RF + Clone + Send + 'static,
    RF: Future<Output = ()> + Send + 'static,
{
    let name = limits.name;
    let listener = match listener.into_std() {
        Ok(l) => l,
        Err(e) => {
            error!(listener = name, "cannot wait for connections: {e}");
            return;
        }
    };
    let limit = Arc::new(Semaphore::new(limits.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let loop_on = |listener, thread| {
        let r#loop = Loop {
            limits,
            limit: limit.clone(),
            stop: stop_rx.clone(),
            thread,
            serve: serve.clone(),
            refuse: refuse.clone(),
        };
        r#loop.run(listener)
    };
    let loops = async {
        match &workers {
            None => loop_on(listener, None).await,
            Some(w) => {
                // Each thread waits on its own descriptor of the one
                // listening socket, registered with its own epoll.
                let mut loops = JoinSet::new();
                for i in 0..w.threads() {
                    match listener.try_clone() {
                        Ok(l) => {
                            loops.spawn_on(loop_on(l, Some((w.clone(), i))), w.handle(i));
                        }
                        Err(e) => error!(
                            listener = name,
                            "session thread {i} cannot wait for connections: {e}"
                        ),
                    }
                }
                // Closed as each loop stops: the socket with the last one.
                drop(listener);
                while loops.join_next().await.is_some() {}
            }
        }
    };
    tokio::pin!(loops);
    tokio::select! {
        // Every loop ended before the shutdown: none could wait (logged).
        _ = &mut loops => return,
        _ = shutdown => {}
    }
    info!(
        listener = name,
        connections = limits.max_connections - limit.available_permits(),
        "shutting down: no new connections; draining for up to {:?}",
        limits.drain
    );
    let _ = stop_tx.send(true);
    loops.await;
    info!(listener = name, "stopped");
}

/// One accept loop: its thread, what it serves with, and when to stop.
struct Loop<S, R> {
    limits: Limits,
    limit: Arc<Semaphore>,
    /// Turns true when the listener stops: the loop stops accepting, and
    /// each connection it serves is told to finish.
    stop: watch::Receiver<bool>,
    /// The session thread the loop runs on (none: the sessions run where
    /// the loop does).
    thread: Option<(Arc<Workers>, usize)>,
    serve: S,
    refuse: R,
}

impl<S, SF, R, RF> Loop<S, R>
where
    S: Fn(Accepted, SocketAddr, OwnedSemaphorePermit, watch::Receiver<bool>) -> SF,
    SF: Future<Output = ()> + Send + 'static,
    R: Fn(Accepted) -> RF,
    RF: Future<Output = ()> + Send + 'static,
{
    /// Accepts until told to stop, then waits up to the drain timeout for
    /// the connections it started before cutting the rest.
    async fn run(self, listener: std::net::TcpListener) {
        let name = self.limits.name;
        let listener = match wait_on(listener) {
            Ok(l) => l,
            Err(e) => {
                error!(listener = name, "cannot wait for connections: {e}");
                return;
            }
        };
        let mut conns = JoinSet::new();
        let mut backoff = Duration::from_millis(5);
        // Finished connections are reaped after each accept and on this
        // tick, not as each one ends: that woke this task (and tried an
        // accept) once per connection.
        let mut reap = tokio::time::interval(REAP_EVERY);
        reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = self.stop.clone();
        loop {
            let accepted = tokio::select! {
                _ = stop.wait_for(|stop| *stop) => break,
                r = accept(&listener) => r,
                _ = reap.tick() => {
                    reap_finished(&mut conns, name);
                    continue;
                }
            };
            reap_finished(&mut conns, name);
            match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(5);
                    self.start(&mut conns, stream, peer);
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep
                    // serving.
                    warn!(
                        listener = name,
                        "accept failed: {e}; retrying in {backoff:?}"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
        drop(listener);
        let drained = tokio::time::timeout(self.limits.drain, async {
            while conns.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!(
                listener = name,
                connections = conns.len(),
                "drain timeout reached; closing the remaining connections"
            );
            conns.shutdown().await;
        }
    }

    /// Starts serving (or refusing) an accepted connection.
    fn start(&self, conns: &mut JoinSet<()>, stream: Accepted, peer: SocketAddr) {
        let Ok(permit) = self.limit.clone().try_acquire_owned() else {
            // Here: a refusal is one write.
            conns.spawn((self.refuse)(stream));
            return;
        };
        let task = (self.serve)(stream, peer, permit, self.stop.clone());
        match &self.thread {
            None => {
                conns.spawn(task);
            }
            Some((w, here)) => {
                let (i, seat) = w.place(*here);
                let task = async move {
                    let _seat = seat;
                    task.await
                };
                if i == *here {
                    conns.spawn(task);
                } else {
                    conns.spawn_on(task, w.handle(i));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_burst_of_connections_past_128_is_queued_and_accepted() {
        // Not accepted while they connect: all wait in the accept queue.
        let n = 200;
        let listener = bind("127.0.0.1:0".parse().unwrap(), 1000).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        for i in 0..n {
            // Past a full queue the kernel drops the SYN (the connect
            // hangs) or answers with a cookie (the accept below hangs).
            let c = tokio::time::timeout(Duration::from_secs(30), TcpStream::connect(addr)).await;
            clients.push(c.unwrap_or_else(|_| panic!("connection {i} of {n} not queued")));
        }
        for i in 0..n {
            // A connection left out of a full queue would never come.
            let accepted = tokio::time::timeout(Duration::from_secs(30), listener.accept()).await;
            assert!(accepted.is_ok(), "connection {i} of {n} never accepted");
        }
    }

    /// Serves each connection with the name of the thread its task runs
    /// on, then holds it until the listener stops.
    async fn name_the_thread(
        stream: Accepted,
        _peer: SocketAddr,
        permit: OwnedSemaphorePermit,
        mut stop: watch::Receiver<bool>,
    ) {
        use tokio::io::AsyncWriteExt;
        let mut s = stream.register().unwrap();
        let name = std::thread::current().name().unwrap_or("?").to_owned();
        s.write_all(format!("{name}\n").as_bytes()).await.unwrap();
        let _ = stop.wait_for(|stop| *stop).await;
        drop(permit);
    }

    async fn served_by(addr: SocketAddr) -> (TcpStream, String) {
        use tokio::io::AsyncBufReadExt;
        let mut c = tokio::io::BufReader::new(TcpStream::connect(addr).await.unwrap());
        let mut name = String::new();
        let read = tokio::time::timeout(Duration::from_secs(30), c.read_line(&mut name)).await;
        assert!(matches!(read, Ok(Ok(n)) if n > 0), "no reply: {read:?}");
        (c.into_inner(), name.trim_end().to_owned())
    }

    #[tokio::test]
    async fn session_threads_accept_and_serve_their_connections_and_stop_together() {
        let w = Arc::new(Workers::start(2).unwrap());
        // Thread 0 starts two sessions ahead: whichever thread accepts the
        // first connection, thread 1 serves it.
        let ahead: Vec<_> = (0..2).map(|_| w.place(0)).collect();
        assert_eq!(w.sessions(), [2, 0]);
        let listener = bind("127.0.0.1:0".parse().unwrap(), 128).unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            max_connections: 100,
            drain: Duration::from_secs(30),
            name: "test",
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            limits,
            Some(w.clone()),
            async {
                let _ = stop_rx.await;
            },
            name_the_thread,
            |_s: Accepted| async {},
        ));
        let (first, name) = served_by(addr).await;
        assert_eq!(name, "idgate-sess-1");
        let mut conns = vec![first];
        for _ in 0..5 {
            let (c, name) = served_by(addr).await;
            assert!(name.starts_with("idgate-sess-"), "served on {name}");
            conns.push(c);
        }
        let counts = w.sessions();
        assert_eq!(counts.iter().sum::<usize>(), 8, "{counts:?}");
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap()
                <= crate::workers::SLACK + 1,
            "{counts:?}"
        );
        // Stopping: every loop stops accepting, its connections are told
        // to finish, and the listening socket is closed.
        stop_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("the listener stops")
            .unwrap();
        drop(ahead);
        assert_eq!(w.sessions(), [0, 0]);
        assert!(TcpStream::connect(addr).await.is_err(), "still listening");
    }

    #[tokio::test]
    async fn accepted_sockets_inherit_the_listeners_nodelay_on_linux() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let inherited = set_nodelay(&listener);
        assert_eq!(inherited, cfg!(target_os = "linux"));
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, peer) = listener.accept().await.unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        if inherited {
            assert!(accepted.nodelay().unwrap());
        }
    }
}
