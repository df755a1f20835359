//! State shared by every session.

use crate::backend::{BackendConn, BackendError, ConnectParams};
use crate::config::Config;
use crate::frontend::columns::ColumnCache;
use crate::frontend::txn::xalog::XaLog;
use crate::idgen::{Allocator, Generator};
use crate::protocol::consts::{cap, DEFAULT_CHARSET};
use crate::rules::RuleSet;
use parking_lot::RwLock;
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

/// Schema names [`Shared::schema_arc`] keeps at most (names sessions
/// entered: a few per application).
const MAX_SCHEMA_NAMES: usize = 10_000;

/// The longest schema name MariaDB accepts: 64 characters of up to 4
/// bytes.
const MAX_SCHEMA_NAME_BYTES: usize = 256;

/// Schema names, one `Arc` each for every session. Past
/// [`MAX_SCHEMA_NAMES`] names, or for a name longer than a schema name can
/// be, a new one is not kept (it is then compared by its bytes): a client
/// that sends names the shard refuses (in its handshake, COM_CHANGE_USER)
/// cannot grow the set beyond that.
#[derive(Debug, Default)]
struct SchemaNames(parking_lot::Mutex<std::collections::HashSet<Arc<str>>>);

impl SchemaNames {
    fn get(&self, name: &str) -> Arc<str> {
        if name.len() > MAX_SCHEMA_NAME_BYTES {
            return Arc::from(name);
        }
        let mut names = self.0.lock();
        if let Some(a) = names.get(name) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(name);
        if names.len() < MAX_SCHEMA_NAMES {
            names.insert(a.clone());
        }
        a
    }
}

/// Shared by all sessions of one server.
#[derive(Debug)]
pub struct Shared {
    pub config: Config,
    /// Schema names as pooled connections carry them, one `Arc` per name
    /// for every session ([`Shared::schema_arc`]).
    schemas: SchemaNames,
    /// `[[users]]` by name: index in `config.users`. Looked up at every
    /// login; hashed with foldhash (SipHash cost about 400 instructions a
    /// login). The names are the config's, whatever a client sends.
    pub users: foldhash::HashMap<Vec<u8>, usize>,
    /// Sessions open per user, under `[[users]] max_connections`.
    pub user_slots: Arc<crate::frontend::session::limits::UserSlots>,
    /// Failed logins per address, and the delay they earn (its clock can be
    /// replaced before the server starts, for tests).
    pub login_throttle: Arc<crate::throttle::LoginThrottle>,
    /// How long a client may take to send each packet of its login (as
    /// MariaDB's connect_timeout); then the connection is closed, so a
    /// client that connects and sends nothing does not hold a slot.
    pub login_timeout: Duration,
    /// Learned from the default shard; refreshed by every new shard connection.
    pub shard_info: RwLock<ShardInfo>,
    /// Column rules in force (`load()` is `None`: idgate only relays);
    /// replaced by a reload (`live.rs`). Sessions read their snapshot.
    pub rules: crate::frontend::inforce::LiveRules,
    /// The generators of `rules`.
    pub allocator: Option<Allocator>,
    /// Column order of rule tables (for INSERTs without a column list).
    pub columns: ColumnCache,
    /// Some rule table is sharded or broadcast: statements are routed.
    pub routing: bool,
    /// XA branches prepared but not committed (shard, xid): committed on the
    /// next connection to that shard (see `xa.rs`).
    pub pending_xa: parking_lot::Mutex<Vec<(usize, String)>>,
    /// Shard connections sessions took so far, per shard, whether from the
    /// pool or opened (for operators and tests: a keyed statement must not
    /// take connections to other shards; logins are the pool's `created`).
    pub shard_connects: Vec<AtomicU64>,
    /// The shared pool of shard connections, per shard (`backend::pool`;
    /// sessions take and give back through `session/pooled.rs`).
    pub pools: Vec<Arc<crate::backend::pool::ShardPool>>,
    /// Fault injection for tests: the next XA COMMIT on this shard index is
    /// not sent and its connection is dropped, as if the shard failed right
    /// after every shard prepared (`usize::MAX`: off).
    #[doc(hidden)]
    pub fault_xa_commit: AtomicUsize,
    /// Sets this server's XA transaction ids apart when it has no commit
    /// log (see `xa.rs`).
    pub xa_tag: String,
    /// The commit log of two-phase commits (see `xalog.rs`), opened by
    /// `server::run` when statements are routed.
    pub xa_log: tokio::sync::OnceCell<Arc<XaLog>>,
    /// Fault injection for tests: 1 = a two-phase commit stops right after
    /// every shard prepared, 2 = right after its commit was recorded, as if
    /// idgate died there (its shard connections are dropped, the branches
    /// stay prepared). 0: off.
    #[doc(hidden)]
    pub fault_xa_crash: std::sync::atomic::AtomicU8,
    /// Every session, for `KILL` (see `kill.rs`).
    pub sessions: Arc<crate::frontend::session::registry::Registry>,
    /// The session threads `server::run` started (`server.session_threads`;
    /// none: the sessions run on the shared runtime), for `/metrics`.
    pub session_threads: arc_swap::ArcSwapOption<crate::workers::Workers>,
    /// XA recovery passes finished (see `xalog.rs`; for tests and operators).
    pub xa_recoveries: AtomicU64,
    /// Wakes the XA recovery task for a pass now (it runs every 10 s).
    pub xa_recover_now: tokio::sync::Notify,
    /// The distributed deadlock detector runs (`routing` and
    /// `server.deadlock_check_ms` > 0): sessions in transactions register in
    /// `watch`.
    pub deadlock_detection: bool,
    /// The sessions that may hold locks on several shards (see `watch.rs`).
    pub watch: crate::frontend::txn::watchlist::Watchlist,
    /// Lock cycles across shards the detector broke (see `deadlock.rs`).
    pub deadlocks_resolved: AtomicU64,
    /// Times the detector read the shards' lock waits (it does only when a
    /// statement of a registered session has run longer than its interval).
    pub deadlock_scans: AtomicU64,
    /// TLS towards clients (`[server] tls_cert`); `None`: not offered.
    /// Reloaded on SIGHUP (see `server.rs`).
    pub client_tls: Option<Arc<crate::tls::ClientTls>>,
    /// TLS towards shards (`[backend] tls`).
    pub shard_tls: crate::tls::ShardTls,
    /// caching_sha2_password towards clients: RSA key, fast-path cache.
    pub sha2: crate::frontend::session::sha2state::Sha2State,
    /// The resharding cutover's pause: tables whose statements are held
    /// (`frontend/pause`).
    pub pause: crate::frontend::pause::gate::PauseGate,
    next_connection_id: AtomicU32,
    /// When the server state was made (uptime in `SHOW IDGATE STATUS`).
    pub started: std::time::Instant,
}

/// How a shard says whether it folds table names.
const LOWER_CASE_TABLE_NAMES: &str = "SELECT @@lower_case_table_names";

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
            .enumerate()
            .map(|(i, u)| (u.name.as_bytes().to_vec(), i))
            .collect();
        let user_slots = crate::frontend::session::limits::UserSlots::new(config.users.len());
        let routing = rules.as_ref().is_some_and(|r| r.is_sharded());
        // The files were checked when the config was loaded; one that went
        // bad since leaves TLS off (clients that require it are refused).
        let client_tls = match (&config.server.tls_cert, &config.server.tls_key) {
            (Some(cert), Some(key)) => match crate::tls::ClientTls::load(cert, key) {
                Ok(t) => Some(Arc::new(t)),
                Err(e) => {
                    tracing::error!("server.tls_cert: {e}; TLS is not offered to clients");
                    None
                }
            },
            _ => None,
        };
        let shard_tls =
            crate::tls::ShardTls::new(config.backend.tls, config.backend.tls_ca.as_deref());
        Shared {
            schemas: Default::default(),
            sha2: crate::frontend::session::sha2state::Sha2State::new(
                config.server.rsa_key.as_deref(),
            ),
            client_tls,
            shard_tls,
            routing,
            pending_xa: parking_lot::Mutex::new(Vec::new()),
            shard_connects: config.shards.iter().map(|_| AtomicU64::new(0)).collect(),
            pools: config
                .shards
                .iter()
                .map(|s| crate::backend::pool::Pool::new(&s.name, pool_settings(&config.backend)))
                .collect(),
            fault_xa_commit: AtomicUsize::new(usize::MAX),
            xa_tag: crate::frontend::txn::xalog::server_tag(),
            xa_log: tokio::sync::OnceCell::new(),
            fault_xa_crash: std::sync::atomic::AtomicU8::new(0),
            xa_recoveries: AtomicU64::new(0),
            sessions: Arc::default(),
            session_threads: Default::default(),
            xa_recover_now: tokio::sync::Notify::new(),
            deadlock_detection: routing && config.server.deadlock_check_ms > 0,
            watch: Default::default(),
            deadlocks_resolved: AtomicU64::new(0),
            deadlock_scans: AtomicU64::new(0),
            login_throttle: Arc::new(crate::throttle::LoginThrottle::new(
                Arc::new(crate::idgen::SystemClock::new()),
                crate::throttle::MAX_ADDRESSES,
            )),
            login_timeout: crate::frontend::session::limits::LOGIN_TIMEOUT,
            config,
            users,
            user_slots,
            shard_info: RwLock::new(ShardInfo {
                server_version: b"5.5.5-10.11.0-MariaDB-idgate".to_vec(),
                capabilities: cap::SUPPORTED,
                ext_capabilities: 0,
                charset: DEFAULT_CHARSET,
            }),
            rules: crate::frontend::inforce::LiveRules::new(rules),
            allocator,
            columns: ColumnCache::default(),
            pause: Default::default(),
            next_connection_id: AtomicU32::new(1),
            started: std::time::Instant::now(),
        }
    }

    /// Whether `user` has the admin privilege (`[[users]] admin = true`).
    pub fn is_admin(&self, user: &str) -> bool {
        self.config.users.iter().any(|u| u.name == user && u.admin)
    }

    /// Whether `[[users]]` account `name` must log in over TLS.
    pub fn user_requires_tls(&self, name: &[u8]) -> bool {
        self.config
            .users
            .iter()
            .any(|u| u.require_tls && u.name.as_bytes() == name)
    }

    /// The generator called `name`.
    pub fn generator(&self, name: &str) -> Option<Arc<Generator>> {
        self.allocator.as_ref()?.generator(name)
    }

    /// A connection id no other session of this process has.
    pub fn connection_id(&self) -> u32 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The `[[users]]` entry called `name`.
    pub fn user(&self, name: &[u8]) -> Option<(usize, &crate::config::UserConfig)> {
        let i = *self.users.get(name)?;
        Some((i, self.config.users.get(i)?))
    }

    /// The shard account (user, password) sessions of `user` log in to the
    /// shards with: its own `backend_user`, or `[backend]`'s.
    pub fn shard_account(&self, user: &str) -> (&str, &str) {
        match self
            .user(user.as_bytes())
            .and_then(|(_, u)| u.shard_account.as_ref())
        {
            Some((n, p)) => (n, p),
            None => (&self.config.backend.user, &self.config.backend.password),
        }
    }

    /// [`Shared::shard_account`] interned: the same strings for every
    /// session of the account, which pooled connection keys copy and
    /// compare by pointer. Asked once per login.
    pub fn shard_account_key(&self, user: &str) -> (&'static str, &'static str) {
        let (n, p) = self.shard_account(user);
        (intern(n), intern(p))
    }

    /// The shared `Arc` of schema name `name` ([`SchemaNames`]): the
    /// pool compares an idle connection's schema with a taker's by
    /// pointer first (`backend::pool::Want::db`). A session asks only
    /// when its schema changes.
    pub fn schema_arc(&self, name: &str) -> Arc<str> {
        self.schemas.get(name)
    }

    /// Connection timeout for shards.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.config.backend.connect_timeout_ms)
    }

    /// What the default shard supports for tracking INSERT IGNORE / ON
    /// DUPLICATE KEY UPDATE ([`crate::sql::upsert`]), from its version.
    pub fn upserts(&self) -> crate::sql::Upserts {
        let info = self.shard_info.read();
        crate::sql::Upserts::for_version(&String::from_utf8_lossy(&info.server_version))
    }

    /// Logs in to the default shard once to learn its version string and
    /// capabilities, learns whether the shards fold table names
    /// ([`Shared::learn_table_name_case`]), and reads their views
    /// ([`Shared::read_views`]).
    pub async fn probe_default_shard(self: &Arc<Self>) -> Result<(), BackendError> {
        let mut conn = self.side_connection(0).await?;
        let first = conn.query_rows(LOWER_CASE_TABLE_NAMES).await;
        let _ = conn.send(&[crate::protocol::consts::cmd::QUIT]).await;
        self.learn_table_name_case(first).await;
        // After the names' case: views are matched as rule tables are.
        self.read_views().await;
        Ok(())
    }

    /// With the default shard's answer `first` (read on the probe's
    /// connection), reads `lower_case_table_names` from every other shard
    /// (at once). When one
    /// folds table names (1 or 2: `Orders` is `orders` there), the rules
    /// match names case-insensitively from now on, or an INSERT into
    /// `Orders` would get no id. A shard that does not answer is logged
    /// and counts as not folding.
    async fn learn_table_name_case(
        self: &Arc<Self>,
        first: Result<Vec<Vec<Option<String>>>, BackendError>,
    ) {
        let mut asks = tokio::task::JoinSet::new();
        asks.spawn(async move { first.map(|r| (0, r)) });
        for shard in 1..self.config.shards.len() {
            let shared = self.clone();
            asks.spawn(async move {
                let mut c = shared.side_connection(shard).await?;
                let rows = c.query_rows(LOWER_CASE_TABLE_NAMES).await;
                let _ = c.send(&[crate::protocol::consts::cmd::QUIT]).await;
                rows.map(|r| (shard, r))
            });
        }
        let mut folding = Vec::new();
        while let Some(done) = asks.join_next().await {
            match done {
                Ok(Ok((shard, rows))) => {
                    let v = rows.first().and_then(|r| r.first().cloned().flatten());
                    if v.as_deref().is_some_and(|v| v != "0") {
                        folding.push(self.config.shards[shard].name.clone());
                    }
                }
                Ok(Err(e)) => tracing::warn!(
                    "lower_case_table_names not read ({e}); rule table names match case-sensitively there"
                ),
                Err(e) => tracing::warn!("lower_case_table_names not read: {e}"),
            }
        }
        if !folding.is_empty() {
            tracing::info!(
                shards = ?folding,
                "the shards fold table names (lower_case_table_names != 0): rule table names match case-insensitively"
            );
            self.rules.fold_names();
        }
    }

    /// A connection of idgate's own to `shard` (no schema, nothing relayed
    /// on it); its handshake is learned as every shard's is.
    pub async fn side_connection(&self, shard: usize) -> Result<BackendConn, BackendError> {
        let s = &self.config.shards[shard];
        let params = ConnectParams {
            shard: &s.name,
            address: &s.address,
            tls: &self.shard_tls,
            public_key: s.public_key_pem.as_deref(),
            user: &self.config.backend.user,
            password: &self.config.backend.password,
            database: None,
            charset: DEFAULT_CHARSET,
            // Plain text queries of idgate's own: no optional framing, and
            // not NO_SCHEMA (the server would ignore `information_schema.`).
            capabilities: cap::LONG_PASSWORD
                | cap::LONG_FLAG
                | cap::PROTOCOL_41
                | cap::TRANSACTIONS
                | cap::SECURE_CONNECTION
                | cap::PLUGIN_AUTH,
            ext_capabilities: 0,
            attrs: None,
            timeout: self.connect_timeout(),
        };
        let (conn, hs) = BackendConn::connect(&params).await?;
        self.learn(&hs);
        Ok(conn)
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

/// `s` for the process's life, one copy per distinct text: shard account
/// names and passwords, which come from the config only (a few; tests that
/// start many servers share them).
fn intern(s: &str) -> &'static str {
    static NAMES: parking_lot::Mutex<Vec<&'static str>> = parking_lot::Mutex::new(Vec::new());
    let mut names = NAMES.lock();
    if let Some(n) = names.iter().find(|n| **n == s) {
        return n;
    }
    let n: &'static str = Box::leak(s.into());
    names.push(n);
    n
}

/// The pool settings of `[backend]`.
fn pool_settings(b: &crate::config::BackendConfig) -> crate::backend::pool::PoolSettings {
    crate::backend::pool::PoolSettings {
        max: b.pool_max,
        min_idle: b.pool_min_idle,
        idle_timeout: std::time::Duration::from_secs(b.pool_idle_timeout),
        max_lifetime: std::time::Duration::from_secs(b.pool_max_lifetime),
        wait_timeout: std::time::Duration::from_millis(b.pool_wait_timeout_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_share_one_arc_each_within_bounds() {
        let names = SchemaNames::default();
        let a = names.get("app");
        assert!(Arc::ptr_eq(&a, &names.get("app")));
        assert!(
            !Arc::ptr_eq(&a, &names.get("App")),
            "names are compared as bytes"
        );
        let long = "x".repeat(MAX_SCHEMA_NAME_BYTES + 1);
        assert!(
            !Arc::ptr_eq(&names.get(&long), &names.get(&long)),
            "too long: not kept"
        );
        for i in 0..MAX_SCHEMA_NAMES + 10 {
            names.get(&format!("db{i}"));
        }
        assert_eq!(names.0.lock().len(), MAX_SCHEMA_NAMES);
        let last = format!("db{}", MAX_SCHEMA_NAMES + 5);
        assert_eq!(
            &*names.get(&last),
            last.as_str(),
            "past the cap: a fresh Arc"
        );
        assert!(Arc::ptr_eq(&a, &names.get("app")), "kept ones stay");
    }
}
