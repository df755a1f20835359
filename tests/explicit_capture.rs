//! Ids idgate learns only once the shard stored them (issue 12): INSERT
//! values written as expressions, variables and subqueries, `ON DUPLICATE
//! KEY UPDATE id = ...` and `UPDATE ... SET id = ...`, text and prepared, on
//! an unsharded rule table and on one sharded by another column. Each is
//! read back before the reply (`frontend/capture.rs`): the generator's
//! floor is at or above every stored id when the client gets its answer,
//! and the next generated id is above all of them.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use support::proxy::{self, Proxy};

const RULES: &str = "[[generator]]\nname = \"ids\"\nkind = \"sequence\"\nbatch = 20\n";

/// A schema with `t` (unsharded rule table) and `s` (sharded by `ck` over
/// both shards), on both shards, and a proxy with their rules.
async fn setup(tb: &support::Testbed, tag: &str) -> (String, Proxy) {
    let schema = support::unique(&format!("xc_{tag}"));
    for shard in 0..2 {
        proxy::admin(
            tb,
            shard,
            &[
                &format!("CREATE DATABASE `{schema}`"),
                &format!(
                    "CREATE TABLE `{schema}`.t (id BIGINT PRIMARY KEY, k INT NOT NULL UNIQUE)"
                ),
                &format!("CREATE TABLE `{schema}`.s (id BIGINT PRIMARY KEY, ck INT NOT NULL)"),
            ],
        )
        .await;
    }
    let rules = format!(
        "{RULES}[[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"ids\"\n\n\
         [[table]]\nname = \"{schema}.s\"\ncolumn = \"id\"\ngenerator = \"ids\"\nshard_key = \"ck\"\nsharding = \"mod\"\n"
    );
    let p = Proxy::start_rules(tb, &rules, &format!("/xc-{schema}")).await;
    (schema, p)
}

async fn drop_schema(tb: &support::Testbed, schema: &str) {
    for shard in 0..2 {
        proxy::admin(tb, shard, &[&format!("DROP DATABASE IF EXISTS `{schema}`")]).await;
    }
}

/// The floor the generator observed.
fn floor(p: &Proxy) -> u64 {
    p.generator("ids").stats().floor
}

async fn ids(c: &mut Conn, table: &str) -> Vec<u64> {
    c.query(format!("SELECT id FROM {table} ORDER BY id"))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expressions_variables_and_subqueries_are_read_back() {
    let Some(tb) = support::testbed() else { return };
    let (schema, p) = setup(&tb, "expr").await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("INSERT INTO t (k) VALUES (1)").await.unwrap();
    c.query_drop("SET @v = 500").await.unwrap();
    c.query_drop("INSERT INTO t VALUES (@v, 2)").await.unwrap();
    // The OK packet reports the stored id of an explicit-only statement.
    assert_eq!(c.last_insert_id(), Some(500));
    assert!(floor(&p) >= 500);
    c.query_drop("INSERT INTO t VALUES ((SELECT 600.5), 3), (@v + 100 + 0.2e0, 4)")
        .await
        .unwrap();
    assert_eq!(c.last_insert_id(), Some(600));
    assert!(floor(&p) >= 601, "floor {}", floor(&p));
    c.query_drop("INSERT INTO t (k) VALUES (5)").await.unwrap();
    let next = c.last_insert_id().unwrap();
    assert!(next > 601, "generated {next} after 601 was stored");
    assert_eq!(ids(&mut c, "t").await.len(), 5);

    // A string the server cuts (non-strict): its leading number is stored
    // and observed; the warning stays for SHOW WARNINGS.
    c.query_drop("SET SESSION sql_mode = ''").await.unwrap();
    c.query_drop("SET @w = '900abc'").await.unwrap();
    c.query_drop("INSERT INTO t VALUES (@w, 6)").await.unwrap();
    let warnings: Vec<(String, u32, String)> = c.query("SHOW WARNINGS").await.unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].1, 1265);
    assert!(floor(&p) >= 900);

    // Prepared: an expression around the client's parameter.
    let st = c
        .prep("INSERT INTO t (id, k) VALUES (? + 1000, ?)")
        .await
        .unwrap();
    c.exec_drop(&st, (5, 7)).await.unwrap();
    assert_eq!(c.last_insert_id(), Some(1005));
    assert!(floor(&p) >= 1005);
    c.exec_drop("INSERT INTO t (id, k) VALUES (NULL, 8)", ())
        .await
        .unwrap();
    assert!(c.last_insert_id().unwrap() > 1005);
    drop(c);
    p.stop().await;
    drop_schema(&tb, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_and_upserts_of_the_id_are_read_back() {
    let Some(tb) = support::testbed() else { return };
    let (schema, p) = setup(&tb, "upd").await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    for k in 0..3 {
        c.exec_drop("INSERT INTO t (k) VALUES (?)", (k,))
            .await
            .unwrap();
    }
    c.query_drop("UPDATE t SET id = id + 1000 WHERE k >= 1")
        .await
        .unwrap();
    assert_eq!(c.affected_rows(), 2);
    let stored = ids(&mut c, "t").await;
    let top = *stored.last().unwrap();
    assert!(
        top > 1000 && floor(&p) >= top,
        "{stored:?}, floor {}",
        floor(&p)
    );
    c.query_drop("INSERT INTO t (k) VALUES (10)").await.unwrap();
    assert!(c.last_insert_id().unwrap() > top);

    // ON DUPLICATE KEY UPDATE id = ...: the updated row's new id.
    c.query_drop("INSERT INTO t (k) VALUES (10) ON DUPLICATE KEY UPDATE id = id + 5000")
        .await
        .unwrap();
    let top = *ids(&mut c, "t").await.last().unwrap();
    assert!(top > 5000 && floor(&p) >= top);

    // Prepared UPDATE, every execute read back.
    let st = c.prep("UPDATE t SET id = ? WHERE k = ?").await.unwrap();
    c.exec_drop(&st, (20_000, 0)).await.unwrap();
    assert!(floor(&p) >= 20_000);
    c.exec_drop(&st, (30_000, 1)).await.unwrap();
    assert!(floor(&p) >= 30_000);
    c.query_drop("INSERT INTO t (k) VALUES (11)").await.unwrap();
    assert!(c.last_insert_id().unwrap() > 30_000);

    // On a table sharded by another column, on both shards.
    for ck in 0..4 {
        c.exec_drop("INSERT INTO s (ck) VALUES (?)", (ck,))
            .await
            .unwrap();
    }
    c.query_drop("UPDATE s SET id = id + 100000").await.unwrap();
    assert_eq!(c.affected_rows(), 4);
    let top = *ids(&mut c, "s").await.last().unwrap();
    assert!(top > 100_000 && floor(&p) >= top);
    c.query_drop("INSERT INTO s (id, ck) VALUES ((SELECT 200000), 5), (@nothing + 0 + 200001, 6)")
        .await
        .unwrap_err();
    c.query_drop("INSERT INTO s (id, ck) VALUES ((SELECT 200000), 5), (200001.4, 6)")
        .await
        .unwrap();
    assert_eq!(c.last_insert_id(), Some(200001));
    assert!(floor(&p) >= 200_001);

    // An event whose body touches no rule table is created as usual.
    c.query_drop("CREATE EVENT ev_ok ON SCHEDULE EVERY 1 DAY DO SELECT 1")
        .await
        .unwrap();
    // Refused, naming the table: a multi-table UPDATE of the id, a mix of
    // generated and captured ids on a table sharded by another column, and
    // SQL-level PREPARE of an UPDATE of the id.
    for sql in [
        "UPDATE t JOIN s ON s.ck = t.k SET t.id = 1",
        "INSERT INTO s (id, ck) VALUES ((SELECT 300000), 1), (NULL, 2)",
        "PREPARE x FROM 'UPDATE t SET id = 5'",
        // MariaDB's per-statement variables: what runs under them is not
        // planned (it would store an id idgate never saw) nor routed.
        "SET STATEMENT max_statement_time = 10 FOR INSERT INTO t (id, k) VALUES (900000, 1)",
        "SET STATEMENT max_statement_time = 10 FOR INSERT INTO s (id, ck) VALUES (900000, 1)",
        "SET STATEMENT max_statement_time = 10 FOR UPDATE t SET id = 900001",
        // A stored program or compound statement that updates the id.
        "CREATE PROCEDURE p_upd() UPDATE t SET id = 900002 WHERE k = 1",
        "BEGIN NOT ATOMIC UPDATE t SET id = id + 900000; END",
        "CREATE EVENT ev_ins ON SCHEDULE EVERY 1 DAY DO INSERT INTO t (id, k) VALUES (900003, 1)",
        "ALTER EVENT ev_ok DO INSERT INTO t (id, k) VALUES (900004, 1)",
        // A trigger on the rule table that assigns the id.
        "CREATE TRIGGER trg_id BEFORE INSERT ON t FOR EACH ROW SET NEW.id = NEW.k + 900000",
        "CREATE DEFINER = CURRENT_USER TRIGGER trg_id2 BEFORE UPDATE ON t FOR EACH ROW \
         BEGIN SET @x = 1, NEW.`ID` = 5; END",
        // Dynamic SQL in a stored program: a literal is read and checked,
        // any other source cannot be read before the program runs.
        "CREATE PROCEDURE p_dyn() BEGIN PREPARE q FROM 'INSERT INTO t (id, k) VALUES (900005, 1)'; EXECUTE q; END",
        "CREATE PROCEDURE p_dyn2(sq TEXT) BEGIN PREPARE q FROM sq; EXECUTE q; END",
        "BEGIN NOT ATOMIC EXECUTE IMMEDIATE CONCAT('INSERT INTO t (id, k) ', 'VALUES (900006, 1)'); END",
    ] {
        let e = c.query_drop(sql).await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("1235") || text.contains("not supported"),
            "{sql}: {text}"
        );
    }
    c.query_drop("DROP EVENT ev_ok").await.unwrap();
    // A stored program that updates other columns is created as usual.
    c.query_drop("CREATE PROCEDURE p_ok() UPDATE t SET k = k WHERE k = 1")
        .await
        .unwrap();
    c.query_drop("CALL p_ok()").await.unwrap();
    c.query_drop("DROP PROCEDURE p_ok").await.unwrap();
    // And one whose dynamic SQL is a literal that writes no id.
    c.query_drop("CREATE PROCEDURE p_dyn_ok() BEGIN PREPARE q FROM 'SELECT COUNT(*) INTO @n FROM t'; EXECUTE q; DEALLOCATE PREPARE q; END")
        .await
        .unwrap();
    c.query_drop("CALL p_dyn_ok()").await.unwrap();
    c.query_drop("DROP PROCEDURE p_dyn_ok").await.unwrap();
    // A trigger on it that reads the id or sets other columns is created.
    c.query_drop(
        "CREATE TRIGGER trg_ok BEFORE INSERT ON t FOR EACH ROW \
         BEGIN IF NEW.id = 0 THEN SET NEW.k = NEW.k; END IF; SET @seen = NEW.id; END",
    )
    .await
    .unwrap();
    c.query_drop("DROP TRIGGER trg_ok").await.unwrap();
    // Dynamic SQL whose text is a user variable: the text is checked as
    // a literal would be.
    c.query_drop("SET @q = 'INSERT INTO t (id, k) VALUES (950000, 77)'")
        .await
        .unwrap();
    for sql in ["PREPARE x FROM @q", "EXECUTE IMMEDIATE @q"] {
        let e = c.query_drop(sql).await.unwrap_err();
        assert!(
            matches!(&e, mysql_async::Error::Server(se) if se.code == 1235 && se.message.contains(".t")),
            "{sql}: {e}"
        );
    }
    // An expression of literals, variables and string functions: idgate
    // evaluates it and checks its text; also adjacent literals (which
    // MariaDB joins), under SET STATEMENT, and in an executable comment.
    c.query_drop("SET @v = 'VALUES (950001, 78)'")
        .await
        .unwrap();
    for sql in [
        "PREPARE x FROM CONCAT('INSERT INTO t (id, k) ', @v)",
        "EXECUTE IMMEDIATE CONCAT_WS(' ', 'INSERT INTO t (id, k)', UPPER(@v))",
        "PREPARE x FROM 'INSERT INTO t (id, k) ' 'VALUES (950002, 79)'",
        "EXECUTE IMMEDIATE REPLACE('INSERT INTO t (id, k) VALUES (?, 80)', '?', '950003')",
        "SET STATEMENT max_statement_time = 10 FOR PREPARE x FROM CONCAT('INSERT INTO t (id, k) ', @v)",
        "/*!100000 EXECUTE IMMEDIATE CONCAT('INSERT INTO t (id, k) ', @v) */",
    ] {
        let e = c.query_drop(sql).await.unwrap_err();
        assert!(
            matches!(&e, mysql_async::Error::Server(se) if se.code == 1235 && se.message.contains(".t")),
            "{sql}: {e}"
        );
    }
    // An expression idgate would have to run twice to read (a subquery,
    // a function with effects): refused with the way around it, which
    // then works.
    for sql in [
        "PREPARE x FROM (SELECT 'INSERT INTO t (id, k) VALUES (950004, 81)')",
        "EXECUTE IMMEDIATE CONCAT('SELECT ', RAND())",
    ] {
        let e = c.query_drop(sql).await.unwrap_err();
        assert!(
            matches!(&e, mysql_async::Error::Server(se) if se.code == 1235 && se.message.contains("SET @q")),
            "{sql}: {e}"
        );
    }
    c.query_drop("SET @w = (SELECT 'SELECT COUNT(*) FROM t')")
        .await
        .unwrap();
    c.query_drop("EXECUTE IMMEDIATE @w").await.unwrap();
    // In one query after the statement that sets it, the variable is read
    // too early: refused (the query does not run at all).
    let e = c
        .query_drop(
            "SET @q2 = 'INSERT INTO t (id, k) VALUES (950005, 82)'; PREPARE x FROM @q2; EXECUTE x",
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, mysql_async::Error::Server(se) if se.code == 1235 && se.message.contains("own")),
        "{e}"
    );
    c.query_drop("SET @r = 'SELECT COUNT(*) FROM t'")
        .await
        .unwrap();
    c.query_drop("PREPARE y FROM @r").await.unwrap();
    c.query_drop("EXECUTE y").await.unwrap();
    c.query_drop("EXECUTE IMMEDIATE @r").await.unwrap();
    c.query_drop("EXECUTE IMMEDIATE CONCAT('SELECT COUNT(*) ', 'FROM t')")
        .await
        .unwrap();
    // First in its query, the variable is read right.
    c.query_drop("PREPARE y FROM @r; EXECUTE y; DEALLOCATE PREPARE y")
        .await
        .unwrap();
    c.query_drop("/*!50000 PREPARE y FROM @r */").await.unwrap();
    c.query_drop("/* app */ EXECUTE IMMEDIATE @r")
        .await
        .unwrap();
    for table in ["s", "t"] {
        assert!(ids(&mut c, table).await.iter().all(|&i| i < 900_000));
    }
    let n: Option<u64> = c
        .query_first("SET STATEMENT max_statement_time = 10 FOR SELECT COUNT(*) FROM t")
        .await
        .expect("a read of a table on one shard under SET STATEMENT is forwarded");
    assert!(n.is_some());
    drop(c);
    p.stop().await;
    drop_schema(&tb, &schema).await;
}

/// Ids above 2^53 (snowflake-sized) are read back exactly: an UPDATE of the
/// id, an expression and an upsert each leave the generator's floor at the
/// very id stored, not at a DOUBLE's neighbour of it (the variable of an
/// UPDATE reset to NULL made GREATEST compare as DOUBLE before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_above_2_pow_53_are_read_back_exactly() {
    let Some(tb) = support::testbed() else { return };
    let (schema, p) = setup(&tb, "big").await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("INSERT INTO t (k) VALUES (1)").await.unwrap();
    // Not representable as a DOUBLE (odd, above 2^54).
    let x: u64 = 54_720_574_496_182_273;
    c.query_drop(format!("UPDATE t SET id = {x} WHERE k = 1"))
        .await
        .unwrap();
    // A second UPDATE in the same session (the variable was reset to NULL).
    c.query_drop(format!("UPDATE t SET id = {} WHERE k = 1", x + 2))
        .await
        .unwrap();
    assert_eq!(floor(&p), x + 2);
    c.query_drop(format!("INSERT INTO t VALUES ({}+1, 2)", x + 3))
        .await
        .unwrap();
    assert_eq!(floor(&p), x + 4);
    c.query_drop(format!(
        "INSERT INTO t VALUES (NULL, 2) ON DUPLICATE KEY UPDATE id = {}",
        x + 7
    ))
    .await
    .unwrap();
    assert_eq!(floor(&p), x + 7);
    c.query_drop("INSERT INTO t (k) VALUES (3)").await.unwrap();
    assert!(c.last_insert_id().unwrap() > x + 7);
    let _ = c.disconnect().await;
    p.stop().await;
    drop_schema(&tb, &schema).await;
}

/// Rows a DDL statement brings under a rule table's name (a table filled
/// elsewhere, renamed into it; `CREATE TABLE ... SELECT`; on the sharded
/// table, on every shard): the generator's floor is raised to their
/// highest id, so the next generated id is above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_ddl_brings_under_a_rule_are_observed() {
    let Some(tb) = support::testbed() else { return };
    let (schema, p) = setup(&tb, "adopt").await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    // Filled without idgate seeing the ids (no rule for `legacy`).
    for sql in [
        "CREATE TABLE legacy (id BIGINT PRIMARY KEY, k INT NOT NULL UNIQUE)",
        "INSERT INTO legacy VALUES (700000, 1), (700001, 2)",
        "DROP TABLE t",
        "RENAME TABLE legacy TO t",
    ] {
        c.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    assert!(floor(&p) >= 700_001, "floor {}", floor(&p));
    c.query_drop("INSERT INTO t (k) VALUES (3)").await.unwrap();
    assert!(c.last_insert_id().is_some_and(|id| id > 700_001));
    for sql in [
        "DROP TABLE t",
        "CREATE TABLE t (id BIGINT PRIMARY KEY, k INT NOT NULL UNIQUE) SELECT 800000 AS id, 1 AS k",
    ] {
        c.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    assert!(floor(&p) >= 800_000, "floor {}", floor(&p));
    // The sharded table: a copy filled on the second shard only, renamed
    // into it on both.
    for shard in 0..2 {
        proxy::admin(
            &tb,
            shard,
            &[&format!(
                "CREATE TABLE `{schema}`.s_new (id BIGINT PRIMARY KEY, ck INT NOT NULL)"
            )],
        )
        .await;
    }
    proxy::admin(
        &tb,
        1,
        &[&format!("INSERT INTO `{schema}`.s_new VALUES (900001, 1)")],
    )
    .await;
    for sql in ["DROP TABLE s", "RENAME TABLE s_new TO s"] {
        c.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    assert!(floor(&p) >= 900_001, "floor {}", floor(&p));
    drop(c);
    p.stop().await;
    drop_schema(&tb, &schema).await;
}
