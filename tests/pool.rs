//! The shared pool of shard connections (#19), against the real test bed:
//! a client that leaves gives its shard connection back reset, and the
//! next client that gets the same connection (proved by CONNECTION_ID())
//! sees none of its state; a transaction left open is never given back;
//! `pool_max` and the 1040 after `pool_wait_timeout_ms`; a pooled
//! connection killed on the shard while idle is replaced, never handed out.
//!
//! Readiness is polled (the connection is given back after the client has
//! gone), never waited for by a fixed sleep.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::proxy::{self, Proxy};

/// idgate with `[backend]` pool settings `pool` (lines of `key = value`).
async fn start_pool(tb: &support::Testbed, pool: &str) -> Proxy {
    let text = proxy::config_text(tb, "127.0.0.1:0", "").replacen(
        "connect_timeout_ms = 60000\n",
        &format!("connect_timeout_ms = 60000\n{pool}\n"),
        1,
    );
    let cfg = idgate::config::Config::parse(&text, "test").expect("test config is valid");
    Proxy::start_config(cfg, true).await
}

/// Polls (up to 60 s) until shard 0's pool has `idle` idle connections.
async fn wait_idle(p: &Proxy, idle: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let s = p.shared.pools[0].state();
        if s.idle == idle {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pool of s0 never had {idle} idle connection(s): {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls (up to 60 s) until shard 0's pool has no connection open.
async fn wait_empty(p: &Proxy) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while p.shared.pools[0].state().open != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pool of s0 still has connections: {:?}",
            p.shared.pools[0].state()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn connection_id(c: &mut Conn) -> u64 {
    c.query_first("SELECT CONNECTION_ID()")
        .await
        .expect("CONNECTION_ID()")
        .expect("a row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_state_leaks_to_the_next_client_on_the_same_connection() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("pool_leak");
    proxy::create_schema(&tb, &schema).await;
    // One connection to the shard: the second client must get the first's.
    let p = start_pool(&tb, "pool_max = 1").await;

    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    let id_a = connection_id(&mut a).await;
    for sql in [
        "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
        "SET SESSION group_concat_max_len = 4242",
        "SET SESSION sql_mode = 'ANSI_QUOTES'",
        "SET time_zone = '+03:00'",
        "SET NAMES latin1",
        "CREATE TEMPORARY TABLE leak_tmp (a INT)",
        "SET @leak = 7",
        "PREPARE leak_ps FROM 'SELECT 1'",
        "INSERT INTO t (v) VALUES (1)",
        "COMMIT",
        "DO GET_LOCK('pool_leak_lock', 0)",
    ] {
        a.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    // A server-side prepared statement of the binary protocol.
    let stmt = a.prep("SELECT ? + 1").await.expect("prepare");
    let two: Option<i64> = a.exec_first(&stmt, (1,)).await.expect("execute");
    assert_eq!(two, Some(2));
    let lid: Option<u64> = a.query_first("SELECT LAST_INSERT_ID()").await.expect("lid");
    assert_eq!(lid, Some(1));
    // Last: with it, any later statement would open a transaction.
    a.query_drop("SET autocommit = 0")
        .await
        .expect("autocommit");
    a.disconnect().await.expect("client a quits");
    wait_idle(&p, 1).await;

    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    assert_eq!(
        connection_id(&mut b).await,
        id_a,
        "the second client gets the first one's shard connection"
    );
    let row: Option<(u64, String, String, String, String, u64)> = b
        .query_first(
            "SELECT @@group_concat_max_len, @@sql_mode, @@time_zone, \
             @@character_set_client, COALESCE(@leak, 'none'), @@autocommit",
        )
        .await
        .expect("session variables");
    let (gcl, mode, tz, cs, leak, autocommit) = row.expect("a row");
    assert_ne!(gcl, 4242, "group_concat_max_len leaked");
    assert!(!mode.contains("ANSI_QUOTES"), "sql_mode leaked: {mode}");
    assert_eq!(tz, "SYSTEM", "time_zone leaked");
    assert_ne!(cs, "latin1", "SET NAMES leaked");
    assert_eq!(leak, "none", "user variable leaked");
    assert_eq!(autocommit, 1, "autocommit = 0 leaked");
    let tmp = b.query_drop("SELECT * FROM leak_tmp").await;
    assert!(tmp.is_err(), "the temporary table leaked");
    let ps = b.query_drop("EXECUTE leak_ps").await;
    assert!(
        matches!(&ps, Err(mysql_async::Error::Server(e)) if e.code == 1243),
        "the SQL prepared statement leaked: {ps:?}"
    );
    let lid: Option<u64> = b.query_first("SELECT LAST_INSERT_ID()").await.expect("lid");
    assert_eq!(lid, Some(0), "LAST_INSERT_ID() leaked");
    let lock: Option<Option<u64>> = b
        .query_first("SELECT IS_USED_LOCK('pool_leak_lock')")
        .await
        .expect("lock");
    assert_eq!(lock, Some(None), "GET_LOCK's lock leaked");
    // The committed row is there; nothing else of a's is.
    let n: Option<u64> = b
        .query_first("SELECT COUNT(*) FROM t")
        .await
        .expect("count");
    assert_eq!(n, Some(1));
    b.disconnect().await.expect("client b quits");
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_is_never_given_back() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("pool_txn");
    proxy::create_schema(&tb, &schema).await;
    let p = start_pool(&tb, "pool_max = 1").await;
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    a.query_drop("CREATE TABLE t (v INT) ENGINE = InnoDB")
        .await
        .expect("create");
    let id_a = connection_id(&mut a).await;
    a.query_drop("BEGIN").await.expect("begin");
    a.query_drop("INSERT INTO t VALUES (1)")
        .await
        .expect("insert");
    a.disconnect()
        .await
        .expect("client a quits inside its transaction");
    // Closed, not pooled: the place is free again.
    wait_empty(&p).await;
    proxy::wait_closed(&tb, 0, id_a).await;
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    assert_ne!(connection_id(&mut b).await, id_a);
    let n: Option<u64> = b
        .query_first("SELECT COUNT(*) FROM t")
        .await
        .expect("count");
    assert_eq!(n, Some(0), "the open transaction's row must be rolled back");
    let in_txn: Option<u64> = b
        .query_first("SELECT @@in_transaction")
        .await
        .expect("in_transaction");
    assert_eq!(in_txn, Some(0));
    b.disconnect().await.expect("client b quits");
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_follows_the_client() {
    let Some(tb) = support::testbed() else { return };
    let (s1, s2) = (support::unique("pool_db1"), support::unique("pool_db2"));
    proxy::create_schema(&tb, &s1).await;
    proxy::create_schema(&tb, &s2).await;
    let p = start_pool(&tb, "pool_max = 1").await;
    let mut a = Conn::new(p.opts(Some(&s1))).await.expect("client a");
    let id_a = connection_id(&mut a).await;
    a.disconnect().await.expect("client a quits");
    wait_idle(&p, 1).await;
    // Another schema: the same connection, moved there.
    let mut b = Conn::new(p.opts(Some(&s2))).await.expect("client b");
    assert_eq!(connection_id(&mut b).await, id_a);
    let db: Option<String> = b.query_first("SELECT DATABASE()").await.expect("db");
    assert_eq!(db.as_deref(), Some(s2.as_str()));
    b.disconnect().await.expect("client b quits");
    wait_idle(&p, 1).await;
    // No schema: never one that has one (a new connection in its place).
    let mut c = Conn::new(p.opts(None)).await.expect("client c");
    let db: Option<Option<String>> = c.query_first("SELECT DATABASE()").await.expect("db");
    assert_eq!(db, Some(None));
    assert_ne!(connection_id(&mut c).await, id_a);
    c.disconnect().await.expect("client c quits");
    // An unknown schema is refused as by MariaDB, and the connection stays pooled.
    wait_idle(&p, 1).await;
    let e = Conn::new(p.opts(Some("pool_no_such_db"))).await;
    assert!(
        matches!(&e, Err(mysql_async::Error::Server(e)) if e.code == 1049),
        "{e:?}"
    );
    wait_idle(&p, 1).await;
    p.stop().await;
    for s in [&s1, &s2] {
        for shard in 0..2 {
            proxy::admin(&tb, shard, &[&format!("DROP DATABASE IF EXISTS `{s}`")]).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_max_then_1040_naming_the_shard() {
    let Some(tb) = support::testbed() else { return };
    let p = start_pool(&tb, "pool_max = 1\npool_wait_timeout_ms = 200").await;
    let mut a = Conn::new(p.opts(Some("mysql"))).await.expect("client a");
    connection_id(&mut a).await;
    // A transaction holds the connection (also with multiplexing).
    a.query_drop("BEGIN").await.expect("begin");
    // The only connection is a's: b waits 200 ms, then 1040.
    let e = Conn::new(p.opts(Some("mysql"))).await;
    match &e {
        Err(mysql_async::Error::Server(e)) => {
            assert_eq!(e.code, 1040, "{e:?}");
            assert!(e.message.contains("shard s0"), "{}", e.message);
            assert!(e.message.contains("pool_max = 1"), "{}", e.message);
        }
        other => panic!("expected error 1040, got {other:?}"),
    }
    let pool = &p.shared.pools[0];
    assert_eq!(pool.stats.timeouts.load(Ordering::Relaxed), 1);
    assert_eq!(pool.state().open, 1, "never more than pool_max");
    // What an operator sees: SHOW IDGATE POOLS (open to every account).
    let rows: Vec<mysql_async::Row> = a.query("SHOW IDGATE POOLS").await.expect("show pools");
    assert_eq!(rows.len(), 2, "one row per shard");
    let s0 = &rows[0];
    let col = |name: &str| -> u64 {
        s0.get::<String, _>(name)
            .unwrap_or_else(|| panic!("column {name}"))
            .parse()
            .expect("a number")
    };
    assert_eq!(s0.get::<String, _>("Shard").as_deref(), Some("s0"));
    assert_eq!(
        (col("Max"), col("Open"), col("In_use"), col("Waiting")),
        (1, 1, 1, 0)
    );
    assert_eq!((col("Waits"), col("Timeouts"), col("Created")), (1, 1, 1));
    a.query_drop("COMMIT").await.expect("commit");
    a.disconnect().await.expect("client a quits");
    wait_idle(&p, 1).await;
    let mut c = Conn::new(p.opts(Some("mysql"))).await.expect("client c");
    connection_id(&mut c).await;
    c.disconnect().await.expect("client c quits");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_client_gets_the_connection_given_back() {
    let Some(tb) = support::testbed() else { return };
    let p = start_pool(&tb, "pool_max = 1\npool_wait_timeout_ms = 600000").await;
    let mut a = Conn::new(p.opts(Some("mysql"))).await.expect("client a");
    let id_a = connection_id(&mut a).await;
    // A transaction holds the connection (also with multiplexing).
    a.query_drop("BEGIN").await.expect("begin");
    let opts = p.opts(Some("mysql"));
    let b = tokio::spawn(async move {
        let mut b = Conn::new(opts).await.expect("client b after waiting");
        let id = connection_id(&mut b).await;
        b.disconnect().await.expect("client b quits");
        id
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while p.shared.pools[0].state().waiting != 1 {
        assert!(tokio::time::Instant::now() < deadline, "b never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.query_drop("COMMIT").await.expect("commit");
    a.disconnect().await.expect("client a quits");
    assert_eq!(b.await.expect("client b"), id_a, "handed straight to b");
    assert_eq!(p.shared.pools[0].stats.waits.load(Ordering::Relaxed), 1);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_killed_while_idle_is_replaced() {
    let Some(tb) = support::testbed() else { return };
    let p = start_pool(&tb, "pool_max = 2").await;
    let mut a = Conn::new(p.opts(Some("mysql"))).await.expect("client a");
    let id_a = connection_id(&mut a).await;
    a.disconnect().await.expect("client a quits");
    wait_idle(&p, 1).await;
    proxy::kill_and_wait_closed(&tb, 0, id_a).await;
    let mut b = Conn::new(p.opts(Some("mysql"))).await.expect("client b");
    let id_b = connection_id(&mut b).await;
    assert_ne!(id_b, id_a, "the killed connection was handed out");
    let one: Option<u64> = b.query_first("SELECT 1").await.expect("b works");
    assert_eq!(one, Some(1));
    assert_eq!(p.shared.pools[0].stats.stale.load(Ordering::Relaxed), 1);
    b.disconnect().await.expect("client b quits");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_in_the_middle_of_a_reply_leaves_no_reply_behind() {
    let Some(tb) = support::testbed() else { return };
    let p = start_pool(&tb, "pool_max = 1").await;
    // About 8 MB of rows, far more than the socket buffers hold: the
    // client leaves while idgate is still relaying them.
    let mut raw = proxy::RawClient::app(p.addr, proxy::CLIENT_CAPS).await;
    let mut q = vec![0x03];
    q.extend_from_slice(b"SELECT REPEAT('x', 8000) FROM mysql.seq_1_to_1000");
    raw.send(&q).await;
    let (_, first) = raw.read().await.expect("the reply starts");
    assert_eq!(first, [1], "a result set of one column, not {first:?}");
    drop(raw);
    // Whatever the session saw, its connection is either closed or was
    // given back only after the whole reply: the next client on the pool's
    // one place gets a connection with nothing left to read.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while p.shared.pools[0].view().in_use() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session never ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut b = Conn::new(p.opts(None)).await.expect("client b");
    let v: Option<u64> = b.query_first("SELECT 42").await.expect("select");
    assert_eq!(v, Some(42));
    b.disconnect().await.expect("client b quits");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_idle_connections_are_opened_ahead_and_idle_ones_expire() {
    let Some(tb) = support::testbed() else { return };
    // pool_min_idle: once a client showed the key, the upkeep task (once a
    // second) opens idle connections up to 3. If a tick comes while client
    // a still holds its connection, it opens 3 beside it and a's makes a
    // fourth idle one when a quits (min_idle counts idle connections; the
    // extra one expires with pool_idle_timeout): 3 or 4, never fewer.
    let p = start_pool(&tb, "pool_min_idle = 3").await;
    let mut a = Conn::new(p.opts(None)).await.expect("client a");
    connection_id(&mut a).await;
    a.disconnect().await.expect("client a quits");
    // Settled: 3 or 4 idle, every connection opened idle (an upkeep tick
    // may still be opening one when the third turns idle: with
    // multiplexing a's connection went back after each statement).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let v = p.shared.pools[0].view();
        if (3..=4).contains(&v.state.idle)
            && v.state.open == v.state.idle
            && v.created == v.state.open as u64
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never 3 or 4 connections opened, all idle: {v:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A client of that key takes one of them: no new login. MariaDB's
    // connection ids rise, so a connection opened before this side one
    // has a lower id than it; a login for b would have a higher one (the
    // upkeep opens none meanwhile: 3 or more are idle until b takes one).
    let mark = {
        let mut side = Conn::new(proxy::direct_opts(&tb, 0, None))
            .await
            .expect("side connection to s0");
        let id = connection_id(&mut side).await;
        side.disconnect().await.expect("side connection quits");
        id
    };
    let mut b = Conn::new(p.opts(None)).await.expect("client b");
    let id_b = connection_id(&mut b).await;
    assert!(id_b < mark, "client b logged in anew ({id_b} after {mark})");
    b.disconnect().await.expect("client b quits");
    p.stop().await;

    // pool_idle_timeout = 1: the upkeep task closes an idle connection
    // once it has been unused for a second.
    let p = start_pool(&tb, "pool_idle_timeout = 1").await;
    let mut a = Conn::new(p.opts(None)).await.expect("client a");
    let id_a = connection_id(&mut a).await;
    a.disconnect().await.expect("client a quits");
    wait_empty(&p).await;
    assert_eq!(p.shared.pools[0].view().closed, 1);
    proxy::wait_closed(&tb, 0, id_a).await;
    p.stop().await;
}

/// A pooled connection remembers the sql_mode idgate read on it while its
/// session state stays the same: the next session's INSERT into a rule
/// table reads nothing (one round trip less per login), and a connection
/// whose state changed is read again, never taken at its old word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_takes_the_sql_mode_its_connection_already_read() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("pool_modes");
    proxy::create_schema(&tb, &schema).await;
    proxy::admin(
        &tb,
        0,
        &[&format!(
            "CREATE TABLE `{schema}`.r (id BIGINT UNSIGNED PRIMARY KEY, k VARCHAR(8) NOT NULL, w VARCHAR(8) NOT NULL)"
        )],
    )
    .await;
    let text = proxy::config_text_etcd(&tb, &support::unique("/pool-modes")).replacen(
        "connect_timeout_ms = 60000\n",
        "connect_timeout_ms = 60000\npool_max = 1\npool_wait_timeout_ms = 60000\n",
        1,
    );
    let cfg = idgate::config::Config::parse(&text, "test").expect("test config is valid");
    let rules = format!(
        "[[generator]]\nname = \"g\"\nkind = \"sequence\"\nbatch = 20\n\n\
         [[table]]\nname = \"{schema}.r\"\ncolumn = \"id\"\ngenerator = \"g\"\n"
    );
    let p = Proxy::start_config_rules(cfg, &rules).await;
    // The shard connection's own count of SELECTs (SHOW counts as none).
    async fn selects(c: &mut Conn) -> u64 {
        let row: Option<(String, u64)> = c
            .query_first("SHOW SESSION STATUS LIKE 'Com_select'")
            .await
            .expect("session status");
        row.expect("a row").1
    }

    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    a.query_drop("INSERT INTO r (k, w) VALUES ('a', 'x')")
        .await
        .expect("a's row");
    a.disconnect().await.expect("a quits");
    wait_idle(&p, 1).await;

    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    let before = selects(&mut b).await;
    b.query_drop("INSERT INTO r (k, w) VALUES ('b', 'x')")
        .await
        .expect("b's row");
    assert_eq!(
        selects(&mut b).await,
        before,
        "b's INSERT into a rule table read no sql_mode: its connection knew it"
    );
    // b's own sql_mode, read again after b set it: a backslash is a
    // character, so 'b\' is a whole string.
    b.query_drop("SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'")
        .await
        .expect("set sql_mode");
    b.query_drop(r"INSERT INTO r (k, w) VALUES ('b\', 'y')")
        .await
        .expect("b's row with a backslash");
    b.disconnect().await.expect("b quits");
    wait_idle(&p, 1).await;

    // c gets the connection reset: the default sql_mode again, where a
    // backslash escapes the quote. Planned with b's mode, this statement
    // would be cut in the wrong places.
    let mut c = Conn::new(p.opts(Some(&schema))).await.expect("client c");
    c.query_drop(r"INSERT INTO r (k, w) VALUES ('c\'', 'z')")
        .await
        .expect("c's row with an escaped quote");
    let rows: Vec<(u64, String, String)> = c
        .query("SELECT id, k, w FROM r ORDER BY id")
        .await
        .expect("rows");
    let kw: Vec<(&str, &str)> = rows.iter().map(|(_, k, w)| (&k[..], &w[..])).collect();
    assert_eq!(
        kw,
        [("a", "x"), ("b", "x"), (r"b\", "y"), ("c'", "z")],
        "{rows:?}"
    );
    let mut ids: Vec<u64> = rows.iter().map(|r| r.0).collect();
    ids.dedup();
    assert!(ids.len() == 4 && ids[0] > 0, "ids filled in: {rows:?}");
    assert_eq!(p.shared.pools[0].view().created, 1, "one login in all");
    c.disconnect().await.expect("c quits");
    proxy::teardown(&tb, p, &schema).await;
}
