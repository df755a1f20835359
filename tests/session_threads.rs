//! Session threads (`[server] session_threads`, `idgate::workers`) against
//! the real test bed: sessions are spread over the threads and served
//! there, and with multiplexing a shard connection opened on one thread
//! serves sessions of the other (`pool_max = 1`: one connection for all),
//! each keeping its own `LAST_INSERT_ID()`; the sessions on each thread
//! are counted (`idgate_session_thread_sessions`).

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use support::proxy::{self, Proxy};

/// The session threads of this process: name and voluntary context
/// switches so far (a thread parked in `epoll_wait` switches out once per
/// wait: one that served a statement has woken at least once).
fn session_threads() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if !comm.starts_with("idgate-sess-") {
            continue;
        }
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let switches = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        out.push((comm.to_string(), switches));
    }
    out.sort();
    out
}

#[tokio::test]
async fn sessions_run_on_their_threads_and_share_a_multiplexed_connection() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("sthreads");
    proxy::create_schema(&tb, &schema).await;
    // The test's own lines, unless the run already adds them.
    let server = match support::server_extra().is_empty() {
        true => "session_threads = 2",
        false => "",
    };
    let mux = match support::backend_extra() {
        "" => "multiplex = true\n",
        _ => "",
    };
    let text = proxy::config_text(&tb, "127.0.0.1:0", server).replacen(
        "connect_timeout_ms = 60000\n",
        &format!("connect_timeout_ms = 60000\n{mux}pool_max = 1\n"),
        1,
    );
    let cfg = idgate::config::Config::parse(&text, "test").expect("test config is valid");
    let p = Proxy::start_config(cfg, true).await;
    let threads = cfg_threads(&text);

    let mut setup = Conn::new(p.opts(Some(&schema))).await.unwrap();
    setup
        .query_drop("CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY, who INT, i INT)")
        .await
        .unwrap();
    drop(setup);

    let before = session_threads();
    assert_eq!(before.len(), threads, "session threads: {before:?}");

    // Sessions are given to the threads in turn, and counted there
    // (`idgate_session_thread_sessions`) while they last.
    let counts = || {
        p.shared
            .session_threads
            .load()
            .as_ref()
            .map(|w| w.sessions())
            .expect("session threads started")
    };
    let wait_counts = |sum: usize| {
        let counts = &counts;
        async move {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                let c = counts();
                if c.iter().sum::<usize>() == sum {
                    return c;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "sessions per thread: {c:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    };
    wait_counts(0).await;
    let mut idle = Vec::new();
    for _ in 0..threads {
        let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
        c.query_drop("DO 1").await.unwrap();
        idle.push(c);
    }
    assert_eq!(wait_counts(threads).await, vec![1; threads]);
    drop(idle);
    wait_counts(0).await;

    // Four clients at once (two per thread), each inserting and reading
    // its own LAST_INSERT_ID() back, all on the one shard connection.
    let clients = 4;
    let rounds = 25;
    let mut tasks = Vec::new();
    for who in 0..clients {
        let opts = p.opts(Some(&schema));
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::new(opts).await.unwrap();
            let mut shard_conns = std::collections::BTreeSet::new();
            for i in 0..rounds {
                c.query_drop(format!("INSERT INTO t (who, i) VALUES ({who}, {i})"))
                    .await
                    .unwrap();
                let ok_id = c.last_insert_id().expect("an id in the OK packet");
                let (lid, owner, row): (u64, i64, i64) = c
                    .query_first(
                        "SELECT LAST_INSERT_ID(), who, i FROM t WHERE id = LAST_INSERT_ID()",
                    )
                    .await
                    .unwrap()
                    .expect("the row just inserted");
                assert_eq!(
                    (lid, owner, row),
                    (ok_id, who, i),
                    "client {who}, round {i}"
                );
                let id: u64 = c
                    .query_first("SELECT CONNECTION_ID()")
                    .await
                    .unwrap()
                    .unwrap();
                shard_conns.insert(id);
            }
            drop(c);
            shard_conns
        }));
    }
    let mut shard_conns = std::collections::BTreeSet::new();
    for t in tasks {
        shard_conns.extend(t.await.unwrap());
    }
    // pool_max = 1: every session on either thread used the same shard
    // connection.
    assert_eq!(shard_conns.len(), 1, "shard connections: {shard_conns:?}");

    let after = session_threads();
    assert_eq!(after.len(), threads, "session threads: {after:?}");
    for ((name, b), (_, a)) in before.iter().zip(&after) {
        assert!(a > b, "{name} never woke to serve a session ({b} -> {a})");
    }

    let mut c = Conn::new(proxy::direct_opts(&tb, 0, Some(&schema)))
        .await
        .unwrap();
    let (rows, distinct): (u64, u64) = c
        .query_first("SELECT COUNT(*), COUNT(DISTINCT id) FROM t")
        .await
        .unwrap()
        .unwrap();
    let n = (clients * rounds) as u64;
    assert_eq!((rows, distinct), (n, n));
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

/// The `session_threads` the config text sets.
fn cfg_threads(text: &str) -> usize {
    text.lines()
        .find_map(|l| l.strip_prefix("session_threads = "))
        .and_then(|n| n.trim().parse().ok())
        .expect("session_threads in the config")
}
