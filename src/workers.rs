//! Session threads: sessions run on `server.session_threads` threads, each
//! its own current-thread tokio runtime with its own epoll, the way
//! HAProxy runs one event loop per thread; everything else (the accept
//! loops, the admin listener, the allocator's and the pools' background
//! work) stays on the shared multi-thread runtime.
//!
//! Why: on the multi-thread runtime one worker at a time waits in
//! `epoll_wait`, and the events it gets are handed to the others through
//! the scheduler (a futex wake each). On two shared cores that hand-off
//! shows up as idle CPU while statements wait: a do-nothing relay on the
//! multi-thread runtime left 3.3-3.5 µs of idle CPU per relayed INSERT
//! against HAProxy's 1.6-1.8, and on one current-thread runtime per core
//! 1.5-2.3, with 1-13% more throughput (`examples/relay.rs` with
//! `RELAY_PER_CORE=1`, session 24's note). A session's socket, its shard
//! connections and its timers are registered with the thread it runs on,
//! so its statements are served without crossing threads.
//!
//! Each thread accepts connections itself (`crate::listener::serve`): every
//! thread waits on the listening socket in its own epoll, and the first to
//! get to a new connection accepts it, so that a session starts on the
//! thread that accepted it, with no hand-off from an accept loop (an
//! eventfd write and a wake-up across threads per connection: connection
//! setup through two session threads ran at 0.83-0.91x the shared
//! runtime's with that hand-off). The thread that is free first wins, which
//! spreads new sessions towards the less busy thread; and a thread that has
//! [`SLACK`] sessions more than the least loaded one hands what it accepts
//! to that one ([`Workers::place`]), so that the threads' session counts
//! never drift further apart than that. A session stays on its thread: a
//! current-thread runtime does not steal work, so a thread with more busy
//! sessions than another serves them more slowly (the kernel still spreads
//! the threads over the cores). The cost: each connection wakes every idle
//! session thread (the listening socket's readiness is reported to each
//! epoll), and all but one find nothing to accept (one `accept4` returning
//! `EAGAIN` each). A shard connection a
//! session takes from the pool may have been opened on another thread:
//! left there, each of its replies would reach the session through that
//! thread's runtime (an eventfd write and a wake-up across threads per
//! statement; with 16 sysbench clients on two threads that was half of
//! all statements, sessions keeping for good the connection they first
//! happened to take). So the taker registers its socket with its own
//! thread first (`PacketConn::move_here`: two `epoll_ctl` calls, counted
//! as `Moved` in `SHOW IDGATE POOLS`), and a multiplexed session, which
//! takes back the connection it gave back first, then keeps it there.
//! Among other idle connections that suit a session alike, the pool hands
//! out one registered with its thread first (`pool::Want::home`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// How many sessions more than the least loaded session thread a thread
/// may have and still keep a session it accepted (see [`Workers::place`]):
/// with one, two threads' counts stay within two of each other, and a
/// thread hands a session over only when that bound would break, since a
/// hand-off costs a wake-up across threads.
pub const SLACK: usize = 1;

/// How often each session thread's keep-planned timer fires (see
/// [`keep_a_wake_up_planned`]).
const PLANNED_WAKE_UP: Duration = Duration::from_secs(1);

/// Keeps a timer due within [`PLANNED_WAKE_UP`] on this thread's runtime,
/// so that adding a timer (every login's timeout) does not wake the
/// thread's own event loop. tokio's time driver unparks its runtime (an
/// eventfd write, and one more `epoll_wait` that returns at once) when a
/// timer is added that is due before the wake-up the driver planned when
/// it last parked, and a runtime with no timer planned none: every
/// connection cost its session thread that pair of system calls (strace,
/// connect + `SELECT 1` + close: 0.76 eventfd writes per connection by the
/// session threads, none with this). The shared runtime always has a timer
/// planned (the accept loop's reap tick, the pools' upkeep). Costs a
/// wake-up per second on an idle thread.
async fn keep_a_wake_up_planned() {
    // The first tick a period away, not at once: the timer is in the
    // wheel from the task's first poll, never fired and re-added at start.
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + PLANNED_WAKE_UP,
        PLANNED_WAKE_UP,
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}

/// The session threads.
pub struct Workers {
    handles: Vec<Handle>,
    /// Sessions on each thread now (`/metrics`:
    /// `idgate_session_thread_sessions`).
    sessions: Arc<[AtomicUsize]>,
    handed_off: AtomicU64,
    /// Dropped with the workers: each thread's runtime then ends (and the
    /// tasks still on it are dropped).
    _stop: Vec<oneshot::Sender<()>>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.handles.len())
            .finish()
    }
}

impl Workers {
    /// Starts `n` session threads (at least one), named `idgate-sess-N`
    /// (a thread name is at most 15 bytes).
    pub fn start(n: usize) -> std::io::Result<Workers> {
        let n = n.max(1);
        let mut handles = Vec::with_capacity(n);
        let mut stop = Vec::with_capacity(n);
        for i in 0..n {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(rt.handle().clone());
            rt.spawn(keep_a_wake_up_planned());
            let (tx, rx) = oneshot::channel::<()>();
            stop.push(tx);
            std::thread::Builder::new()
                .name(format!("idgate-sess-{i}"))
                .spawn(move || {
                    crate::protocol::stream::set_event_loop(i as u32 + 1);
                    // Runs the tasks spawned onto it until the workers are
                    // dropped.
                    let _ = rt.block_on(rx);
                })?;
        }
        Ok(Workers {
            handles,
            sessions: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            handed_off: AtomicU64::new(0),
            _stop: stop,
        })
    }

    /// How many session threads there are.
    pub fn threads(&self) -> usize {
        self.handles.len()
    }

    /// Session thread `i`'s runtime.
    pub fn handle(&self, i: usize) -> &Handle {
        &self.handles[i]
    }

    /// The thread a session accepted on thread `here` runs on: `here`,
    /// unless `here` has more than [`SLACK`] sessions more than the least
    /// loaded thread, which then gets it (the first of them); and the
    /// session's seat there, counted among the thread's sessions until
    /// dropped.
    pub fn place(&self, here: usize) -> (usize, Seat) {
        let load = |i: usize| self.sessions[i].load(Ordering::Relaxed);
        let least = (0..self.handles.len())
            .min_by_key(|&i| load(i))
            .unwrap_or(here);
        let i = if load(here) > load(least) + SLACK {
            self.handed_off.fetch_add(1, Ordering::Relaxed);
            least
        } else {
            here
        };
        self.sessions[i].fetch_add(1, Ordering::Relaxed);
        let seat = Seat {
            sessions: self.sessions.clone(),
            thread: i,
        };
        (i, seat)
    }

    /// Sessions a thread accepted and handed to a less loaded one
    /// ([`Workers::place`]) since the start (`/metrics`:
    /// `idgate_session_thread_handoffs_total`).
    pub fn handed_off(&self) -> u64 {
        self.handed_off.load(Ordering::Relaxed)
    }

    /// Sessions on each thread now.
    pub fn sessions(&self) -> Vec<usize> {
        self.sessions
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }
}

/// A session's place on its thread (see [`Workers::place`]).
#[derive(Debug)]
pub struct Seat {
    sessions: Arc<[AtomicUsize]>,
    thread: usize,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.sessions[self.thread].fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_stays_where_it_was_accepted_unless_that_thread_is_too_far_ahead() {
        let w = Workers::start(2).unwrap();
        let mut seats = Vec::new();
        let mut place = |here| {
            let (i, seat) = w.place(here);
            seats.push(seat);
            i
        };
        // Thread 0 keeps what it accepts up to SLACK + 1 sessions ahead.
        for _ in 0..=SLACK {
            assert_eq!(place(0), 0);
        }
        assert_eq!(w.handed_off(), 0);
        // One more would put it further ahead: thread 1 gets it.
        assert_eq!(place(0), 1);
        assert_eq!(w.handed_off(), 1);
        assert_eq!(place(1), 1);
        assert_eq!(w.sessions(), [SLACK + 1, 2]);
        // Seats count while they last.
        seats.truncate(1);
        assert_eq!(w.sessions(), [1, 0]);
        drop(seats);
        assert_eq!(w.sessions(), [0, 0]);
        // Each handle runs its own thread.
        for i in 0..w.threads() {
            let name = w
                .handle(i)
                .spawn(async { std::thread::current().name().map(str::to_owned) })
                .await
                .unwrap();
            assert_eq!(name.unwrap(), format!("idgate-sess-{i}"));
        }
    }

    /// Write system calls made by thread `tid` of this process so far.
    fn writes_by(tid: i32) -> u64 {
        let io = std::fs::read_to_string(format!("/proc/self/task/{tid}/io")).unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("syscw: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    }

    // A plain test thread, not a runtime: waking it (std's channel, a
    // futex) costs the session thread no write of its own.
    #[test]
    fn adding_a_timer_does_not_wake_the_threads_own_event_loop() {
        use std::sync::mpsc;
        let w = Workers::start(1).unwrap();
        let thread = w.handle(0);
        let (tx, rx) = mpsc::channel();
        thread.spawn(async move { tx.send(unsafe { libc::gettid() }).unwrap() });
        let tid = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        // Rarely (about 2 runs in 100 on a loaded machine, cause not
        // found) a burst of timers wakes the loop anyway, for a stretch of
        // it; without the planned wake-up every timer does, every time. So
        // a few bursts are tried and one must stay within the bound.
        let mut seen = Vec::new();
        for _ in 0..5 {
            let (writes, allowed) = writes_for_timers(thread, tid, 50);
            if writes <= allowed {
                return;
            }
            seen.push((writes, allowed));
        }
        panic!(
            "writes by the session thread for 50 timers, against the bound, in each try: {seen:?}"
        );
    }

    /// Adds `n` timers on an idle session thread one at a time, as logins
    /// do, and returns the writes that thread made meanwhile with the
    /// number allowed: one eventfd write per timer without the planned
    /// wake-up; with it none, but for the planned wake-up's own re-arming,
    /// at most once a second (twice allowed: a timer added in between),
    /// however long a loaded machine took.
    fn writes_for_timers(thread: &Handle, tid: i32, n: usize) -> (u64, u64) {
        use std::future::Future;
        use std::sync::mpsc;
        use std::task::Poll;
        let before = writes_by(tid);
        let started = std::time::Instant::now();
        for _ in 0..n {
            // A timeout far off, added while the thread's event loop is
            // parked with nothing else to do.
            let (tx, rx) = mpsc::channel();
            thread.spawn(async move {
                let far = tokio::time::sleep(Duration::from_secs(10));
                tokio::pin!(far);
                std::future::poll_fn(|cx| {
                    let _ = far.as_mut().poll(cx);
                    Poll::Ready(())
                })
                .await;
                tx.send(()).unwrap();
            });
            rx.recv_timeout(Duration::from_secs(30)).unwrap();
        }
        let writes = writes_by(tid) - before;
        (writes, 2 + 2 * (started.elapsed().as_secs() + 1))
    }

    #[tokio::test]
    async fn dropping_the_workers_ends_their_tasks() {
        let w = Workers::start(1).unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        w.handle(0).spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await
        });
        drop(w);
        // The task is dropped with its runtime, and its sender with it.
        let r = tokio::time::timeout(std::time::Duration::from_secs(30), rx).await;
        assert!(matches!(r, Ok(Err(_))), "{r:?}");
    }
}
