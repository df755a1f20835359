//! An in-memory store for tests: shared between several allocators standing
//! for several processes, with injected faults and latency.
//!
//! A "crash" is dropping an allocator without `shutdown`: its node leases stay
//! taken until the test calls [`MemoryStore::expire_orphans`], as etcd would
//! expire them after their TTL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::{LeaseState, Members, NodeLease, Store, StoreError, StoreFuture, Versioned};

/// A fault the memory store injects into every call until cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Calls behave normally.
    #[default]
    None,
    /// Calls fail at once with [`StoreError::Injected`] and change nothing.
    Fail,
    /// Calls never return (the caller's timeout must fire).
    Hang,
    /// Writes are applied but the caller is told they failed (a reply lost
    /// after commit, as with an etcd timeout).
    LoseReply,
}

#[derive(Debug, Default)]
struct Inner {
    /// Counters by key.
    values: HashMap<String, Versioned>,
    /// Last version handed out (versions are global, like etcd revisions).
    revision: u64,
    /// Leased node ids by (scope, node).
    nodes: HashMap<(String, u64), Arc<LeaseState>>,
    /// Last lease handle handed out.
    handles: i64,
    /// Member records by (scope, handle): value and lease state.
    members: HashMap<(String, i64), (u64, Arc<LeaseState>)>,
    /// Followed counters.
    followers: HashMap<String, tokio::sync::watch::Sender<u64>>,
    /// Documents by key (sorted, for listing by prefix).
    docs: std::collections::BTreeMap<String, Vec<u8>>,
}

impl Inner {
    fn set(&mut self, key: &str, value: u64) -> u64 {
        self.revision += 1;
        let version = self.revision;
        self.values
            .insert(key.to_string(), Versioned { value, version });
        if let Some(tx) = self.followers.get(key) {
            super::raise(tx, value);
        }
        version
    }
}

/// The in-memory store.
#[derive(Debug, Default)]
pub struct MemoryStore {
    /// All state, behind one lock (tests only; no await while held).
    inner: Mutex<Inner>,
    /// The fault currently injected.
    fault: Mutex<Fault>,
    /// Latency added to every call (simulates a network round trip).
    latency: Mutex<Duration>,
    /// Successful writes, for checking that the store sees about rate / batch
    /// writes per second.
    writes: AtomicU64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Arc<MemoryStore> {
        Arc::new(MemoryStore::default())
    }

    /// Injects `fault` into every later call.
    pub fn set_fault(&self, fault: Fault) {
        *self.fault.lock() = fault;
    }

    /// Adds `latency` to every later call.
    pub fn set_latency(&self, latency: Duration) {
        *self.latency.lock() = latency;
    }

    /// Number of successful writes so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Current value of a counter.
    pub fn value(&self, key: &str) -> Option<u64> {
        self.inner.lock().values.get(key).map(|v| v.value)
    }

    /// Overwrites a counter (tests: corrupt or rewind the store behind idgate's back).
    pub fn put(&self, key: &str, value: u64) {
        self.inner.lock().set(key, value);
    }

    /// Expires the leases of crashed holders (dropped without release), as a
    /// TTL would. Returns how many were freed.
    pub fn expire_orphans(&self) -> usize {
        let mut inner = self.inner.lock();
        let before = inner.nodes.len();
        inner.nodes.retain(|_, st| Arc::strong_count(st) > 1);
        let members = inner.members.len();
        inner.members.retain(|_, (_, st)| Arc::strong_count(st) > 1);
        before - inner.nodes.len() + members - inner.members.len()
    }

    /// Revokes the lease on `node` of `scope` (the holder loses it).
    pub fn revoke_node(&self, scope: &str, node: u64) -> bool {
        let removed = self.inner.lock().nodes.remove(&(scope.to_string(), node));
        if let Some(st) = &removed {
            st.mark_lost();
        }
        removed.is_some()
    }

    /// Expires the member record `handle` of `scope` (as etcd does when a
    /// partitioned holder's lease runs out): the holder is told it lost it.
    pub fn expire_member(&self, scope: &str, handle: i64) -> bool {
        let removed = self
            .inner
            .lock()
            .members
            .remove(&(scope.to_string(), handle));
        if let Some((_, st)) = &removed {
            st.mark_lost();
        }
        removed.is_some()
    }

    /// Removes the member record `handle` of `scope` without telling its
    /// holder (a lease expired in the store while the holder is cut off and
    /// has not noticed yet).
    pub fn drop_member_silently(&self, scope: &str, handle: i64) -> bool {
        self.inner
            .lock()
            .members
            .remove(&(scope.to_string(), handle))
            .is_some()
    }

    /// The live member records of `scope`: (handle, value), by handle.
    pub fn member_records(&self, scope: &str) -> Vec<(i64, u64)> {
        let mut v: Vec<(i64, u64)> = self
            .inner
            .lock()
            .members
            .iter()
            .filter(|((s, _), _)| s == scope)
            .map(|((_, h), (v, _))| (*h, *v))
            .collect();
        v.sort_unstable();
        v
    }

    /// Node ids of `scope` currently leased.
    pub fn leased_nodes(&self, scope: &str) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .inner
            .lock()
            .nodes
            .keys()
            .filter(|(s, _)| s == scope)
            .map(|(_, n)| *n)
            .collect();
        v.sort_unstable();
        v
    }

    /// Applies latency and the injected fault. `Ok(lose_reply)`.
    async fn enter(&self) -> Result<bool, StoreError> {
        let latency = *self.latency.lock();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let fault = *self.fault.lock();
        match fault {
            Fault::None => Ok(false),
            Fault::Fail => Err(StoreError::Injected),
            Fault::Hang => std::future::pending().await,
            Fault::LoseReply => Ok(true),
        }
    }
}

impl Store for MemoryStore {
    fn load<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Versioned>> {
        Box::pin(async move {
            self.enter().await?;
            Ok(self.inner.lock().values.get(key).copied())
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let lose = self.enter().await?;
            self.inner.lock().values.remove(key);
            if lose {
                return Err(StoreError::Injected);
            }
            Ok(())
        })
    }

    fn compare_and_set<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
        value: u64,
    ) -> StoreFuture<'a, Option<u64>> {
        Box::pin(async move {
            let lose = self.enter().await?;
            let result = {
                let mut inner = self.inner.lock();
                let current = inner.values.get(key).map(|v| v.version);
                if current != expected {
                    None
                } else {
                    let version = inner.set(key, value);
                    self.writes.fetch_add(1, Ordering::Relaxed);
                    Some(version)
                }
            };
            if lose {
                return Err(StoreError::Injected);
            }
            Ok(result)
        })
    }

    fn node_held<'a>(&'a self, scope: &'a str, node: u64) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            self.enter().await?;
            let inner = self.inner.lock();
            Ok(inner
                .nodes
                .get(&(scope.to_string(), node))
                .is_some_and(|st| st.is_valid()))
        })
    }

    fn acquire_node<'a>(&'a self, scope: &'a str, count: u64) -> StoreFuture<'a, NodeLease> {
        Box::pin(async move {
            let lose = self.enter().await?;
            let mut inner = self.inner.lock();
            let free = (0..count).find(|n| !inner.nodes.contains_key(&(scope.to_string(), *n)));
            let Some(node) = free else {
                return Err(StoreError::NodesExhausted(count));
            };
            let state = LeaseState::new_valid();
            inner.nodes.insert((scope.to_string(), node), state.clone());
            inner.handles += 1;
            let lease = NodeLease {
                node,
                handle: inner.handles,
                state,
            };
            if lose {
                // The node stays taken by a holder that never learns of it:
                // orphaned, freed by `expire_orphans` like a TTL would.
                return Err(StoreError::Injected);
            }
            Ok(lease)
        })
    }

    fn release_node<'a>(&'a self, scope: &'a str, lease: &'a NodeLease) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.enter().await?;
            let mut inner = self.inner.lock();
            let key = (scope.to_string(), lease.node);
            if inner
                .nodes
                .get(&key)
                .is_some_and(|st| Arc::ptr_eq(st, &lease.state))
            {
                inner.nodes.remove(&key);
            }
            lease.state.mark_lost();
            Ok(())
        })
    }

    fn join<'a>(&'a self, scope: &'a str) -> StoreFuture<'a, Option<NodeLease>> {
        Box::pin(async move {
            let lose = self.enter().await?;
            let mut inner = self.inner.lock();
            inner.handles += 1;
            let handle = inner.handles;
            let state = LeaseState::new_valid();
            inner
                .members
                .insert((scope.to_string(), handle), (0, state.clone()));
            if lose {
                return Err(StoreError::Injected);
            }
            Ok(Some(NodeLease {
                node: 0,
                handle,
                state,
            }))
        })
    }

    fn set_member<'a>(
        &'a self,
        scope: &'a str,
        lease: &'a NodeLease,
        value: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let lose = self.enter().await?;
            let mut inner = self.inner.lock();
            inner.revision += 1;
            match inner.members.get_mut(&(scope.to_string(), lease.handle)) {
                Some((v, st)) if Arc::ptr_eq(st, &lease.state) => *v = value,
                _ => return Err(StoreError::Unavailable("member record gone".into())),
            }
            if lose {
                return Err(StoreError::Injected);
            }
            Ok(())
        })
    }

    fn leave<'a>(&'a self, scope: &'a str, lease: &'a NodeLease) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.enter().await?;
            self.inner
                .lock()
                .members
                .remove(&(scope.to_string(), lease.handle));
            lease.state.mark_lost();
            Ok(())
        })
    }

    fn members<'a>(&'a self, scope: &'a str, key: &'a str) -> StoreFuture<'a, Members> {
        Box::pin(async move {
            self.enter().await?;
            let inner = self.inner.lock();
            let mut members: Vec<(i64, u64)> = inner
                .members
                .iter()
                .filter(|((s, _), (_, st))| s == scope && st.is_valid())
                .map(|((_, h), (v, _))| (*h, *v))
                .collect();
            members.sort_unstable();
            Ok(Members {
                key: inner.values.get(key).map(|v| v.value),
                members,
            })
        })
    }

    fn follow(&self, key: &str) -> Option<tokio::sync::watch::Receiver<u64>> {
        let mut inner = self.inner.lock();
        let current = inner.values.get(key).map(|v| v.value).unwrap_or(0);
        let tx = inner
            .followers
            .entry(key.to_string())
            .or_insert_with(|| tokio::sync::watch::channel(current).0);
        Some(tx.subscribe())
    }

    fn load_doc<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            self.enter().await?;
            Ok(self.inner.lock().docs.get(key).cloned())
        })
    }

    fn list_docs<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<(String, Vec<u8>)>> {
        Box::pin(async move {
            self.enter().await?;
            Ok(self
                .inner
                .lock()
                .docs
                .range(prefix.to_string()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect())
        })
    }

    fn publish<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
        value: u64,
        docs: &'a [(String, Vec<u8>)],
    ) -> StoreFuture<'a, Option<u64>> {
        Box::pin(async move {
            let lose = self.enter().await?;
            let result = {
                let mut inner = self.inner.lock();
                if inner.values.get(key).map(|v| v.version) != expected {
                    None
                } else {
                    for (k, v) in docs {
                        inner.docs.insert(k.clone(), v.clone());
                    }
                    let version = inner.set(key, value);
                    self.writes.fetch_add(1, Ordering::Relaxed);
                    Some(version)
                }
            };
            if lose {
                return Err(StoreError::Injected);
            }
            Ok(result)
        })
    }

    fn describe(&self) -> String {
        "memory".to_string()
    }
}
