//! Real drivers through idgate filling ids (issue 4): the driver's own "last
//! insert id" must be the id stored in the row, as with AUTO_INCREMENT.
//! mysql_async (text and prepared), sqlx (prepared and text), PyMySQL
//! (`cursor.lastrowid`, a script under tests/clients/), and `sysbench
//! oltp_insert --auto-inc=on` (sends `id = 0`).

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use std::process::Command;
use support::proxy::{self, Proxy};

/// A schema with `t` (no AUTO_INCREMENT; its rule fills `id`) and a proxy
/// with that rule. `extra` is appended to the rule file.
async fn setup(tb: &support::Testbed, tag: &str, extra: &str) -> (String, Proxy) {
    let schema = support::unique(&format!("ijc_{tag}"));
    proxy::admin(
        tb,
        0,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &format!(
                "CREATE TABLE `{schema}`.t (id BIGINT UNSIGNED PRIMARY KEY, k VARCHAR(64) NOT NULL UNIQUE)"
            ),
        ],
    )
    .await;
    let rules = format!(
        "[[generator]]\nname = \"ids\"\nkind = \"sequence\"\nbatch = 50\n\n\
         [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"ids\"\n{extra}"
    );
    let proxy = Proxy::start_rules(tb, &rules, &format!("/t-{schema}")).await;
    (schema, proxy)
}

async fn drop_schema(tb: &support::Testbed, schema: &str) {
    proxy::admin(tb, 0, &[&format!("DROP DATABASE IF EXISTS `{schema}`")]).await;
}

async fn stored(c: &mut Conn, k: &str) -> u64 {
    c.exec_first("SELECT id FROM t WHERE k = ?", (k,))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("row {k} stored"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_async_last_insert_id_is_the_stored_id() {
    let Some(tb) = support::testbed() else { return };
    let (schema, proxy) = setup(&tb, "ma", "").await;
    let mut c = Conn::new(proxy.opts(Some(&schema))).await.unwrap();
    let mut check = Conn::new(proxy::direct_opts(&tb, 0, Some(&schema)))
        .await
        .unwrap();

    // Text protocol.
    for (sql, k) in [
        ("INSERT INTO t (k) VALUES ('m1')", "m1"),
        ("INSERT INTO t (id, k) VALUES (NULL, 'm2')", "m2"),
        ("INSERT INTO t (id, k) VALUES (0, 'm3')", "m3"),
        ("INSERT INTO t SET k = 'm4'", "m4"),
        ("REPLACE INTO t (k) VALUES ('m5')", "m5"),
    ] {
        c.query_drop(sql).await.unwrap();
        assert_eq!(
            c.last_insert_id(),
            Some(stored(&mut check, k).await),
            "{sql}"
        );
        assert_eq!(c.affected_rows(), 1, "{sql}");
    }
    c.query_drop("INSERT INTO t (k) VALUES ('m6'), ('m7'), ('m8')")
        .await
        .unwrap();
    let first = stored(&mut check, "m6").await;
    assert_eq!(c.last_insert_id(), Some(first), "multi-row: the first id");
    assert_eq!(c.affected_rows(), 3);
    let lid: u64 = c
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lid, first);

    // Prepared: one statement, many executes, each a fresh id.
    let stmt = c.prep("INSERT INTO t (k) VALUES (?)").await.unwrap();
    assert_eq!(
        stmt.num_params(),
        1,
        "the client sees the parameters it wrote"
    );
    let mut ids = Vec::new();
    for n in 0..20 {
        let k = format!("p{n}");
        c.exec_drop(&stmt, (k.as_str(),)).await.unwrap();
        let id = stored(&mut check, &k).await;
        assert_eq!(c.last_insert_id(), Some(id), "execute {n}");
        ids.push(id);
    }
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "fresh, increasing: {ids:?}"
    );
    // `?` in the id column bound to NULL and to 0.
    let stmt = c.prep("INSERT INTO t (id, k) VALUES (?, ?)").await.unwrap();
    assert_eq!(stmt.num_params(), 2);
    c.exec_drop(&stmt, (None::<u64>, "q1")).await.unwrap();
    assert_eq!(c.last_insert_id(), Some(stored(&mut check, "q1").await));
    c.exec_drop(&stmt, (0u64, "q2")).await.unwrap();
    assert_eq!(c.last_insert_id(), Some(stored(&mut check, "q2").await));
    // An explicit id: kept, reported, and later ids are above it.
    c.exec_drop(&stmt, (7_000_000u64, "q3")).await.unwrap();
    assert_eq!(stored(&mut check, "q3").await, 7_000_000);
    assert_eq!(c.last_insert_id(), Some(7_000_000));
    c.exec_drop(&stmt, (None::<u64>, "q4")).await.unwrap();
    let q4 = stored(&mut check, "q4").await;
    assert!(q4 > 7_000_000, "{q4}");
    assert_eq!(c.last_insert_id(), Some(q4));
    // exec_batch: every execute a fresh id.
    c.exec_batch(
        "INSERT INTO t (k) VALUES (?)",
        (0..10).map(|n| (format!("r{n}"),)),
    )
    .await
    .unwrap();
    let r9 = stored(&mut check, "r9").await;
    assert_eq!(c.last_insert_id(), Some(r9), "the last execute's id");
    let lid: u64 = c
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lid, r9);

    let n: u64 = check
        .query_first("SELECT COUNT(DISTINCT id) FROM t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 8 + 20 + 4 + 10);
    c.disconnect().await.unwrap();
    check.disconnect().await.unwrap();
    proxy.stop().await;
    drop_schema(&tb, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_last_insert_id_is_the_stored_id() {
    use sqlx::{ConnectOptions, Connection};
    let Some(tb) = support::testbed() else { return };
    let (schema, proxy) = setup(&tb, "sqlx", "").await;
    let opts = sqlx::mysql::MySqlConnectOptions::new()
        .host(&proxy.addr.ip().to_string())
        .port(proxy.addr.port())
        .username(proxy::USER)
        .password(proxy::PASSWORD)
        .database(&schema)
        .ssl_mode(sqlx::mysql::MySqlSslMode::Disabled);
    let mut c = opts.connect().await.expect("sqlx connects through idgate");
    let mut check = Conn::new(proxy::direct_opts(&tb, 0, Some(&schema)))
        .await
        .unwrap();
    // Prepared (sqlx::query with binds), many times: a fresh id each time.
    let mut last = 0;
    for n in 0..10 {
        let k = format!("s{n}");
        let r = sqlx::query("INSERT INTO t (k) VALUES (?)")
            .bind(&k)
            .execute(&mut c)
            .await
            .unwrap();
        assert_eq!(r.rows_affected(), 1);
        let id = stored(&mut check, &k).await;
        assert_eq!(r.last_insert_id(), id, "execute {n}");
        assert!(id > last);
        last = id;
    }
    let r = sqlx::query("INSERT INTO t (id, k) VALUES (?, ?), (?, ?)")
        .bind(None::<u64>)
        .bind("s10")
        .bind(0u64)
        .bind("s11")
        .execute(&mut c)
        .await
        .unwrap();
    assert_eq!(r.rows_affected(), 2);
    assert_eq!(
        r.last_insert_id(),
        stored(&mut check, "s10").await,
        "first row's id"
    );
    assert!(stored(&mut check, "s11").await > r.last_insert_id());
    let lid: u64 = sqlx::query_scalar("SELECT LAST_INSERT_ID()")
        .fetch_one(&mut c)
        .await
        .unwrap();
    assert_eq!(lid, r.last_insert_id());
    // Text protocol (raw_sql).
    let r = sqlx::raw_sql("INSERT INTO t (k) VALUES ('s12')")
        .execute(&mut c)
        .await
        .unwrap();
    assert_eq!(r.last_insert_id(), stored(&mut check, "s12").await);
    c.close().await.unwrap();
    check.disconnect().await.unwrap();
    proxy.stop().await;
    drop_schema(&tb, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pymysql_lastrowid_is_the_stored_id() {
    let Some(tb) = support::testbed() else { return };
    if !std::path::Path::new("/usr/bin/python3").exists() {
        eprintln!("SKIPPED: /usr/bin/python3 not installed");
        return;
    }
    let (schema, proxy) = setup(&tb, "py", "").await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/pymysql_lastrowid.py"
    );
    let addr = proxy.addr;
    let schema2 = schema.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("/usr/bin/python3")
            .arg(script)
            .arg(addr.ip().to_string())
            .arg(addr.port().to_string())
            .arg(proxy::USER)
            .arg(proxy::PASSWORD)
            .arg(&schema2)
            .output()
            .expect("run python3")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pymysql script failed (python3-pymysql installed?):\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.lines().last().is_some_and(|l| l.starts_with("OK ")),
        "{stdout}"
    );
    proxy.stop().await;
    drop_schema(&tb, &schema).await;
}

/// `sysbench oltp_insert --auto-inc=on` sends `id = 0` in a text-protocol
/// INSERT: every row gets a unique id from idgate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sysbench_oltp_insert_gets_unique_ids() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("ijc_sb");
    // sysbench's own table, without AUTO_INCREMENT, and a rule for it.
    proxy::create_sbtest(&tb, &schema).await;
    let rules = format!(
        "[[generator]]\nname = \"sb\"\nkind = \"sequence\"\nbatch = 100\n\n\
         [[table]]\nname = \"{schema}.sbtest1\"\ncolumn = \"id\"\ngenerator = \"sb\"\n"
    );
    let proxy = Proxy::start_rules(&tb, &rules, &format!("/t-{schema}-sb")).await;
    let addr = proxy.addr;
    let db = schema.clone();
    // A number of INSERTs, not a duration: a slow machine makes as many
    // as a fast one (--time only ends a run that hangs).
    let args = [
        "--auto-inc=on",
        "--tables=1",
        "--table-size=10000",
        "--threads=4",
        "--events=2000",
        "--time=600",
    ];
    let out = proxy::sysbench(addr, &db, "oltp_insert", &args, "run").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sysbench failed:\n{stdout}\n{stderr}");
    let high_water = proxy.generator("sb").stats().high_water;
    let mut c = Conn::new(proxy::direct_opts(&tb, 0, Some(&schema)))
        .await
        .unwrap();
    let (n, distinct, zeros, min, max): (u64, u64, u64, u64, u64) = c
        .query_first(
            "SELECT COUNT(*), COUNT(DISTINCT id), SUM(id = 0), COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM sbtest1",
        )
        .await
        .unwrap()
        .unwrap();
    let writes = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("write:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no write count in:\n{stdout}"));
    eprintln!("sysbench oltp_insert through idgate: {n} rows, ids {min}..={max}");
    assert_eq!(n, 2000, "sysbench inserted {n} rows:\n{stdout}");
    assert_eq!(n, writes, "every INSERT sysbench counted stored one row");
    assert_eq!(n, distinct, "ids are unique");
    assert_eq!(zeros, 0, "no row kept id 0");
    assert!(
        min >= 1 && max < high_water,
        "ids {min}..={max} within what the generator issued (< {high_water})"
    );
    c.disconnect().await.unwrap();
    proxy.stop().await;
    drop_schema(&tb, &schema).await;
}
