//! A shared pool of logged-in shard connections, one per shard: a client
//! that logs in takes a ready connection instead of paying a MariaDB login,
//! and gives it back (reset) when it leaves.
//!
//! The pool knows connections, not sessions. A connection is only reused
//! by a client it is interchangeable for: the same shard account and password,
//! capabilities and handshake character set (its [`ConnKey`]: replies are
//! relayed byte for byte, so both sides must frame them alike, and
//! COM_RESET_CONNECTION brings back the handshake's character set). The
//! current schema is not part of the key: MariaDB keeps it over a reset, so
//! the pool remembers it and the taker changes it when it differs.
//!
//! `max` is a hard cap on the connections to the shard, idle or in use:
//! every open connection holds a [`Lease`], and dropping the lease (the
//! connection was closed, broke, or could not be opened) frees its place.
//! A taker that finds the pool full waits in line (first come, first
//! served: a connection given back goes straight to the first waiter, or
//! its place does when the waiter needs another key) up to `wait_timeout`,
//! then gets [`PoolFull`] (error 1040 for the client). An idle connection
//! of another key is closed to make room rather than making anyone wait.
//!
//! Generic over the connection type so the bookkeeping is tested without a
//! shard (`tests` below); [`ShardPool`] is the one sessions use.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// What makes two shard connections interchangeable for a client.
/// Compared at every idle connection a take looks at: the account's
/// names by pointer first (every session of an account shares them).
#[derive(Clone, Copy, Eq)]
pub struct ConnKey {
    /// The shard account the connection is logged in with: interned for
    /// the process's life (`Shared::shard_account_key`), so that a key is
    /// copied at every take and give-back without touching a reference
    /// count that every session of the account, on every thread, shares.
    pub user: &'static str,
    /// ... and its password: two `[[users]]` may name the same shard
    /// account with different passwords, and only the right one may get a
    /// connection that logged in (the shard's 1045 otherwise).
    pub password: &'static str,
    /// Capabilities in force (relayed replies are framed by them).
    pub capabilities: u32,
    /// MariaDB extended capabilities in force.
    pub ext_capabilities: u32,
    /// The handshake's character set (what a reset goes back to).
    pub charset: u8,
}

impl PartialEq for ConnKey {
    fn eq(&self, other: &Self) -> bool {
        self.capabilities == other.capabilities
            && self.ext_capabilities == other.ext_capabilities
            && self.charset == other.charset
            && same_static(self.user, other.user)
            && same_static(self.password, other.password)
    }
}

impl std::fmt::Debug for ConnKey {
    /// The password left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnKey")
            .field("user", &self.user)
            .field("capabilities", &self.capabilities)
            .field("ext_capabilities", &self.ext_capabilities)
            .field("charset", &self.charset)
            .finish_non_exhaustive()
    }
}

/// The pool of shard connections sessions use.
pub type ShardPool = Pool<ConnKey, Box<crate::backend::BackendConn>>;
/// A place in a [`ShardPool`].
pub type ShardLease = Lease<ConnKey, Box<crate::backend::BackendConn>>;

/// `[backend] pool_*`, per shard.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    /// Connections to the shard at most, idle or in use (0: no cap).
    pub max: usize,
    /// Idle connections kept open even when unused (per key seen).
    pub min_idle: usize,
    /// An idle connection is closed after this long unused (`ZERO`: none is
    /// kept idle: every connection is closed when its client leaves).
    pub idle_timeout: Duration,
    /// A connection is closed once this old, when it is next idle.
    pub max_lifetime: Duration,
    /// How long a taker waits for a place when the pool is full.
    pub wait_timeout: Duration,
}

/// A taker waited `wait_timeout` and no place came free.
#[derive(Debug, Clone, Copy)]
pub struct PoolFull {
    pub max: usize,
    pub waited: Duration,
}

/// Counters of one pool (read by `SHOW IDGATE POOLS` and `/metrics`).
#[derive(Debug, Default)]
pub struct PoolStats {
    /// Connections opened for the pool.
    pub created: AtomicU64,
    /// Connections closed (broken, expired, evicted, not reusable).
    pub closed: AtomicU64,
    /// Connections handed out from idle (no login).
    pub reused: AtomicU64,
    /// Takers that had to wait for a place.
    pub waits: AtomicU64,
    /// Microseconds waited, in total.
    pub wait_us: AtomicU64,
    /// Takers that waited `wait_timeout` in vain.
    pub timeouts: AtomicU64,
    /// Idle connections found closed or not answering a ping before use.
    pub stale: AtomicU64,
    /// Connections given back after a statement by a multiplexed session
    /// (`[backend] multiplex`), without a reset.
    pub multiplexed: AtomicU64,
    /// Connections handed out whose session state (its [`Idle::tag`])
    /// differed from the taker's: reset and given the taker's state.
    pub restored: AtomicU64,
    /// Connections held now by a session that could not give them back
    /// after its statement, by the reason (its index; the names are the
    /// session's, `frontend::session::mux::Pin`).
    pub pinned: [AtomicU64; PIN_SLOTS],
    /// `LAST_INSERT_ID()` values a taker read from a connection another
    /// session left one on (`lidclaim.rs`).
    pub lid_reads: AtomicU64,
    /// Connections a session took that were registered with another
    /// session thread's event loop, moved to its own
    /// (`server.session_threads`).
    pub moved: AtomicU64,
    /// Sessions look at their INSERTs after they ran, to spare such reads,
    /// until `multiplexed` reaches this (`frontend/session/generated.rs`).
    pub look_until: AtomicU64,
}

/// Reasons a session's connection may be pinned (slots in
/// [`PoolStats::pinned`]).
pub const PIN_SLOTS: usize = 20;

/// A snapshot of a pool's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolState {
    /// Connections open (idle + in use).
    pub open: usize,
    pub idle: usize,
    /// Takers waiting for a place.
    pub waiting: usize,
}

/// Everything `SHOW IDGATE POOLS` and `/metrics` show of one pool.
#[derive(Debug, Clone, Default)]
pub struct PoolView {
    pub shard: String,
    pub max: usize,
    pub state: PoolState,
    pub created: u64,
    pub closed: u64,
    pub reused: u64,
    pub waits: u64,
    pub wait_us: u64,
    pub timeouts: u64,
    pub stale: u64,
    pub multiplexed: u64,
    pub restored: u64,
    pub lid_reads: u64,
    pub moved: u64,
    pub pinned: [u64; PIN_SLOTS],
}

impl PoolView {
    /// Connections handed out now.
    pub fn in_use(&self) -> usize {
        self.state.open.saturating_sub(self.state.idle)
    }
}

/// An idle connection and what the pool knows of it.
#[derive(Debug)]
pub struct Idle<K, C> {
    pub key: K,
    pub conn: C,
    /// Its current schema, as the last user left it (shared: a
    /// multiplexed session gives its connection back at every statement).
    pub db: Option<Arc<str>>,
    /// The session state its last user left on it (the session's `SET`s,
    /// as a fingerprint): 0 as after a login or COM_RESET_CONNECTION. A
    /// taker with the same tag needs no round trip to use it.
    pub tag: u64,
    /// Its `LAST_INSERT_ID()`, when known.
    pub lid: Option<u64>,
    /// The session that gave it back as it was (0: none; a reset one has
    /// none): taken back by it first, its prepared statements are still
    /// there.
    pub owner: u32,
    /// Server-side statement ids `owner` left open on it (another taker
    /// closes them).
    pub stmts: Vec<u32>,
    pub lease: Lease<K, C>,
    /// Given back at.
    pub since: Instant,
    /// Its number in the pool, set when it is given back (0 before):
    /// increasing from the front of the idle list to its back, so a
    /// session finds the connection it gave back by a binary search
    /// ([`Want::serial`]).
    pub serial: u64,
    /// The event loop its socket is registered with
    /// (`protocol::stream::event_loop`): a taker on another session thread
    /// moves it to its own first, one on the same takes it as it is.
    pub home: u32,
}

/// What a taker gets.
#[derive(Debug)]
pub enum Taken<K, C> {
    /// An idle connection of its key.
    Reuse(Idle<K, C>),
    /// A place: the taker opens the connection. `evicted`: an idle
    /// connection of another key closed to make room (the taker sends it
    /// COM_QUIT).
    Open {
        lease: Lease<K, C>,
        evicted: Option<C>,
    },
}

/// What a waiter is handed. A place comes as its lease, so a grant that
/// reaches a taker who just gave up is freed again when dropped.
enum Grant<K, C> {
    Conn(Idle<K, C>),
    Place(Lease<K, C>),
}

struct Waiter<K, C> {
    key: K,
    tx: oneshot::Sender<Grant<K, C>>,
}

struct Inner<K, C> {
    /// Most recently given back last.
    idle: VecDeque<Idle<K, C>>,
    /// Leases alive.
    open: usize,
    waiters: VecDeque<Waiter<K, C>>,
    /// The last [`Idle::serial`] given.
    serial: u64,
}

/// The pool of one shard.
pub struct Pool<K, C> {
    /// The shard's name (error messages).
    pub shard: String,
    pub settings: PoolSettings,
    pub stats: PoolStats,
    inner: Mutex<Inner<K, C>>,
    /// The key of the last taker (what `min_idle` connections are opened
    /// for).
    last_key: Mutex<Option<K>>,
}

impl<K, C> std::fmt::Debug for Pool<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("shard", &self.shard)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

/// A place in a pool, held by each open connection wherever it is (idle
/// or in use). Dropped: the connection is gone and its place is free.
pub struct Lease<K, C> {
    pool: Option<Arc<Pool<K, C>>>,
    /// When its connection was opened.
    pub created: Instant,
}

impl<K, C> std::fmt::Debug for Lease<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

impl<K, C> Lease<K, C> {
    /// The pool the lease is in.
    pub fn pool(&self) -> Option<&Arc<Pool<K, C>>> {
        self.pool.as_ref()
    }
}

impl<K, C> Drop for Lease<K, C> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.stats.closed.fetch_add(1, Ordering::Relaxed);
            pool.free_place();
        }
    }
}

impl<K, C> Pool<K, C> {
    /// The pool's state and counters now.
    pub fn view(&self) -> PoolView {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let st = &self.stats;
        PoolView {
            shard: self.shard.clone(),
            max: self.settings.max,
            state: self.state(),
            created: n(&st.created),
            closed: n(&st.closed),
            reused: n(&st.reused),
            waits: n(&st.waits),
            wait_us: n(&st.wait_us),
            timeouts: n(&st.timeouts),
            stale: n(&st.stale),
            multiplexed: n(&st.multiplexed),
            restored: n(&st.restored),
            lid_reads: n(&st.lid_reads),
            moved: n(&st.moved),
            pinned: std::array::from_fn(|i| n(&st.pinned[i])),
        }
    }

    pub fn state(&self) -> PoolState {
        let g = self.inner.lock();
        PoolState {
            open: g.open,
            idle: g.idle.len(),
            waiting: g.waiters.len(),
        }
    }

    fn lease(self: &Arc<Self>, now: Instant) -> Lease<K, C> {
        Lease {
            pool: Some(self.clone()),
            created: now,
        }
    }

    /// A lease was dropped: its place goes to the first waiter still
    /// waiting, or is free.
    fn free_place(self: &Arc<Self>) {
        let mut g = self.inner.lock();
        while let Some(w) = g.waiters.pop_front() {
            match w.tx.send(Grant::Place(self.lease(Instant::now()))) {
                Ok(()) => return,
                // Dropped here, under the lock: it must not free a place.
                Err(Grant::Place(mut l)) => disarm(&mut l),
                Err(Grant::Conn(_)) => {}
            }
        }
        g.open = g.open.saturating_sub(1);
    }
}

impl<K: Clone + Eq, C> Pool<K, C> {
    pub fn new(shard: &str, settings: PoolSettings) -> Arc<Self> {
        Arc::new(Pool {
            shard: shard.to_string(),
            settings,
            stats: PoolStats::default(),
            inner: Mutex::new(Inner {
                idle: VecDeque::new(),
                open: 0,
                waiters: VecDeque::new(),
                serial: 0,
            }),
            last_key: Mutex::new(None),
        })
    }

    /// Takes a connection for `key` (preferring the one `owner` gave back,
    /// then one already in `db` and with session state `tag`), or a place
    /// to open one, waiting in line when the pool is full.
    pub async fn take(self: &Arc<Self>, key: &K, want: Want<'_>) -> Result<Taken<K, C>, PoolFull> {
        let rx = match self.try_take(key, want, None) {
            Ok(t) => return Ok(t),
            Err(rx) => rx,
        };
        self.stats.waits.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let granted = match tokio::time::timeout(self.settings.wait_timeout, rx).await {
            Ok(Ok(g)) => Some(g),
            // The sender is only dropped with the pool.
            Ok(Err(_)) => None,
            Err(_) => None,
        };
        let waited = started.elapsed();
        self.stats
            .wait_us
            .fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
        match granted {
            Some(g) => Ok(self.granted(g)),
            None => {
                // Out of the line (its receiver is gone: nothing is sent to it).
                self.inner.lock().waiters.retain(|w| !w.tx.is_closed());
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(PoolFull {
                    max: self.settings.max,
                    waited,
                })
            }
        }
    }

    fn granted(self: &Arc<Self>, g: Grant<K, C>) -> Taken<K, C> {
        match g {
            Grant::Conn(idle) => {
                self.stats.reused.fetch_add(1, Ordering::Relaxed);
                Taken::Reuse(idle)
            }
            Grant::Place(lease) => Taken::Open {
                lease,
                evicted: None,
            },
        }
    }

    /// [`Pool::take`] without waiting: what is there now, or the line's
    /// receiver (the taker is in line).
    fn try_take(
        self: &Arc<Self>,
        key: &K,
        want: Want<'_>,
        now: Option<Instant>,
    ) -> Result<Taken<K, C>, oneshot::Receiver<Grant<K, C>>> {
        // The clock is read only for a new place (a reused connection
        // keeps its lease).
        let now = || now.unwrap_or_else(Instant::now);
        if self.settings.min_idle > 0 {
            *self.last_key.lock() = Some(key.clone());
        }
        let mut g = self.inner.lock();
        if let Some(i) = own(&g.idle, key, want).or_else(|| pick(&g.idle, key, want)) {
            if let Some(idle) = g.idle.remove(i) {
                self.stats.reused.fetch_add(1, Ordering::Relaxed);
                return Ok(Taken::Reuse(idle));
            }
        }
        let max = self.settings.max;
        if g.waiters.is_empty() && (max == 0 || g.open < max) {
            g.open += 1;
            return Ok(Taken::Open {
                lease: self.lease(now()),
                evicted: None,
            });
        }
        if g.waiters.is_empty() {
            if let Some(mut old) = g.idle.pop_front() {
                // Full, but the oldest idle connection is of another key:
                // it is closed and its place goes to this taker.
                disarm(&mut old.lease);
                self.stats.closed.fetch_add(1, Ordering::Relaxed);
                return Ok(Taken::Open {
                    lease: self.lease(now()),
                    evicted: Some(old.conn),
                });
            }
        }
        let (tx, rx) = oneshot::channel();
        g.waiters.push_back(Waiter {
            key: key.clone(),
            tx,
        });
        Err(rx)
    }

    /// Gives a connection back (the caller has reset it). It goes to the
    /// first waiter of its key, or becomes idle; when the first waiter needs
    /// another key, it is returned to be closed and its place goes to that
    /// waiter. `None`: the pool kept it.
    pub fn give_back(self: &Arc<Self>, idle: Idle<K, C>) -> Option<C> {
        self.give_back_numbered(idle).0
    }

    /// [`Pool::give_back`], and the connection's [`Idle::serial`] when the
    /// pool kept it idle (to find it again by: [`Want::serial`]).
    pub fn give_back_numbered(self: &Arc<Self>, mut idle: Idle<K, C>) -> (Option<C>, Option<u64>) {
        let now = idle.since;
        let too_old =
            now.saturating_duration_since(idle.lease.created) >= self.settings.max_lifetime;
        if too_old || self.settings.idle_timeout.is_zero() {
            return (Some(close(idle)), None);
        }
        let mut g = self.inner.lock();
        while let Some(w) = g.waiters.pop_front() {
            if w.key == idle.key {
                // A failed send gives back exactly what was sent.
                if let Err(Grant::Conn(back)) = w.tx.send(Grant::Conn(idle)) {
                    idle = back;
                    continue;
                }
                return (None, None);
            }
            // Another key: this connection is closed and its place moves
            // to the waiter.
            match w.tx.send(Grant::Place(self.lease(now))) {
                Ok(()) => {
                    disarm(&mut idle.lease);
                    self.stats.closed.fetch_add(1, Ordering::Relaxed);
                    return (Some(idle.conn), None);
                }
                Err(Grant::Place(mut l)) => disarm(&mut l),
                Err(Grant::Conn(_)) => {}
            }
        }
        g.serial += 1;
        idle.serial = g.serial;
        g.idle.push_back(idle);
        (None, Some(g.serial))
    }

    /// Idle connections to close now: unused for `idle_timeout` (beyond
    /// `min_idle`, the most recently used are kept) or older than
    /// `max_lifetime`.
    pub fn expire(&self, now: Instant) -> Vec<C> {
        let s = &self.settings;
        let mut g = self.inner.lock();
        let mut keep = VecDeque::with_capacity(g.idle.len());
        let mut out = Vec::new();
        // Newest first, so the ones kept under min_idle are the freshest.
        let mut kept_idle = 0;
        for c in g.idle.drain(..).rev() {
            let old = now.saturating_duration_since(c.lease.created) >= s.max_lifetime;
            let unused = now.saturating_duration_since(c.since) >= s.idle_timeout;
            if old || (unused && kept_idle >= s.min_idle) {
                out.push(c);
            } else {
                kept_idle += 1;
                keep.push_front(c);
            }
        }
        g.idle = keep;
        drop(g);
        out.into_iter().map(close).collect()
    }

    /// Takes the idle connection `which` picks, if there is one (a session
    /// fetching a value it left on its connection, `lidclaim.rs`).
    pub fn take_idle_where(&self, which: impl Fn(&Idle<K, C>) -> bool) -> Option<Idle<K, C>> {
        let mut g = self.inner.lock();
        let i = g.idle.iter().position(which)?;
        g.idle.remove(i)
    }

    /// The key of the last taker (with `min_idle` only).
    pub fn last_key(&self) -> Option<K> {
        self.last_key.lock().clone()
    }

    /// Idle connections of `key` now.
    pub fn idle_of(&self, key: &K) -> usize {
        self.inner
            .lock()
            .idle
            .iter()
            .filter(|c| &c.key == key)
            .count()
    }

    /// A place for a connection opened without a taker (to keep
    /// `min_idle`), if one is free and nobody waits.
    pub fn spare_place(self: &Arc<Self>) -> Option<Lease<K, C>> {
        let mut g = self.inner.lock();
        let max = self.settings.max;
        if g.waiters.is_empty() && (max == 0 || g.open < max) {
            g.open += 1;
            return Some(self.lease(Instant::now()));
        }
        None
    }
}

/// What a taker would like of an idle connection, besides its key.
#[derive(Debug, Clone, Copy, Default)]
pub struct Want<'a> {
    /// Its schema (compared by pointer first: sessions share one `Arc`
    /// per schema name, `Shared::schema_arc`).
    pub db: Option<&'a Arc<str>>,
    /// Its session state tag ([`Idle::tag`]).
    pub tag: u64,
    /// The taker (0: none): the connection it gave back is best.
    pub owner: u32,
    /// The [`Idle::serial`] of the connection the taker gave back last
    /// (0: none), looked up before any list is walked.
    pub serial: u64,
    /// The taker's event loop ([`Idle::home`]): of two connections that
    /// suit it alike, one registered there is taken first.
    pub home: u32,
}

/// The connection the taker gave back last, if it is still idle and as it
/// was: found by its serial (a binary search, where [`pick`] walks the
/// idle list; with many clients the list is long, and most takes are of
/// this kind).
fn own<K: Eq, C>(idle: &VecDeque<Idle<K, C>>, key: &K, want: Want<'_>) -> Option<usize> {
    if want.serial == 0 || want.owner == 0 {
        return None;
    }
    let i = idle.binary_search_by_key(&want.serial, |c| c.serial).ok()?;
    let c = &idle[i];
    (c.owner == want.owner && c.tag == want.tag && &c.key == key && same_db(c.db.as_ref(), want.db))
        .then_some(i)
}

/// Whether two schemas are the same: by pointer first (sessions share one
/// `Arc` per name), then by name.
fn same_db(a: Option<&Arc<str>>, b: Option<&Arc<str>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same_str(a, b),
        _ => false,
    }
}

fn same_str(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

/// [`same_str`] for interned names.
fn same_static(a: &'static str, b: &'static str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// The idle connection to hand `key`: its most recently given back, the
/// one the taker gave back as it was first, then one in `db` with the
/// taker's session state (registered with the taker's event loop first),
/// then one in `db`; with no schema wanted, only one that has none (a
/// schema cannot be left).
fn pick<K: Eq, C>(idle: &VecDeque<Idle<K, C>>, key: &K, want: Want<'_>) -> Option<usize> {
    // The taker's own first, found by its number before any key or schema
    // is compared: a multiplexed session takes back what it gave at every
    // statement, among up to `pool_max` idle connections.
    if want.owner != 0 {
        let own = idle.iter().rposition(|c| {
            c.owner == want.owner
                && c.tag == want.tag
                && &c.key == key
                && same_db(c.db.as_ref(), want.db)
        });
        if own.is_some() {
            return own;
        }
    }
    let (mut here, mut same_state, mut in_db, mut any) = (None, None, None, None);
    for (i, c) in idle.iter().enumerate().rev() {
        if &c.key != key {
            continue;
        }
        if same_db(c.db.as_ref(), want.db) {
            if c.tag == want.tag {
                if c.home == want.home {
                    here = Some(i);
                    break;
                }
                same_state = same_state.or(Some(i));
            }
            in_db = in_db.or(Some(i));
        } else if want.db.is_some() && any.is_none() {
            any = Some(i);
        }
    }
    here.or(same_state).or(in_db).or(any)
}

/// A lease whose place is not freed when it is dropped (the place moved
/// to another lease).
fn disarm<K, C>(l: &mut Lease<K, C>) {
    l.pool = None;
}

/// Takes a connection out of the pool for closing (its lease dropped).
fn close<K, C>(idle: Idle<K, C>) -> C {
    drop(idle.lease);
    idle.conn
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(max: usize) -> PoolSettings {
        PoolSettings {
            max,
            min_idle: 0,
            idle_timeout: Duration::from_secs(60),
            max_lifetime: Duration::from_secs(3600),
            wait_timeout: Duration::from_millis(50),
        }
    }

    fn open(p: &Arc<Pool<u8, u32>>, key: u8) -> Lease<u8, u32> {
        match p.try_take(&key, Want::default(), Some(Instant::now())) {
            Ok(Taken::Open { lease, evicted }) => {
                assert!(evicted.is_none());
                lease
            }
            _ => panic!("expected a place"),
        }
    }

    fn idle(key: u8, conn: u32, lease: Lease<u8, u32>, since: Instant) -> Idle<u8, u32> {
        Idle {
            key,
            conn,
            db: None,
            tag: 0,
            lid: None,
            owner: 0,
            stmts: Vec::new(),
            lease,
            since,
            serial: 0,
            home: 0,
        }
    }

    #[test]
    fn reuse_by_key_and_cap() {
        let p = Pool::<u8, u32>::new("s0", settings(2));
        let a = open(&p, 1);
        let b = open(&p, 1);
        assert_eq!(p.state().open, 2);
        // Full: a third taker is in line.
        let mut rx = p
            .try_take(&1, Want::default(), Some(Instant::now()))
            .expect_err("in line");
        assert_eq!(p.state().waiting, 1);
        drop(b);
        // The freed place went to the waiter (still counted open).
        assert_eq!(
            p.state(),
            PoolState {
                open: 2,
                idle: 0,
                waiting: 0
            }
        );
        let _place = rx.try_recv().expect("a place");
        assert!(p.give_back(idle(1, 7, a, Instant::now())).is_none());
        match p.try_take(&1, Want::default(), Some(Instant::now())) {
            Ok(Taken::Reuse(i)) => assert_eq!(i.conn, 7),
            _ => panic!("expected the idle connection"),
        }
    }

    #[test]
    fn another_key_evicts_an_idle_connection() {
        let p = Pool::<u8, u32>::new("s0", settings(1));
        let a = open(&p, 1);
        assert!(p.give_back(idle(1, 7, a, Instant::now())).is_none());
        match p.try_take(&2, Want::default(), Some(Instant::now())) {
            Ok(Taken::Open { evicted, lease }) => {
                assert_eq!(evicted, Some(7));
                assert_eq!(p.state().open, 1);
                drop(lease);
            }
            _ => panic!("expected a place with an eviction"),
        }
        assert_eq!(p.state().open, 0);
    }

    #[test]
    fn given_back_to_the_first_waiter() {
        let p = Pool::<u8, u32>::new("s0", settings(1));
        let a = open(&p, 1);
        let mut rx_other = p
            .try_take(&2, Want::default(), Some(Instant::now()))
            .expect_err("in line");
        let mut rx_same = p
            .try_take(&1, Want::default(), Some(Instant::now()))
            .expect_err("in line");
        // The first waiter needs another key: the connection is closed and
        // its place moves there.
        assert_eq!(p.give_back(idle(1, 7, a, Instant::now())), Some(7));
        let place = rx_other.try_recv();
        assert!(matches!(place, Ok(Grant::Place(_))));
        assert!(rx_same.try_recv().is_err());
        assert_eq!(
            p.state(),
            PoolState {
                open: 1,
                idle: 0,
                waiting: 1
            }
        );
        // That place given up goes on to the next in line.
        drop(place);
        assert!(matches!(rx_same.try_recv(), Ok(Grant::Place(_))));
        assert_eq!(
            p.state(),
            PoolState {
                open: 0,
                idle: 0,
                waiting: 0
            }
        );
    }

    #[test]
    fn a_waiter_that_left_is_skipped() {
        let p = Pool::<u8, u32>::new("s0", settings(1));
        let a = open(&p, 1);
        let rx = p
            .try_take(&1, Want::default(), Some(Instant::now()))
            .expect_err("in line");
        drop(rx);
        assert!(p.give_back(idle(1, 7, a, Instant::now())).is_none());
        assert_eq!(
            p.state(),
            PoolState {
                open: 1,
                idle: 1,
                waiting: 0
            }
        );
    }

    #[test]
    fn expire_by_idle_time_and_lifetime_keeping_min_idle() {
        let mut s = settings(0);
        s.min_idle = 1;
        let p = Pool::<u8, u32>::new("s0", s);
        let t0 = Instant::now();
        let leases: Vec<_> = (0..3).map(|_| open(&p, 1)).collect();
        for (c, l) in leases.into_iter().enumerate() {
            assert!(p.give_back(idle(1, c as u32, l, t0)).is_none());
        }
        assert!(p.expire(t0 + Duration::from_secs(59)).is_empty());
        let mut gone = p.expire(t0 + Duration::from_secs(61));
        gone.sort();
        // The most recently given back stays (min_idle).
        assert_eq!(gone, vec![0, 1]);
        assert_eq!(
            p.state(),
            PoolState {
                open: 1,
                idle: 1,
                waiting: 0
            }
        );
        assert_eq!(p.expire(t0 + Duration::from_secs(3601)), vec![2]);
        assert_eq!(p.state().open, 0);
    }

    #[test]
    fn schema_preference() {
        let p = Pool::<u8, u32>::new("s0", settings(0));
        let leases: Vec<_> = (0..3).map(|_| open(&p, 1)).collect();
        for ((c, db), l) in [(1, Some("a")), (2, Some("b")), (3, None)]
            .into_iter()
            .zip(leases)
        {
            let mut i = idle(1, c, l, Instant::now());
            i.db = db.map(Arc::from);
            assert!(p.give_back(i).is_none());
        }
        // The taker's own `Arc`s: compared by content with the pool's.
        let (a, z): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("z"));
        let take = |db| match p.try_take(
            &1,
            Want {
                db,
                ..Want::default()
            },
            Some(Instant::now()),
        ) {
            Ok(Taken::Reuse(i)) => i,
            _ => panic!("expected a reuse"),
        };
        assert_eq!(take(Some(&a)).conn, 1);
        // No schema wanted: only the one without.
        assert_eq!(take(None).conn, 3);
        // Another schema: any (it is changed by the taker).
        assert_eq!(take(Some(&z)).conn, 2);
        assert!(matches!(
            p.try_take(&1, Want::default(), Some(Instant::now())),
            Ok(Taken::Open { .. })
        ));
    }

    #[test]
    fn a_taker_finds_what_it_gave_back_by_its_serial() {
        let p = Pool::<u8, u32>::new("s0", settings(0));
        let db: Arc<str> = Arc::from("app");
        let mut serials = Vec::new();
        let leases: Vec<_> = (0..6).map(|_| open(&p, 1)).collect();
        for (c, l) in (1..=6).zip(leases) {
            let mut i = idle(1, c, l, Instant::now());
            i.owner = c;
            i.db = Some(db.clone());
            let (closed, serial) = p.give_back_numbered(i);
            assert!(closed.is_none());
            serials.push(serial.expect("kept idle"));
        }
        assert!(serials.windows(2).all(|w| w[0] < w[1]), "{serials:?}");
        let want = |owner: u32, tag, serial| Want {
            db: Some(&db),
            tag,
            owner,
            serial,
            home: 0,
        };
        let take = |w| match p.try_take(&1, w, Some(Instant::now())) {
            Ok(Taken::Reuse(i)) => i,
            _ => panic!("expected a reuse"),
        };
        // From the middle of the list, and again after removals.
        assert_eq!(take(want(3, 0, serials[2])).conn, 3);
        assert_eq!(take(want(5, 0, serials[4])).conn, 5);
        assert_eq!(take(want(2, 0, serials[1])).conn, 2);
        // Given back again: a new, larger serial at the back.
        let l = open(&p, 1);
        let mut i = idle(1, 2, l, Instant::now());
        i.owner = 2;
        i.db = Some(db.clone());
        let again = p.give_back_numbered(i).1.unwrap();
        assert!(again > serials[5]);
        assert_eq!(take(want(2, 0, again)).conn, 2);
        // Its connection is gone (taken above) or changed (another tag):
        // the usual choice, the most recent of the key.
        assert_eq!(take(want(3, 0, serials[2])).conn, 6);
        let l = open(&p, 1);
        let mut i = idle(1, 7, l, Instant::now());
        (i.owner, i.tag, i.db) = (7, 9, Some(db.clone()));
        let tagged = p.give_back_numbered(i).1.unwrap();
        assert_eq!(take(want(7, 0, tagged)).conn, 4);
        // A serial of another owner is not taken as the taker's own.
        assert_eq!(take(want(8, 9, tagged)).conn, 7);
    }

    #[test]
    fn a_connection_on_the_takers_event_loop_first() {
        let p = Pool::<u8, u32>::new("s0", settings(0));
        let leases: Vec<_> = (0..4).map(|_| open(&p, 1)).collect();
        // Connection c on event loop `home`, session state `tag`; the
        // last given back is the most recent.
        for ((c, home, tag), l) in [(1, 1, 0), (2, 2, 0), (3, 1, 5), (4, 1, 0)]
            .into_iter()
            .zip(leases)
        {
            let mut i = idle(1, c, l, Instant::now());
            (i.home, i.tag) = (home, tag);
            assert!(p.give_back(i).is_none());
        }
        let take = |home, tag| match p.try_take(
            &1,
            Want {
                tag,
                home,
                ..Want::default()
            },
            Some(Instant::now()),
        ) {
            Ok(Taken::Reuse(i)) => i.conn,
            _ => panic!("expected a reuse"),
        };
        // Same state on the taker's loop (the most recent of them), before
        // one given back later on another loop.
        assert_eq!(take(2, 0), 2);
        // None left on loop 2 in that state: the most recent in it.
        assert_eq!(take(2, 0), 4);
        // The session state comes before the loop.
        assert_eq!(take(2, 5), 3);
        assert_eq!(take(1, 0), 1);
    }

    #[test]
    fn session_state_preference() {
        let p = Pool::<u8, u32>::new("s0", settings(0));
        let leases: Vec<_> = (0..3).map(|_| open(&p, 1)).collect();
        for ((c, tag), l) in [(1, 7), (2, 0), (3, 9)].into_iter().zip(leases) {
            let mut i = idle(1, c, l, Instant::now());
            i.tag = tag;
            assert!(p.give_back(i).is_none());
        }
        let take = |tag, owner| match p.try_take(
            &1,
            Want {
                db: None,
                tag,
                owner,
                serial: 0,
                home: 0,
            },
            Some(Instant::now()),
        ) {
            Ok(Taken::Reuse(i)) => i.conn,
            _ => panic!("expected a reuse"),
        };
        // The one with the taker's state, else the most recent one.
        assert_eq!(take(7, 0), 1);
        assert_eq!(take(5, 0), 3);
        assert_eq!(take(0, 0), 2);
        // With the taker's state, the one it gave back comes first.
        let (l4, l5) = (open(&p, 1), open(&p, 1));
        let mut i = idle(1, 4, l4, Instant::now());
        i.owner = 42;
        assert!(p.give_back(i).is_none());
        assert!(p.give_back(idle(1, 5, l5, Instant::now())).is_none());
        assert_eq!(take(0, 42), 4);
        assert_eq!(take(0, 42), 5);
    }

    #[test]
    fn zero_idle_timeout_keeps_nothing() {
        let mut s = settings(0);
        s.idle_timeout = Duration::ZERO;
        let p = Pool::<u8, u32>::new("s0", s);
        let l = open(&p, 1);
        assert_eq!(p.give_back(idle(1, 5, l, Instant::now())), Some(5));
        assert_eq!(p.state().open, 0);
    }

    #[tokio::test]
    async fn full_pool_times_out() {
        let p = Pool::<u8, u32>::new("s0", settings(1));
        let _a = open(&p, 1);
        let e = p.take(&1, Want::default()).await.expect_err("full");
        assert_eq!(e.max, 1);
        assert_eq!(p.stats.timeouts.load(Ordering::Relaxed), 1);
        // The one that timed out is no longer in line.
        assert_eq!(p.state().waiting, 0);
        assert!(p
            .try_take(&1, Want::default(), Some(Instant::now()))
            .is_err());
    }
}
