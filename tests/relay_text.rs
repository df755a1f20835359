//! Differential tests of the text protocol: the same statements run directly
//! on shard s0 and through idgate (each in its own copy of a schema) give the
//! same result sets, column metadata, OK packet fields, warnings and errors.
//! Also COM_CHANGE_USER and COM_RESET_CONNECTION through idgate.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::{ChangeUserOpts, Conn};
use support::proxy::{self, Event, Proxy};

/// The statements of the differential test, in order.
const SCRIPT: &[&str] = &[
    "SET SESSION sql_mode = ''",
    "CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20), \
     d DECIMAL(10,3), dt DATETIME(6), b BLOB, j JSON, u TEXT CHARACTER SET utf8mb4, \
     f DOUBLE, n INT NULL, tiny TINYINT UNSIGNED, e ENUM('x','y'), ts TIMESTAMP NULL, \
     UNIQUE KEY uk (name))",
    "CREATE TABLE plain (k INT PRIMARY KEY, v VARCHAR(5))",
    "INSERT INTO t (name, d, dt, b, j, u, f, n, tiny, e, ts) VALUES ('a', 1.5, \
     '2024-01-02 03:04:05.123456', x'00ff10', '{\"a\": [1, 2]}', 'grüße 🎉', 1.25e10, NULL, 255, 'y', \
     '2020-02-29 23:59:59')",
    "INSERT INTO t (name, d, dt, u) VALUES ('b', -99999.999, '1999-12-31 23:59:59.000001', '日本語'), \
     ('c', 0.001, NULL, NULL), ('d', NULL, '2038-01-19 03:14:07.5', '')",
    "INSERT INTO plain VALUES (1, 'x'), (2, 'y')",
    "INSERT INTO plain VALUES (3, 'z')",
    "UPDATE plain SET v = 'much too long' WHERE k = 1",
    "SHOW WARNINGS",
    "INSERT INTO plain VALUES (4, 'abcdefgh'), (5, 'ok')",
    "SHOW WARNINGS",
    "SHOW COUNT(*) WARNINGS",
    "INSERT INTO plain VALUES (1, 'dup')",
    "SELECT * FROM no_such_table",
    "SELEC 1",
    "SELECT * FROM t ORDER BY id",
    "SELECT id, name AS alias, d * 2, CONCAT(name, u), LENGTH(b), JSON_EXTRACT(j, '$.a') FROM t t_alias ORDER BY id",
    "SELECT NULL, 1, -1, 1.5, 'x', CAST(18446744073709551615 AS UNSIGNED), 1e300, \
     CAST('2024-01-01' AS DATE), CAST('12:34:56.789' AS TIME(3)), X'DEADBEEF', _utf8mb4'ü' COLLATE utf8mb4_bin",
    "SELECT * FROM t WHERE 1 = 0",
    "INSERT INTO t (name) VALUES ('a') ON DUPLICATE KEY UPDATE n = 7",
    "UPDATE t SET n = 5 WHERE id > 1",
    "UPDATE t SET n = 5 WHERE id > 1",
    "INSERT INTO plain SELECT k + 100, v FROM plain",
    "REPLACE INTO plain VALUES (2, 'r')",
    "DELETE FROM plain WHERE k > 100",
    "SELECT LAST_INSERT_ID(), ROW_COUNT()",
    "INSERT INTO t (name) VALUES ('e')",
    "SELECT LAST_INSERT_ID()",
    "SELECT 1; SELECT 'two', 2; INSERT INTO plain VALUES (10, 'a'); UPDATE plain SET v = 'bb' WHERE k = 10; \
     SELECT * FROM plain ORDER BY k; DELETE FROM plain WHERE k = 10",
    "SELECT 1; SELECT * FROM no_such_table; SELECT 2",
    "INSERT INTO plain VALUES (20, 'a'); INSERT INTO plain VALUES (20, 'dup'); SELECT 3",
    "BEGIN",
    "INSERT INTO plain VALUES (30, 'tx')",
    "SELECT * FROM plain WHERE k = 30",
    "ROLLBACK",
    "SELECT COUNT(*) FROM plain WHERE k = 30",
    "CREATE PROCEDURE p(IN x INT) BEGIN SELECT x; SELECT x + 1 AS y, 'z'; UPDATE plain SET v = 'p' WHERE k = x; END",
    "CALL p(2)",
    "CALL p(99)",
    "SELECT DATABASE(), @@session.sql_mode, @@character_set_client, @@collation_connection",
    "SET @v = 42",
    "SELECT @v, @undefined",
    "DO 1",
    "SELECT CAST('x' AS SIGNED)",
    "SHOW WARNINGS",
    "SELECT 1 / 0",
    "SELECT * FROM t FOR UPDATE",
    "SHOW CREATE TABLE plain",
    "SHOW COLUMNS FROM t",
    "EXPLAIN SELECT * FROM t WHERE id = 1",
    "SELECT REPEAT('x', 70000) AS big, REPEAT('y', 300) AS medium",
    "TRUNCATE TABLE plain",
    "DROP TABLE plain",
    "DROP TABLE plain",
    "SELECT * FROM plain",
];

#[tokio::test]
async fn text_protocol_through_idgate_equals_direct() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let a = support::unique("rt_direct");
    let b = support::unique("rt_idgate");
    proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE DATABASE {a}"),
            &format!("CREATE DATABASE {b}"),
        ],
    )
    .await;

    let mut direct = Conn::new(proxy::direct_opts(&tb, 0, Some(&a)))
        .await
        .unwrap();
    let mut through = Conn::new(proxy.opts(Some(&b))).await.unwrap();
    assert_eq!(direct.server_version(), through.server_version());

    let mut mismatches = Vec::new();
    for sql in SCRIPT {
        let want = proxy::run_text(&mut direct, sql, &a).await;
        let got = proxy::run_text(&mut through, sql, &b).await;
        assert!(!want.is_empty(), "{sql}: nothing recorded");
        if want != got {
            mismatches.push(format!("{sql}\n  direct: {want:?}\n  idgate: {got:?}"));
        }
    }
    // Sanity: the script did produce what it is meant to check.
    let all: Vec<Event> = {
        let mut v = Vec::new();
        for sql in ["SELECT 1; SELECT 2", "SELECT * FROM no_such"] {
            v.extend(proxy::run_text(&mut through, sql, &b).await);
        }
        v
    };
    assert!(matches!(all.last(), Some(Event::Err { code: 1146, .. })));

    drop(direct);
    drop(through);
    proxy::admin(
        &tb,
        0,
        &[&format!("DROP DATABASE {a}"), &format!("DROP DATABASE {b}")],
    )
    .await;
    proxy.stop().await;
    assert!(
        mismatches.is_empty(),
        "{} statements differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// The warnings, affected rows and info of particular statements, checked
/// by value (the differential test only checks they are equal).
#[tokio::test]
async fn ok_packet_fields_reach_the_client() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let db = support::unique("rt_ok");
    proxy::admin(&tb, 0, &[&format!("CREATE DATABASE {db}")]).await;
    let mut c = Conn::new(proxy.opts(Some(&db))).await.unwrap();
    c.query_drop("SET SESSION sql_mode = ''").await.unwrap();
    c.query_drop("CREATE TABLE w (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(3))")
        .await
        .unwrap();
    c.query_drop("INSERT INTO w (v) VALUES ('a'), ('b'), ('c')")
        .await
        .unwrap();
    assert_eq!(c.affected_rows(), 3);
    assert_eq!(c.last_insert_id(), Some(1));
    assert_eq!(c.info(), "Records: 3  Duplicates: 0  Warnings: 0");
    c.query_drop("UPDATE w SET v = 'toolong'").await.unwrap();
    assert_eq!(c.affected_rows(), 3);
    assert_eq!(c.get_warnings(), 3);
    assert_eq!(c.info(), "Rows matched: 3  Changed: 3  Warnings: 3");
    let w: Vec<(String, u32, String)> = c.query("SHOW WARNINGS").await.unwrap();
    assert_eq!(w.len(), 3);
    assert_eq!(w[0].1, 1265, "{w:?}");
    drop(c);
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE {db}")]).await;
    proxy.stop().await;
}

#[tokio::test]
async fn change_user_checks_the_password_and_resets_the_session() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let db = support::unique("rt_cu");
    proxy::admin(&tb, 0, &[&format!("CREATE DATABASE {db}")]).await;

    let mut c = Conn::new(proxy.opts(None)).await.unwrap();
    c.query_drop("SET @marker = 'before'").await.unwrap();
    let before: Option<u64> = c.query_first("SELECT CONNECTION_ID()").await.unwrap();
    c.change_user(
        ChangeUserOpts::default()
            .with_user(Some(proxy::USER2.into()))
            .with_pass(Some(proxy::PASSWORD2.into()))
            .with_db_name(Some(db.clone())),
    )
    .await
    .expect("change_user with the right password");
    let (marker, cur_db): (Option<String>, Option<String>) = c
        .query_first("SELECT @marker, DATABASE()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        marker, None,
        "user variables are gone after COM_CHANGE_USER"
    );
    assert_eq!(cur_db.as_deref(), Some(db.as_str()));
    let after: Option<u64> = c.query_first("SELECT CONNECTION_ID()").await.unwrap();
    assert!(before.is_some() && after.is_some());

    // A prepared statement from before the change is gone too.
    c.query_drop("SET @x = 1").await.unwrap();
    c.change_user(ChangeUserOpts::default()).await.unwrap();
    let x: Option<Option<String>> = c.query_first("SELECT @x").await.unwrap();
    assert_eq!(x, Some(None));

    // Wrong password: 1045, then the connection is closed.
    let r = c
        .change_user(
            ChangeUserOpts::default()
                .with_user(Some(proxy::USER.into()))
                .with_pass(Some("wrong".into())),
        )
        .await;
    match r {
        Err(mysql_async::Error::Server(e)) => {
            assert_eq!(e.code, 1045, "{e:?}");
            assert_eq!(e.state, "28000");
        }
        other => panic!("expected 1045, got {other:?}"),
    }
    assert!(
        c.query_drop("SELECT 1").await.is_err(),
        "the session is closed after a refused COM_CHANGE_USER"
    );

    // Unknown user: 1045 as well.
    let mut c = Conn::new(proxy.opts(None)).await.unwrap();
    match c
        .change_user(
            ChangeUserOpts::default()
                .with_user(Some("nobody".into()))
                .with_pass(Some(proxy::PASSWORD.into())),
        )
        .await
    {
        Err(mysql_async::Error::Server(e)) => assert_eq!(e.code, 1045),
        other => panic!("expected 1045, got {other:?}"),
    }
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE {db}")]).await;
    proxy.stop().await;
}

#[tokio::test]
async fn reset_connection_clears_session_state() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let mut c = Conn::new(proxy.opts(None)).await.unwrap();
    // Before any shard connection exists, idgate answers by itself.
    assert!(c.reset().await.unwrap(), "COM_RESET_CONNECTION supported");
    c.query_drop("SET @v = 1, SESSION sql_mode = 'ANSI'")
        .await
        .unwrap();
    let stmt = c.prep("SELECT ?").await.unwrap();
    let id_before: Option<u64> = c.query_first("SELECT CONNECTION_ID()").await.unwrap();
    assert!(c.reset().await.unwrap());
    let (v, mode): (Option<u32>, String) = c
        .query_first("SELECT @v, @@session.sql_mode")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v, None, "user variable reset");
    assert_ne!(mode, "ANSI", "sql_mode reset to the global default");
    let id_after: Option<u64> = c.query_first("SELECT CONNECTION_ID()").await.unwrap();
    assert_eq!(
        id_before, id_after,
        "the reset is done on the same shard connection"
    );
    // The statement prepared before the reset is gone on the server side;
    // mysql_async forgot its cache, so a fresh prepare works.
    drop(stmt);
    let one: Option<u32> = c.exec_first("SELECT ?", (1u32,)).await.unwrap();
    assert_eq!(one, Some(1));
    proxy.stop().await;
}
