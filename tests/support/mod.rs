//! Shared helpers for integration tests: where the test bed's real servers are.
//!
//! The servers are started by `scripts/testbed.sh up` (two MariaDB shards and
//! one etcd on 127.0.0.1). Addresses come from the environment that script
//! prints (`scripts/testbed.sh env`), with its default ports as fallback.
//! Under `CI=true` a missing server is a test failure, never a silent skip.
#![allow(dead_code)]

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use idgate::config::{AllocatorConfig, StoreKind};
use idgate::idgen::{Allocator, AllocatorOptions, Clock, IdgenError};
use idgate::rules::spec::GeneratorRule;

/// Addresses and credentials of the running test bed.
#[derive(Debug, Clone)]
pub struct Testbed {
    /// MariaDB shards, `host:port`, shard 0 first (the two most tests use).
    pub shards: Vec<String>,
    /// A third shard, for placement over three shards.
    pub third: String,
    /// A server that folds table names (`lower_case_table_names = 1`).
    pub folded: String,
    /// etcd client endpoint, `http://host:port`.
    pub etcd: String,
    /// Account with all privileges on every shard.
    pub user: String,
    pub password: String,
    /// The same privileges, but MariaDB accepts it only over TLS (REQUIRE SSL).
    pub tls_user: String,
    pub tls_password: String,
    /// The test bed's TLS material (`scripts/testbed.sh` makes it): `ca.pem`
    /// signed `server.pem` and `server2.pem` (for 127.0.0.1 and localhost,
    /// with their `.key`); `other-ca.pem` signed nothing here.
    pub tls_dir: std::path::PathBuf,
}

impl Testbed {
    /// A file of the test bed's TLS material (see [`Testbed::tls_dir`]).
    pub fn tls_file(&self, name: &str) -> String {
        self.tls_dir.join(name).display().to_string()
    }
}

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

fn reachable(addr: &str) -> bool {
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        // A server that is down refuses at once; one that is up but slow
        // to accept (a loaded machine) must not pass for down.
        .map(|a| TcpStream::connect_timeout(&a, Duration::from_secs(30)).is_ok())
        .unwrap_or(false)
}

/// The test bed, or `None` when its servers are not running (outside CI).
/// Panics under `CI=true` when a server is missing.
pub fn testbed() -> Option<Testbed> {
    let tb = Testbed {
        shards: vec![
            env_or("IDGATE_TEST_S0", "127.0.0.1:23061"),
            env_or("IDGATE_TEST_S1", "127.0.0.1:23062"),
        ],
        third: env_or("IDGATE_TEST_S2", "127.0.0.1:23063"),
        folded: env_or("IDGATE_TEST_S3_FOLDED", "127.0.0.1:23064"),
        etcd: env_or("IDGATE_TEST_ETCD", "http://127.0.0.1:23790"),
        user: env_or("IDGATE_TEST_USER", "idgate"),
        password: env_or("IDGATE_TEST_PASSWORD", "idgate"),
        tls_user: env_or("IDGATE_TEST_TLS_USER", "idgate_tls"),
        tls_password: env_or("IDGATE_TEST_TLS_PASSWORD", "idgate_tls"),
        tls_dir: env_or(
            "IDGATE_TEST_TLS_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/testbed/tls"),
        )
        .into(),
    };
    let etcd_addr = tb.etcd.trim_start_matches("http://").to_string();
    let missing: Vec<&str> = tb
        .shards
        .iter()
        .map(String::as_str)
        .chain([tb.third.as_str(), tb.folded.as_str(), etcd_addr.as_str()])
        .filter(|a| !reachable(a))
        .collect();
    if missing.is_empty() {
        return Some(tb);
    }
    let msg = format!(
        "test bed not running (unreachable: {}); start it with `scripts/testbed.sh up`",
        missing.join(", ")
    );
    if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// A name unique to this test run, for schemas and etcd prefixes, so test
/// binaries running at the same time never share state.
/// `[backend]` lines every idgate the tests start gets: `multiplex = true`
/// under `IDGATE_TEST_MULTIPLEX=1` (scripts/test.sh runs the relevant
/// test files a second time so), else none.
pub fn backend_extra() -> &'static str {
    match std::env::var("IDGATE_TEST_MULTIPLEX").as_deref() {
        Ok("1") => "multiplex = true\n",
        _ => "",
    }
}

/// `[server]` lines every idgate the tests start gets:
/// `session_threads = N` under `IDGATE_TEST_SESSION_THREADS=N`
/// (scripts/test.sh runs the relay, pool and multiplexing tests a third
/// time so), else none.
pub fn server_extra() -> String {
    match std::env::var("IDGATE_TEST_SESSION_THREADS") {
        Ok(n) if !n.is_empty() => format!("session_threads = {n}\n"),
        _ => String::new(),
    }
}

pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        nanos % 100_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Bound on each etcd call of a test's allocator (production: 2 s). The
/// test bed's etcd fsyncs every write, and an fsync on a loaded CI machine
/// has taken longer than production's bounds: a test whose allocator must
/// succeed gets bounds no plausible delay reaches (they cost nothing when
/// etcd answers at once).
pub const ETCD_CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on a request waiting for the store, and on every background store
/// operation, of a test's allocator (production: 3 s).
pub const ALLOCATOR_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one state-file write (fsync) of a test's file store.
pub const FILE_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Shortest etcd lease TTL of a test's allocator: the keep-alive gives a
/// lease up when it could not renew it for most of its TTL, so the TTL must
/// stay well above [`ETCD_CALL_TIMEOUT`] (production: 10 s over 2 s calls).
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(60);

/// The allocator `cfg` describes, as `Allocator::open` opens it, but with
/// the bounds above instead of production's (and a lease TTL of at least
/// [`MIN_LEASE_TTL`]), reading `clock`.
pub async fn open_allocator(
    cfg: &AllocatorConfig,
    generators: &[GeneratorRule],
    clock: Arc<dyn Clock>,
) -> Result<Allocator, IdgenError> {
    open_allocator_with(cfg, generators, clock, ALLOCATOR_TIMEOUT).await
}

/// [`open_allocator`] with the allocator's own `timeout` instead of
/// [`ALLOCATOR_TIMEOUT`] (store calls keep their long bounds): for a test
/// that needs a request to give up.
pub async fn open_allocator_with(
    cfg: &AllocatorConfig,
    generators: &[GeneratorRule],
    clock: Arc<dyn Clock>,
    timeout: Duration,
) -> Result<Allocator, IdgenError> {
    // The production path with the bounds above in the config.
    let mut cfg = cfg.clone();
    let call = match cfg.store {
        StoreKind::Etcd => ETCD_CALL_TIMEOUT,
        StoreKind::File => FILE_WRITE_TIMEOUT,
    };
    cfg.store_timeout_ms = call.as_millis() as u64;
    cfg.lease_ttl_secs = cfg.lease_ttl_secs.max(MIN_LEASE_TTL.as_secs());
    let store = Allocator::open_store(&cfg).await?;
    let options = AllocatorOptions { timeout };
    Allocator::with_options(store, clock, generators, options).await
}

/// Writes `text` to `path` readable by its owner only (mode 0600), as
/// idgate requires of a file holding a plaintext password.
pub fn write_private(path: &std::path::Path, text: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

pub mod drivers;
pub mod process;
pub mod proxy;
