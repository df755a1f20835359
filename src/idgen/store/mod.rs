//! The persistent store behind the generators, as one trait with three
//! implementations: etcd (shared by several idgate processes), a local state
//! file (the embedded default) and memory (tests, with injected faults).
//!
//! The store holds counters (u64 values with a version for compare-and-swap),
//! snowflake node-id leases, and the member records of the processes
//! issuing a sequence (a value attached to a lease: what each process may
//! still issue, for explicit ids; see `sequence.rs`). Keys are relative (`seq/orders/hwm`); a store
//! adds its own prefix.

pub mod etcd;
pub mod file;
pub mod memory;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

pub use super::error::StoreError;

/// A boxed future returned by store calls (keeps the trait object-safe).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A counter value and the version a compare-and-swap must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versioned {
    /// The stored value.
    pub value: u64,
    /// Opaque version (etcd mod_revision); never 0 for a present key.
    pub version: u64,
}

/// The state of one node-id lease, shared between the store (which keeps it
/// alive) and the generator (which stops issuing when it is lost).
pub struct LeaseState {
    /// False once the lease is lost (expired, revoked, not kept alive in time).
    /// Never becomes true again: a new lease is a new `LeaseState`.
    valid: AtomicBool,
    /// Woken when `valid` turns false.
    lost: Notify,
    /// Called once when the lease is lost: the generator stops issuing at
    /// once and wakes its background task (which re-leases).
    watchers: parking_lot::Mutex<Vec<LostHook>>,
}

/// A callback run when a lease is lost.
pub type LostHook = Box<dyn Fn() + Send + Sync>;

impl std::fmt::Debug for LeaseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseState")
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl LeaseState {
    /// A fresh, valid lease state.
    pub fn new_valid() -> Arc<LeaseState> {
        Arc::new(LeaseState {
            valid: AtomicBool::new(true),
            lost: Notify::new(),
            watchers: parking_lot::Mutex::new(Vec::new()),
        })
    }

    /// Whether the lease is still held.
    pub fn is_valid(&self) -> bool {
        self.valid.load(Ordering::Acquire)
    }

    /// Marks the lease lost (once) and tells whoever waits for that.
    pub fn mark_lost(&self) {
        if self.valid.swap(false, Ordering::AcqRel) {
            self.lost.notify_waiters();
            self.lost.notify_one();
            for hook in self.watchers.lock().iter() {
                hook();
            }
        }
    }

    /// Registers `hook` to run when the lease is lost (at once if it already is).
    pub fn on_lost(&self, hook: LostHook) {
        if !self.is_valid() {
            hook();
            return;
        }
        self.watchers.lock().push(hook);
        // Lost between the check and the push: the hook may not have run.
        if !self.is_valid() {
            if let Some(h) = self.watchers.lock().last() {
                h();
            }
        }
    }

    /// Resolves when the lease is lost.
    pub async fn wait_lost(&self) {
        loop {
            let notified = self.lost.notified();
            if !self.is_valid() {
                return;
            }
            notified.await;
        }
    }
}

/// A node id leased by this process for one snowflake generator.
#[derive(Debug, Clone)]
pub struct NodeLease {
    /// The node id, below `2^node_bits`.
    pub node: u64,
    /// Store-specific handle (etcd lease id) used to release it.
    pub handle: i64,
    /// Validity, kept up to date by the store.
    pub state: Arc<LeaseState>,
}

/// The processes that issue ids of one generator, and one counter, read at
/// one revision (see [`Store::members`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    /// The counter asked for (`None`: absent).
    pub key: Option<u64>,
    /// Every live member: its handle and the value it last set.
    pub members: Vec<(i64, u64)>,
}

/// A persistent store for generator state.
///
/// Every call must return within a bounded time (the implementation's own
/// timeout); the allocator adds its own timeout on top.
pub trait Store: Send + Sync + 'static {
    /// Reads a counter; `None` if the key does not exist.
    fn load<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Versioned>>;

    /// Sets `key` to `value` if its version is still `expected` (`None`: the
    /// key must not exist). Returns the new version, or `None` if the
    /// comparison failed (someone else wrote the key).
    fn compare_and_set<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
        value: u64,
    ) -> StoreFuture<'a, Option<u64>>;

    /// Removes `key` (no error if it does not exist). Used for records that
    /// live only until a job is done (XA commit decisions), not counters.
    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()>;

    /// Leases a node id in `0..count` under `scope` that no live process holds.
    /// Fails with [`StoreError::NodesExhausted`] when all are taken.
    fn acquire_node<'a>(&'a self, scope: &'a str, count: u64) -> StoreFuture<'a, NodeLease>;

    /// Whether some live process holds node id `node` under `scope` (a
    /// lease not expired; the state file: this process's own node).
    fn node_held<'a>(&'a self, scope: &'a str, node: u64) -> StoreFuture<'a, bool>;

    /// Gives a node id back (clean shutdown).
    fn release_node<'a>(&'a self, scope: &'a str, lease: &'a NodeLease) -> StoreFuture<'a, ()>;

    /// Follows a counter that other processes write: the receiver holds the
    /// highest value seen so far (0 at first) and is notified when it rises.
    /// `None` when no other process can write it (the file store). The
    /// implementation keeps following (re-creating its watch after errors)
    /// until every receiver is dropped.
    fn follow(&self, key: &str) -> Option<tokio::sync::watch::Receiver<u64>> {
        let _ = key;
        None
    }

    /// Joins the processes issuing ids under `scope`: a member record that
    /// lives as long as the returned lease (etcd: a key attached to a lease
    /// with a TTL, kept alive), holding a value (0 at first; see
    /// [`Store::set_member`]). `None`: the store serves one process only
    /// (the state file), so there is nobody to coordinate with.
    fn join<'a>(&'a self, scope: &'a str) -> StoreFuture<'a, Option<NodeLease>> {
        let _ = scope;
        Box::pin(async { Ok(None) })
    }

    /// Sets the value of this process's member record. Fails when the
    /// record is gone (lease lost).
    fn set_member<'a>(
        &'a self,
        scope: &'a str,
        lease: &'a NodeLease,
        value: u64,
    ) -> StoreFuture<'a, ()> {
        let _ = (scope, lease, value);
        Box::pin(async { Ok(()) })
    }

    /// Removes this process's member record (clean shutdown).
    fn leave<'a>(&'a self, scope: &'a str, lease: &'a NodeLease) -> StoreFuture<'a, ()> {
        let _ = scope;
        lease.state.mark_lost();
        Box::pin(async { Ok(()) })
    }

    /// The live members of `scope` and the counter `key`, read at one
    /// revision (a consistent snapshot).
    fn members<'a>(&'a self, scope: &'a str, key: &'a str) -> StoreFuture<'a, Members> {
        let _ = scope;
        Box::pin(async move {
            Ok(Members {
                key: self.load(key).await?.map(|v| v.value),
                members: Vec::new(),
            })
        })
    }

    /// Reads a document (bytes idgate wrote with [`Store::publish`], e.g.
    /// a published rules version); `None` if absent.
    fn load_doc<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        let _ = key;
        Box::pin(async { Err(no_docs(self.describe())) })
    }

    /// The documents whose key starts with `prefix`: (key relative to the
    /// store's own prefix, bytes), in key order.
    fn list_docs<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<(String, Vec<u8>)>> {
        let _ = prefix;
        Box::pin(async { Err(no_docs(self.describe())) })
    }

    /// One transaction: if counter `key`'s version is still `expected`
    /// (`None`: absent), sets it to `value` and writes every document of
    /// `docs`; else changes nothing. Returns the new version, or `None`
    /// when the comparison failed (someone else moved the counter first).
    fn publish<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
        value: u64,
        docs: &'a [(String, Vec<u8>)],
    ) -> StoreFuture<'a, Option<u64>> {
        let _ = (key, expected, value, docs);
        Box::pin(async { Err(no_docs(self.describe())) })
    }

    /// A short description for logs and stats (`etcd http://...`, `file /path`).
    fn describe(&self) -> String;
}

/// What a store that keeps no documents (the state file) answers.
fn no_docs(store: String) -> StoreError {
    StoreError::Unavailable(format!(
        "{store} keeps no published rules (rules published with `idgate rules push` need [allocator] store = \"etcd\")"
    ))
}

/// Raises a followed value (never lowers it).
pub(crate) fn raise(tx: &tokio::sync::watch::Sender<u64>, v: u64) {
    tx.send_if_modified(|cur| {
        if v > *cur {
            *cur = v;
            true
        } else {
            false
        }
    });
}

/// Parses a counter value as written by idgate (decimal ASCII).
pub(crate) fn parse_counter(key: &str, raw: &[u8]) -> Result<u64, StoreError> {
    std::str::from_utf8(raw)
        .ok()
        .map(str::trim)
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| StoreError::Corrupt {
            key: key.to_string(),
            detail: format!(
                "expected a decimal counter, found {:?}",
                String::from_utf8_lossy(&raw[..raw.len().min(64)])
            ),
        })
}
