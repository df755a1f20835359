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
    /// Threads that run sessions; 0: one per core.
    #[serde(default)]
    pub worker_threads: usize,
    /// Largest command packet accepted from a client, in bytes (MySQL's
    /// protocol maximum is 1 GiB; the shard's max_allowed_packet also applies).
    #[serde(default = "default_max_packet")]
    pub max_packet: usize,
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
}

/// `[[users]]`: one account of idgate's own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub name: String,
    /// Plain text; checked with mysql_native_password (MySQL) or compared
    /// as sent by `AUTH` (Redis protocol).
    #[serde(default)]
    pub password: String,
    /// Generators this user may take ids from outside INSERTs (Redis
    /// protocol, NEXTVAL); absent: all of them. Grants as March has them, so
    /// one application cannot drain or probe another's generator.
    pub generators: Option<Vec<String>>,
    /// This user must log in over TLS (error 3159 otherwise).
    #[serde(default)]
    pub require_tls: bool,
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

/// `[backend]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    pub user: String,
    #[serde(default)]
    pub password: String,
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
}

/// `[[shards]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    /// Name used in rules and error messages.
    pub name: String,
    /// `host:port` of the MariaDB/MySQL server.
    pub address: String,
}

/// `[rules]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesConfig {
    /// Directory whose `*.toml` files are loaded (relative to the config file).
    pub dir: PathBuf,
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
fn default_deadlock_check_ms() -> u64 {
    200
}
fn default_connect_timeout() -> u64 {
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
        let mut cfg = Config::parse(&text, &path.display().to_string())?;
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(r) = cfg.rules.as_mut() {
            if r.dir.is_relative() {
                r.dir = base.join(&r.dir);
            }
        }
        if cfg.allocator.file_path.is_relative() {
            cfg.allocator.file_path = base.join(&cfg.allocator.file_path);
        }
        for p in [
            cfg.server.tls_cert.as_mut(),
            cfg.server.tls_key.as_mut(),
            cfg.backend.tls_ca.as_mut(),
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
        Ok(())
    }

    /// Parses and validates config text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
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
        let d = cfg.server.deadlock_check_ms;
        // InnoDB refreshes its lock tables only after 100 ms without
        // readers: a detector reading them more often would read stale ones.
        if d != 0 && !(150..=60_000).contains(&d) {
            return Err(invalid(
                "server.deadlock_check_ms",
                format!("{d}: must be 0 (off) or between 150 and 60000"),
            ));
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
        if cfg.users.is_empty() {
            return Err(invalid(
                "users",
                "at least one [[users]] entry is needed".into(),
            ));
        }
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
        if cfg.allocator.store == StoreKind::Etcd && cfg.allocator.etcd_endpoints.is_empty() {
            return Err(invalid(
                "allocator.etcd_endpoints",
                "store = \"etcd\" needs at least one endpoint".into(),
            ));
        }
        Ok(cfg)
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
        assert_eq!(c.allocator.store, StoreKind::File);
        assert!(c.rules.is_none());
        assert!(c.server.resp_listen.is_none());
        assert!(c.users[0].may_use("anything"));
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
            let e = Config::load(&path).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
