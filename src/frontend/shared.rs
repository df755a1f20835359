//! State shared by every session.

use super::columns::ColumnCache;
use crate::backend::{BackendConn, BackendError, ConnectParams};
use crate::config::Config;
use crate::idgen::{Allocator, Generator};
use crate::protocol::consts::{cap, DEFAULT_CHARSET};
use crate::rules::RuleSet;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the default shard announced in its handshake; idgate shows clients
/// the same version string so drivers pick the same code paths.
#[derive(Debug, Clone)]
pub struct ShardInfo {
    pub server_version: Vec<u8>,
    pub capabilities: u32,
    /// MariaDB extended capabilities (when `capabilities` lacks `LONG_PASSWORD`).
    pub ext_capabilities: u32,
    pub charset: u8,
}

/// Shared by all sessions of one server.
#[derive(Debug)]
pub struct Shared {
    pub config: Config,
    /// `[[users]]` by name: password.
    pub users: HashMap<Vec<u8>, Vec<u8>>,
    /// Learned from the default shard; refreshed by every new shard connection.
    pub shard_info: RwLock<ShardInfo>,
    /// Column rules; `None`: idgate only relays.
    pub rules: Option<Arc<RuleSet>>,
    /// The generators of `rules`.
    pub allocator: Option<Allocator>,
    /// Column order of rule tables (for INSERTs without a column list).
    pub columns: ColumnCache,
    /// Some rule table is sharded or broadcast: statements are routed.
    pub routing: bool,
    /// XA branches prepared but not committed (shard, xid): committed on the
    /// next connection to that shard (see `xa.rs`).
    pub pending_xa: parking_lot::Mutex<Vec<(usize, String)>>,
    /// Shard connections opened so far, per shard (for operators and tests:
    /// a keyed statement must not open connections to other shards).
    pub shard_connects: Vec<AtomicU64>,
    /// Fault injection for tests: the next XA COMMIT on this shard index is
    /// not sent and its connection is dropped, as if the shard failed right
    /// after every shard prepared (`usize::MAX`: off).
    #[doc(hidden)]
    pub fault_xa_commit: AtomicUsize,
    /// Sets this server's XA transaction ids apart (see `xa.rs`).
    pub xa_tag: String,
    /// The distributed deadlock detector runs (`routing` and
    /// `server.deadlock_check_ms` > 0): sessions in transactions register in
    /// `watch`.
    pub deadlock_detection: bool,
    /// The sessions that may hold locks on several shards (see `watch.rs`).
    pub watch: super::watch::Watchlist,
    /// Lock cycles across shards the detector broke (see `deadlock.rs`).
    pub deadlocks_resolved: AtomicU64,
    /// Times the detector read the shards' lock waits (it does only when a
    /// statement of a registered session has run longer than its interval).
    pub deadlock_scans: AtomicU64,
    next_connection_id: AtomicU32,
}

impl Shared {
    /// State for a server that only relays (no rules).
    pub fn new(config: Config) -> Self {
        Shared::with_rules(config, None, None)
    }

    /// State for a server that fills ids by `rules` from `allocator`.
    pub fn with_rules(
        config: Config,
        rules: Option<Arc<RuleSet>>,
        allocator: Option<Allocator>,
    ) -> Self {
        let users = config
            .users
            .iter()
            .map(|u| (u.name.as_bytes().to_vec(), u.password.as_bytes().to_vec()))
            .collect();
        let routing = rules.as_ref().is_some_and(|r| r.is_sharded());
        Shared {
            routing,
            pending_xa: parking_lot::Mutex::new(Vec::new()),
            shard_connects: config.shards.iter().map(|_| AtomicU64::new(0)).collect(),
            fault_xa_commit: AtomicUsize::new(usize::MAX),
            xa_tag: super::xa::server_tag(),
            deadlock_detection: routing && config.server.deadlock_check_ms > 0,
            watch: Default::default(),
            deadlocks_resolved: AtomicU64::new(0),
            deadlock_scans: AtomicU64::new(0),
            config,
            users,
            shard_info: RwLock::new(ShardInfo {
                server_version: b"5.5.5-10.11.0-MariaDB-idgate".to_vec(),
                capabilities: cap::SUPPORTED,
                ext_capabilities: 0,
                charset: DEFAULT_CHARSET,
            }),
            rules,
            allocator,
            columns: ColumnCache::default(),
            next_connection_id: AtomicU32::new(1),
        }
    }

    /// The generator called `name`.
    pub fn generator(&self, name: &str) -> Option<Arc<Generator>> {
        self.allocator.as_ref()?.generator(name)
    }

    /// A connection id no other session of this process has.
    pub fn connection_id(&self) -> u32 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Connection timeout for shards.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.config.backend.connect_timeout_ms)
    }

    /// Logs in to the default shard once to learn its version string and
    /// capabilities.
    pub async fn probe_default_shard(&self) -> Result<(), BackendError> {
        let s = &self.config.shards[0];
        let params = ConnectParams {
            shard: &s.name,
            address: &s.address,
            user: &self.config.backend.user,
            password: &self.config.backend.password,
            database: None,
            charset: DEFAULT_CHARSET,
            // Nothing is relayed on this connection: ask for no optional framing.
            capabilities: cap::SUPPORTED & !cap::DEPRECATE_EOF,
            ext_capabilities: 0,
            attrs: None,
            timeout: self.connect_timeout(),
        };
        let (mut conn, hs) = BackendConn::connect(&params).await?;
        self.learn(&hs);
        let _ = conn.send(&[crate::protocol::consts::cmd::QUIT]).await;
        Ok(())
    }

    /// Records what a shard's handshake said.
    pub fn learn(&self, hs: &crate::protocol::handshake::ServerHandshake) {
        {
            let info = self.shard_info.read();
            if info.server_version == hs.server_version
                && info.capabilities == hs.capabilities
                && info.ext_capabilities == hs.ext_capabilities
            {
                return;
            }
        }
        *self.shard_info.write() = ShardInfo {
            server_version: hs.server_version.clone(),
            capabilities: hs.capabilities,
            ext_capabilities: hs.ext_capabilities,
            charset: hs.charset,
        };
    }
}
