//! Multiplexing (`[backend] multiplex = true`, #19), against the real test
//! bed: two clients alternating on one shard connection (`pool_max = 1`,
//! CONNECTION_ID() proves it is the same one) each keep their own session
//! (variables, sql_mode, time zone, LAST_INSERT_ID(), prepared
//! statements, warnings) and see none of the other's; what pins a session
//! (a transaction, a temporary table, a user variable) keeps its
//! connection, counted by reason, until released or the session ends.

mod support;

use idgate::frontend::session::mux::Pin;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use std::time::Duration;
use support::proxy::{self, Proxy};

/// Config text `base` with multiplexing and the `[backend]` lines `pool`.
fn with_mux(base: String, pool: &str) -> String {
    base.replacen(
        "connect_timeout_ms = 60000\n",
        &format!(
            "connect_timeout_ms = 60000\n{}{pool}\n",
            // Already there under IDGATE_TEST_MULTIPLEX=1.
            match support::backend_extra() {
                "" => "multiplex = true\n",
                _ => "",
            }
        ),
        1,
    )
}

/// idgate with multiplexing and the `[backend]` lines `pool`.
async fn start_mux(tb: &support::Testbed, pool: &str) -> Proxy {
    let text = with_mux(proxy::config_text(tb, "127.0.0.1:0", ""), pool);
    let cfg = idgate::config::Config::parse(&text, "test").expect("test config is valid");
    Proxy::start_config(cfg, true).await
}

/// One pooled connection, waited for as long as a test may take.
const ONE_CONNECTION: &str = "pool_max = 1\npool_wait_timeout_ms = 60000";

/// idgate with multiplexing on [`ONE_CONNECTION`], its allocator in the
/// test bed's etcd under a new prefix named after `prefix`, filling
/// `schema.r`'s `id` from sequence `g` (with `generator_extra`, lines of
/// the generator).
async fn start_mux_filling_r(
    tb: &support::Testbed,
    prefix: &str,
    schema: &str,
    generator_extra: &str,
) -> Proxy {
    let text = with_mux(
        proxy::config_text_etcd(tb, &support::unique(prefix)),
        ONE_CONNECTION,
    );
    let cfg = idgate::config::Config::parse(&text, "test").expect("test config is valid");
    let rules = format!(
        "[[generator]]\nname = \"g\"\nkind = \"sequence\"\n{generator_extra}\n\
         [[table]]\nname = \"{schema}.r\"\ncolumn = \"id\"\ngenerator = \"g\"\n"
    );
    Proxy::start_config_rules(cfg, &rules).await
}

/// The test bed, a new schema named after `name` on it, and idgate with
/// multiplexing and `pool` in front (`None`: no test bed, outside CI).
async fn setup(name: &str, pool: &str) -> Option<(support::Testbed, String, Proxy)> {
    let tb = support::testbed()?;
    let schema = support::unique(name);
    proxy::create_schema(&tb, &schema).await;
    let p = start_mux(&tb, pool).await;
    Some((tb, schema, p))
}

/// Polls (up to 60 s) until idgate knows `schema.table`'s columns (read
/// in the background after the first INSERT into it, `generated.rs`).
async fn wait_columns_known(p: &Proxy, schema: &str, table: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while p.shared.columns.auto_increment(schema, table).is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the columns of {schema}.{table} were never read"
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

async fn one<T: mysql_async::prelude::FromValue + Send + 'static>(c: &mut Conn, sql: &str) -> T {
    c.query_first(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or_else(|| panic!("{sql}: no row"))
}

/// Polls (up to 60 s) until `n` connections of shard 0's pool are held by
/// a session pinned by `pin` (a session counts them after its reply).
async fn wait_pinned(p: &Proxy, pin: Pin, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let v = p.shared.pools[0].view();
        if v.pinned[pin as usize] == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {n} connection(s) pinned by {}: {v:?}",
            pin.name()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_alternate_on_one_connection_without_seeing_each_other() {
    let Some((tb, schema, p)) =
        setup("mux_alt", "pool_max = 1\npool_wait_timeout_ms = 60000").await
    else {
        return;
    };
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    let id = connection_id(&mut a).await;
    assert_eq!(
        connection_id(&mut b).await,
        id,
        "one shard connection for both"
    );

    // Session settings: a's are restored on the connection for a only.
    for sql in [
        "SET SESSION sql_mode = 'ANSI_QUOTES'",
        "SET time_zone = '+03:00'",
        "SET SESSION group_concat_max_len = 4242",
    ] {
        a.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let settings = "SELECT CONCAT_WS('|', @@sql_mode, @@time_zone, @@group_concat_max_len)";
    for _ in 0..2 {
        let seen_b: String = one(&mut b, settings).await;
        assert!(
            !seen_b.contains("ANSI_QUOTES"),
            "b sees a's sql_mode: {seen_b}"
        );
        assert!(
            !seen_b.contains("+03:00") && !seen_b.contains("4242"),
            "{seen_b}"
        );
        let seen_a: String = one(&mut a, settings).await;
        assert_eq!(seen_a, "ANSI_QUOTES|+03:00|4242", "a keeps its settings");
    }
    assert_eq!(connection_id(&mut a).await, id);
    assert_eq!(connection_id(&mut b).await, id);

    // LAST_INSERT_ID() is each session's own.
    a.query_drop("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        .await
        .expect("create");
    a.query_drop("INSERT INTO t (v) VALUES (1)")
        .await
        .expect("insert a");
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 0);
    b.query_drop("INSERT INTO t (v) VALUES (2)")
        .await
        .expect("insert b");
    assert_eq!(one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await, 1);
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 2);
    assert_eq!(one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await, 1);

    // Server-side prepared statements: prepared again on the connection
    // each execute gets.
    let sa = a.prep("SELECT ? + 1").await.expect("prepare a");
    let sb = b.prep("SELECT ? * 10").await.expect("prepare b");
    for i in 0..3i64 {
        let ra: Option<i64> = a.exec_first(&sa, (i,)).await.expect("execute a");
        let rb: Option<i64> = b.exec_first(&sb, (i,)).await.expect("execute b");
        assert_eq!((ra, rb), (Some(i + 1), Some(i * 10)));
    }

    // Warnings: a keeps the connection until it ran a statement without
    // any, so SHOW WARNINGS sees its own; b never sees a's.
    a.query_drop("SELECT CAST('1x' AS SIGNED)")
        .await
        .expect("a truncation warning");
    wait_pinned(&p, Pin::Diagnostics, 1).await;
    let w: Vec<(String, u64, String)> = a.query("SHOW WARNINGS").await.expect("warnings");
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].1, 1292, "{w:?}");
    assert_eq!(one::<u64>(&mut a, "SELECT @@warning_count").await, 1);
    a.query_drop("SELECT 1").await.expect("select");
    wait_pinned(&p, Pin::Diagnostics, 0).await;
    let w: Vec<(String, u64, String)> = b.query("SHOW WARNINGS").await.expect("warnings");
    assert!(w.is_empty(), "b sees a's warnings: {w:?}");
    assert_eq!(connection_id(&mut b).await, id);

    let v = p.shared.pools[0].view();
    assert_eq!(v.created, 1, "one login to the shard in all: {v:?}");
    assert!(v.multiplexed > 20, "{v:?}");
    assert!(v.restored > 0, "{v:?}");
    a.disconnect().await.expect("a quits");
    b.disconnect().await.expect("b quits");
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_sessions_keep_their_connection_until_released() {
    let Some((tb, schema, p)) =
        setup("mux_pin", "pool_max = 2\npool_wait_timeout_ms = 60000").await
    else {
        return;
    };
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    a.query_drop("CREATE TABLE t (v INT) ENGINE = InnoDB")
        .await
        .expect("create");
    // A logged-in client that waits holds no shard connection (given back
    // right after the reply: polled).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while p.shared.pools[0].view().in_use() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "connections still in use: {:?}",
            p.shared.pools[0].view()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A transaction: a holds its connection until COMMIT; b gets the other.
    a.query_drop("BEGIN").await.expect("begin");
    a.query_drop("INSERT INTO t VALUES (1)")
        .await
        .expect("insert");
    wait_pinned(&p, Pin::Transaction, 1).await;
    let id_a = connection_id(&mut a).await;
    assert_ne!(connection_id(&mut b).await, id_a);
    assert_eq!(one::<u64>(&mut b, "SELECT COUNT(*) FROM t").await, 0);
    a.query_drop("COMMIT").await.expect("commit");
    wait_pinned(&p, Pin::Transaction, 0).await;
    assert_eq!(one::<u64>(&mut b, "SELECT COUNT(*) FROM t").await, 1);

    // Table locks, also `FLUSH ... FOR EXPORT`'s, until `UNLOCK TABLES`.
    a.query_drop("FLUSH TABLES t FOR EXPORT")
        .await
        .expect("flush for export");
    wait_pinned(&p, Pin::LockTables, 1).await;
    let id_a = connection_id(&mut a).await;
    assert_ne!(connection_id(&mut b).await, id_a);
    assert_eq!(one::<u64>(&mut b, "SELECT COUNT(*) FROM t").await, 1);
    a.query_drop("UNLOCK TABLES").await.expect("unlock");
    wait_pinned(&p, Pin::LockTables, 0).await;

    // A temporary table and a user variable pin for the session's life
    // (b mentions one too: it is pinned as well).
    a.query_drop("CREATE TEMPORARY TABLE tmp (a INT)")
        .await
        .expect("temporary table");
    a.query_drop("SET @mine = 7").await.expect("user variable");
    wait_pinned(&p, Pin::TemporaryTable, 1).await;
    let id_a = connection_id(&mut a).await;
    for _ in 0..3 {
        assert_ne!(connection_id(&mut b).await, id_a);
        assert!(
            b.query_drop("SELECT * FROM tmp").await.is_err(),
            "b sees a's table"
        );
        let v: Option<u64> = one(&mut b, "SELECT @mine").await;
        assert_eq!(v, None, "b sees a's user variable");
        assert_eq!(connection_id(&mut a).await, id_a);
        assert_eq!(one::<u64>(&mut a, "SELECT @mine").await, 7);
    }
    let rows: Vec<mysql_async::Row> = b.query("SHOW IDGATE POOLS").await.expect("show pools");
    let s0 = &rows[0];
    let multiplexed: u64 = s0
        .get::<String, _>("Multiplexed")
        .expect("column Multiplexed")
        .parse()
        .expect("a number");
    assert!(multiplexed > 0);
    assert!(
        s0.get::<String, _>("Lid_reads").is_some(),
        "column Lid_reads"
    );
    assert_eq!(
        s0.get::<String, _>("Pinned").as_deref(),
        Some("temporary_table=1,user_variable=1")
    );
    // The session ends: its connection is reset, and nothing of a's stays.
    a.disconnect().await.expect("a quits");
    wait_idle(&p, 1).await;
    wait_pinned(&p, Pin::TemporaryTable, 0).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.expect("client c");
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(connection_id(&mut c).await);
        let v: Option<u64> = one(&mut c, "SELECT @mine").await;
        assert_eq!(v, None, "a's user variable outlived a");
        assert!(c.query_drop("SELECT * FROM tmp").await.is_err());
    }
    // b holds the other one: c gets a's, reset.
    assert!(seen.iter().all(|i| *i == id_a), "{seen:?} {id_a}");
    b.disconnect().await.expect("b quits");
    c.disconnect().await.expect("c quits");
    proxy::teardown(&tb, p, &schema).await;
}

/// The shard connection's own count of SELECT and DO statements
/// (`SHOW SESSION STATUS`, which counts as neither): what idgate ran on it
/// besides the client's statements.
async fn selects_and_dos(c: &mut Conn) -> (u64, u64) {
    let rows: Vec<(String, u64)> = c
        .query("SHOW SESSION STATUS WHERE Variable_name IN ('Com_select', 'Com_do')")
        .await
        .expect("session status");
    let get = |n: &str| {
        rows.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{n} in {rows:?}"))
    };
    (get("Com_select"), get("Com_do"))
}

/// A multiplexed INSERT that generates an id costs no round trip of
/// idgate's own: the value stays on the connection, unread, until somebody
/// needs it (`lidclaim.rs`). Each session still sees its own value, and a
/// session that ended leaves none behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_insert_id_is_read_only_when_somebody_needs_it() {
    let Some((tb, schema, p)) =
        setup("mux_lid", "pool_max = 1\npool_wait_timeout_ms = 60000").await
    else {
        return;
    };
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    let id = connection_id(&mut a).await;
    a.query_drop("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        .await
        .expect("create");
    let before = selects_and_dos(&mut a).await;
    for v in 0..10 {
        let r = a
            .query_iter(format!("INSERT INTO t (v) VALUES ({v})"))
            .await
            .expect("insert");
        assert_eq!(r.last_insert_id(), Some(v + 1), "the OK packet's id");
        drop(r);
    }
    assert_eq!(
        selects_and_dos(&mut a).await,
        before,
        "ten multiplexed INSERTs ran no statement of idgate's on the shard"
    );
    assert_eq!(one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await, 10);
    assert_eq!(one::<u64>(&mut a, "SELECT @@identity").await, 10);

    // Another session on the same connection: the value a left there is
    // a's (known from the OK packet), b's own is 0.
    a.query_drop("INSERT INTO t (v) VALUES (10)")
        .await
        .expect("insert 11");
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    assert_eq!(connection_id(&mut b).await, id, "one shard connection");
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 0);
    assert_eq!(one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await, 11);
    b.query_drop("INSERT INTO t (v) VALUES (11)")
        .await
        .expect("insert 12");
    a.query_drop("DO 1").await.expect("a runs something else");
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 12);
    assert_eq!(one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await, 11);

    // A session that ended with a value unread leaves nothing behind.
    a.query_drop("INSERT INTO t (v) VALUES (12)")
        .await
        .expect("insert 13");
    a.disconnect().await.expect("a quits");
    let mut c = Conn::new(p.opts(Some(&schema))).await.expect("client c");
    assert_eq!(connection_id(&mut c).await, id);
    assert_eq!(one::<u64>(&mut c, "SELECT LAST_INSERT_ID()").await, 0);
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 12);
    assert_eq!(p.shared.pools[0].view().created, 1, "one login in all");
    b.disconnect().await.expect("b quits");
    c.disconnect().await.expect("c quits");
    proxy::teardown(&tb, p, &schema).await;
}

/// A connection the pool closes (idle too long) while it holds a session's
/// unread `LAST_INSERT_ID()` gives the value up first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_left_on_a_connection_the_pool_closes_is_read_first() {
    let Some((tb, schema, p)) = setup("mux_lid_exp", "pool_idle_timeout = 1").await else {
        return;
    };
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    a.query_drop("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT) AUTO_INCREMENT = 700")
        .await
        .expect("create");
    // An id written as an expression: idgate cannot tell from the
    // statement whether MariaDB generated it, so the value is claimed.
    a.query_drop("INSERT INTO t (id, v) VALUES (NULL + 0, 1)")
        .await
        .expect("insert");
    // The upkeep closes the idle connection (after a second unused).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while p.shared.pools[0].state().open > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle connection was never closed: {:?}",
            p.shared.pools[0].state()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await, 700);
    a.disconnect().await.expect("a quits");
    proxy::teardown(&tb, p, &schema).await;
}

/// An INSERT ... ON DUPLICATE KEY UPDATE into a rule table that updates
/// (stores no id) leaves the session's `LAST_INSERT_ID()` as it was: idgate
/// tracks the statement through `LAST_INSERT_ID()` and puts the value the
/// connection held back, so a taken connection must first hold the
/// session's value, not the one another session left there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filled_in_ids_are_known_and_an_updating_upsert_keeps_the_sessions_value() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("mux_lid_odku");
    proxy::create_schema(&tb, &schema).await;
    proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE TABLE `{schema}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT) AUTO_INCREMENT = 500"),
            &format!("CREATE TABLE `{schema}`.r (id BIGINT UNSIGNED PRIMARY KEY, k VARCHAR(8) NOT NULL UNIQUE, w VARCHAR(8) NOT NULL)"),
        ],
    )
    .await;
    let p = start_mux_filling_r(&tb, "/mux-odku", &schema, "batch = 20\n").await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.expect("client c");
    c.query_drop("INSERT INTO r (k, w) VALUES ('k1', 'x')")
        .await
        .expect("row k1");
    // idgate writes the id it fills in as LAST_INSERT_ID(<id>): it knows
    // the connection's value without reading it back, even when another
    // session takes the connection right after.
    let mut d = Conn::new(p.opts(Some(&schema))).await.expect("client d");
    let before = selects_and_dos(&mut c).await;
    let mut last = 0;
    for i in 0..5 {
        let r = c
            .query_iter(format!("INSERT INTO r (k, w) VALUES ('c{i}', 'x')"))
            .await
            .expect("insert into the rule table");
        last = r.last_insert_id().expect("the OK's id");
        drop(r);
        d.query_drop("DO 1").await.expect("d takes the connection");
    }
    assert_eq!(
        selects_and_dos(&mut c).await,
        (before.0, before.1 + 5),
        "no statement of idgate's: d's five DOs only"
    );
    assert_eq!(one::<u64>(&mut c, "SELECT LAST_INSERT_ID()").await, last);
    assert_eq!(one::<u64>(&mut d, "SELECT LAST_INSERT_ID()").await, 0);
    c.disconnect().await.expect("c quits");
    d.disconnect().await.expect("d quits");
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    a.query_drop("INSERT INTO t (v) VALUES (1)")
        .await
        .expect("a's insert");
    b.query_drop("INSERT INTO r (k, w) VALUES ('k1', 'y') ON DUPLICATE KEY UPDATE w = 'y'")
        .await
        .expect("b's upsert");
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 0);
    assert_eq!(one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await, 500);
    a.disconnect().await.expect("a quits");
    b.disconnect().await.expect("b quits");
    proxy::teardown(&tb, p, &schema).await;
}

/// Many sessions on few connections, each inserting and reading its
/// `LAST_INSERT_ID()` back between other sessions' statements: values
/// left on connections are taken back, read by other sessions, waited
/// for; every session always reads its own last id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_sharing_two_connections_each_read_their_own_last_id() {
    let Some((tb, schema, p)) =
        setup("mux_lid_many", "pool_max = 2\npool_wait_timeout_ms = 60000").await
    else {
        return;
    };
    proxy::admin(
        &tb,
        0,
        &[&format!(
            "CREATE TABLE `{schema}`.t (id INT AUTO_INCREMENT PRIMARY KEY, who INT, n INT)"
        )],
    )
    .await;
    let mut tasks = Vec::new();
    for who in 0..8u64 {
        let opts = p.opts(Some(&schema));
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::new(opts).await.expect("client");
            let mut mine = 0;
            for n in 0..40u64 {
                // Deterministic mix: inserts whose effect on the value
                // idgate knows from the statement (generated, or an
                // explicit id that keeps it) or does not (an expression:
                // the value is put on the connection first and claimed
                // after), a read back, or something else.
                match (who + n) % 5 {
                    0 | 1 => {
                        let sql = match (who + n) % 5 {
                            0 => format!("INSERT INTO t (who, n) VALUES ({who}, {n})"),
                            _ => {
                                format!("INSERT INTO t (id, who, n) VALUES (NULL + 0, {who}, {n})")
                            }
                        };
                        let r = c.query_iter(sql).await.expect("insert");
                        mine = r.last_insert_id().expect("the OK's id");
                        drop(r);
                    }
                    2 => {
                        // Negative: below the AUTO_INCREMENT counter.
                        let id = -(1 + who as i64 * 1000 + n as i64);
                        c.query_drop(format!(
                            "INSERT INTO t (id, who, n) VALUES ({id}, {who}, {n})"
                        ))
                        .await
                        .expect("explicit id");
                    }
                    3 => c.query_drop("DO 1").await.expect("do"),
                    _ => {}
                }
                // Read back at some steps only: values stay unread on
                // connections while other sessions take them.
                if (who * 7 + n) % 3 == 0 || n == 39 {
                    let seen: u64 = one(&mut c, "SELECT LAST_INSERT_ID()").await;
                    assert_eq!(seen, mine, "session {who} after step {n}");
                }
                if mine != 0 {
                    let row: (u64, u64) = c
                        .query_first(format!("SELECT who, id FROM t WHERE id = {mine}"))
                        .await
                        .expect("select")
                        .expect("its row");
                    assert_eq!(row, (who, mine), "session {who}'s row");
                }
            }
            c.disconnect().await.expect("quit");
        }));
    }
    for t in tasks {
        t.await.expect("a session failed");
    }
    let v = p.shared.pools[0].view();
    assert!(v.created <= 2, "two shard connections at most: {v:?}");
    proxy::teardown(&tb, p, &schema).await;
}

/// A `SET` run as a server-side prepared statement changes the session
/// too: idgate cannot replay it, so the session keeps its connection
/// (pinned, `set_not_replayable`) and the next session to get that
/// connection gets it reset, never with the changed sql_mode.
/// What mysqldump writes around a dump: its `SET`s are in executable
/// comments (`/*!40101 ... */`), which MariaDB runs. A `SET` there is
/// replayed for its session and never reaches another; one that saves a
/// value in a user variable pins the session, whose restore then reads
/// its own value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_in_executable_comments_stay_with_their_session() {
    let Some((tb, schema, p)) =
        setup("mux_exec", "pool_max = 1\npool_wait_timeout_ms = 60000").await
    else {
        return;
    };
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    let id = connection_id(&mut a).await;
    assert_eq!(connection_id(&mut b).await, id, "one shard connection");
    let settings = "SELECT CONCAT_WS('|', @@unique_checks, @@time_zone)";
    let defaults: String = one(&mut b, settings).await;
    for sql in [
        "/*!40014 SET UNIQUE_CHECKS=0 */",
        "/*M!100100 SET TIME_ZONE='+04:00'*/",
    ] {
        a.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for _ in 0..2 {
        assert_eq!(
            one::<String>(&mut b, settings).await,
            defaults,
            "b sees a's SETs"
        );
        assert_eq!(one::<String>(&mut a, settings).await, "OFF|+04:00");
    }
    assert_eq!(connection_id(&mut a).await, id);
    assert_eq!(connection_id(&mut b).await, id);
    a.disconnect().await.expect("a quits");
    wait_idle(&p, 1).await;
    assert_eq!(
        one::<String>(&mut b, settings).await,
        defaults,
        "a's SETs outlive it"
    );

    // A SET in a query of several statements cannot be replayed: it pins.
    let mut d = Conn::new(p.opts(Some(&schema))).await.expect("client d");
    d.query_drop("SELECT 1; SET time_zone = '+07:00'")
        .await
        .expect("a query of two statements");
    wait_pinned(&p, Pin::SetNotReplayable, 1).await;
    let tz: String = one(&mut d, "SELECT @@time_zone").await;
    assert_eq!(tz, "+07:00");
    d.disconnect().await.expect("d quits");
    wait_pinned(&p, Pin::SetNotReplayable, 0).await;
    assert_eq!(
        one::<String>(&mut b, settings).await,
        defaults,
        "d's SET reached b"
    );

    // Saved in a user variable, set, restored: the session is pinned,
    // reads back its own value, and its end resets the connection.
    let mut c = Conn::new(p.opts(Some(&schema))).await.expect("client c");
    for sql in [
        "/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */",
        "/*!40103 SET @OLD_TIME_ZONE=@@TIME_ZONE */",
        "/*!40103 SET TIME_ZONE='+00:00' */",
    ] {
        c.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    wait_pinned(&p, Pin::UserVariable, 1).await;
    assert_eq!(one::<String>(&mut c, settings).await, "OFF|+00:00");
    for sql in [
        "/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */",
        "/*!40014 SET UNIQUE_CHECKS=@OLD_UNIQUE_CHECKS */",
    ] {
        c.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    assert_eq!(one::<String>(&mut c, settings).await, defaults);
    c.disconnect().await.expect("c quits");
    wait_pinned(&p, Pin::UserVariable, 0).await;
    let left: String = one(
        &mut b,
        "SELECT CONCAT_WS('|', @@unique_checks, @@time_zone, COALESCE(@OLD_TIME_ZONE, 'none'))",
    )
    .await;
    assert_eq!(left, format!("{defaults}|none"), "c's state reached b");
    b.disconnect().await.expect("b quits");
    proxy::teardown(&tb, p, &schema).await;
}

/// `SET INSERT_ID` (as mysqlbinlog writes before an INSERT) is consumed by
/// the next INSERT: replayed on another connection it would be used again
/// (a duplicate key). It pins the session instead, so the next INSERT
/// gets the next AUTO_INCREMENT value; another client waits for the one
/// connection meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_insert_id_pins_instead_of_replaying() {
    let Some((tb, schema, p)) =
        setup("mux_insid", "pool_max = 1\npool_wait_timeout_ms = 60000").await
    else {
        return;
    };
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    for sql in [
        "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
        "SET INSERT_ID = 100",
        "INSERT INTO t (v) VALUES (1)",
    ] {
        a.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    assert_eq!(a.last_insert_id(), Some(100));
    wait_pinned(&p, Pin::SetNotReplayable, 1).await;
    let opts = p.opts(Some(&schema));
    let b = tokio::spawn(async move {
        let mut b = Conn::new(opts).await.expect("client b");
        b.query_drop("SELECT 1").await.expect("b's statement");
        b
    });
    // b waits for the connection a holds.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while p.shared.pools[0].state().waiting == 0 {
        assert!(tokio::time::Instant::now() < deadline, "b never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.query_drop("INSERT INTO t (v) VALUES (2)")
        .await
        .expect("the second INSERT takes the next value");
    assert_eq!(a.last_insert_id(), Some(101));
    a.disconnect().await.expect("a quits");
    let mut b = b.await.expect("b ran");
    let ids: Vec<u64> = b.query("SELECT id FROM t ORDER BY id").await.expect("ids");
    assert_eq!(ids, [100, 101]);
    b.disconnect().await.expect("b quits");
    proxy::teardown(&tb, p, &schema).await;
}

/// MariaDB's `SET STATEMENT var = value FOR stmt` pins as `stmt` does: a
/// temporary table made under it stays with its session, and the
/// session's end resets the connection before anyone else gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporary_table_made_under_set_statement_pins_the_session() {
    let Some((tb, schema, p)) =
        setup("mux_setstmt", "pool_max = 1\npool_wait_timeout_ms = 60000").await
    else {
        return;
    };
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    a.query_drop("SET STATEMENT max_statement_time = 100 FOR CREATE TEMPORARY TABLE tmp (x INT)")
        .await
        .expect("temporary table under SET STATEMENT");
    wait_pinned(&p, Pin::TemporaryTable, 1).await;
    assert_eq!(one::<u64>(&mut a, "SELECT COUNT(*) FROM tmp").await, 0);
    let id = connection_id(&mut a).await;
    a.disconnect().await.expect("a quits");
    wait_pinned(&p, Pin::TemporaryTable, 0).await;
    wait_idle(&p, 1).await;
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    assert_eq!(connection_id(&mut b).await, id, "b gets a's connection");
    let seen = b.query_drop("SELECT COUNT(*) FROM tmp").await;
    assert!(
        matches!(&seen, Err(mysql_async::Error::Server(e)) if e.code == 1146),
        "a's temporary table reached b: {seen:?}"
    );
    b.disconnect().await.expect("b quits");
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_run_as_a_prepared_statement_pins_the_session_and_does_not_leak() {
    let Some((tb, schema, p)) =
        setup("mux_pset", "pool_max = 1\npool_wait_timeout_ms = 60000").await
    else {
        return;
    };
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    let set = a
        .prep("SET SESSION sql_mode = ?")
        .await
        .expect("prepare the SET");
    a.exec_drop(&set, ("ANSI_QUOTES",))
        .await
        .expect("execute the SET");
    wait_pinned(&p, Pin::SetNotReplayable, 1).await;
    let mode: String = one(&mut a, "SELECT @@sql_mode").await;
    assert_eq!(mode, "ANSI_QUOTES", "a's own setting");
    a.disconnect().await.expect("a quits");
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    let mode: String = one(&mut b, "SELECT @@sql_mode").await;
    assert!(!mode.contains("ANSI_QUOTES"), "b sees a's sql_mode: {mode}");
    assert_eq!(p.shared.pools[0].view().created, 1, "one login in all");
    b.disconnect().await.expect("b quits");
    proxy::teardown(&tb, p, &schema).await;
}

/// What a prepared statement's text tells the multiplexer is read at its
/// first execute and kept with it: every later execute still gets it
/// (one that names LAST_INSERT_ID() is given the session's value, one
/// that pins nothing gives its connection back, one that takes a lock
/// pins), and each statement keeps its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_statements_facts_hold_at_every_execute() {
    let Some((tb, schema, p)) =
        setup("mux_pfacts", "pool_max = 1\npool_wait_timeout_ms = 60000").await
    else {
        return;
    };
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    a.query_drop("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        .await
        .expect("create");
    a.query_drop("INSERT INTO t (v) VALUES (1)")
        .await
        .expect("a inserts");
    let mine = a.last_insert_id().expect("a's id");
    let lid = a
        .prep("SELECT LAST_INSERT_ID() + ?")
        .await
        .expect("prepare the read");
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    for round in 0..3 {
        // b's INSERT runs on the one connection and moves its value.
        b.query_drop("INSERT INTO t (v) VALUES (2)")
            .await
            .expect("b inserts");
        let got: Option<u64> = a.exec_first(&lid, (0,)).await.expect("execute the read");
        assert_eq!(got, Some(mine), "round {round}: a's LAST_INSERT_ID()");
    }
    let plain = a.prep("SELECT ? + 1").await.expect("prepare plain");
    for _ in 0..2 {
        let two: Option<i64> = a.exec_first(&plain, (1,)).await.expect("execute plain");
        assert_eq!(two, Some(2));
        wait_idle(&p, 1).await;
    }
    let lock = a
        .prep("SELECT GET_LOCK('mux_pfacts', ?)")
        .await
        .expect("prepare the lock");
    let got: Option<i64> = a.exec_first(&lock, (0,)).await.expect("take the lock");
    assert_eq!(got, Some(1));
    wait_pinned(&p, Pin::GetLock, 1).await;
    a.disconnect().await.expect("a quits");
    b.disconnect().await.expect("b quits");
    proxy::teardown(&tb, p, &schema).await;
}

/// An INSERT whose AUTO_INCREMENT values MariaDB generated (the column
/// left out, or given NULL or 0) reports the connection's
/// `LAST_INSERT_ID()` in its OK packet: the session knows it, and the
/// next session to take the connection reads nothing first (once a taker
/// had to read a value, inserting sessions look at their statements). An explicit
/// id is reported too but leaves `LAST_INSERT_ID()` as it was: then the
/// value is claimed and read as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_mariadb_generated_are_known_from_the_ok_packet() {
    let Some((tb, schema, p)) = setup("mux_gen", ONE_CONNECTION).await else {
        return;
    };
    generated_ids_are_known(tb, schema, p).await;
}

/// The same with rules for another table: the planner reads each INSERT
/// into `t` up to its table, finds no rule and passes it on, and the
/// session reads its effect on from there (`sql::autoinc::resume`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_mariadb_generated_are_known_with_rules_for_other_tables() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("mux_gen_rules");
    proxy::create_schema(&tb, &schema).await;
    proxy::admin(
        &tb,
        0,
        &[&format!(
            "CREATE TABLE `{schema}`.r (id BIGINT UNSIGNED PRIMARY KEY, w INT)"
        )],
    )
    .await;
    let p = start_mux_filling_r(&tb, "/mux-gen", &schema, "").await;
    generated_ids_are_known(tb, schema, p).await;
}

/// Inserting sessions look at their statements for
/// `generated::LOOK_FOR` give-backs after a taker had to read a value,
/// not longer: past that, an INSERT MariaDB generates the id of is again
/// claimed unread, and the next session to take the connection reads it
/// (one round trip) for its owner, whose `LAST_INSERT_ID()` stays right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_are_looked_at_only_for_a_while_after_a_read() {
    let Some((tb, schema, p)) = setup("mux_look", ONE_CONNECTION).await else {
        return;
    };
    let reads = || {
        p.shared.pools[0]
            .stats
            .lid_reads
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    a.query_drop("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        .await
        .expect("create");
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    // b takes the value a's INSERT left on the connection: a read, and
    // a's next INSERT is looked at (the table's columns are read for it
    // in the background).
    a.query_drop("INSERT INTO t (v) VALUES (0)")
        .await
        .expect("first row");
    b.query_drop("DO 1").await.expect("b takes the connection");
    assert!(reads() >= 1, "b read a's value");
    a.query_drop("INSERT INTO t (v) VALUES (1)")
        .await
        .expect("second row");
    b.query_drop("DO 1").await.expect("b takes the connection");
    wait_columns_known(&p, &schema, "t").await;
    let before = reads();
    // Within the window: a's INSERT is looked at, nothing to read.
    a.query_drop("INSERT INTO t (v) VALUES (2)")
        .await
        .expect("third row");
    b.query_drop("DO 1").await.expect("b takes the connection");
    assert_eq!(reads(), before, "looked at: nothing to read");
    // Past it (every statement gives the connection back): claimed again.
    for _ in 0..idgate::frontend::session::generated::LOOK_FOR {
        b.query_drop("DO 1").await.expect("b alone");
    }
    let r = a
        .query_iter("INSERT INTO t (v) VALUES (3)")
        .await
        .expect("fourth row");
    let id = r.last_insert_id().expect("the OK's id");
    drop(r);
    b.query_drop("DO 1").await.expect("b takes the connection");
    assert_eq!(reads(), before + 1, "the window ended: b read a's value");
    assert_eq!(one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await, id);
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 0);
    a.disconnect().await.expect("a quits");
    b.disconnect().await.expect("b quits");
    proxy::teardown(&tb, p, &schema).await;
}

/// What [`ids_mariadb_generated_are_known_from_the_ok_packet`] checks, on
/// `p` (one pooled connection) in front of `tb`, in `schema`.
async fn generated_ids_are_known(tb: support::Testbed, schema: String, p: Proxy) {
    let mut a = Conn::new(p.opts(Some(&schema))).await.expect("client a");
    a.query_drop("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        .await
        .expect("create");
    let mut b = Conn::new(p.opts(Some(&schema))).await.expect("client b");
    // b reads the value a's first INSERT left on the connection: from
    // then on, inserting sessions look at their statements
    // (`generated.rs`), and the second INSERT has the table's columns
    // read in the background.
    for _ in 0..2 {
        a.query_drop("INSERT INTO t (v) VALUES (0)")
            .await
            .expect("first rows");
        b.query_drop("DO 1").await.expect("b takes the connection");
    }
    assert!(
        p.shared.pools[0]
            .stats
            .lid_reads
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    wait_columns_known(&p, &schema, "t").await;
    let before = selects_and_dos(&mut a).await;
    let mut last = 0;
    for (i, sql) in [
        "INSERT INTO t (v) VALUES (1)",
        "INSERT INTO t (id, v) VALUES (NULL, 2), (NULL, 3)",
        "INSERT INTO t SET v = 4",
        "INSERT INTO t VALUES (NULL, 5)",
    ]
    .into_iter()
    .enumerate()
    {
        let r = a.query_iter(sql).await.expect(sql);
        last = r.last_insert_id().expect("the OK's id");
        drop(r);
        b.query_drop("DO 1").await.expect("b takes the connection");
        assert!(i < 4);
    }
    let stmt = a
        .prep("INSERT INTO t (v) VALUES (?)")
        .await
        .expect("prepare");
    a.exec_drop(&stmt, (6,)).await.expect("prepared insert");
    let prepared_id = a.last_insert_id().expect("the OK's id");
    assert!(prepared_id > last, "{prepared_id} after {last}");
    b.query_drop("DO 1").await.expect("b takes the connection");
    assert_eq!(
        selects_and_dos(&mut a).await,
        (before.0, before.1 + 5),
        "no statement of idgate's: b's five DOs only"
    );
    assert_eq!(
        one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await,
        prepared_id
    );
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 0);

    // An explicit id: reported by the OK packet, but LAST_INSERT_ID()
    // stays the session's, whatever the connection held: nothing to read.
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 0);
    let r = a
        .query_iter("INSERT INTO t (id, v) VALUES (1000, 7)")
        .await
        .expect("explicit id");
    assert_eq!(r.last_insert_id(), Some(1000));
    drop(r);
    let before = selects_and_dos(&mut a).await;
    b.query_drop("DO 1").await.expect("b takes the connection");
    assert_eq!(
        selects_and_dos(&mut a).await,
        (before.0, before.1 + 1),
        "an explicit id leaves the value as it was: nothing to read"
    );
    assert_eq!(
        one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await,
        prepared_id,
        "an explicit id does not change LAST_INSERT_ID()"
    );

    // The id as a placeholder: unknown until it runs. The connection is
    // given the session's value first (b left its own 0 there) and the
    // value is read when b takes the connection.
    let by_param = a
        .prep("INSERT INTO t (id, v) VALUES (?, ?)")
        .await
        .expect("prepare");
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 0);
    a.exec_drop(&by_param, (2000, 8))
        .await
        .expect("explicit id as a parameter");
    b.query_drop("DO 1").await.expect("b takes the connection");
    assert_eq!(
        one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await,
        prepared_id,
        "still a's value after an explicit id given as a parameter"
    );
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 0);
    a.exec_drop(&by_param, (None::<u64>, 9))
        .await
        .expect("NULL id as a parameter");
    let generated = a.last_insert_id().expect("the OK's id");
    assert!(generated > 2000, "{generated}");
    b.query_drop("DO 1").await.expect("b takes the connection");
    assert_eq!(
        one::<u64>(&mut a, "SELECT LAST_INSERT_ID()").await,
        generated
    );
    assert_eq!(one::<u64>(&mut b, "SELECT LAST_INSERT_ID()").await, 0);
    assert_eq!(p.shared.pools[0].view().created, 1, "one login in all");
    a.disconnect().await.expect("a quits");
    b.disconnect().await.expect("b quits");
    proxy::teardown(&tb, p, &schema).await;
}
