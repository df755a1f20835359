//! The etcd store: counters and node-id leases under `[allocator] etcd_prefix`,
//! shared by every idgate process pointing at the same etcd.
//!
//! - Counters are decimal strings; compare-and-swap is a txn comparing the
//!   key's mod_revision (or `version == 0` for "absent").
//! - A node id is a key `<prefix>/<scope>/node/<n>` attached to an etcd lease
//!   with a TTL. A background task keeps the lease alive and re-creates the
//!   keep-alive stream after a disconnect (the client does not); when the lease
//!   cannot be renewed before its TTL runs out, or etcd says it is gone, the
//!   [`LeaseState`] turns invalid and the generator stops issuing.
//! - Every call is bounded by a timeout.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use tokio::time::Instant;

use super::{
    parse_counter, LeaseState, Members, NodeLease, Store, StoreError, StoreFuture, Versioned,
};

/// Tunables of the etcd store.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// Bound on every etcd call (connect, get, txn, lease calls).
    pub timeout: Duration,
    /// TTL of node-id leases: how long a crashed process keeps its node id
    /// before another process may take it.
    pub lease_ttl: Duration,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            timeout: Duration::from_secs(2),
            lease_ttl: Duration::from_secs(10),
        }
    }
}

/// The etcd store.
pub struct EtcdStore {
    /// The client (cheap to clone: channels inside).
    client: Client,
    /// Key prefix without a trailing `/`.
    prefix: String,
    /// See [`EtcdOptions`].
    options: EtcdOptions,
    /// For `describe`.
    endpoints: Vec<String>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn unavailable(e: etcd_client::Error) -> StoreError {
    StoreError::Unavailable(format!("etcd: {e}"))
}

impl EtcdStore {
    /// A new lease of `lease_ttl`: its id, the TTL etcd granted (seconds)
    /// and when it was asked for.
    async fn grant_lease(&self) -> Result<(i64, i64, Instant), StoreError> {
        let ttl_s = i64::try_from(self.options.lease_ttl.as_secs().max(2)).unwrap_or(10);
        let granted_at = Instant::now();
        let grant = self
            .bounded(self.client.clone().lease_grant(ttl_s, None))
            .await?;
        Ok((grant.id(), grant.ttl(), granted_at))
    }

    /// A lease granted at `granted_at` with `ttl_s` seconds, kept alive in
    /// the background for as long as the returned handle's state is held.
    fn kept_alive(&self, node: u64, lease: i64, ttl_s: i64, granted_at: Instant) -> NodeLease {
        let state = LeaseState::new_valid();
        let ttl = Duration::from_secs(u64::try_from(ttl_s.max(1)).unwrap_or(2));
        tokio::spawn(keep_alive(
            self.client.clone(),
            lease,
            ttl,
            granted_at + ttl,
            self.options.timeout,
            Arc::downgrade(&state),
        ));
        NodeLease {
            node,
            handle: lease,
            state,
        }
    }

    /// Connects to etcd. The connection is made lazily by the client, so this
    /// succeeds even when etcd is down; calls then fail within the timeout.
    pub async fn connect(
        endpoints: &[String],
        prefix: &str,
        options: EtcdOptions,
    ) -> Result<EtcdStore, StoreError> {
        if endpoints.is_empty() {
            return Err(StoreError::Unavailable(
                "etcd: no endpoints configured ([allocator] etcd_endpoints)".into(),
            ));
        }
        let connect = ConnectOptions::new()
            .with_connect_timeout(options.timeout)
            .with_timeout(options.timeout)
            .with_keep_alive(Duration::from_secs(5), options.timeout);
        let client =
            tokio::time::timeout(options.timeout, Client::connect(endpoints, Some(connect)))
                .await
                .map_err(|_| StoreError::Timeout(options.timeout))?
                .map_err(unavailable)?;
        Ok(EtcdStore {
            client,
            prefix: prefix.trim_end_matches('/').to_string(),
            options,
            endpoints: endpoints.to_vec(),
        })
    }

    fn key(&self, rel: &str) -> String {
        format!("{}/{rel}", self.prefix)
    }

    async fn bounded<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.options.timeout, fut).await {
            Ok(r) => r.map_err(unavailable),
            Err(_) => Err(StoreError::Timeout(self.options.timeout)),
        }
    }

    async fn try_nodes(
        &self,
        scope: &str,
        count: u64,
        lease: i64,
    ) -> Result<Option<u64>, StoreError> {
        let node_prefix = self.key(&format!("{scope}/node/"));
        let taken = self
            .bounded(self.client.clone().get(
                node_prefix.as_str(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            ))
            .await?;
        let taken: HashSet<u64> = taken
            .kvs()
            .iter()
            .filter_map(|kv| {
                kv.key()
                    .strip_prefix(node_prefix.as_bytes())
                    .and_then(|n| std::str::from_utf8(n).ok())
                    .and_then(|n| n.parse().ok())
            })
            .collect();
        let holder = format!("pid {}", std::process::id());
        for node in (0..count).filter(|n| !taken.contains(n)) {
            let key = format!("{node_prefix}{node}");
            let txn = Txn::new()
                .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    holder.as_str(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let resp = self.bounded(self.client.clone().txn(txn)).await?;
            if resp.succeeded() {
                return Ok(Some(node));
            }
        }
        Ok(None)
    }
}

impl Store for EtcdStore {
    fn load<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Versioned>> {
        Box::pin(async move {
            let full = self.key(key);
            let resp = self
                .bounded(self.client.clone().get(full.as_str(), None))
                .await?;
            match resp.kvs().first() {
                None => Ok(None),
                Some(kv) => Ok(Some(Versioned {
                    value: parse_counter(&full, kv.value())?,
                    version: u64::try_from(kv.mod_revision()).unwrap_or(0),
                })),
            }
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let full = self.key(key);
            self.bounded(self.client.clone().delete(full.as_str(), None))
                .await?;
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
            let full = self.key(key);
            let cmp = match expected {
                None => Compare::version(full.as_str(), CompareOp::Equal, 0),
                Some(v) => Compare::mod_revision(
                    full.as_str(),
                    CompareOp::Equal,
                    i64::try_from(v).unwrap_or(i64::MAX),
                ),
            };
            let txn = Txn::new().when([cmp]).and_then([TxnOp::put(
                full.as_str(),
                value.to_string(),
                None,
            )]);
            let resp = self.bounded(self.client.clone().txn(txn)).await?;
            if !resp.succeeded() {
                return Ok(None);
            }
            let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
            match u64::try_from(revision) {
                Ok(r) if r > 0 => Ok(Some(r)),
                _ => Err(StoreError::Unavailable(
                    "etcd: txn response without a revision".into(),
                )),
            }
        })
    }

    fn node_held<'a>(&'a self, scope: &'a str, node: u64) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let key = self.key(&format!("{scope}/node/{node}"));
            let resp = self
                .bounded(
                    self.client
                        .clone()
                        .get(key.as_str(), Some(GetOptions::new().with_keys_only())),
                )
                .await?;
            Ok(!resp.kvs().is_empty())
        })
    }

    fn acquire_node<'a>(&'a self, scope: &'a str, count: u64) -> StoreFuture<'a, NodeLease> {
        Box::pin(async move {
            let (lease, ttl, granted_at) = self.grant_lease().await?;
            let found = self.try_nodes(scope, count, lease).await;
            let node = match found {
                Ok(Some(n)) => n,
                other => {
                    let _ = self.bounded(self.client.clone().lease_revoke(lease)).await;
                    return Err(match other {
                        Err(e) => e,
                        _ => StoreError::NodesExhausted(count),
                    });
                }
            };
            Ok(self.kept_alive(node, lease, ttl, granted_at))
        })
    }

    fn release_node<'a>(&'a self, _scope: &'a str, lease: &'a NodeLease) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            lease.state.mark_lost();
            // Revoking the lease deletes the node key: the id is free at once.
            self.bounded(self.client.clone().lease_revoke(lease.handle))
                .await
                .map(|_| ())
        })
    }

    fn join<'a>(&'a self, scope: &'a str) -> StoreFuture<'a, Option<NodeLease>> {
        Box::pin(async move {
            let (lease, ttl, granted_at) = self.grant_lease().await?;
            let key = self.key(&format!("{scope}/member/{lease:x}"));
            let put = self
                .bounded(self.client.clone().put(
                    key.as_str(),
                    "0",
                    Some(PutOptions::new().with_lease(lease)),
                ))
                .await;
            if let Err(e) = put {
                let _ = self.bounded(self.client.clone().lease_revoke(lease)).await;
                return Err(e);
            }
            Ok(Some(self.kept_alive(0, lease, ttl, granted_at)))
        })
    }

    fn set_member<'a>(
        &'a self,
        scope: &'a str,
        lease: &'a NodeLease,
        value: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let key = self.key(&format!("{scope}/member/{:x}", lease.handle));
            // Only while the record exists: a put would otherwise bring an
            // expired member back.
            let txn = Txn::new()
                .when([Compare::version(key.as_str(), CompareOp::Greater, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    value.to_string(),
                    Some(PutOptions::new().with_lease(lease.handle)),
                )]);
            let resp = self.bounded(self.client.clone().txn(txn)).await?;
            if resp.succeeded() {
                Ok(())
            } else {
                Err(StoreError::Unavailable("etcd: member record gone".into()))
            }
        })
    }

    fn leave<'a>(&'a self, _scope: &'a str, lease: &'a NodeLease) -> StoreFuture<'a, ()> {
        self.release_node(_scope, lease)
    }

    fn members<'a>(&'a self, scope: &'a str, key: &'a str) -> StoreFuture<'a, Members> {
        Box::pin(async move {
            let full = self.key(key);
            let member_prefix = self.key(&format!("{scope}/member/"));
            // One txn: both reads at one revision.
            let txn = Txn::new().and_then([
                TxnOp::get(full.as_str(), None),
                TxnOp::get(
                    member_prefix.as_str(),
                    Some(GetOptions::new().with_prefix()),
                ),
            ]);
            let resp = self.bounded(self.client.clone().txn(txn)).await?;
            let mut out = Members::default();
            for (i, op) in resp.op_responses().into_iter().enumerate() {
                let etcd_client::TxnOpResponse::Get(get) = op else {
                    continue;
                };
                for kv in get.kvs() {
                    if i == 0 {
                        out.key = Some(parse_counter(&full, kv.value())?);
                    } else {
                        let handle = kv
                            .key()
                            .strip_prefix(member_prefix.as_bytes())
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .and_then(|h| i64::from_str_radix(h, 16).ok());
                        let Some(handle) = handle else { continue };
                        let key = String::from_utf8_lossy(kv.key());
                        out.members.push((handle, parse_counter(&key, kv.value())?));
                    }
                }
            }
            Ok(out)
        })
    }

    fn follow(&self, key: &str) -> Option<tokio::sync::watch::Receiver<u64>> {
        let (tx, rx) = tokio::sync::watch::channel(0);
        tokio::spawn(follow(
            self.client.clone(),
            self.key(key),
            tx,
            self.options.timeout,
        ));
        Some(rx)
    }

    fn load_doc<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let full = self.key(key);
            let resp = self
                .bounded(self.client.clone().get(full.as_str(), None))
                .await?;
            Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
        })
    }

    fn list_docs<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<(String, Vec<u8>)>> {
        Box::pin(async move {
            let full = self.key(prefix);
            let resp = self
                .bounded(
                    self.client
                        .clone()
                        .get(full.as_str(), Some(GetOptions::new().with_prefix())),
                )
                .await?;
            let strip = format!("{}/", self.prefix);
            let mut out: Vec<(String, Vec<u8>)> = resp
                .kvs()
                .iter()
                .filter_map(|kv| {
                    let k = kv.key_str().ok()?;
                    Some((k.strip_prefix(&strip)?.to_string(), kv.value().to_vec()))
                })
                .collect();
            out.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(out)
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
            let full = self.key(key);
            let cmp = match expected {
                None => Compare::version(full.as_str(), CompareOp::Equal, 0),
                Some(v) => Compare::mod_revision(
                    full.as_str(),
                    CompareOp::Equal,
                    i64::try_from(v).unwrap_or(i64::MAX),
                ),
            };
            let mut ops: Vec<TxnOp> = docs
                .iter()
                .map(|(k, v)| TxnOp::put(self.key(k), v.clone(), None))
                .collect();
            ops.push(TxnOp::put(full.as_str(), value.to_string(), None));
            let txn = Txn::new().when([cmp]).and_then(ops);
            let resp = self.bounded(self.client.clone().txn(txn)).await?;
            if !resp.succeeded() {
                return Ok(None);
            }
            let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
            match u64::try_from(revision) {
                Ok(r) if r > 0 => Ok(Some(r)),
                _ => Err(StoreError::Unavailable(
                    "etcd: txn response without a revision".into(),
                )),
            }
        })
    }

    fn describe(&self) -> String {
        format!("etcd {} prefix {}", self.endpoints.join(","), self.prefix)
    }
}

/// Keeps one lease alive until its holder drops it or it is lost.
///
/// Renews every TTL/3. A failed or closed stream is dropped and re-created on
/// the next round (the client does not reconnect streams). The lease counts as
/// lost once `deadline - margin` passes without a renewal (the deadline runs
/// from when the last successful renewal was *sent*, so it is never later than
/// etcd's own), or when etcd answers with TTL 0 (expired or revoked).
async fn keep_alive(
    client: Client,
    lease: i64,
    ttl: Duration,
    mut deadline: Instant,
    timeout: Duration,
    state: Weak<LeaseState>,
) {
    let margin = (ttl / 5).max(Duration::from_millis(500));
    let interval = ttl / 3;
    let mut stream = None;
    loop {
        match state.upgrade() {
            Some(st) if st.is_valid() => {}
            _ => return, // released, lost, or its generator is gone
        }
        if stream.is_none() {
            if let Ok(Ok(s)) =
                tokio::time::timeout(timeout, client.clone().lease_keep_alive(lease)).await
            {
                stream = Some(s);
            }
        }
        let mut renewed = false;
        if let Some((keeper, responses)) = stream.as_mut() {
            let sent_at = Instant::now();
            let round = async {
                keeper.keep_alive().await?;
                responses.message().await
            };
            match tokio::time::timeout(timeout, round).await {
                Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                    deadline =
                        sent_at + Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(0));
                    renewed = true;
                }
                Ok(Ok(Some(_))) => {
                    // TTL 0: etcd no longer knows the lease.
                    if let Some(st) = state.upgrade() {
                        st.mark_lost();
                    }
                    return;
                }
                _ => stream = None,
            }
        }
        let now = Instant::now();
        if now + margin >= deadline {
            if let Some(st) = state.upgrade() {
                tracing::warn!(
                    lease,
                    "etcd node-id lease not renewed in time; giving it up"
                );
                st.mark_lost();
            }
            return;
        }
        let pause = if renewed {
            interval
        } else {
            Duration::from_millis(250)
        };
        tokio::time::sleep(pause.min(deadline - margin - now)).await;
    }
}

/// Follows `key` until every receiver is gone: reads it, then watches it from
/// the next revision. A broken or cancelled watch (etcd restarted, connection
/// lost, revision compacted) is re-created after a pause: the client does not
/// do it. Values that do not parse are ignored (logged).
async fn follow(
    client: Client,
    key: String,
    tx: tokio::sync::watch::Sender<u64>,
    timeout: Duration,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let round = async {
            let resp = tokio::time::timeout(timeout, client.clone().get(key.as_str(), None))
                .await
                .map_err(|_| ())?
                .map_err(|_| ())?;
            if let Some(kv) = resp.kvs().first() {
                match parse_counter(&key, kv.value()) {
                    Ok(v) => super::raise(&tx, v),
                    Err(e) => tracing::warn!(error = %e, "ignoring a followed value"),
                }
            }
            let from = resp.header().map(|h| h.revision()).unwrap_or(0) + 1;
            let mut stream = tokio::time::timeout(
                timeout,
                client.clone().watch(
                    key.as_str(),
                    Some(WatchOptions::new().with_start_revision(from)),
                ),
            )
            .await
            .map_err(|_| ())?
            .map_err(|_| ())?;
            loop {
                tokio::select! {
                    _ = tx.closed() => return Ok(()),
                    msg = stream.message() => {
                        let Ok(Some(resp)) = msg else { return Err(()) };
                        for ev in resp.events() {
                            if let Some(Ok(v)) = ev.kv().map(|kv| parse_counter(&key, kv.value())) {
                                super::raise(&tx, v);
                            }
                        }
                        if resp.canceled() {
                            return Err(());
                        }
                    }
                }
            }
        };
        tokio::select! {
            _ = tx.closed() => return,
            r = round => if r.is_ok() { return },
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
