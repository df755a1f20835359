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
/// over it. With `workers`, each connection's task runs on the next
/// session thread ([`crate::workers`]); without, on this runtime.
pub async fn serve<S, SF, R, RF>(
    listener: TcpListener,
    limits: Limits,
    workers: Option<&Workers>,
    shutdown: impl Future<Output = ()>,
    mut serve: S,
    mut refuse: R,
) where
    S: FnMut(Accepted, SocketAddr, OwnedSemaphorePermit, watch::Receiver<bool>) -> SF,
    SF: Future<Output = ()> + Send + 'static,
    R: FnMut(Accepted) -> RF,
    RF: Future<Output = ()> + Send + 'static,
{
    let name = limits.name;
    let listener = match listener.into_std().and_then(wait_on) {
        Ok(l) => l,
        Err(e) => {
            error!(listener = name, "cannot wait for connections: {e}");
            return;
        }
    };
    let limit = Arc::new(Semaphore::new(limits.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut backoff = Duration::from_millis(5);
    // Finished connections are reaped after each accept and on this tick,
    // not as each one ends: that woke this task (and tried an accept) once
    // per connection.
    let mut reap = tokio::time::interval(REAP_EVERY);
    reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            r = accept(&listener) => r,
            _ = reap.tick() => {
                reap_finished(&mut conns, name);
                continue;
            }
        };
        reap_finished(&mut conns, name);
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff = Duration::from_millis(5);
                accepted
            }
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                warn!(
                    listener = name,
                    "accept failed: {e}; retrying in {backoff:?}"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        match limit.clone().try_acquire_owned() {
            Ok(permit) => {
                let task = serve(stream, peer, permit, stop_rx.clone());
                match workers {
                    Some(w) => {
                        let (thread, seat) = w.pick();
                        conns.spawn_on(
                            async move {
                                let _seat = seat;
                                task.await
                            },
                            thread,
                        )
                    }
                    None => conns.spawn(task),
                };
            }
            Err(_) => {
                // On this runtime: a refusal is one write.
                conns.spawn(refuse(stream));
            }
        }
    }
    drop(listener);
    info!(
        listener = name,
        connections = conns.len(),
        "shutting down: no new connections; draining for up to {:?}",
        limits.drain
    );
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(limits.drain, async {
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
    info!(listener = name, "stopped");
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
