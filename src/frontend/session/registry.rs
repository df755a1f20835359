//! Every session of the server, by idgate connection id: what `KILL` from
//! another session needs of each (its login user, its shard connections'
//! thread ids, a kill flag and a wake-up; `kill.rs` runs the `KILL`), and
//! what `SHOW IDGATE SESSIONS` shows of each (client address, schema,
//! the command it runs and since when, whether it is in a transaction).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// What a session exposes to `KILL` from other sessions.
#[derive(Debug)]
pub struct Control {
    /// The login user (changed by COM_CHANGE_USER).
    pub(in crate::frontend) user: Mutex<String>,
    /// MariaDB's thread id of the session's connection to each shard.
    pub(in crate::frontend) threads: Mutex<Vec<Option<u32>>>,
    pub(in crate::frontend) killed: AtomicBool,
    /// Wakes the session when it is killed (a stored permit if it is busy).
    pub(in crate::frontend) wake: Notify,
    /// The client's address.
    pub(in crate::frontend) peer: Peer,
    /// The session's schema (updated when it changes).
    pub(in crate::frontend) schema: Mutex<Option<String>>,
    /// The command byte being handled; [`IDLE`] between commands.
    pub(in crate::frontend) command: AtomicU8,
    /// When the current command started, or the last one ended (µs since
    /// the registry's epoch).
    pub(in crate::frontend) since_us: AtomicU64,
    /// The session was in a transaction when its last command ended.
    pub(in crate::frontend) in_txn: AtomicBool,
    /// The client connection is encrypted.
    pub(in crate::frontend) tls: bool,
}

/// [`Control::command`] between commands (no command has this byte).
pub const IDLE: u8 = 0xff;

impl Control {
    /// Records the thread id of the session's connection to `shard`.
    pub fn set_thread(&self, shard: usize, thread: Option<u32>) {
        if let Some(t) = self.threads.lock().get_mut(shard) {
            *t = thread;
        }
    }

    /// Records a new login user.
    pub fn set_user(&self, user: &str) {
        *self.user.lock() = user.to_string();
    }

    /// Records the start (`command`) or the end ([`IDLE`]) of a command.
    ///
    /// The start is a sequentially consistent store, paired with the
    /// sequentially consistent load of the resharding pause's flag that
    /// follows it (`pause::PauseGate::active`) and with the pause's store
    /// of that flag before it reads every session's activity: either the
    /// session sees the pause (and its statement is held), or the pause
    /// sees the session busy (and waits for it before acknowledging);
    /// never neither. On x86 it is one locked exchange.
    #[inline]
    pub fn set_command(&self, command: u8, now_us: u64) {
        self.since_us.store(now_us, Ordering::Relaxed);
        let order = if command == IDLE {
            Ordering::Release
        } else {
            Ordering::SeqCst
        };
        self.command.store(command, order);
    }

    /// Whether another session killed this one.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Completes when the session is killed (see [`Control::is_killed`]).
    pub async fn killed(&self) {
        self.wake.notified().await
    }
}

/// Every session of the server, by idgate connection id.
#[derive(Debug)]
pub struct Registry {
    sessions: Mutex<foldhash::HashMap<u32, Arc<Control>>>,
    /// Where [`Control::since_us`] counts from.
    epoch: std::time::Instant,
    /// Sessions registered since the start
    /// (`idgate_sessions_opened_total`).
    opened: AtomicU64,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            sessions: Mutex::default(),
            epoch: std::time::Instant::now(),
            opened: AtomicU64::new(0),
        }
    }
}

/// What a session is doing ([`Registry::activity`]).
#[derive(Debug, Clone, Copy)]
pub struct Activity {
    pub id: u32,
    /// Inside a command.
    pub in_command: bool,
    /// When that command began, or the last one ended (µs, the
    /// registry's clock).
    pub since_us: u64,
    /// In a transaction when its last command ended.
    pub in_txn: bool,
}

/// A client's address as logs and `SHOW IDGATE SESSIONS` show it (empty
/// when unknown). Kept as an address and written out only when shown: a
/// connection that only logs in and out never formats it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Peer(pub Option<std::net::SocketAddr>);

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(a) => write!(f, "{a}"),
            None => Ok(()),
        }
    }
}

/// One row of `SHOW IDGATE SESSIONS`.
#[derive(Debug, Clone)]
pub struct SessionView {
    pub id: u32,
    pub user: String,
    pub peer: String,
    pub schema: Option<String>,
    /// Shard indexes the session has a connection to.
    pub shards: Vec<usize>,
    pub in_txn: bool,
    /// The client connection is encrypted.
    pub tls: bool,
    /// The command byte, or [`IDLE`].
    pub command: u8,
    /// Seconds in that command (or idle).
    pub secs: u64,
}

impl Registry {
    /// Registers session `id`; it is removed when the guard is dropped.
    pub fn register(
        self: &Arc<Self>,
        id: u32,
        user: &str,
        peer: Peer,
        tls: bool,
        shards: usize,
    ) -> Registered {
        let control = Arc::new(Control {
            user: Mutex::new(user.to_string()),
            threads: Mutex::new(vec![None; shards]),
            killed: AtomicBool::new(false),
            wake: Notify::new(),
            peer,
            schema: Mutex::new(None),
            command: AtomicU8::new(IDLE),
            since_us: AtomicU64::new(self.now_us()),
            in_txn: AtomicBool::new(false),
            tls,
        });
        self.sessions.lock().insert(id, control.clone());
        self.opened.fetch_add(1, Ordering::Relaxed);
        Registered {
            registry: self.clone(),
            id,
            control,
        }
    }

    pub(in crate::frontend) fn get(&self, id: u32) -> Option<Arc<Control>> {
        self.sessions.lock().get(&id).cloned()
    }

    /// Microseconds since the registry's epoch ([`Control::set_command`]).
    #[inline]
    pub fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// [`Registry::now_us`] of the instant `at`.
    #[inline]
    pub fn us_at(&self, at: std::time::Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// Every session as `SHOW IDGATE SESSIONS` shows it, by id.
    pub fn views(&self) -> Vec<SessionView> {
        let now = self.now_us();
        let mut v: Vec<SessionView> = self
            .sessions
            .lock()
            .iter()
            .map(|(&id, c)| SessionView {
                id,
                user: c.user.lock().clone(),
                peer: c.peer.to_string(),
                schema: c.schema.lock().clone(),
                shards: c
                    .threads
                    .lock()
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.is_some())
                    .map(|(i, _)| i)
                    .collect(),
                in_txn: c.in_txn.load(Ordering::Relaxed),
                tls: c.tls,
                command: c.command.load(Ordering::Relaxed),
                secs: now.saturating_sub(c.since_us.load(Ordering::Relaxed)) / 1_000_000,
            })
            .collect();
        v.sort_by_key(|s| s.id);
        v
    }

    /// What each session is doing now (the resharding pause's let-run
    /// sessions: `frontend/pause`).
    pub fn activity(&self) -> Vec<Activity> {
        self.sessions
            .lock()
            .iter()
            .map(|(&id, c)| Activity {
                id,
                in_command: c.command.load(Ordering::Relaxed) != IDLE,
                since_us: c.since_us.load(Ordering::Relaxed),
                in_txn: c.in_txn.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// What session `id` is doing now; `None`: it is gone.
    pub fn activity_of(&self, id: u32) -> Option<Activity> {
        let c = self.get(id)?;
        Some(Activity {
            id,
            in_command: c.command.load(Ordering::Relaxed) != IDLE,
            since_us: c.since_us.load(Ordering::Relaxed),
            in_txn: c.in_txn.load(Ordering::Relaxed),
        })
    }

    /// Sessions registered now.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    /// Sessions registered since the start, those gone included.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Whether no session is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A session's registration; dropping it unregisters the session.
#[derive(Debug)]
pub struct Registered {
    registry: Arc<Registry>,
    id: u32,
    /// The session's control block.
    pub control: Arc<Control>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.sessions.lock().remove(&self.id);
    }
}
