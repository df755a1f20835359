//! The commit log of idgate's two-phase commits (`recovery.rs` finishes
//! the branches dead servers left from it).
//!
//! A write on several shards is committed with XA (see `xa.rs`): every
//! shard prepares, then every shard commits. If idgate dies between the
//! two, MariaDB keeps the prepared branches (across disconnects and
//! restarts) with their locks, and someone has to decide: commit or roll
//! back. That decision must be the one idgate made, so it is written down
//! first, in the allocator's store (etcd, or the state file), before the
//! first `XA COMMIT` is sent ("presumed abort"):
//!
//! - no record: no shard was told to commit, so rolling every branch back
//!   is right;
//! - a record: some shard may have committed, so every branch commits.
//!
//! The record is deleted once every shard has committed (in the
//! background: a leftover record is harmless, its xid is found nowhere).
//!
//! **Whose branches.** Each idgate server leases a node id in the store's
//! scope `xa` (etcd: a key with a TTL lease kept alive, as snowflake node
//! ids are; the state file: one process at a time). Its xids are
//! `idgate-<cluster>-<node>-<incarnation>-<session>-<seq>`: the cluster is
//! a random id kept in the store (idgates with another store never touch
//! these xids), the incarnation a per-node counter in the store, one more
//! at every start. A branch's server is dead when its node has a higher
//! incarnation now, or no live process holds its node. Every idgate looks
//! at `XA RECOVER` on every shard when it starts and every 10 s after, and
//! finishes the branches of dead servers: a restarted idgate its
//! predecessor's at once, a surviving idgate those of one that died once
//! its lease has expired (etcd: 10 s). A DBA can do the same by hand:
//! `XA RECOVER`, then `XA COMMIT` when `<prefix>/xa/commit/<xid>` exists in
//! the store, `XA ROLLBACK` otherwise.

use crate::idgen::store::{NodeLease, Store, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::warn;

/// The store scope of XA node ids.
const SCOPE: &str = "xa";
/// How many idgate servers can share one store.
const NODES: u64 = 1024;

/// One server's commit log.
pub struct XaLog {
    store: Arc<dyn Store>,
    lease: NodeLease,
    cluster: u64,
    incarnation: u64,
    /// Set by `close`: the recovery task stops.
    closed: std::sync::atomic::AtomicBool,
    pub(in crate::frontend) close_now: tokio::sync::Notify,
    /// `idgate-<cluster>-<node>-<incarnation>`: the start of every xid this server makes.
    prefix: String,
}

impl std::fmt::Debug for XaLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XaLog")
            .field("prefix", &self.prefix)
            .field("store", &self.store.describe())
            .finish()
    }
}

/// What recovery did with the branches of earlier incarnations.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Branches committed (a commit record existed).
    pub committed: usize,
    /// Branches rolled back (no record: the commit was never decided).
    pub rolled_back: usize,
}

impl XaLog {
    /// Leases a node id for this server's xids and counts a new
    /// incarnation of it.
    pub async fn open(store: Arc<dyn Store>) -> Result<XaLog, StoreError> {
        let cluster = cluster_id(&*store).await?;
        let lease = store.acquire_node(SCOPE, NODES).await?;
        let incarnation = match next_incarnation(&*store, lease.node).await {
            Ok(n) => n,
            Err(e) => {
                let _ = store.release_node(SCOPE, &lease).await;
                return Err(e);
            }
        };
        Ok(XaLog {
            prefix: format!("idgate-{cluster:08x}-{:x}-{incarnation:x}", lease.node),
            store,
            lease,
            cluster,
            incarnation,
            closed: std::sync::atomic::AtomicBool::new(false),
            close_now: tokio::sync::Notify::new(),
        })
    }

    /// The start of every xid of this server (`idgate-<cluster>-<node>-<incarnation>`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether the store still vouches that no other process uses this
    /// node (an etcd lease not kept alive in time is lost for good).
    pub fn valid(&self) -> bool {
        self.lease.state.is_valid()
    }

    /// Whether `xid` is a branch of this store's idgates whose server is
    /// gone: an earlier incarnation of this node; or of another node, when
    /// that node has started again since (a higher incarnation) or no live
    /// process holds it. A branch of a live server is never touched.
    pub async fn is_dead(&self, xid: &str) -> Result<bool, StoreError> {
        let Some((cluster, node, incarnation)) = parse_xid(xid) else {
            return Ok(false);
        };
        if cluster != self.cluster {
            return Ok(false);
        }
        if node == self.lease.node {
            return Ok(incarnation != self.incarnation);
        }
        let current = self
            .store
            .load(&incarnation_key(node))
            .await?
            .map_or(0, |v| v.value);
        if current > incarnation {
            return Ok(true);
        }
        Ok(!self.store.node_held(SCOPE, node).await?)
    }

    /// Writes down that `xid` commits. Must succeed before any `XA COMMIT`.
    pub async fn record_commit(&self, xid: &str) -> Result<(), StoreError> {
        if !self.valid() {
            return Err(StoreError::Unavailable(format!(
                "the XA node lease {} was lost",
                self.lease.node
            )));
        }
        // `None`: the record exists already, which says the same.
        self.store.compare_and_set(&key(xid), None, 1).await?;
        Ok(())
    }

    /// Whether a commit of `xid` was recorded.
    pub async fn decided(&self, xid: &str) -> Result<bool, StoreError> {
        Ok(self.store.load(&key(xid)).await?.is_some())
    }

    /// Deletes the record of `xid` (every branch committed).
    pub async fn forget(&self, xid: &str) -> Result<(), StoreError> {
        self.store.delete(&key(xid)).await
    }

    /// Deletes the record of `xid` in the background (logging a failure).
    pub fn forget_later(self: &Arc<Self>, xid: String) {
        let log = self.clone();
        tokio::spawn(async move {
            if let Err(e) = log.forget(&xid).await {
                warn!(%xid, "cannot delete the XA commit record (harmless, it names a finished transaction): {e}");
            }
        });
    }

    /// Gives the node id back (clean shutdown) and stops recovery.
    pub async fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.close_now.notify_waiters();
        let _ = self.store.release_node(SCOPE, &self.lease).await;
    }

    pub(in crate::frontend) fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// `(cluster, node, incarnation)` of an xid made with a commit log:
/// `idgate-<cluster>-<node>-<incarnation>-<session>-<seq>`, hexadecimal.
fn parse_xid(xid: &str) -> Option<(u64, u64, u64)> {
    let mut parts = xid.split('-');
    if parts.next() != Some("idgate") {
        return None;
    }
    let mut nums = [0u64; 5];
    for n in &mut nums {
        *n = u64::from_str_radix(parts.next()?, 16).ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some((nums[0], nums[1], nums[2]))
}

fn incarnation_key(node: u64) -> String {
    format!("xa/incarnation/{node}")
}

/// A random id of this store, made by the first idgate that uses it: the
/// xids of idgates with different stores (another etcd prefix, another
/// state file) on the same shards never look like each other's.
async fn cluster_id(store: &dyn Store) -> Result<u64, StoreError> {
    const KEY: &str = "xa/cluster";
    if let Some(v) = store.load(KEY).await? {
        return Ok(v.value & 0xffff_ffff);
    }
    let mine = u64::from(rand::random::<u32>());
    if store.compare_and_set(KEY, None, mine).await?.is_some() {
        return Ok(mine);
    }
    match store.load(KEY).await? {
        Some(v) => Ok(v.value & 0xffff_ffff),
        None => Err(StoreError::Unavailable(format!("{KEY} vanished"))),
    }
}

/// Counts one more start of node `node`: unique among its incarnations.
async fn next_incarnation(store: &dyn Store, node: u64) -> Result<u64, StoreError> {
    let key = incarnation_key(node);
    loop {
        let current = store.load(&key).await?;
        let next = current.map_or(1, |v| v.value + 1);
        if store
            .compare_and_set(&key, current.map(|v| v.version), next)
            .await?
            .is_some()
        {
            return Ok(next);
        }
    }
}

fn key(xid: &str) -> String {
    format!("xa/commit/{xid}")
}

/// A tag that sets one server's xids apart from every other's (another
/// idgate process, or another server in this process): start time, process
/// id and a counter.
pub(in crate::frontend) fn server_tag() -> String {
    static SERVERS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = SERVERS.fetch_add(1, Ordering::Relaxed) & 0xffff;
    format!("{:x}{:x}{n:x}", nanos as u64, std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idgen::MemoryStore;

    // In memory, on paused tokio time: nothing here waits on the machine.

    #[tokio::test(start_paused = true)]
    async fn dead_branches_are_those_of_servers_gone() {
        let store: Arc<dyn Store> = MemoryStore::new();
        let a = XaLog::open(store.clone()).await.unwrap();
        let b = XaLog::open(store.clone()).await.unwrap();
        assert_ne!(a.lease.node, b.lease.node, "two live servers, two nodes");
        assert!(a.prefix().starts_with("idgate-"));
        let xid = |log: &XaLog| format!("{}-1f-2", log.prefix());
        assert!(!a.is_dead(&xid(&a)).await.unwrap(), "its own");
        assert!(!a.is_dead(&xid(&b)).await.unwrap(), "another live server's");
        // Another incarnation of its own node: an earlier start.
        let earlier = format!("idgate-{:08x}-{:x}-7-1-1", a.cluster, a.lease.node);
        assert!(a.is_dead(&earlier).await.unwrap());
        // b stops: its branches are dead for a.
        let b_xid = xid(&b);
        b.close().await;
        assert!(a.is_dead(&b_xid).await.unwrap(), "a node no one holds");
        // b's node starts again: the old incarnation's branches stay dead,
        // the new one's are alive.
        let c = XaLog::open(store.clone()).await.unwrap();
        assert_eq!(c.lease.node, b.lease.node);
        assert!(a.is_dead(&b_xid).await.unwrap());
        assert!(!a.is_dead(&xid(&c)).await.unwrap());
        // Other formats and other stores' idgates are never touched.
        assert!(!a.is_dead("idgate-18f2a3b4c5d6e7f8-1-1").await.unwrap());
        assert!(!a.is_dead("someone-else-1").await.unwrap());
        let foreign = format!("idgate-{:08x}-0-1-1-1", a.cluster ^ 1);
        assert!(!a.is_dead(&foreign).await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn records_are_written_read_and_deleted() {
        let store: Arc<dyn Store> = MemoryStore::new();
        let log = XaLog::open(store).await.unwrap();
        let xid = format!("{}-2-7", log.prefix());
        assert!(!log.decided(&xid).await.unwrap());
        log.record_commit(&xid).await.unwrap();
        log.record_commit(&xid).await.unwrap();
        assert!(log.decided(&xid).await.unwrap());
        log.forget(&xid).await.unwrap();
        assert!(!log.decided(&xid).await.unwrap());
    }
}
