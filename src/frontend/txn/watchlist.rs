//! The sessions that can hold locks on several shards, as the distributed
//! deadlock detector (`deadlock.rs`) sees them.
//!
//! A session is registered while it is inside a transaction (XA or plain,
//! including `autocommit = 0`) and while it runs a write on several shards
//! outside one (an XA transaction of its own). Its [`Watched`] entry says
//! when that transaction started (a counter: the youngest transaction of a
//! cycle is the victim), which backend connection (MariaDB thread id) it has
//! on each shard, whether a round trip (one command to the shard and its
//! reply) is under way on each since when, and whether the detector chose it
//! as a victim. A session outside a transaction is not registered: its
//! statements cost one flag test, no lock and no allocation.
//!
//! # Killing the right statement
//!
//! Each shard slot numbers its round trips. The detector reads every slot
//! *before* it reads the shards' lock waits, and later claims the waiting
//! round trip with a compare-and-swap from exactly what it read (RUNNING ->
//! KILLING): the claim fails if that round trip has ended since. Then it
//! sets the session's victim flag, sends `KILL QUERY`, and marks the slot
//! KILLED. A session ending a round trip swaps RUNNING -> IDLE; if the
//! detector claimed it first, the session waits for KILLED before it sends
//! anything else on that connection. So a KILL reaches either the round trip
//! seen waiting, or the connection while it is idle between commands, which
//! MariaDB forgets at the next command: never a later statement.
//!
//! The session sees the KILL as error 1317 (or 1927 / a lost connection if
//! something else went wrong) ending a claimed round trip: it rolls its whole
//! transaction back on every shard and tells the client 1213, as MariaDB
//! does for a deadlock it detects itself (see `Session::deadlock_victim`).
//!
//! This file: the types the detector and the sessions share (`Watched`,
//! `Watchlist`); `watch.rs`: what a session does with them.

use crate::protocol::codes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::warn;

/// What MariaDB says for a deadlock; a victim of the detector gets the same.
pub const DEADLOCK_MESSAGE: &str =
    "Deadlock found when trying to get lock; try restarting transaction";

/// State of a slot's current round trip (the low two bits of its word).
pub mod state {
    /// No round trip under way.
    pub const IDLE: u64 = 0;
    /// A command was sent; its reply is not read yet.
    pub const RUNNING: u64 = 1;
    /// The detector is killing this round trip.
    pub const KILLING: u64 = 2;
    /// The detector's KILL has been answered (or has failed).
    pub const KILLED: u64 = 3;
}

/// The state part of a slot word.
pub fn state_of(word: u64) -> u64 {
    word & 3
}

/// One shard connection of a watched session.
#[derive(Debug, Default)]
pub struct Slot {
    /// MariaDB's thread id of the connection (0: none).
    conn: AtomicU32,
    /// `round << 2 | state`.
    word: AtomicU64,
    /// When the current round trip started (ms since the registry's epoch).
    since_ms: AtomicU64,
}

/// A registered session.
#[derive(Debug)]
pub struct Watched {
    /// idgate's connection id of the session.
    pub session: u32,
    /// Order of the transaction's start: higher is younger.
    started: AtomicU64,
    /// Set by the detector before it kills a statement of this session.
    victim: AtomicBool,
    slots: Box<[Slot]>,
    /// Woken when a slot goes KILLING -> KILLED.
    killed: Notify,
}

impl Watched {
    pub fn new(session: u32, shards: usize) -> Watched {
        Watched {
            session,
            started: AtomicU64::new(0),
            victim: AtomicBool::new(false),
            slots: (0..shards).map(|_| Slot::default()).collect(),
            killed: Notify::new(),
        }
    }

    /// Whether the detector chose this session as a deadlock victim.
    pub fn is_victim(&self) -> bool {
        self.victim.load(Ordering::Acquire)
    }

    /// Whether an error `code` ending the current round trip on `shard` is
    /// the detector's KILL of a victim (for a relay's hook: no waiting).
    pub fn killed_here(&self, shard: usize, code: u16) -> bool {
        is_kill_code(code) && self.claimed(shard) && self.is_victim()
    }

    /// Whether the current round trip on `shard` was claimed by the detector.
    pub fn claimed(&self, shard: usize) -> bool {
        self.slots.get(shard).is_some_and(|s| {
            matches!(
                state_of(s.word.load(Ordering::Acquire)),
                state::KILLING | state::KILLED
            )
        })
    }

    /// Records that a round trip on `shard` (thread `conn`) starts now.
    pub(in crate::frontend) async fn begin(
        &self,
        shard: usize,
        conn: u32,
        now_ms: u64,
        limit: Duration,
    ) {
        let Some(slot) = self.slots.get(shard) else {
            return;
        };
        slot.conn.store(conn, Ordering::Relaxed);
        slot.since_ms.store(now_ms, Ordering::Relaxed);
        // A KILL still under way must land before the next command goes out.
        self.wait_killed(slot, limit).await;
        let _ = slot
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some((((w >> 2) + 1) << 2) | state::RUNNING)
            });
    }

    /// Records that the round trip on `shard` is over; `true` if the
    /// detector had claimed it (then its KILL has been answered).
    pub(in crate::frontend) async fn end(&self, shard: usize, limit: Duration) -> bool {
        let Some(slot) = self.slots.get(shard) else {
            return false;
        };
        let w = slot.word.load(Ordering::Acquire);
        if state_of(w) == state::RUNNING {
            let idle = (w & !3) | state::IDLE;
            match slot
                .word
                .compare_exchange(w, idle, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return false,
                Err(now) if state_of(now) == state::IDLE => return false,
                Err(_) => {}
            }
        } else if state_of(w) == state::IDLE {
            return false;
        }
        let w = self.wait_killed(slot, limit).await;
        let _ = slot.word.compare_exchange(
            w,
            (w & !3) | state::IDLE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        true
    }

    /// Waits (at most `limit`) until `slot` is not KILLING; its word then.
    async fn wait_killed(&self, slot: &Slot, limit: Duration) -> u64 {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let woken = self.killed.notified();
            let w = slot.word.load(Ordering::Acquire);
            if state_of(w) != state::KILLING {
                return w;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                warn!(
                    conn = self.session,
                    "the deadlock detector's KILL was not answered in time; going on"
                );
                return w;
            }
        }
    }

    /// The detector claims round trip `word` on `shard` (RUNNING -> KILLING);
    /// `false` if that round trip is over.
    pub fn claim(&self, shard: usize, word: u64) -> bool {
        state_of(word) == state::RUNNING
            && self.slots.get(shard).is_some_and(|s| {
                s.word
                    .compare_exchange(
                        word,
                        (word & !3) | state::KILLING,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
            })
    }

    /// The session is no longer a victim (its transaction ended).
    pub fn clear_victim(&self) {
        self.victim.store(false, Ordering::Release);
    }

    /// Marks the session a victim (before its statement is killed).
    pub fn mark_victim(&self) {
        self.victim.store(true, Ordering::Release);
    }

    /// The detector is done with claimed round trip `word` on `shard`
    /// (KILLING -> KILLED), whether its KILL worked or not.
    pub fn release(&self, shard: usize, word: u64) {
        if let Some(s) = self.slots.get(shard) {
            let _ = s.word.compare_exchange(
                (word & !3) | state::KILLING,
                (word & !3) | state::KILLED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        self.killed.notify_waiters();
    }
}

/// One slot as the detector read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotView {
    pub conn: u32,
    pub word: u64,
    pub since_ms: u64,
}

/// One registered session as the detector read it.
#[derive(Debug, Clone)]
pub struct SessionView {
    pub entry: Arc<Watched>,
    pub session: u32,
    pub started: u64,
    pub slots: Vec<SlotView>,
}

/// Every registered session (in `Shared`).
#[derive(Debug)]
pub struct Watchlist {
    epoch: Instant,
    next_txn: AtomicU64,
    sessions: Mutex<HashMap<u32, Arc<Watched>>>,
}

impl Default for Watchlist {
    fn default() -> Self {
        Watchlist {
            epoch: Instant::now(),
            next_txn: AtomicU64::new(1),
            sessions: Mutex::new(HashMap::new()),
        }
    }
}

impl Watchlist {
    /// Milliseconds since this registry was made.
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Registers `w` as a transaction starting now; `conns` are the
    /// session's open shard connections (shard, thread id).
    pub fn register(&self, w: &Arc<Watched>, conns: impl Iterator<Item = (usize, u32)>) {
        for s in w.slots.iter() {
            s.conn.store(0, Ordering::Relaxed);
        }
        for (shard, conn) in conns {
            if let Some(s) = w.slots.get(shard) {
                s.conn.store(conn, Ordering::Relaxed);
            }
        }
        w.victim.store(false, Ordering::Release);
        w.started.store(
            self.next_txn.fetch_add(1, Ordering::Relaxed),
            Ordering::Release,
        );
        self.sessions.lock().insert(w.session, w.clone());
    }

    pub fn deregister(&self, session: u32) {
        self.sessions.lock().remove(&session);
    }

    /// How many sessions are registered.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every registered session and its slots, read now.
    pub fn snapshot(&self) -> Vec<SessionView> {
        let sessions = self.sessions.lock();
        sessions
            .values()
            .map(|w| SessionView {
                entry: w.clone(),
                session: w.session,
                started: w.started.load(Ordering::Acquire),
                slots: w
                    .slots
                    .iter()
                    .map(|s| {
                        let word = s.word.load(Ordering::Acquire);
                        SlotView {
                            conn: s.conn.load(Ordering::Relaxed),
                            word,
                            since_ms: s.since_ms.load(Ordering::Relaxed),
                        }
                    })
                    .collect(),
            })
            .collect()
    }
}

/// Whether `code` is how a shard reports a KILL (of the query or the connection).
pub fn is_kill_code(code: u16) -> bool {
    code == codes::ER_QUERY_INTERRUPTED.code || code == codes::ER_CONNECTION_KILLED.code
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(5);

    // Paused tokio time (here and below): the wait for a KILL runs out only
    // when nothing else can run, never because the machine is slow.
    #[tokio::test(start_paused = true)]
    async fn a_finished_round_trip_cannot_be_claimed() {
        let w = Watched::new(7, 2);
        w.begin(1, 42, 0, LIMIT).await;
        let seen = w.slots[1].word.load(Ordering::Acquire);
        assert_eq!(state_of(seen), state::RUNNING);
        assert!(!w.end(1, LIMIT).await, "not claimed");
        assert!(!w.claim(1, seen), "the round trip seen is over");
        // The next round trip has another number: the old word still fails.
        w.begin(1, 42, 0, LIMIT).await;
        assert!(!w.claim(1, seen));
        let now = w.slots[1].word.load(Ordering::Acquire);
        assert!(w.claim(1, now));
        assert!(w.claimed(1));
        assert!(!w.claimed(0));
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_of_a_claimed_round_trip_waits_for_the_kill() {
        let w = Arc::new(Watched::new(7, 1));
        w.begin(0, 42, 0, LIMIT).await;
        let seen = w.slots[0].word.load(Ordering::Acquire);
        assert!(w.claim(0, seen));
        w.mark_victim();
        let ender = {
            let w = w.clone();
            tokio::spawn(async move { w.end(0, LIMIT).await })
        };
        tokio::task::yield_now().await;
        assert!(!ender.is_finished(), "waits while the KILL is under way");
        w.release(0, seen);
        assert!(ender.await.unwrap(), "claimed");
        assert!(w.is_victim());
        assert_eq!(
            state_of(w.slots[0].word.load(Ordering::Acquire)),
            state::IDLE
        );
        // A release after the session moved on changes nothing.
        w.begin(0, 42, 0, LIMIT).await;
        w.release(0, seen);
        assert_eq!(
            state_of(w.slots[0].word.load(Ordering::Acquire)),
            state::RUNNING
        );
    }

    #[test]
    fn the_registry_orders_transactions_by_start() {
        let list = Watchlist::default();
        let a = Arc::new(Watched::new(1, 2));
        let b = Arc::new(Watched::new(2, 2));
        list.register(&a, [(0, 100), (1, 200)].into_iter());
        list.register(&b, [(0, 101)].into_iter());
        let mut snap = list.snapshot();
        snap.sort_by_key(|s| s.session);
        assert_eq!(snap.len(), 2);
        assert!(snap[1].started > snap[0].started, "b is younger");
        assert_eq!(snap[0].slots[1].conn, 200);
        assert_eq!(snap[1].slots[1].conn, 0);
        list.deregister(1);
        assert_eq!(list.len(), 1);
    }
}
