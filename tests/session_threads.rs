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

/// Waits until the session threads of a proxy stopped before have ended
/// (a stopped proxy's threads exit on their own, soon after): the tests
/// find threads by name, and a new proxy's have the same names.
async fn no_session_threads_left() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = session_threads();
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "session threads of a stopped proxy still running: {left:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The tests look at this process's session threads: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A proxy with session threads (two, unless the run sets them) and
/// multiplexing with `pool_max = 1`: one shard connection for every
/// session. Returns it with the number of session threads.
async fn start(tb: &support::Testbed, backend: &str) -> (Proxy, usize) {
    // The test's own lines, unless the run already adds them.
    let server = match support::server_extra().is_empty() {
        true => "session_threads = 2",
        false => "",
    };
    let mux = match support::backend_extra() {
        "" => "multiplex = true\n",
        _ => "",
    };
    let text = proxy::config_text(tb, "127.0.0.1:0", server).replacen(
        "connect_timeout_ms = 60000\n",
        &format!("connect_timeout_ms = 60000\n{mux}pool_max = 1\n{backend}"),
        1,
    );
    let cfg = idgate::config::Config::parse(&text, "test").expect("test config is valid");
    (Proxy::start_config(cfg, true).await, cfg_threads(&text))
}

#[tokio::test]
async fn sessions_run_on_their_threads_and_share_a_multiplexed_connection() {
    let Some(tb) = support::testbed() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    no_session_threads_left().await;
    let schema = support::unique("sthreads");
    proxy::create_schema(&tb, &schema).await;
    let (p, threads) = start(&tb, "").await;

    let mut setup = Conn::new(p.opts(Some(&schema))).await.unwrap();
    setup
        .query_drop("CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY, who INT, i INT)")
        .await
        .unwrap();
    drop(setup);

    let before = session_threads();
    assert_eq!(before.len(), threads, "session threads: {before:?}");

    // Each thread accepts sessions and keeps them unless it is more than
    // SLACK ahead of the least loaded one; they are counted there
    // (`idgate_session_thread_sessions`) while they last.
    let counts = || sessions_per_thread(&p);
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
    let ahead = idgate::workers::SLACK + 1;
    let n = threads * ahead;
    for _ in 0..n {
        let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
        c.query_drop("DO 1").await.unwrap();
        idle.push(c);
    }
    // However the threads raced for them: none more than SLACK + 1 ahead
    // of another, so each has at least one.
    let counts = wait_counts(n).await;
    let (least, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(
        most - least <= ahead && *least > 0,
        "sessions per thread: {counts:?}"
    );
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

/// A pooled connection opened by a session on one thread and taken by a
/// session on another is moved to the taker's thread (`Moved` in `SHOW
/// IDGATE POOLS`): its replies then wake the taker's thread, not the one
/// that opened it, at every statement. Over TLS (the test bed's shards
/// offer it: `tls = "preferred"`) and in clear.
#[tokio::test]
async fn a_connection_taken_on_another_thread_moves_there() {
    let Some(tb) = support::testbed() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    moves(&tb, "").await;
    moves(&tb, "tls = \"disabled\"\n").await;
}

async fn moves(tb: &support::Testbed, backend: &str) {
    no_session_threads_left().await;
    let schema = support::unique("sthmove");
    proxy::create_schema(tb, &schema).await;
    let (p, threads) = start(tb, backend).await;
    assert!(threads >= 2, "needs two session threads, has {threads}");
    let moved = || {
        p.shared.pools[0]
            .stats
            .moved
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let counts = || sessions_per_thread(&p);

    // A's session opens the one shard connection, on A's thread (the
    // session threads start with the first accept loop).
    let mut a = Conn::new(p.opts(Some(&schema))).await.unwrap();
    let a_id = conn_id(&mut a).await;
    let on_a = counts();
    assert_eq!(on_a.iter().sum::<usize>(), 1, "{on_a:?}");
    let a_thread = on_a.iter().position(|n| *n == 1).unwrap();
    // (Moved there if A's login opened it elsewhere.)
    let base = moved();

    // B's session is on another thread (sessions are opened, and kept
    // idle, until one lands there: a thread keeps what it accepts up to
    // SLACK + 1 sessions ahead). It takes the connection and moves it
    // there, once.
    let mut idle = Vec::new();
    let mut b = loop {
        let c = Conn::new(p.opts(Some(&schema))).await.unwrap();
        let now = counts();
        if now[a_thread] < now.iter().sum::<usize>() {
            break c;
        }
        assert!(
            now[a_thread] <= idgate::workers::SLACK + 1,
            "sessions per thread: {now:?}"
        );
        idle.push(c);
    };
    assert_eq!(
        conn_id(&mut b).await,
        a_id,
        "pool_max = 1: the same connection"
    );
    assert_eq!(moved(), base + 1);
    let a_name = format!("idgate-sess-{a_thread}");
    let a_wakes = || {
        session_threads()
            .into_iter()
            .find(|(name, _)| *name == a_name)
            .map(|(_, n)| n)
            .expect("A's thread")
    };
    let woke = a_wakes();
    let statements = 400;
    for _ in 0..statements {
        b.query_drop("DO 1").await.unwrap();
    }
    let woke = a_wakes() - woke;
    assert_eq!(moved(), base + 1, "it stays on B's thread");
    // Registered with A's thread, each reply would have woken it (at
    // least once per statement).
    assert!(
        woke < statements / 2,
        "{a_name} woke {woke} times during {statements} statements of a session on another thread"
    );

    // A takes it back to its thread.
    assert_eq!(conn_id(&mut a).await, a_id);
    assert_eq!(moved(), base + 2);
    let rows: Vec<mysql_async::Row> = a.query("SHOW IDGATE POOLS").await.unwrap();
    assert_eq!(rows[0].get::<u64, _>("Moved"), Some(base + 2));
    // Over TLS or not, as configured.
    let tls: Option<String> = b
        .query_first("SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_cipher'")
        .await
        .unwrap();
    assert_eq!(
        tls.is_some_and(|c| !c.is_empty()),
        backend.is_empty(),
        "shard connection TLS ({backend:?})"
    );
    drop((a, b, idle));
    proxy::teardown(tb, p, &schema).await;
}

/// The shard connection a client's statement ran on.
async fn conn_id(c: &mut Conn) -> u64 {
    c.query_first("SELECT CONNECTION_ID()")
        .await
        .unwrap()
        .unwrap()
}

/// The sessions on each of the proxy's session threads now.
fn sessions_per_thread(p: &Proxy) -> Vec<usize> {
    p.shared
        .session_threads
        .load()
        .as_ref()
        .map(|w| w.sessions())
        .expect("session threads started")
}
