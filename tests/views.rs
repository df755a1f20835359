//! Writes through an updatable view over a rule table (`rules::views`,
//! `frontend/views.rs`): refused with 1235 naming the view and the table,
//! for views made before idgate started, through idgate, on top of other
//! views, and on a shard directly (learned at the next reload). Reads,
//! DELETEs, UPDATEs of other columns and views over other tables pass;
//! a read-only view gets MariaDB's own answer. `SHOW IDGATE VIEWS` lists
//! the guarded ones.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Error};
use support::proxy::{self, Proxy, ADMIN, ADMIN_PASSWORD};

/// A schema with rule table `t` (an AUTO_INCREMENT id: through a view
/// MariaDB would fill it itself, past the generator) and plain table
/// `plain`, on shard 0, with view `pre` over `t` made directly before
/// idgate starts.
async fn setup(tb: &support::Testbed, tag: &str) -> (String, tempfile::TempDir, Proxy) {
    let schema = support::unique(&format!("vw_{tag}"));
    proxy::admin(
        tb,
        0,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &format!(
                "CREATE TABLE `{schema}`.t (id BIGINT PRIMARY KEY AUTO_INCREMENT, k INT NOT NULL)"
            ),
            &format!("CREATE TABLE `{schema}`.plain (id BIGINT PRIMARY KEY AUTO_INCREMENT, k INT)"),
            &format!("CREATE VIEW `{schema}`.pre AS SELECT id, k FROM `{schema}`.t"),
        ],
    )
    .await;
    let dir = tempfile::tempdir().expect("rules dir");
    std::fs::write(
        dir.path().join("a.toml"),
        format!(
            "[[generator]]\nname = \"ids\"\nkind = \"sequence\"\nbatch = 20\n\n\
             [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"ids\"\n"
        ),
    )
    .expect("rule file");
    let p = Proxy::start_rules_dir(tb, dir.path(), &support::unique("/views")).await;
    (schema, dir, p)
}

/// The statement was refused by idgate as a write through `view` to `t`.
fn refused_through(r: Result<(), Error>, view: &str, sql: &str) {
    match r {
        Err(Error::Server(e)) => {
            assert_eq!(e.code, 1235, "{sql}: {}", e.message);
            assert!(
                e.message.contains(&format!(".{view} ")) && e.message.contains(".t"),
                "{sql}: the message names view {view} and table t: {}",
                e.message
            );
        }
        other => panic!("{sql}: refused by idgate, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_ids_through_views_over_rule_tables_are_refused() {
    let Some(tb) = support::testbed() else { return };
    let (schema, _dir, p) = setup(&tb, "refuse").await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("INSERT INTO t (k) VALUES (1)").await.unwrap();
    let first = c.last_insert_id().unwrap();
    // Made through idgate: guarded before the CREATE's reply.
    c.query_drop("CREATE VIEW v AS SELECT id AS oid, k FROM t")
        .await
        .unwrap();
    c.query_drop("CREATE VIEW v2 AS SELECT oid AS top, k FROM v")
        .await
        .unwrap();
    c.query_drop("CREATE ALGORITHM = TEMPTABLE VIEW ro AS SELECT id, k FROM t")
        .await
        .unwrap();
    c.query_drop("CREATE VIEW pv AS SELECT id, k FROM plain")
        .await
        .unwrap();
    // What a DBA sees: the guarded views, each with its table and the
    // columns that show the id.
    let shown: Vec<(String, String, String, String)> = c
        .query_map(
            "SHOW IDGATE VIEWS",
            |(v, t, col, ids, _read): (String, String, String, String, u64)| (v, t, col, ids),
        )
        .await
        .unwrap();
    let t = format!("{schema}.t");
    let want: Vec<(String, String, String, String)> = [("pre", "id"), ("v", "oid"), ("v2", "top")]
        .iter()
        .map(|(v, ids)| {
            (
                format!("{schema}.{v}"),
                t.clone(),
                "id".to_string(),
                ids.to_string(),
            )
        })
        .collect();
    assert_eq!(shown, want);
    for (view, sql) in [
        ("pre", "INSERT INTO pre (k) VALUES (2)".to_string()),
        (
            "pre",
            format!("INSERT INTO `{schema}`.pre (id, k) VALUES (900000, 2)"),
        ),
        ("v", "INSERT INTO v (oid, k) VALUES (900001, 3)".into()),
        ("v", "INSERT INTO v SET k = 3".into()),
        ("v", "REPLACE INTO v (k) VALUES (4)".into()),
        ("v", "INSERT INTO v (k) SELECT k FROM plain".into()),
        ("v2", "INSERT INTO v2 (k) VALUES (5)".into()),
        ("v", "SELECT 1; INSERT INTO v (k) VALUES (6)".into()),
        ("v", "UPDATE v SET oid = 900002 WHERE k = 1".into()),
        ("v", "UPDATE v SET k = 7, oid = oid + 1000".into()),
        ("v2", "UPDATE v2 SET top = 900003".into()),
        ("pre", "UPDATE pre AS x SET x.id = 900004".into()),
        (
            "v",
            "LOAD DATA INFILE '/nonexistent' INTO TABLE v (k)".into(),
        ),
        (
            "v",
            "CREATE PROCEDURE p_v() INSERT INTO v (k) VALUES (8)".into(),
        ),
        ("v", "PREPARE s FROM 'INSERT INTO v (k) VALUES (9)'".into()),
    ] {
        refused_through(c.query_drop(&sql).await, view, &sql);
    }
    // Prepared over the binary protocol, too.
    let r = c.prep("INSERT INTO v (k) VALUES (?)").await.map(|_| ());
    refused_through(r, "v", "COM_STMT_PREPARE INSERT INTO v");
    // Nothing reached the table: the generator's row is the only one.
    let ids: Vec<u64> = c.query("SELECT id FROM t").await.unwrap();
    assert_eq!(ids, vec![first]);
    // What does not write an id passes.
    c.query_drop("UPDATE v SET k = 10 WHERE oid = 1 OR k = 1")
        .await
        .unwrap();
    let seen: Vec<(u64, i32)> = c.query("SELECT oid, k FROM v").await.unwrap();
    assert_eq!(seen, vec![(first, 10)]);
    let top: Vec<u64> = c.query("SELECT top FROM v2").await.unwrap();
    assert_eq!(top, vec![first]);
    c.query_drop("INSERT INTO pv (k) VALUES (11)")
        .await
        .unwrap();
    c.query_drop("DELETE FROM v WHERE k = 10").await.unwrap();
    // A read-only view: MariaDB's own refusal (1471, not insertable-into).
    match c.query_drop("INSERT INTO ro (k) VALUES (12)").await {
        Err(Error::Server(e)) => assert_eq!(e.code, 1471, "{}", e.message),
        other => panic!("MariaDB refuses an INSERT into a TEMPTABLE view: {other:?}"),
    }
    // The rule table itself works as before.
    c.query_drop("INSERT INTO t (k) VALUES (13)").await.unwrap();
    assert!(c.last_insert_id().unwrap() > first);
    drop(c);
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE `{schema}`")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_made_on_a_shard_are_learned_at_reload_and_dropped_ones_forgotten() {
    let Some(tb) = support::testbed() else { return };
    let (schema, _dir, p) = setup(&tb, "learn").await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    // A session that holds a prepared INSERT into `late` before it exists
    // as a guarded view.
    proxy::admin(
        &tb,
        0,
        &[&format!(
            "CREATE TABLE `{schema}`.late (id BIGINT PRIMARY KEY AUTO_INCREMENT, k INT)"
        )],
    )
    .await;
    let stmt = c.prep("INSERT INTO late (k) VALUES (?)").await.unwrap();
    c.exec_drop(&stmt, (1,)).await.unwrap();
    // The table becomes a view over `t`, on the shard directly: idgate
    // cannot know until it reads the views again.
    proxy::admin(
        &tb,
        0,
        &[
            &format!("DROP TABLE `{schema}`.late"),
            &format!("CREATE VIEW `{schema}`.late AS SELECT id, k FROM `{schema}`.t"),
        ],
    )
    .await;
    let mut dba = Conn::new(p.opts_as(ADMIN, ADMIN_PASSWORD, Some(&schema)))
        .await
        .unwrap();
    dba.query_drop("IDGATE RELOAD RULES").await.unwrap();
    refused_through(
        c.query_drop("INSERT INTO late (k) VALUES (2)").await,
        "late",
        "INSERT INTO late after the reload",
    );
    // The statement prepared before is planned again on the new rules.
    refused_through(
        c.exec_drop(&stmt, (3,)).await,
        "late",
        "a prepared INSERT into late after the reload",
    );
    // Dropped and made a table again through idgate: writes pass.
    c.query_drop("DROP VIEW late").await.unwrap();
    c.query_drop("CREATE TABLE late (id BIGINT PRIMARY KEY AUTO_INCREMENT, k INT)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO late (k) VALUES (4)")
        .await
        .unwrap();
    let ts: Vec<u64> = c.query("SELECT id FROM t").await.unwrap();
    assert!(ts.is_empty(), "nothing reached t through late: {ts:?}");
    drop(c);
    drop(dba);
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE `{schema}`")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_over_a_sharded_table_are_refused_not_answered_from_one_shard() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("vw_sharded");
    // `orders` sharded by id over both shards; views made on each shard
    // directly (idgate itself refuses CREATE VIEW over a sharded table).
    for shard in 0..2 {
        proxy::admin(
            &tb,
            shard,
            &[
                &format!("CREATE DATABASE `{schema}`"),
                &format!("CREATE TABLE `{schema}`.orders (id BIGINT PRIMARY KEY, k INT NOT NULL)"),
                &format!("CREATE VIEW `{schema}`.sv AS SELECT id, k FROM `{schema}`.orders"),
                &format!(
                    "CREATE VIEW `{schema}`.agg AS SELECT COUNT(*) AS n FROM `{schema}`.orders"
                ),
                &format!("CREATE VIEW `{schema}`.sv2 AS SELECT k FROM `{schema}`.sv"),
            ],
        )
        .await;
    }
    let dir = tempfile::tempdir().expect("rules dir");
    std::fs::write(
        dir.path().join("a.toml"),
        format!(
            "[[generator]]\nname = \"ids\"\nkind = \"sequence\"\n\n\
             [[table]]\nname = \"{schema}.orders\"\ncolumn = \"id\"\ngenerator = \"ids\"\n\
             shard_key = \"id\"\nsharding = \"mod\"\n"
        ),
    )
    .expect("rule file");
    let p = Proxy::start_rules_dir(&tb, dir.path(), &support::unique("/views-sh")).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("INSERT INTO orders (k) VALUES (1), (2), (3), (4)")
        .await
        .unwrap();
    for (view, sql) in [
        ("sv", "SELECT * FROM sv"),
        ("agg", "SELECT n FROM agg"),
        ("sv2", "SELECT COUNT(*) FROM sv2"),
        ("sv", "UPDATE sv SET k = k + 1"),
        ("sv", "DELETE FROM sv WHERE k = 1"),
    ] {
        match c.query_drop(sql).await {
            Err(Error::Server(e)) => {
                assert_eq!(e.code, 1235, "{sql}: {}", e.message);
                assert!(
                    e.message.contains(&format!(
                        "view {schema}.{view} reads sharded table {schema}.orders"
                    )),
                    "{sql}: {}",
                    e.message
                );
            }
            other => panic!("{sql}: refused, got {other:?}"),
        }
    }
    // Writes of ids through the updatable one are refused as for any guarded view.
    match c.query_drop("INSERT INTO sv (k) VALUES (5)").await {
        Err(Error::Server(e)) => assert!(
            e.code == 1235 && e.message.contains("through view") && e.message.contains(".orders"),
            "{}",
            e.message
        ),
        other => panic!("INSERT INTO sv: refused, got {other:?}"),
    }
    // The table itself answers across shards; the views can be dropped.
    let n: Option<u64> = c.query_first("SELECT COUNT(*) FROM orders").await.unwrap();
    assert_eq!(n, Some(4));
    c.query_drop("DROP VIEW sv2").await.unwrap();
    drop(c);
    for shard in 0..2 {
        proxy::admin(&tb, shard, &[&format!("DROP DATABASE `{schema}`")]).await;
    }
}
