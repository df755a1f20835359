//! Ids through the proxy stay unique under concurrency, across idgate
//! instances sharing one etcd prefix, and across a kill -9 of the binary
//! (issue 4).

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;
use support::proxy::{self, Proxy};

const SNOWFLAKE: &str = "kind = \"snowflake\"\nepoch = \"2026-01-01T00:00:00Z\"\n\
                         timestamp_bits = 41\nnode_bits = 10\nsequence_bits = 12\n";

fn rules(schema: &str) -> String {
    format!(
        "[[generator]]\nname = \"seq\"\nkind = \"sequence\"\nbatch = 20\n\n\
         [[generator]]\nname = \"snow\"\n{SNOWFLAKE}\n\
         [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"seq\"\n\n\
         [[table]]\nname = \"{schema}.e\"\ncolumn = \"id\"\ngenerator = \"snow\"\n"
    )
}

async fn create(tb: &support::Testbed, schema: &str) {
    proxy::admin(
        tb,
        0,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &format!(
                "CREATE TABLE `{schema}`.t (id BIGINT UNSIGNED PRIMARY KEY, w VARCHAR(32) NOT NULL, n INT NOT NULL)"
            ),
            &format!(
                "CREATE TABLE `{schema}`.e (id BIGINT UNSIGNED PRIMARY KEY, w VARCHAR(32) NOT NULL, n INT NOT NULL)"
            ),
        ],
    )
    .await;
}

async fn drop_schema(tb: &support::Testbed, schema: &str) {
    proxy::admin(tb, 0, &[&format!("DROP DATABASE IF EXISTS `{schema}`")]).await;
}

/// Whether idgate refused a statement because its allocator could not get
/// ids from etcd in time (error 1467: the cache ran out while etcd was
/// slow, or a snowflake lost its node lease). Nothing was sent to a shard.
fn allocator_refused(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(se) if se.code == 1467
        && (se.message.contains("store unavailable")
            || se.message.contains("no valid node id lease")))
}

/// One client connection inserting `rounds` times into `table` with every
/// form (single row, multi-row, prepared); returns the ids the driver
/// reported as last insert id, in order.
///
/// With `retry_refused`, a statement idgate refuses for want of ids
/// ([`allocator_refused`]) is sent again (for up to a minute): the `idgate`
/// binary runs with production's bounds on etcd (2 s per call, 3 s per
/// request), which the test bed's etcd can miss on a loaded machine.
async fn writer(
    opts: mysql_async::OptsBuilder,
    table: &'static str,
    who: String,
    rounds: usize,
    retry_refused: bool,
) -> Vec<u64> {
    let mut c = Conn::new(opts).await.expect("connect through idgate");
    let stmt = c
        .prep(format!("INSERT INTO {table} (w, n) VALUES (?, ?)"))
        .await
        .unwrap();
    let mut reported = Vec::new();
    for i in 0..rounds {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let r = match i % 3 {
                0 => {
                    c.query_drop(format!("INSERT INTO {table} (w, n) VALUES ('{who}', {i})"))
                        .await
                }
                1 => {
                    c.query_drop(format!(
                        "INSERT INTO {table} (id, w, n) VALUES (NULL, '{who}', {i}), (0, '{who}', {i}), (DEFAULT, '{who}', {i})"
                    ))
                    .await
                }
                _ => c.exec_drop(&stmt, (who.as_str(), i)).await,
            };
            match r {
                Ok(()) => break,
                Err(e)
                    if retry_refused
                        && allocator_refused(&e)
                        && tokio::time::Instant::now() < deadline =>
                {
                    eprintln!("{who} round {i}: {e}; again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("{who} round {i}: {e}"),
            }
        }
        reported.push(c.last_insert_id().expect("a last insert id"));
    }
    c.disconnect().await.unwrap();
    reported
}

/// Rows per statement form of [`writer`].
fn rows_for(rounds: usize) -> usize {
    (0..rounds).map(|i| if i % 3 == 1 { 3 } else { 1 }).sum()
}

async fn check_table(
    tb: &support::Testbed,
    schema: &str,
    table: &str,
    expected_rows: usize,
) -> Vec<(u64, String)> {
    let mut c = Conn::new(proxy::direct_opts(tb, 0, Some(schema)))
        .await
        .unwrap();
    let rows: Vec<(u64, String)> = c
        .query(format!("SELECT id, w FROM {table} ORDER BY id"))
        .await
        .unwrap();
    c.disconnect().await.unwrap();
    assert_eq!(
        rows.len(),
        expected_rows,
        "{table}: every INSERT stored its rows"
    );
    let distinct: HashSet<u64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(distinct.len(), rows.len(), "{table}: ids are distinct");
    assert!(!distinct.contains(&0), "{table}: no id 0");
    rows
}

/// Two idgate instances (one etcd prefix) x 4 connections each, inserting
/// at once into the same tables: no duplicate-key error, every id distinct,
/// and each connection's ids increase (sequence and snowflake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_insert_concurrently_without_duplicates() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("iji_two");
    create(&tb, &schema).await;
    let prefix = format!("/t-{schema}");
    let a = Proxy::start_rules(&tb, &rules(&schema), &prefix).await;
    let b = Proxy::start_rules(&tb, &rules(&schema), &prefix).await;
    const ROUNDS: usize = 60;
    let mut tasks = Vec::new();
    for (name, p) in [("a", &a), ("b", &b)] {
        for conn in 0..4 {
            for table in ["t", "e"] {
                let who = format!("{name}{conn}");
                tasks.push((
                    table,
                    tokio::spawn(writer(p.opts(Some(&schema)), table, who, ROUNDS, false)),
                ));
            }
        }
    }
    let mut per_table: std::collections::HashMap<&str, Vec<Vec<u64>>> = Default::default();
    for (table, t) in tasks {
        per_table
            .entry(table)
            .or_default()
            .push(t.await.expect("writer did not panic"));
    }
    for table in ["t", "e"] {
        let rows = check_table(&tb, &schema, table, 8 * rows_for(ROUNDS)).await;
        let ids: HashSet<u64> = rows.iter().map(|r| r.0).collect();
        for reported in &per_table[table] {
            assert!(
                reported.windows(2).all(|w| w[0] < w[1]),
                "{table}: ids increase per connection: {reported:?}"
            );
            assert!(
                reported.iter().all(|id| ids.contains(id)),
                "{table}: every reported last insert id is a stored row's id"
            );
        }
    }
    a.stop().await;
    b.stop().await;
    drop_schema(&tb, &schema).await;
}

/// A generated row before an explicit id in the same statement, where the
/// explicit id is exactly the id the sequence would issue next: idgate
/// observes explicit ids first, so this never collides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_row_before_explicit_id_never_collides() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("iji_obs");
    create(&tb, &schema).await;
    let p = Proxy::start_rules(&tb, &rules(&schema), &format!("/t-{schema}")).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("INSERT INTO t (w, n) VALUES ('warm', 0)")
        .await
        .unwrap();
    for form in 0..3 {
        let next = p.generator("seq").stats().next_id;
        match form {
            0 => c
                .query_drop(format!(
                    "INSERT INTO t (id, w, n) VALUES (NULL, 'g', 0), ({next}, 'x', 0)"
                ))
                .await
                .unwrap_or_else(|e| panic!("text, explicit {next}: {e}")),
            1 => c
                .exec_drop(
                    "INSERT INTO t (id, w, n) VALUES (?, 'g', 1), (?, 'x', 1)",
                    (None::<u64>, next),
                )
                .await
                .unwrap_or_else(|e| panic!("prepared, explicit {next}: {e}")),
            _ => c
                .query_drop(format!(
                    "INSERT INTO t SET w = 'g', n = 2; INSERT INTO t (id, w, n) VALUES ({}, 'x', 2), (NULL, 'g', 2)",
                    next + 1
                ))
                .await
                .unwrap_or_else(|e| panic!("multi-statement, explicit {}: {e}", next + 1)),
        }
    }
    let rows: Vec<(u64, String, i32)> = c
        .query("SELECT id, w, n FROM t ORDER BY n, w")
        .await
        .unwrap();
    assert_eq!(rows.len(), 1 + 2 + 2 + 3, "{rows:?}");
    // The generated row written after an explicit one is above it.
    let last: Vec<&(u64, String, i32)> = rows.iter().filter(|r| r.2 == 2).collect();
    let x = last.iter().find(|r| r.1 == "x").unwrap().0;
    assert!(last.iter().filter(|r| r.1 == "g").all(|r| r.0 != x));
    c.disconnect().await.unwrap();
    p.stop().await;
    drop_schema(&tb, &schema).await;
}

/// The `idgate` binary killed with SIGKILL mid-load and started again on the
/// same etcd prefix issues no id twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_restart_issues_no_id_twice() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("iji_kill");
    create(&tb, &schema).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("rules")).unwrap();
    std::fs::write(dir.path().join("rules/t.toml"), rules(&schema)).unwrap();
    let mut total = 0;
    for run in 0..3 {
        let mut child = spawn_binary(&tb, dir.path(), &format!("/t-{schema}")).await;
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname(child.1.ip().to_string())
            .tcp_port(child.1.port())
            .user(Some(proxy::USER))
            .pass(Some(proxy::PASSWORD))
            .db_name(Some(&schema))
            .prefer_socket(false);
        let mut writers = Vec::new();
        for conn in 0..3 {
            for table in ["t", "e"] {
                writers.push(tokio::spawn(writer(
                    opts.clone(),
                    table,
                    format!("r{run}c{conn}"),
                    30,
                    true,
                )));
            }
        }
        for w in writers {
            w.await.expect("writer");
        }
        total += 3 * rows_for(30);
        // kill -9: no shutdown, cached ids abandoned, snowflake leases kept.
        child.0.kill().unwrap();
        child.0.wait().unwrap();
    }
    check_table(&tb, &schema, "t", total).await;
    check_table(&tb, &schema, "e", total).await;
    drop_schema(&tb, &schema).await;
}

/// Starts `idgate serve` with rules from `dir/rules` and etcd under `prefix`.
///
/// Its etcd leases live 60 s (production: 10 s), so that no lease of a
/// running binary runs out between two slow keep-alive rounds. It opens
/// its allocator with production's bounds: if that fails on a slow etcd
/// (the binary exits), it is started again.
async fn spawn_binary(
    tb: &support::Testbed,
    dir: &std::path::Path,
    prefix: &str,
) -> (std::process::Child, SocketAddr) {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let cfg = format!(
        "{}lease_ttl_secs = 60\n\n[rules]\ndir = \"rules\"\n",
        proxy::config_text_etcd(tb, prefix).replace("127.0.0.1:0", &addr.to_string())
    );
    let path = dir.join("idgate.toml");
    support::write_private(&path, &cfg);
    let start = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_idgate"))
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start idgate")
    };
    let mut child = start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            eprintln!("idgate exited while starting ({status}); starting it again");
            child = start();
        }
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname(addr.ip().to_string())
            .tcp_port(addr.port())
            .user(Some(proxy::USER))
            .pass(Some(proxy::PASSWORD))
            .prefer_socket(false);
        if let Ok(c) = Conn::new(opts).await {
            let _ = c.disconnect().await;
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "idgate binary did not start on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, addr)
}

/// A rule table with an AFTER INSERT trigger that writes to a table of
/// its own with AUTO_INCREMENT: MariaDB then reports 0 in the OK of an
/// INSERT whose id idgate wrote as `LAST_INSERT_ID(<id>)`, though
/// `LAST_INSERT_ID()` is the id. The client must still be told the stored
/// id, in the text and the binary protocol, as MariaDB tells it for an
/// AUTO_INCREMENT table with the same trigger (checked beside it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_trigger_does_not_hide_the_generated_id() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("trg");
    let table = |name: &str, id: &str| {
        format!("CREATE TABLE `{schema}`.{name} (id {id} PRIMARY KEY, w VARCHAR(32) NOT NULL, n INT NOT NULL)")
    };
    let log = |name: &str| {
        format!("CREATE TABLE `{schema}`.{name} (seq BIGINT AUTO_INCREMENT PRIMARY KEY, id BIGINT)")
    };
    let trigger = |on: &str, into: &str| {
        format!("CREATE TRIGGER `{schema}`.{on}_ai AFTER INSERT ON `{schema}`.{on} FOR EACH ROW INSERT INTO `{schema}`.{into} (id) VALUES (NEW.id)")
    };
    proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &table("t", "BIGINT UNSIGNED"),
            &table("a", "BIGINT UNSIGNED AUTO_INCREMENT"),
            &log("t_log"),
            &log("a_log"),
            &trigger("t", "t_log"),
            &trigger("a", "a_log"),
        ],
    )
    .await;
    let p = Proxy::start_rules(&tb, &rules(&schema), &support::unique("/trg")).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.expect("login");
    for table in ["a", "t"] {
        for sql in [
            format!("INSERT INTO {table} (w, n) VALUES ('x', 1)"),
            format!("INSERT INTO {table} (w, n) VALUES ('x', 1), ('y', 2)"),
        ] {
            c.query_drop(&sql).await.expect("text insert");
            let ok = c.last_insert_id().unwrap_or(0);
            let sel: Option<u64> = c.query_first("SELECT LAST_INSERT_ID()").await.unwrap();
            assert!(
                ok > 0 && Some(ok) == sel,
                "{sql}: OK {ok}, LAST_INSERT_ID() {sel:?}"
            );
            c.exec_drop(sql.replace("'x', 1", "?, ?"), ("p", 3))
                .await
                .expect("prepared insert");
            let ok = c.last_insert_id().unwrap_or(0);
            let sel: Option<u64> = c.query_first("SELECT LAST_INSERT_ID()").await.unwrap();
            assert!(
                ok > 0 && Some(ok) == sel,
                "prepared {sql}: OK {ok}, LAST_INSERT_ID() {sel:?}"
            );
        }
    }
    drop(c);
    p.stop().await;
    drop_schema(&tb, &schema).await;
}
