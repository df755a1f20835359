//! Shared helpers for integration tests: where the test bed's real servers are.
//!
//! The servers are started by `scripts/testbed.sh up` (two MariaDB shards and
//! one etcd on 127.0.0.1). Addresses come from the environment that script
//! prints (`scripts/testbed.sh env`), with its default ports as fallback.
//! Under `CI=true` a missing server is a test failure, never a silent skip.
#![allow(dead_code)]

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Addresses and credentials of the running test bed.
#[derive(Debug, Clone)]
pub struct Testbed {
    /// MariaDB shards, `host:port`, shard 0 first (the two most tests use).
    pub shards: Vec<String>,
    /// A third shard, for placement over three shards.
    pub third: String,
    /// etcd client endpoint, `http://host:port`.
    pub etcd: String,
    /// Account with all privileges on every shard.
    pub user: String,
    pub password: String,
}

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

fn reachable(addr: &str) -> bool {
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
        .unwrap_or(false)
}

/// The test bed, or `None` when its servers are not running (outside CI).
/// Panics under `CI=true` when a server is missing.
pub fn testbed() -> Option<Testbed> {
    let tb = Testbed {
        shards: vec![
            env_or("IDGATE_TEST_S0", "127.0.0.1:33061"),
            env_or("IDGATE_TEST_S1", "127.0.0.1:33062"),
        ],
        third: env_or("IDGATE_TEST_S2", "127.0.0.1:33063"),
        etcd: env_or("IDGATE_TEST_ETCD", "http://127.0.0.1:23790"),
        user: env_or("IDGATE_TEST_USER", "idgate"),
        password: env_or("IDGATE_TEST_PASSWORD", "idgate"),
    };
    let etcd_addr = tb.etcd.trim_start_matches("http://").to_string();
    let missing: Vec<&str> = tb
        .shards
        .iter()
        .map(String::as_str)
        .chain([tb.third.as_str(), etcd_addr.as_str()])
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
pub mod process;
pub mod proxy;
