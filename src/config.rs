//! `idgate.toml`: the proxy's configuration, validated on load.
//!
//! Every key is documented in the README and in `examples/idgate.toml`.
//! Unknown keys are errors; errors name the file, the line where toml can
//! tell it, and the key.

pub use crate::tls::ShardTlsMode;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    /// Accounts applications log in to idgate with.
    pub users: Vec<UserConfig>,
    /// The account idgate logs in to every shard with.
    pub backend: BackendConfig,
    /// The shards; the first one is the default shard.
    pub shards: Vec<ShardConfig>,
    #[serde(default)]
    pub allocator: AllocatorConfig,
    /// Column rules; absent: idgate relays without injecting ids.
    pub rules: Option<RulesConfig>,
    /// The text gave some password in plain text (`password`,
    /// `backend_password`): the file must not be world-readable.
    #[serde(skip)]
    pub holds_plaintext: bool,
}

/// `[server]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address applications connect to with the MySQL protocol.
    pub listen: String,
    /// HTTP address for /metrics and /healthz (`crate::http`); none: not served.
    pub admin_listen: Option<String>,
    /// Address of the Redis-protocol id service (`crate::resp`: `INCR gen`,
    /// `IDGATE.NEXT gen n`); none: not served.
    pub resp_listen: Option<String>,
    /// Client sessions at once; one more gets error 1040.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Seconds sessions may take to finish after SIGTERM/SIGINT before they are cut.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout_secs: u64,
    /// Threads of the shared runtime (accept loops, background work, and
    /// the sessions when `session_threads` is 0); 0: one per core.
    #[serde(default)]
    pub worker_threads: usize,
    /// Threads that run the MySQL sessions, each its own event loop
    /// (`crate::workers`); 0: the sessions run on the shared runtime.
    #[serde(default)]
    pub session_threads: usize,
    /// The plugin idgate's greeting names, and the one a `[[users]]` entry
    /// without `auth` logs in with (MySQL's `default_authentication_plugin`):
    /// caching_sha2_password (MySQL 8's default, the default) or
    /// mysql_native_password (MariaDB's), which spares MariaDB clients
    /// (libmariadb, PHP) caching_sha2_password's hashing at every login.
    #[serde(default)]
    pub default_auth: AuthPlugin,
    /// Largest command packet accepted from a client, in bytes (MySQL's
    /// protocol maximum is 1 GiB; the shard's max_allowed_packet also applies).
    #[serde(default = "default_max_packet")]
    pub max_packet: usize,
    /// Bytes idgate may hold at once for one scattered statement (the
    /// merge's next row of each shard, an aggregate's rows, the rows of a
    /// merged cursor kept while the session runs other statements); more
    /// fails the statement with error 1038 (`frontend::route::stream`).
    #[serde(default = "default_max_result_buffer")]
    pub max_result_buffer: usize,
    /// Bytes of a `LOAD DATA LOCAL` into a rule table buffered per shard
    /// before they are sent on as one packet (`frontend::write::load`):
    /// bigger packets cost fewer writes, and bound idgate's memory per load.
    #[serde(default = "default_load_buffer")]
    pub load_buffer: usize,
    /// How often (ms) the distributed deadlock detector looks for lock
    /// cycles across shards, when statements are routed; 0 turns it off.
    #[serde(default = "default_deadlock_check_ms")]
    pub deadlock_check_ms: u64,
    /// TLS certificate chain (PEM) offered to clients, with `tls_key`; none:
    /// idgate does not offer TLS. Re-read on SIGHUP (sessions keep theirs).
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Clients that do not switch to TLS are refused (error 3159).
    #[serde(default)]
    pub require_tls: bool,
    /// RSA private key (PEM, PKCS#8 or PKCS#1) whose public half clients
    /// of caching_sha2_password ask for to send their password encrypted
    /// without TLS; none: a 2048-bit key generated when first needed (so
    /// its public key changes with every start).
    pub rsa_key: Option<PathBuf>,
}

/// `[[users]] auth`: how a user's password is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthPlugin {
    /// MySQL 8's default: SHA-256 scramble, fast path from a cache, full
    /// authentication over TLS or RSA (see `protocol::sha2`).
    #[default]
    CachingSha2Password,
    /// SHA-1 scramble, checked with SHA1(SHA1(password)) alone.
    MysqlNativePassword,
}

impl AuthPlugin {
    /// The plugin's name on the wire.
    pub fn wire_name(self) -> &'static [u8] {
        match self {
            AuthPlugin::CachingSha2Password => b"caching_sha2_password",
            AuthPlugin::MysqlNativePassword => b"mysql_native_password",
        }
    }
}

/// `[[users]]`: one account of idgate's own. Its `Debug` leaves the
/// passwords out (a config printed in a log must not leak them).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub name: String,
    /// Plain text; checked with mysql_native_password (MySQL) or compared
    /// as sent by `AUTH` (Redis protocol). At most one of `password`,
    /// `password_hash`, `password_file`, `password_env`; none: empty.
    pub password: Option<String>,
    /// `*` + 40 hex digits, as `SELECT PASSWORD('...')` prints it
    /// (mysql_native_password), or `$idgate-sha2$...` (caching_sha2_password
    /// only), as `idgate hash-password` prints them.
    pub password_hash: Option<String>,
    /// A file holding the password (one trailing newline stripped).
    pub password_file: Option<PathBuf>,
    /// An environment variable holding the password.
    pub password_env: Option<String>,
    /// The password as checked, from whichever key gave it (resolved on load).
    #[serde(skip)]
    pub secret: Secret,
    /// The authentication plugin this user logs in with; absent:
    /// `server.default_auth`, except for a `*`+hex `password_hash`
    /// (mysql_native_password, the one plugin that hash can check a
    /// scramble with) and a `$idgate-sha2$` one (caching_sha2_password).
    pub auth: Option<AuthPlugin>,
    /// `auth` resolved on load.
    #[serde(skip)]
    pub plugin: AuthPlugin,
    /// The shard account this user's sessions log in to the shards with;
    /// absent: `[backend]`'s.
    pub backend_user: Option<String>,
    /// That account's password (or `backend_password_file`/`_env`).
    pub backend_password: Option<String>,
    pub backend_password_file: Option<PathBuf>,
    pub backend_password_env: Option<String>,
    /// Accepted only to be refused with a reason: a hash cannot log in.
    pub backend_password_hash: Option<String>,
    /// The resolved shard account (user, password); `None`: `[backend]`'s.
    #[serde(skip)]
    pub shard_account: Option<(String, String)>,
    /// Sessions of this user at once (MySQL listener, whole process); one
    /// more gets error 1203. Absent: no limit of its own.
    pub max_connections: Option<usize>,
    /// Generators this user may take ids from outside INSERTs (Redis
    /// protocol, NEXTVAL); absent: all of them. Grants as March has them, so
    /// one application cannot drain or probe another's generator.
    pub generators: Option<Vec<String>>,
    /// May run idgate's statements that change state (`IDGATE SET FLOOR`,
    /// `IDGATE RESERVE`, `IDGATE RELOAD RULES`); default false.
    #[serde(default)]
    pub admin: bool,
    /// This user must log in over TLS (error 3159 otherwise).
    #[serde(default)]
    pub require_tls: bool,
}

/// `Some("..")` for a password that is set, `None` for one that is not.
fn hidden<T>(v: &Option<T>) -> Option<&'static str> {
    v.as_ref().map(|_| "..")
}

impl std::fmt::Debug for UserConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserConfig")
            .field("name", &self.name)
            .field("password", &hidden(&self.password))
            .field("password_hash", &hidden(&self.password_hash))
            .field("password_file", &self.password_file)
            .field("password_env", &self.password_env)
            .field("secret", &self.secret)
            .field("plugin", &self.plugin)
            .field("backend_user", &self.backend_user)
            .field("backend_password", &hidden(&self.backend_password))
            .field("backend_password_file", &self.backend_password_file)
            .field("backend_password_env", &self.backend_password_env)
            .field(
                "shard_account",
                &self.shard_account.as_ref().map(|(u, _)| (u, "..")),
            )
            .field("max_connections", &self.max_connections)
            .field("generators", &self.generators)
            .field("admin", &self.admin)
            .field("require_tls", &self.require_tls)
            .finish_non_exhaustive()
    }
}

impl UserConfig {
    /// Whether this user may take ids from generator `name` directly (the
    /// one grant check: the Redis listener calls it, the frontend can too).
    pub fn may_use(&self, name: &str) -> bool {
        match &self.generators {
            None => true,
            Some(list) => list.iter().any(|g| g == name),
        }
    }
}

/// A `[[users]]` password as idgate checks it. Its `Debug` shows no secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Secret {
    /// No password: only an empty one is accepted.
    #[default]
    Empty,
    /// The password itself (`password`, `password_file`, `password_env`).
    Plain(String),
    /// SHA1(SHA1(password)) (`password_hash`): enough to check a
    /// mysql_native_password scramble or a password sent in clear.
    NativeHash([u8; 20]),
    /// PBKDF2 of the password (`password_hash = "$idgate-sha2$..."`): checks
    /// a password sent in clear (caching_sha2_password's full
    /// authentication, Redis `AUTH`), never a scramble.
    Sha2Hash(crate::protocol::sha2::Sha2Hash),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Secret::Empty => "Empty",
            Secret::Plain(_) => "Plain(..)",
            Secret::NativeHash(_) => "NativeHash(..)",
            Secret::Sha2Hash(_) => "Sha2Hash(..)",
        })
    }
}

fn sha1(parts: &[&[u8]]) -> [u8; 20] {
    use sha1::Digest;
    let mut h = sha1::Sha1::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// Equal in constant time (for equal lengths).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The `*` + 40 upper-case hex digits form of SHA1(SHA1(`password`)), as
/// MariaDB's `PASSWORD()` prints it (empty for an empty password).
pub fn native_hash_text(password: &[u8]) -> String {
    if password.is_empty() {
        return String::new();
    }
    let h = sha1(&[&sha1(&[password])]);
    let mut out = String::with_capacity(41);
    out.push('*');
    for b in h {
        out.push_str(&format!("{b:02X}"));
    }
    out
}

/// Parses the `*HEX` form of [`native_hash_text`].
pub fn parse_native_hash(text: &str) -> Option<[u8; 20]> {
    let hex = text.strip_prefix('*')?;
    if hex.len() != 40 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 20];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Secret {
    /// SHA1(SHA1(password)); `None` for an empty password.
    pub fn stage2(&self) -> Option<[u8; 20]> {
        match self {
            Secret::Empty => None,
            Secret::Plain(p) if p.is_empty() => None,
            Secret::Plain(p) => Some(sha1(&[&sha1(&[p.as_bytes()])])),
            Secret::NativeHash(h) => Some(*h),
            Secret::Sha2Hash(_) => None,
        }
    }

    /// SHA256(SHA256(password)), which checks a caching_sha2_password
    /// scramble, when the password itself is known (a hash gives it only
    /// after a full authentication, cached by the frontend).
    pub fn sha2_stage2(&self) -> Option<[u8; 32]> {
        match self {
            Secret::Plain(p) if !p.is_empty() => Some(crate::protocol::sha2::stage2(p.as_bytes())),
            _ => None,
        }
    }

    /// Whether there is no password.
    pub fn is_empty(&self) -> bool {
        // Not `stage2().is_none()`: that hashes the password twice, at
        // every login.
        match self {
            Secret::Empty => true,
            Secret::Plain(p) => p.is_empty(),
            Secret::NativeHash(_) | Secret::Sha2Hash(_) => false,
        }
    }

    /// Checks a mysql_native_password `token` made with `nonce`: the token
    /// is SHA1(pw) XOR SHA1(nonce + SHA1(SHA1(pw))), so SHA1(SHA1(pw)) alone
    /// verifies it. An empty password takes an empty token only.
    pub fn verify_native(&self, nonce: &[u8], token: &[u8]) -> bool {
        let Some(stage2) = self.stage2() else {
            return token.is_empty();
        };
        if token.len() != 20 {
            return false;
        }
        let mask = sha1(&[nonce, &stage2]);
        let mut stage1 = [0u8; 20];
        for i in 0..20 {
            stage1[i] = token[i] ^ mask[i];
        }
        same(&sha1(&[&stage1]), &stage2)
    }

    /// Checks a password sent in clear (Redis `AUTH`).
    pub fn verify_plain(&self, sent: &[u8]) -> bool {
        match self {
            Secret::Plain(p) => same(p.as_bytes(), sent),
            Secret::Sha2Hash(h) => !sent.is_empty() && h.verify(sent),
            _ => match self.stage2() {
                None => sent.is_empty(),
                Some(h) => !sent.is_empty() && same(&sha1(&[&sha1(&[sent])]), &h),
            },
        }
    }
}

/// Reads `[server] rsa_key`: the key, or why not (naming the file).
pub fn read_rsa_key(path: &Path) -> Result<crate::protocol::sha2::RsaKeys, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    crate::protocol::sha2::RsaKeys::from_pem(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `[backend]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    pub user: String,
    /// Plain text, or from `password_file` / `password_env` (at most one;
    /// none: empty). Resolved on load: after it, this holds the password.
    #[serde(default)]
    pub password: String,
    pub password_file: Option<PathBuf>,
    pub password_env: Option<String>,
    /// Accepted only to be refused with a reason: a hash cannot log in.
    pub password_hash: Option<String>,
    /// Milliseconds to connect and log in to a shard before giving up.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_ms: u64,
    /// TLS towards the shards: `disabled`, `preferred` (when a shard
    /// offers it), `required`, `verify_ca` (the certificate must be signed
    /// by `tls_ca`).
    #[serde(default)]
    pub tls: ShardTlsMode,
    /// CA certificates (PEM) for `tls = "verify_ca"`.
    pub tls_ca: Option<PathBuf>,
    /// The shared pool of shard connections (`backend::pool`): idle
    /// connections kept open per shard and account once one was used.
    #[serde(default)]
    pub pool_min_idle: usize,
    /// Connections to one shard at most, idle or in use (0: no cap).
    #[serde(default = "default_pool_max")]
    pub pool_max: usize,
    /// Seconds an idle pooled connection is kept (0: none is kept; every
    /// shard connection closes with its session, as without a pool).
    #[serde(default = "default_pool_idle_timeout")]
    pub pool_idle_timeout: u64,
    /// Seconds after which a pooled connection is closed once idle.
    #[serde(default = "default_pool_max_lifetime")]
    pub pool_max_lifetime: u64,
    /// Milliseconds a client waits for a shard connection when the shard's
    /// pool is full; then error 1040 naming the shard.
    #[serde(default = "default_pool_wait_timeout")]
    pub pool_wait_timeout_ms: u64,
    /// Multiplexing: a session outside a transaction whose state does not
    /// pin it gives its shard connections back after each statement
    /// (`frontend::session::mux`).
    #[serde(default)]
    pub multiplex: bool,
}

impl std::fmt::Debug for BackendConfig {
    /// The password left out, as for [`UserConfig`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendConfig")
            .field("user", &self.user)
            .field("password", &(!self.password.is_empty()).then_some(".."))
            .field("password_file", &self.password_file)
            .field("password_env", &self.password_env)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("tls", &self.tls)
            .field("tls_ca", &self.tls_ca)
            .field("pool_min_idle", &self.pool_min_idle)
            .field("pool_max", &self.pool_max)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("pool_max_lifetime", &self.pool_max_lifetime)
            .field("pool_wait_timeout_ms", &self.pool_wait_timeout_ms)
            .field("multiplex", &self.multiplex)
            .finish_non_exhaustive()
    }
}

/// `[[shards]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    /// Name used in rules and error messages.
    pub name: String,
    /// `host:port` of the MariaDB/MySQL server.
    pub address: String,
    /// The server's RSA public key (PEM) for caching_sha2_password's full
    /// authentication without TLS: pinned, so idgate never asks the
    /// server for it (a key sent over plain TCP could be anyone's).
    #[serde(default)]
    pub public_key: Option<PathBuf>,
    /// `public_key`'s contents, read and checked on load.
    #[serde(skip)]
    pub public_key_pem: Option<Vec<u8>>,
}

/// `[rules]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesConfig {
    /// Directory whose `*.toml` files are loaded (relative to the config
    /// file); with `source = "etcd"`, only what `rules check` reads by
    /// default.
    #[serde(default = "default_rules_dir")]
    pub dir: PathBuf,
    /// Where the rules in force come from: the directory (default), or the
    /// versions `idgate rules push` publishes in etcd (`crate::publish`).
    #[serde(default)]
    pub source: RulesSource,
    /// With `source = "etcd"`: a local copy of the version applied last,
    /// so idgate can start while etcd is down (relative to the config file).
    pub cache_file: Option<PathBuf>,
}

/// `[rules] source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RulesSource {
    /// `rules.dir`, read at start, `kill -HUP` and `IDGATE RELOAD RULES`.
    #[default]
    Dir,
    /// The version published under `<allocator.etcd_prefix>/rules/`, followed.
    Etcd,
}

fn default_rules_dir() -> PathBuf {
    "rules".into()
}

/// `[allocator]`: where generator state is persisted.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocatorConfig {
    /// `etcd`, or `file` (the embedded default).
    #[serde(default)]
    pub store: StoreKind,
    /// etcd client endpoints, e.g. `["http://127.0.0.1:2379"]`.
    #[serde(default)]
    pub etcd_endpoints: Vec<String>,
    /// Every key idgate writes in etcd starts with this prefix.
    #[serde(default = "default_etcd_prefix")]
    pub etcd_prefix: String,
    /// State file for `store = "file"` (relative to the config file).
    #[serde(default = "default_file_path")]
    pub file_path: PathBuf,
    /// TTL of the etcd leases of snowflake node ids and of each process's
    /// member record: how long a process cut off from etcd keeps issuing
    /// from its cache (a little less), and how long explicit ids inside
    /// the cache of a process that crashed cannot be confirmed.
    #[serde(default = "default_lease_ttl_secs")]
    pub lease_ttl_secs: u64,
    /// Bound on one call to the store (an etcd request, a state-file
    /// write), in ms (default 2000). A call past it counts as a failure.
    #[serde(default = "default_store_timeout_ms")]
    pub store_timeout_ms: u64,
    /// How long a statement waits for ids, or for other processes to
    /// confirm an explicit id, before error 1467, in ms (default 3000).
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// How many ids `IDGATE SET FLOOR` must leave a generator before its
    /// `max`: a count of ids (`1000000`) or a share of its range (`"1%"`,
    /// the default). A floor above that is refused: one mistyped statement
    /// would otherwise exhaust the generator for good.
    #[serde(default)]
    pub floor_headroom: Headroom,
}

/// `allocator.floor_headroom`: ids, or a percentage of a generator's range.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Headroom {
    /// This many ids.
    Ids(u64),
    /// `"N%"` of the range (validated by `Config::parse`).
    Share(String),
}

impl Default for Headroom {
    fn default() -> Self {
        Headroom::Share("1%".into())
    }
}

impl Headroom {
    /// The percentage of a share (`None` for a count; for a malformed
    /// share, which `Config::parse` refuses).
    fn percent(s: &str) -> Option<f64> {
        let v: f64 = s.strip_suffix('%')?.trim().parse().ok()?;
        (0.0..=100.0).contains(&v).then_some(v)
    }

    /// Ids to keep free in a generator whose ids run `first..=max`.
    pub fn ids(&self, first: u64, max: u64) -> u64 {
        match self {
            Headroom::Ids(n) => *n,
            Headroom::Share(s) => {
                // In millionths of the range: exact for the usual shares.
                let ppm = (Headroom::percent(s).unwrap_or(1.0) * 10_000.0).round() as u128;
                (u128::from(max.saturating_sub(first)) * ppm / 1_000_000) as u64
            }
        }
    }
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            store: StoreKind::File,
            etcd_endpoints: Vec::new(),
            etcd_prefix: default_etcd_prefix(),
            file_path: default_file_path(),
            lease_ttl_secs: default_lease_ttl_secs(),
            store_timeout_ms: default_store_timeout_ms(),
            request_timeout_ms: default_request_timeout_ms(),
            floor_headroom: Headroom::default(),
        }
    }
}

/// Which store persists the allocator's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// etcd: shared by several idgate processes.
    Etcd,
    /// A local state file with an exclusive lock: one idgate process.
    #[default]
    File,
}

fn default_etcd_prefix() -> String {
    "/idgate".to_string()
}
fn default_store_timeout_ms() -> u64 {
    2000
}

fn default_request_timeout_ms() -> u64 {
    3000
}

fn default_lease_ttl_secs() -> u64 {
    10
}
fn default_file_path() -> PathBuf {
    "idgate-state".into()
}
fn default_max_connections() -> usize {
    4096
}
fn default_drain_timeout() -> u64 {
    30
}
fn default_max_packet() -> usize {
    1 << 30
}
fn default_max_result_buffer() -> usize {
    16 << 20
}
fn default_load_buffer() -> usize {
    1 << 20
}
fn default_deadlock_check_ms() -> u64 {
    200
}
fn default_connect_timeout() -> u64 {
    5000
}
/// Under MariaDB's default max_connections (151), leaving room for idgate's
/// own connections (XA recovery, the deadlock detector, KILL) and others.
fn default_pool_max() -> usize {
    100
}
fn default_pool_idle_timeout() -> u64 {
    60
}
fn default_pool_max_lifetime() -> u64 {
    3600
}
fn default_pool_wait_timeout() -> u64 {
    5000
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// Syntax errors and unknown keys (toml's message carries line and column).
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// A file holding a plaintext password that others may read.
    #[error("{path}: {reason}")]
    WorldReadable { path: String, reason: String },
    #[error("{path}: {key}: {reason}")]
    Invalid {
        path: String,
        key: String,
        reason: String,
    },
}

impl Config {
    /// Reads and validates a config file; relative paths in it are resolved
    /// against the file's directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut cfg = Config::parse_at(&text, &path.display().to_string(), base)?;
        if cfg.holds_plaintext {
            refuse_world_readable(path, "it holds a plaintext password")?;
        }
        if let Some(r) = cfg.rules.as_mut() {
            if r.dir.is_relative() {
                r.dir = base.join(&r.dir);
            }
            if let Some(c) = r.cache_file.as_mut().filter(|c| c.is_relative()) {
                *c = base.join(&*c);
            }
        }
        if cfg.allocator.file_path.is_relative() {
            cfg.allocator.file_path = base.join(&cfg.allocator.file_path);
        }
        for p in [
            cfg.server.tls_cert.as_mut(),
            cfg.server.tls_key.as_mut(),
            cfg.backend.tls_ca.as_mut(),
            cfg.server.rsa_key.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        cfg.check_tls_files(&path.display().to_string())?;
        Ok(cfg)
    }

    /// Reads the TLS files the config names, so a bad path or PEM is
    /// reported when the config is checked, not at the first connection.
    pub fn check_tls_files(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: String| ConfigError::Invalid {
            path: origin.to_string(),
            key: key.to_string(),
            reason,
        };
        if let (Some(cert), Some(key)) = (&self.server.tls_cert, &self.server.tls_key) {
            crate::tls::server_config(cert, key).map_err(|e| invalid("server.tls_cert", e))?;
        }
        if let Some(ca) = &self.backend.tls_ca {
            crate::tls::ca_roots(ca).map_err(|e| invalid("backend.tls_ca", e))?;
        }
        if let Some(path) = &self.server.rsa_key {
            read_rsa_key(path).map_err(|e| invalid("server.rsa_key", e))?;
        }
        Ok(())
    }

    /// Parses and validates config text; `origin` names it in errors.
    /// `password_file`s are read relative to the current directory.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        Config::parse_at(text, origin, Path::new("."))
    }

    /// [`Config::parse`], with relative `password_file`s read from `base`.
    fn parse_at(text: &str, origin: &str, base: &Path) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string().trim_end().replace('\n', "\n  "),
        })?;
        let invalid = |key: &str, reason: String| ConfigError::Invalid {
            path: origin.to_string(),
            key: key.to_string(),
            reason,
        };
        cfg.listen_addr().map_err(|e| invalid("server.listen", e))?;
        cfg.resp_addr()
            .map_err(|e| invalid("server.resp_listen", e))?;
        if cfg.server.max_connections == 0 {
            return Err(invalid(
                "server.max_connections",
                "must be at least 1".into(),
            ));
        }
        if cfg.server.max_packet < 1024 || cfg.server.max_packet > 1 << 30 {
            return Err(invalid(
                "server.max_packet",
                "must be between 1024 and 1073741824".into(),
            ));
        }
        if !(4096..=16 << 20).contains(&cfg.server.load_buffer) {
            return Err(invalid(
                "server.load_buffer",
                "must be between 4096 and 16777216 (bytes)".into(),
            ));
        }
        if cfg.server.max_result_buffer < 4096 {
            return Err(invalid(
                "server.max_result_buffer",
                "must be at least 4096 (bytes)".into(),
            ));
        }
        let d = cfg.server.deadlock_check_ms;
        // InnoDB refreshes its lock tables only after 100 ms without
        // readers: a detector reading them more often would read stale ones.
        if d != 0 && !(150..=60_000).contains(&d) {
            return Err(invalid(
                "server.deadlock_check_ms",
                format!("{d}: must be 0 (off) or between 150 and 60000"),
            ));
        }
        for (i, shard) in cfg.shards.iter_mut().enumerate() {
            if let Some(path) = &shard.public_key {
                let path = if path.is_relative() {
                    base.join(path)
                } else {
                    path.clone()
                };
                let pem = std::fs::read(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))
                    .and_then(|pem| {
                        crate::protocol::sha2::check_public_key(&pem)
                            .map(|()| pem)
                            .map_err(|e| format!("{}: {e}", path.display()))
                    })
                    .map_err(|e| invalid(&format!("shards[{i}].public_key"), e))?;
                shard.public_key_pem = Some(pem);
            }
        }
        match (&cfg.server.tls_cert, &cfg.server.tls_key) {
            (Some(_), None) => {
                return Err(invalid(
                    "server.tls_key",
                    "tls_cert is set: its private key is needed too".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "server.tls_cert",
                    "tls_key is set: its certificate is needed too".into(),
                ))
            }
            _ => {}
        }
        let tls_on = cfg.server.tls_cert.is_some();
        if cfg.server.require_tls && !tls_on {
            return Err(invalid(
                "server.require_tls",
                "needs server.tls_cert and server.tls_key".into(),
            ));
        }
        if cfg.backend.tls == ShardTlsMode::VerifyCa && cfg.backend.tls_ca.is_none() {
            return Err(invalid(
                "backend.tls_ca",
                "tls = \"verify_ca\" needs the CA certificate file".into(),
            ));
        }
        let b = &cfg.backend;
        if b.pool_max != 0 && b.pool_min_idle > b.pool_max {
            return Err(invalid(
                "backend.pool_min_idle",
                format!("{}: more than pool_max ({})", b.pool_min_idle, b.pool_max),
            ));
        }
        if b.pool_wait_timeout_ms > 3_600_000 || b.pool_max_lifetime == 0 {
            return Err(invalid(
                "backend.pool_wait_timeout_ms",
                "pool_wait_timeout_ms must be at most 3600000 and pool_max_lifetime at least 1"
                    .into(),
            ));
        }
        if cfg.users.is_empty() {
            return Err(invalid(
                "users",
                "at least one [[users]] entry is needed".into(),
            ));
        }
        cfg.resolve_secrets(origin, base)?;
        for (i, u) in cfg.users.iter().enumerate() {
            if u.name.is_empty() {
                return Err(invalid(
                    &format!("users[{i}].name"),
                    "must not be empty".into(),
                ));
            }
            if cfg.users[..i].iter().any(|o| o.name == u.name) {
                return Err(invalid(
                    &format!("users[{i}].name"),
                    format!("user {:?} is defined twice", u.name),
                ));
            }
            if u.require_tls && !tls_on {
                return Err(invalid(
                    &format!("users[{i}].require_tls"),
                    "needs server.tls_cert and server.tls_key".into(),
                ));
            }
        }
        if cfg.shards.is_empty() {
            return Err(invalid(
                "shards",
                "at least one [[shards]] entry is needed".into(),
            ));
        }
        for (i, s) in cfg.shards.iter().enumerate() {
            if s.name.is_empty() {
                return Err(invalid(
                    &format!("shards[{i}].name"),
                    "must not be empty".into(),
                ));
            }
            if cfg.shards[..i].iter().any(|o| o.name == s.name) {
                return Err(invalid(
                    &format!("shards[{i}].name"),
                    format!("shard {:?} is defined twice", s.name),
                ));
            }
            match s.address.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
                _ => {
                    return Err(invalid(
                        &format!("shards[{i}].address"),
                        format!("{:?} is not host:port", s.address),
                    ))
                }
            }
        }
        let ttl = cfg.allocator.lease_ttl_secs;
        if !(3..=3600).contains(&ttl) {
            return Err(invalid(
                "allocator.lease_ttl_secs",
                format!("{ttl}: must be between 3 and 3600"),
            ));
        }
        for (key, ms) in [
            ("allocator.store_timeout_ms", cfg.allocator.store_timeout_ms),
            (
                "allocator.request_timeout_ms",
                cfg.allocator.request_timeout_ms,
            ),
        ] {
            if !(100..=600_000).contains(&ms) {
                return Err(invalid(
                    key,
                    format!("{ms}: must be between 100 and 600000"),
                ));
            }
        }
        // The lease is renewed by store calls: one that may take as long as
        // the lease lives would let it expire while the process still
        // issues from its cache.
        if cfg.allocator.store_timeout_ms >= ttl.saturating_mul(1000) {
            return Err(invalid(
                "allocator.store_timeout_ms",
                format!(
                    "{} ms: must be below allocator.lease_ttl_secs ({ttl} s)",
                    cfg.allocator.store_timeout_ms
                ),
            ));
        }
        if let Headroom::Share(s) = &cfg.allocator.floor_headroom {
            if Headroom::percent(s).is_none() {
                return Err(invalid(
                    "allocator.floor_headroom",
                    format!(
                        "{s:?}: must be a count of ids or a percentage from \"0%\" to \"100%\""
                    ),
                ));
            }
        }
        if cfg.allocator.store == StoreKind::Etcd && cfg.allocator.etcd_endpoints.is_empty() {
            return Err(invalid(
                "allocator.etcd_endpoints",
                "store = \"etcd\" needs at least one endpoint".into(),
            ));
        }
        if let Some(r) = &cfg.rules {
            if r.source == RulesSource::Etcd && cfg.allocator.store != StoreKind::Etcd {
                return Err(invalid(
                    "rules.source",
                    "\"etcd\" needs [allocator] store = \"etcd\" (the rules are published under its etcd_prefix)".into(),
                ));
            }
            if r.cache_file.is_some() && r.source != RulesSource::Etcd {
                return Err(invalid(
                    "rules.cache_file",
                    "is a copy of rules published through etcd: it needs rules.source = \"etcd\""
                        .into(),
                ));
            }
        }
        Ok(cfg)
    }

    /// Reads every password from the key that gives it (exactly one per
    /// account), into [`UserConfig::secret`], [`UserConfig::shard_account`]
    /// and [`BackendConfig::password`].
    fn resolve_secrets(&mut self, origin: &str, base: &Path) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: String| ConfigError::Invalid {
            path: origin.to_string(),
            key,
            reason,
        };
        let b = &mut self.backend;
        if b.password_hash.is_some() {
            return Err(invalid(
                "backend.password_hash".into(),
                "a hash is not enough to log in to a shard; give the password with password_file or password_env".into(),
            ));
        }
        let given = [
            ("password", !b.password.is_empty()),
            ("password_file", b.password_file.is_some()),
            ("password_env", b.password_env.is_some()),
        ];
        one_source("[backend]", &given).map_err(|r| invalid("backend".into(), r))?;
        self.holds_plaintext |= !b.password.is_empty();
        if let Some(p) = read_source(b.password_file.as_deref(), b.password_env.as_deref(), base)
            .map_err(|r| invalid("backend".into(), r))?
        {
            b.password = p;
        }
        let default_auth = self.server.default_auth;
        for (i, u) in self.users.iter_mut().enumerate() {
            let who = format!("user {:?}", u.name);
            let key = format!("users[{i}]");
            let given = [
                ("password", u.password.is_some()),
                ("password_hash", u.password_hash.is_some()),
                ("password_file", u.password_file.is_some()),
                ("password_env", u.password_env.is_some()),
            ];
            one_source(&who, &given).map_err(|r| invalid(key.clone(), r))?;
            self.holds_plaintext |= u.password.as_ref().is_some_and(|p| !p.is_empty());
            u.secret = if let Some(p) = &u.password {
                Secret::Plain(p.clone())
            } else if let Some(h) = &u.password_hash {
                if h.starts_with(crate::protocol::sha2::HASH_PREFIX) {
                    match crate::protocol::sha2::Sha2Hash::parse(h) {
                        Ok(h) => Secret::Sha2Hash(h),
                        Err(r) => {
                            return Err(invalid(
                                format!("{key}.password_hash"),
                                format!("{who}: {r}"),
                            ))
                        }
                    }
                } else {
                    match parse_native_hash(h) {
                        Some(h) => Secret::NativeHash(h),
                        None => return Err(invalid(
                            format!("{key}.password_hash"),
                            format!("{who}: not '*' followed by 40 hex digits (the form SELECT PASSWORD('...') and `idgate hash-password` print) nor $idgate-sha2$... (`idgate hash-password --plugin caching_sha2_password`)"),
                        )),
                    }
                }
            } else {
                match read_source(u.password_file.as_deref(), u.password_env.as_deref(), base)
                    .map_err(|r| invalid(key.clone(), format!("{who}: {r}")))?
                {
                    Some(p) => Secret::Plain(p),
                    None => Secret::Empty,
                }
            };
            u.plugin = match (u.auth, &u.secret) {
                (Some(AuthPlugin::MysqlNativePassword), Secret::Sha2Hash(_)) => {
                    return Err(invalid(
                        format!("{key}.auth"),
                        format!("{who}: a $idgate-sha2$ password_hash can only check caching_sha2_password; give a '*'+hex hash (`idgate hash-password`) for mysql_native_password"),
                    ))
                }
                (Some(p), _) => p,
                (None, Secret::NativeHash(_)) => AuthPlugin::MysqlNativePassword,
                (None, Secret::Sha2Hash(_)) => AuthPlugin::CachingSha2Password,
                (None, _) => default_auth,
            };
            if u.backend_password_hash.is_some() {
                return Err(invalid(
                    format!("{key}.backend_password_hash"),
                    format!("{who}: a hash is not enough to log in to a shard; give the password with backend_password_file or backend_password_env"),
                ));
            }
            let given = [
                ("backend_password", u.backend_password.is_some()),
                ("backend_password_file", u.backend_password_file.is_some()),
                ("backend_password_env", u.backend_password_env.is_some()),
            ];
            one_source(&who, &given).map_err(|r| invalid(key.clone(), r))?;
            self.holds_plaintext |= u.backend_password.as_ref().is_some_and(|p| !p.is_empty());
            let password = match &u.backend_password {
                Some(p) => Some(p.clone()),
                None => read_source(
                    u.backend_password_file.as_deref(),
                    u.backend_password_env.as_deref(),
                    base,
                )
                .map_err(|r| invalid(key.clone(), format!("{who}: {r}")))?,
            };
            u.shard_account = match (&u.backend_user, password) {
                (Some(name), p) if !name.is_empty() => Some((name.clone(), p.unwrap_or_default())),
                (Some(_), _) => {
                    return Err(invalid(
                        format!("{key}.backend_user"),
                        format!("{who}: must not be empty"),
                    ))
                }
                (None, Some(_)) => {
                    return Err(invalid(
                        format!("{key}.backend_user"),
                        format!("{who}: a backend password needs backend_user (without both, the [backend] account is used)"),
                    ))
                }
                (None, None) => None,
            };
            if u.max_connections == Some(0) {
                return Err(invalid(
                    format!("{key}.max_connections"),
                    format!("{who}: must be at least 1"),
                ));
            }
        }
        Ok(())
    }

    /// The parsed `server.resp_listen` address, if one is configured.
    pub fn resp_addr(&self) -> Result<Option<SocketAddr>, String> {
        match &self.server.resp_listen {
            None => Ok(None),
            Some(a) => a
                .parse()
                .map(Some)
                .map_err(|e| format!("{a:?} is not ip:port ({e})")),
        }
    }

    /// The parsed `server.listen` address.
    pub fn listen_addr(&self) -> Result<SocketAddr, String> {
        self.server
            .listen
            .parse()
            .map_err(|e| format!("{:?} is not ip:port ({e})", self.server.listen))
    }
}

/// Refuses more than one of the `given` keys of `who`'s account.
fn one_source(who: &str, given: &[(&str, bool)]) -> Result<(), String> {
    let set: Vec<&str> = given.iter().filter(|g| g.1).map(|g| g.0).collect();
    if set.len() > 1 {
        let keys: Vec<&str> = given.iter().map(|g| g.0).collect();
        return Err(format!(
            "{who}: give exactly one of {}, not {}",
            keys.join(", "),
            set.join(" and ")
        ));
    }
    Ok(())
}

/// The password in file `file` (relative to `base`; one trailing newline
/// stripped) or environment variable `env`; `None` when neither is given.
fn read_source(
    file: Option<&Path>,
    env: Option<&str>,
    base: &Path,
) -> Result<Option<String>, String> {
    if let Some(f) = file {
        let path = if f.is_relative() {
            base.join(f)
        } else {
            f.to_path_buf()
        };
        refuse_world_readable(&path, "it holds a password").map_err(|e| e.to_string())?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read password file {}: {e}", path.display()))?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        return Ok(Some(text.to_string()));
    }
    if let Some(name) = env {
        return match std::env::var(name) {
            Ok(v) => Ok(Some(v)),
            Err(e) => Err(format!("environment variable {name} (password_env): {e}")),
        };
    }
    Ok(None)
}

/// Refuses a file every user of the machine may read (`mode & 0o004`).
fn refuse_world_readable(path: &Path, why: &str) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::metadata(path) {
        Ok(m) => m.permissions().mode(),
        // Reading it reports the error.
        Err(_) => return Ok(()),
    };
    if mode & 0o004 != 0 {
        return Err(ConfigError::WorldReadable {
            path: path.display().to_string(),
            reason: format!(
                "{why} and every user of this machine may read it (mode {:03o}); run `chmod 600 {}`",
                mode & 0o777,
                path.display()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[server]
listen = "127.0.0.1:6033"
[[users]]
name = "app"
password = "x"
[backend]
user = "root"
[[shards]]
name = "s0"
address = "127.0.0.1:3306"
"#;

    #[test]
    fn minimal_config_gets_defaults() {
        let c = Config::parse(GOOD, "t.toml").unwrap();
        assert_eq!(c.server.max_connections, 4096);
        assert_eq!(c.server.deadlock_check_ms, 200);
        assert_eq!(c.server.load_buffer, 1 << 20);
        assert_eq!(c.allocator.store, StoreKind::File);
        assert!(c.rules.is_none());
        assert!(c.server.resp_listen.is_none());
        assert!(c.users[0].may_use("anything"));
    }

    #[test]
    fn rules_source_and_cache_file() {
        let dir = GOOD.to_string() + "[rules]\ndir = \"r\"\n";
        let c = Config::parse(&dir, "t.toml").unwrap();
        let r = c.rules.unwrap();
        assert_eq!(r.source, RulesSource::Dir);
        assert_eq!(r.cache_file, None);
        let etcd = GOOD.to_string()
            + "[allocator]\nstore = \"etcd\"\netcd_endpoints = [\"http://127.0.0.1:2379\"]\n\
               [rules]\nsource = \"etcd\"\ncache_file = \"rules-cache\"\n";
        let r = Config::parse(&etcd, "t.toml").unwrap().rules.unwrap();
        assert_eq!(r.source, RulesSource::Etcd);
        assert_eq!(r.dir, PathBuf::from("rules"));
        assert_eq!(r.cache_file, Some(PathBuf::from("rules-cache")));
        let file_store = GOOD.to_string() + "[rules]\nsource = \"etcd\"\n";
        let e = Config::parse(&file_store, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rules.source") && e.contains("store = \"etcd\""),
            "{e}"
        );
        let cache_dir = GOOD.to_string() + "[rules]\ncache_file = \"c\"\n";
        let e = Config::parse(&cache_dir, "t.toml").unwrap_err().to_string();
        assert!(e.contains("rules.cache_file"), "{e}");
        let bad = GOOD.to_string() + "[rules]\nsource = \"zk\"\n";
        assert!(Config::parse(&bad, "t.toml").is_err());
    }

    #[test]
    fn generator_grants() {
        let text = GOOD.replace(
            "password = \"x\"",
            "password = \"x\"\ngenerators = [\"orders\", \"events\"]",
        );
        let c = Config::parse(&text, "t.toml").unwrap();
        assert!(c.users[0].may_use("orders"));
        assert!(c.users[0].may_use("events"));
        assert!(!c.users[0].may_use("invoices"));
        let none = GOOD.replace("password = \"x\"", "password = \"x\"\ngenerators = []");
        assert!(!Config::parse(&none, "t.toml").unwrap().users[0].may_use("orders"));
    }

    #[test]
    fn debug_output_leaves_passwords_out() {
        let text = GOOD
            .replace("password = \"x\"", "password = \"user-secret\"\nbackend_user = \"u\"\nbackend_password = \"shard-secret\"")
            .replace("user = \"root\"", "user = \"root\"\npassword = \"backend-secret\"");
        let c = Config::parse(&text, "t.toml").unwrap();
        let d = format!("{c:?}");
        for secret in ["user-secret", "shard-secret", "backend-secret"] {
            assert!(!d.contains(secret), "{secret} in {d}");
        }
        assert!(d.contains("\"app\"") && d.contains("\"root\""), "{d}");
    }

    #[test]
    fn floor_headroom_is_ids_or_a_share() {
        let c = Config::parse(GOOD, "t.toml").unwrap();
        assert_eq!(c.allocator.floor_headroom.ids(1, 1001), 10);
        assert!(!c.users[0].admin);
        let with = |v: &str| {
            GOOD.replace(
                "[backend]",
                &format!("[allocator]\nfloor_headroom = {v}\n[backend]"),
            )
        };
        let c = Config::parse(&with("500"), "t.toml").unwrap();
        assert_eq!(c.allocator.floor_headroom.ids(1, 1001), 500);
        let c = Config::parse(&with("\"0.5%\""), "t.toml").unwrap();
        assert_eq!(c.allocator.floor_headroom.ids(0, 10_000), 50);
        for bad in ["\"5\"", "\"101%\"", "\"-1%\""] {
            let e = Config::parse(&with(bad), "t.toml").unwrap_err().to_string();
            assert!(e.contains("allocator.floor_headroom"), "{bad}: {e}");
        }
    }

    #[test]
    fn unknown_key_is_refused_with_its_line() {
        let text = GOOD.replace("user = \"root\"", "user = \"root\"\npasword = \"x\"");
        let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("t.toml"), "{e}");
        assert!(e.contains("pasword"), "{e}");
        assert!(e.contains("line 9"), "{e}");
    }

    #[test]
    fn semantic_errors_name_the_key() {
        let e = Config::parse(&GOOD.replace("127.0.0.1:3306", "nohost"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("shards[0].address"), "{e}");
        let e = Config::parse(
            &format!("{GOOD}\n[allocator]\nstore = \"etcd\"\n"),
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("allocator.etcd_endpoints"), "{e}");
        for (ttl, ok) in [("2", false), ("3", true), ("3600", true), ("3601", false)] {
            let text = format!("{GOOD}\n[allocator]\nlease_ttl_secs = {ttl}\n");
            let r = Config::parse(&text, "t.toml");
            assert_eq!(r.is_ok(), ok, "{ttl}");
            if let Err(e) = r {
                assert!(e.to_string().contains("allocator.lease_ttl_secs"), "{e}");
            }
        }
        for (extra, ok) in [
            ("store_timeout_ms = 99", false),
            ("store_timeout_ms = 9999", true),
            ("store_timeout_ms = 10000", false),
            ("lease_ttl_secs = 60\nstore_timeout_ms = 30000", true),
            ("request_timeout_ms = 600000", true),
            ("request_timeout_ms = 600001", false),
        ] {
            let text = format!("{GOOD}\n[allocator]\n{extra}\n");
            let r = Config::parse(&text, "t.toml");
            assert_eq!(r.is_ok(), ok, "{extra}");
            if let Err(e) = r {
                assert!(e.to_string().contains("_timeout_ms"), "{e}");
            }
        }
        let e = Config::parse(
            &GOOD.replace(
                "listen = \"127.0.0.1:6033\"",
                "listen = \"127.0.0.1:6033\"\nresp_listen = \"nowhere\"",
            ),
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("server.resp_listen"), "{e}");
        for bad in ["5", "100", "60001"] {
            let text = GOOD.replace(
                "listen = \"127.0.0.1:6033\"",
                &format!("listen = \"127.0.0.1:6033\"\ndeadlock_check_ms = {bad}"),
            );
            let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(e.contains("server.deadlock_check_ms"), "{e}");
        }
        for good in ["0", "150", "60000"] {
            let text = GOOD.replace(
                "listen = \"127.0.0.1:6033\"",
                &format!("listen = \"127.0.0.1:6033\"\ndeadlock_check_ms = {good}"),
            );
            assert!(Config::parse(&text, "t.toml").is_ok(), "{good}");
        }
        for (value, ok) in [
            ("4095", false),
            ("4096", true),
            ("16777216", true),
            ("16777217", false),
        ] {
            let text = GOOD.replace(
                "listen = \"127.0.0.1:6033\"",
                &format!("listen = \"127.0.0.1:6033\"\nload_buffer = {value}"),
            );
            match Config::parse(&text, "t.toml") {
                Ok(c) => assert!(ok && c.server.load_buffer.to_string() == value, "{value}"),
                Err(e) => assert!(
                    !ok && e.to_string().contains("server.load_buffer"),
                    "{value}: {e}"
                ),
            }
        }
    }

    fn user(extra: &str) -> String {
        GOOD.replace("password = \"x\"", extra)
    }

    #[test]
    fn password_sources_exactly_one() {
        let e = Config::parse(&user("password = \"x\"\npassword_env = \"X\""), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("users[0]") && e.contains("\"app\""), "{e}");
        assert!(e.contains("password and password_env"), "{e}");
        assert!(
            e.contains("exactly one of password, password_hash, password_file, password_env"),
            "{e}"
        );
        let e = Config::parse(
            &user("password_hash = \"*B69027D44F6E5EDC07F1AEAD1477967B16F28227\"\npassword_file = \"f\""),
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("password_hash and password_file"), "{e}");
        // None: an empty password.
        let c = Config::parse(&user(""), "t.toml").unwrap();
        assert!(c.users[0].secret.is_empty());
        assert!(!c.holds_plaintext);
        assert!(Config::parse(GOOD, "t.toml").unwrap().holds_plaintext);
    }

    #[test]
    fn password_hash_is_checked_and_verifies() {
        for bad in [
            "B69027D44F6E5EDC07F1AEAD1477967B16F28227",
            "*B69027",
            "*Z69027D44F6E5EDC07F1AEAD1477967B16F28227",
            "x",
        ] {
            let e = Config::parse(&user(&format!("password_hash = \"{bad}\"")), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("users[0].password_hash") && e.contains("40 hex digits"),
                "{e}"
            );
        }
        // Lower case hex is taken too.
        let c = Config::parse(
            &user("password_hash = \"*b69027d44f6e5edc07f1aead1477967b16f28227\""),
            "t.toml",
        )
        .unwrap();
        let s = &c.users[0].secret;
        assert_eq!(
            s,
            &Secret::NativeHash(parse_native_hash(&native_hash_text(b"x")).unwrap())
        );
        assert!(format!("{s:?}").contains(".."));
        let nonce = b"abcdefghijklmnopqrst";
        let token = mysql_common::scramble::scramble_native(nonce, b"x").unwrap();
        assert!(s.verify_native(nonce, &token));
        assert!(Secret::Plain("x".into()).verify_native(nonce, &token));
        let wrong = mysql_common::scramble::scramble_native(nonce, b"y").unwrap();
        assert!(!s.verify_native(nonce, &wrong));
        assert!(!s.verify_native(nonce, b""));
        assert!(!s.verify_native(nonce, &token[..19]));
        assert!(s.verify_plain(b"x") && !s.verify_plain(b"y") && !s.verify_plain(b""));
        assert!(Secret::Empty.verify_native(nonce, b"") && Secret::Empty.verify_plain(b""));
        assert!(!Secret::Empty.verify_plain(b"x"));
        assert_eq!(native_hash_text(b""), "");
        // Only no password at all is empty.
        assert!(Secret::Empty.is_empty() && Secret::Plain(String::new()).is_empty());
        assert!(!Secret::Plain("x".into()).is_empty() && !s.is_empty());
    }

    #[test]
    fn password_env_and_file() {
        // A variable every process has: setting one would race with other
        // tests' threads reading the environment.
        let var = "PATH";
        let value = std::env::var(var).expect("PATH is set");
        let c = Config::parse(&user(&format!("password_env = \"{var}\"")), "t.toml").unwrap();
        assert_eq!(c.users[0].secret, Secret::Plain(value.clone()));
        let e = Config::parse(
            &user("password_env = \"IDGATE_NO_SUCH_VARIABLE_X\""),
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("IDGATE_NO_SUCH_VARIABLE_X"), "{e}");

        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "from-file\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let text = format!(
            "{}\n",
            GOOD.replace("password = \"x\"", "password_file = \"pw\"")
                .replace(
                    "user = \"root\"",
                    &format!("user = \"root\"\npassword_env = \"{var}\"")
                )
        );
        let path = dir.path().join("idgate.toml");
        std::fs::write(&path, &text).unwrap();
        // No plaintext password in it: its mode does not matter.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(c.users[0].secret, Secret::Plain("from-file".into()));
        assert_eq!(c.backend.password, value);
        // A world-readable password file is refused, naming it.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Config::load(&path).unwrap_err().to_string();
        assert!(
            e.contains(&f.display().to_string()) && e.contains("chmod 600"),
            "{e}"
        );
        // Group-readable is the operator's choice.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(Config::load(&path).is_ok());
        // A config holding a plaintext password must not be world-readable.
        std::fs::write(&path, GOOD).unwrap();
        let e = Config::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("idgate.toml") && e.contains("plaintext") && e.contains("chmod 600"),
            "{e}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Config::load(&path).is_ok());
    }

    #[test]
    fn backend_accounts() {
        let e = Config::parse(
            &GOOD.replace(
                "user = \"root\"",
                "user = \"root\"\npassword_hash = \"*B69027D44F6E5EDC07F1AEAD1477967B16F28227\"",
            ),
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("backend.password_hash") && e.contains("password_file or password_env"),
            "{e}"
        );
        let e = Config::parse(
            &GOOD.replace(
                "user = \"root\"",
                "user = \"root\"\npassword = \"a\"\npassword_env = \"B\"",
            ),
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("[backend]") && e.contains("password and password_env"),
            "{e}"
        );
        let c = Config::parse(
            &user("password = \"x\"\nbackend_user = \"shop\"\nbackend_password = \"spw\"\nmax_connections = 2"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(
            c.users[0].shard_account,
            Some(("shop".into(), "spw".into()))
        );
        assert_eq!(c.users[0].max_connections, Some(2));
        assert!(Config::parse(GOOD, "t.toml").unwrap().users[0]
            .shard_account
            .is_none());
        for (extra, key, says) in [
            ("backend_password = \"spw\"", "users[0].backend_user", "needs backend_user"),
            ("backend_user = \"\"", "users[0].backend_user", "must not be empty"),
            ("backend_user = \"s\"\nbackend_password_hash = \"*B69027D44F6E5EDC07F1AEAD1477967B16F28227\"", "users[0].backend_password_hash", "backend_password_file or backend_password_env"),
            ("backend_user = \"s\"\nbackend_password = \"a\"\nbackend_password_env = \"B\"", "users[0]", "backend_password and backend_password_env"),
            ("max_connections = 0", "users[0].max_connections", "at least 1"),
        ] {
            let e = Config::parse(&user(&format!("password = \"x\"\n{extra}")), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains(says) && e.contains("\"app\""), "{extra}: {e}");
        }
    }

    #[test]
    fn tls_keys_are_checked_and_name_the_key() {
        let c = Config::parse(GOOD, "t.toml").unwrap();
        assert_eq!(c.backend.tls, ShardTlsMode::Preferred);
        assert!(!c.server.require_tls && c.server.tls_cert.is_none());
        let server = |extra: &str| {
            GOOD.replace(
                "listen = \"127.0.0.1:6033\"",
                &format!("listen = \"127.0.0.1:6033\"\n{extra}"),
            )
        };
        for (text, key) in [
            (server("tls_cert = \"a.pem\""), "server.tls_key"),
            (server("tls_key = \"a.key\""), "server.tls_cert"),
            (server("require_tls = true"), "server.require_tls"),
            (
                GOOD.replace("[[users]]\n", "[[users]]\nrequire_tls = true\n"),
                "users[0].require_tls",
            ),
            (
                format!("{GOOD}\n[backend]\n"),
                "", // a second [backend] table: a parse error
            ),
        ] {
            let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
        let verify = GOOD.replace("[backend]\n", "[backend]\ntls = \"verify_ca\"\n");
        let e = Config::parse(&verify, "t.toml").unwrap_err().to_string();
        assert!(e.contains("backend.tls_ca"), "{e}");
        let bad_mode = GOOD.replace("[backend]\n", "[backend]\ntls = \"sometimes\"\n");
        assert!(Config::parse(&bad_mode, "t.toml").is_err());

        // Files are read at load: a missing or non-PEM file names the key.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("junk.pem"), "not pem").unwrap();
        for (extra_server, extra_backend, key) in [
            (
                "tls_cert = \"missing.pem\"\ntls_key = \"missing.key\"",
                "",
                "server.tls_cert",
            ),
            (
                "tls_cert = \"junk.pem\"\ntls_key = \"junk.pem\"",
                "",
                "server.tls_cert",
            ),
            (
                "",
                "tls = \"verify_ca\"\ntls_ca = \"junk.pem\"",
                "backend.tls_ca",
            ),
        ] {
            let text = server(extra_server)
                .replace("[backend]\n", &format!("[backend]\n{extra_backend}\n"));
            let path = dir.path().join("idgate.toml");
            std::fs::write(&path, text).unwrap();
            // It holds a plaintext password: owner-only, or that is refused first.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            let e = Config::load(&path).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
