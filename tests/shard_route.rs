//! Sharded routing through idgate on the test bed's two real MariaDB shards
//! (issue 5): rows land where the rule says, keyed statements touch only
//! their shard, scattered reads equal the same query on one unsharded copy,
//! multi-shard writes are atomic, transactions keep their writes on one
//! shard, DDL runs on every shard.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use std::sync::atomic::Ordering;
use support::proxy::{self, Proxy};

fn rules(schema: &str) -> String {
    format!(
        "[[generator]]\nname = \"seq\"\nkind = \"sequence\"\nbatch = 50\n\n\
         [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"id\"\nsharding = \"mod\"\n\n\
         [[table]]\nname = \"{schema}.h\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"id\"\nsharding = \"hash\"\n\n\
         [[table]]\nname = \"{schema}.ref\"\ncolumn = \"id\"\ngenerator = \"seq\"\nbroadcast = true\n\n\
         [[table]]\nname = \"{schema}.up\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"id\"\nsharding = \"mod\"\n\n\
         [[table]]\nname = \"{schema}.solo\"\ncolumn = \"id\"\ngenerator = \"seq\"\n"
    )
}

const TABLE: &str = "(id BIGINT UNSIGNED PRIMARY KEY, w VARCHAR(32) NOT NULL, n INT NOT NULL, d DECIMAL(10,2) NULL)";

/// A proxy with the sharded rules, the schema on both shards and the tables
/// created through idgate (DDL on a sharded table runs on every shard).
async fn setup(tb: &support::Testbed) -> (Proxy, String) {
    let schema = support::unique("shard");
    proxy::create_schema(tb, &schema).await;
    let p = Proxy::start_rules(tb, &rules(&schema), &format!("/{schema}")).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    for t in ["t", "h", "ref"] {
        c.query_drop(format!("CREATE TABLE {t} {TABLE}"))
            .await
            .unwrap();
    }
    // The unsharded copy scattered reads are compared with.
    c.query_drop(format!("CREATE TABLE plain {TABLE}"))
        .await
        .unwrap();
    (p, schema)
}

async fn direct(tb: &support::Testbed, shard: usize, schema: &str) -> Conn {
    Conn::new(proxy::direct_opts(tb, shard, Some(schema)))
        .await
        .unwrap()
}

async fn ids_on(tb: &support::Testbed, shard: usize, schema: &str, table: &str) -> Vec<u64> {
    let mut c = direct(tb, shard, schema).await;
    let ids = c
        .query(format!("SELECT id FROM {table} ORDER BY id"))
        .await
        .unwrap();
    let _ = c.disconnect().await;
    ids
}

#[tokio::test]
async fn rows_land_where_the_rule_says() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    // Single rows with generated ids, a multi-row INSERT split across the
    // shards, explicit ids, INSERT ... SET.
    for i in 0..20 {
        c.exec_drop("INSERT INTO t (w, n) VALUES (?, ?)", ("p", i))
            .await
            .unwrap();
        c.query_drop(format!("INSERT INTO t (w, n) VALUES ('s', {i})"))
            .await
            .unwrap();
    }
    let r = c
        .query_iter("INSERT INTO t (w, n) VALUES ('m', 1), ('m', 2), ('m', 3), ('m', 4), ('m', 5)")
        .await
        .unwrap();
    let (affected, first) = (r.affected_rows(), r.last_insert_id());
    drop(r);
    assert_eq!(affected, 5);
    let first = first.expect("a last insert id");
    let lid: u64 = c
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        lid, first,
        "LAST_INSERT_ID() is the first generated id of the split INSERT"
    );
    c.query_drop("INSERT INTO t (id, w, n) VALUES (1000001, 'x', 0), (1000002, 'x', 0)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO t SET w = 'set', n = 9")
        .await
        .unwrap();
    let mut all = Vec::new();
    for shard in 0..2 {
        let ids = ids_on(&tb, shard, &schema, "t").await;
        assert!(!ids.is_empty(), "shard {shard} got rows");
        for id in &ids {
            assert_eq!((*id % 2) as usize, shard, "id {id} is on shard {shard}");
        }
        all.extend(ids);
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "no row on two shards");
    assert_eq!(n, 20 * 2 + 5 + 2 + 1, "no row lost");
    // The hash table: placement is CRC32(id) % 2, as MariaDB computes it.
    for _ in 0..20 {
        c.query_drop("INSERT INTO h (w, n) VALUES ('a', 1), ('b', 2)")
            .await
            .unwrap();
    }
    for shard in 0..2 {
        let mut d = direct(&tb, shard, &schema).await;
        let wrong: u64 = d
            .query_first(format!(
                "SELECT COUNT(*) FROM h WHERE CRC32(id) % 2 <> {shard}"
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(wrong, 0, "hash placement on shard {shard}");
        let _ = d.disconnect().await;
    }
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test]
async fn keyed_statements_touch_only_their_shard() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    {
        let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
        c.query_drop("INSERT INTO t (id, w, n) VALUES (10, 'a', 1), (11, 'b', 2), (12, 'c', 3), (13, 'd', 4)")
            .await
            .unwrap();
    }
    // The driver's own queries at connect go to the default shard: count
    // from after them.
    let mut c = Conn::new(p.opts(None)).await.unwrap();
    c.query_drop("SELECT 1").await.unwrap();
    let before: Vec<u64> = p.shard_connects();
    let w: Option<String> = c
        .query_first(format!("SELECT w FROM `{schema}`.t WHERE id = 11"))
        .await
        .unwrap();
    assert_eq!(w.as_deref(), Some("b"));
    let ws: Vec<String> = c
        .query(format!(
            "SELECT w FROM `{schema}`.t WHERE id IN (13, 11) ORDER BY id"
        ))
        .await
        .unwrap();
    assert_eq!(ws, ["b", "d"]);
    let stmt = c
        .prep(format!("SELECT w FROM `{schema}`.t WHERE id = ?"))
        .await
        .unwrap();
    let w: Option<String> = c.exec_first(&stmt, (13,)).await.unwrap();
    assert_eq!(w.as_deref(), Some("d"));
    c.query_drop(format!("UPDATE `{schema}`.t SET n = n + 10 WHERE id = 13"))
        .await
        .unwrap();
    c.exec_drop(format!("DELETE FROM `{schema}`.t WHERE id = ?"), (11,))
        .await
        .unwrap();
    let after: Vec<u64> = p.shard_connects();
    // With multiplexing (IDGATE_TEST_MULTIPLEX=1) a session takes a
    // connection for every statement, and a prepare goes to the first
    // shard: the count says nothing of routing then.
    if support::backend_extra().is_empty() {
        assert_eq!(
            after[0], before[0],
            "keyed statements on odd ids opened no connection to shard s0"
        );
        assert_eq!(after[1], before[1] + 1, "one connection to s1");
    }
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [13]);
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [10, 12]);
    // Changing the shard key is refused.
    let err = c
        .query_drop(format!("UPDATE `{schema}`.t SET id = 15 WHERE id = 13"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("shard key"), "{err}");
    // MariaDB's per-statement variables: what runs under them is not
    // routed, so it is refused rather than run on the first shard only.
    for sql in [
        "SET STATEMENT max_statement_time = 10 FOR SELECT w FROM t WHERE id = 13",
        "SET STATEMENT max_statement_time = 10 FOR DELETE FROM t",
        "SET STATEMENT max_statement_time = 10 FOR INSERT INTO t (id, w, n) VALUES (21, 'x', 1)",
    ] {
        let sql = sql.replace(" t", &format!(" `{schema}`.t"));
        let err = c.query_drop(&sql).await.unwrap_err();
        assert!(
            matches!(&err, mysql_async::Error::Server(e)
                if e.code == 1235 && e.message.contains("SET STATEMENT") && e.message.contains("sharded table t ")),
            "{sql}: {err}"
        );
        let err = c.prep(&sql).await.map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("SET STATEMENT"), "{sql}: {err}");
    }
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [13]);
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [10, 12]);
    // On a table without rules it runs once, on the default shard, even
    // with the session's connection to s1 open (a session `SET` reaches
    // every open shard; `SET STATEMENT ... FOR` is not one).
    for shard in [0, 1] {
        direct(&tb, shard, &schema)
            .await
            .query_drop("CREATE TABLE dup (id BIGINT UNSIGNED PRIMARY KEY)")
            .await
            .unwrap();
    }
    let w: Option<String> = c
        .query_first(format!("SELECT w FROM `{schema}`.t WHERE id = 13"))
        .await
        .unwrap();
    assert_eq!(w.as_deref(), Some("d"));
    c.query_drop(format!(
        "SET STATEMENT max_statement_time = 10 FOR INSERT INTO `{schema}`.dup VALUES (1)"
    ))
    .await
    .unwrap();
    assert_eq!(ids_on(&tb, 0, &schema, "dup").await, [1]);
    assert!(ids_on(&tb, 1, &schema, "dup").await.is_empty());
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test]
async fn scattered_reads_equal_one_unsharded_copy() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    let mut values = Vec::new();
    for i in 0..60u64 {
        let d = if i % 7 == 0 {
            "NULL".to_string()
        } else {
            format!("{}.{:02}", i * 3 % 17, i % 100)
        };
        values.push(format!(
            "({}, 'w{}', {}, {d})",
            i + 1,
            (i * 37) % 23,
            (i * 13) % 29
        ));
    }
    let rows = values.join(", ");
    c.query_drop(format!("INSERT INTO t (id, w, n, d) VALUES {rows}"))
        .await
        .unwrap();
    proxy::admin(
        &tb,
        0,
        &[&format!(
            "INSERT INTO `{schema}`.plain (id, w, n, d) VALUES {rows}"
        )],
    )
    .await;
    for q in [
        "SELECT id, w FROM {T} ORDER BY id",
        "SELECT id, n FROM {T} ORDER BY n DESC, id LIMIT 7",
        "SELECT id, n FROM {T} ORDER BY n, id LIMIT 5 OFFSET 11",
        "SELECT id, n FROM {T} ORDER BY n, id LIMIT 11, 5",
        "SELECT id, d FROM {T} ORDER BY d, id LIMIT 9",
        "SELECT id, d FROM {T} ORDER BY d DESC, id",
        "SELECT * FROM {T} WHERE n > 10 ORDER BY w, id LIMIT 20",
        "SELECT COUNT(*), SUM(n), MIN(w), MAX(d), SUM(d) FROM {T}",
        "SELECT COUNT(*) FROM {T} WHERE n > 100",
        "SELECT MAX(id) FROM {T} WHERE id < 30",
    ] {
        let sharded: Vec<Row> = c.query(q.replace("{T}", "t")).await.unwrap();
        let plain: Vec<Row> = c.query(q.replace("{T}", "plain")).await.unwrap();
        let show = |rows: &[Row]| -> Vec<Vec<mysql_async::Value>> {
            rows.iter().map(|r| r.clone().unwrap()).collect()
        };
        assert_eq!(show(&sharded), show(&plain), "{q}");
        // The same through the binary protocol (with an OFFSET, the shards
        // prepared `LIMIT ?, ?` and idgate binds `0, offset + count`).
        let sharded: Vec<Row> = c.exec(q.replace("{T}", "t"), ()).await.unwrap();
        let plain: Vec<Row> = c.exec(q.replace("{T}", "plain"), ()).await.unwrap();
        assert_eq!(show(&sharded), show(&plain), "prepared {q}");
    }
    // LIMIT numbers bound as parameters (as drivers and ORMs send them),
    // scattered and on one shard, beside other parameters.
    let show = |rows: Vec<Row>| -> Vec<Vec<mysql_async::Value>> {
        rows.into_iter().map(|r| r.unwrap()).collect()
    };
    for (q, params) in [
        ("SELECT id, n FROM {T} ORDER BY n, id LIMIT ?", vec![7u64]),
        (
            "SELECT id, n FROM {T} ORDER BY n, id LIMIT ?, ?",
            vec![11, 5],
        ),
        (
            "SELECT id, n FROM {T} ORDER BY n, id LIMIT ? OFFSET ?",
            vec![5, 11],
        ),
        (
            "SELECT id, n FROM {T} ORDER BY n, id LIMIT 5 OFFSET ?",
            vec![58],
        ),
        (
            "SELECT id, n FROM {T} ORDER BY n, id LIMIT ? OFFSET 3",
            vec![0],
        ),
        (
            "SELECT id, w FROM {T} WHERE n > ? ORDER BY w DESC, id LIMIT ? OFFSET ? FOR UPDATE",
            vec![3, 4, 6],
        ),
        (
            "SELECT id, w FROM {T} WHERE id IN (?, ?, ?) ORDER BY id LIMIT ?, ?",
            vec![4, 8, 9, 1, 1],
        ),
        (
            "SELECT id, w FROM {T} WHERE id = ? LIMIT ?, ?",
            vec![8, 0, 1],
        ),
        (
            "SELECT id, w FROM {T} WHERE id = ? LIMIT ?, ?",
            vec![8, 1, 1],
        ),
        ("SELECT COUNT(*) FROM {T} WHERE n > ? LIMIT ?", vec![5, 1]),
    ] {
        let sharded: Vec<Row> = c.exec(q.replace("{T}", "t"), params.clone()).await.unwrap();
        let plain: Vec<Row> = c
            .exec(q.replace("{T}", "plain"), params.clone())
            .await
            .unwrap();
        assert_eq!(show(sharded), show(plain), "prepared {q} with {params:?}");
    }
    let stmt = c
        .prep("SELECT id FROM t ORDER BY id LIMIT ? OFFSET ?")
        .await
        .unwrap();
    assert_eq!(
        stmt.num_params(),
        2,
        "the client is told its own parameters"
    );
    let err = c.exec_drop(&stmt, (-1i64, 0)).await.unwrap_err();
    assert!(err.to_string().contains("1210"), "{err}");
    let ids: Vec<u64> = c.exec(&stmt, (2, 3)).await.unwrap();
    assert_eq!(ids, [4, 5]);
    // Unordered scatter: the same rows (in shard order), text and binary.
    let mut all: Vec<u64> = c.query("SELECT id FROM t").await.unwrap();
    all.sort_unstable();
    assert_eq!(all, (1..=60).collect::<Vec<u64>>());
    let mut all: Vec<(u64, String)> = c
        .exec("SELECT id, w FROM t WHERE n >= ?", (0,))
        .await
        .unwrap();
    all.sort_unstable();
    assert_eq!(all.len(), 60);
    assert_eq!(all[0].0, 1);
    // What cannot be answered across shards is refused, with the reason.
    for (q, why) in [
        ("SELECT n, COUNT(*) FROM t GROUP BY n", "GROUP BY"),
        (
            "SELECT * FROM t JOIN h ON t.id = h.id",
            "joins sharded tables",
        ),
    ] {
        let err = c.query_drop(q).await.unwrap_err();
        assert!(err.to_string().contains(why), "{q}: {err}");
    }
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test]
async fn multi_shard_writes_are_atomic() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    // A row only shard s1 has makes the s1 part of the next INSERT fail.
    proxy::admin(
        &tb,
        1,
        &[&format!(
            "INSERT INTO `{schema}`.t VALUES (101, 'x', 0, NULL)"
        )],
    )
    .await;
    let err = c
        .query_drop("INSERT INTO t (id, w, n) VALUES (100, 'a', 1), (101, 'b', 2), (102, 'c', 3)")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("s1"),
        "the error names the shard: {err}"
    );
    assert!(
        ids_on(&tb, 0, &schema, "t").await.is_empty(),
        "s0's part was rolled back"
    );
    // RETURNING rows from several shards cannot be combined: refused, and
    // rolled back everywhere.
    let err = c
        .query_drop("INSERT INTO t (id, w, n) VALUES (300, 'a', 1), (301, 'b', 2) RETURNING id")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("RETURNING"), "{err}");
    assert!(ids_on(&tb, 0, &schema, "t").await.is_empty());
    // Unkeyed UPDATE and DELETE run on both shards, atomically.
    c.query_drop("INSERT INTO t (id, w, n) VALUES (200, 'a', 1), (201, 'b', 2), (202, 'c', 3)")
        .await
        .unwrap();
    let r = c
        .query_iter("UPDATE t SET n = n + 1 WHERE n > 0")
        .await
        .unwrap();
    assert_eq!(
        r.affected_rows(),
        3,
        "200..202 on both shards (101 has n = 0)"
    );
    drop(r);
    // The same through prepared statements: an execute on both shards.
    c.exec_drop("UPDATE t SET n = n + ? WHERE n > 0", (10,))
        .await
        .unwrap();
    assert_eq!(c.affected_rows(), 3);
    let n: Option<i64> = c
        .exec_first("SELECT SUM(n) FROM t WHERE id >= ?", (200,))
        .await
        .unwrap();
    assert_eq!(n, Some((1 + 1 + 10) + (2 + 1 + 10) + (3 + 1 + 10)));
    let r = c.query_iter("DELETE FROM t WHERE id >= 200").await.unwrap();
    assert_eq!(r.affected_rows(), 3);
    drop(r);
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [101]);
    // A broadcast table gets every row on both shards; the client is told
    // what one copy did (as with one server), not the sum over the copies.
    let r = c
        .query_iter("INSERT INTO ref (w, n) VALUES ('r', 1), ('r', 2)")
        .await
        .unwrap();
    assert_eq!(r.affected_rows(), 2, "two rows inserted");
    assert_eq!(
        r.info().to_string(),
        "Records: 2  Duplicates: 0  Warnings: 0"
    );
    drop(r);
    assert_eq!(
        ids_on(&tb, 0, &schema, "ref").await,
        ids_on(&tb, 1, &schema, "ref").await
    );
    assert_eq!(ids_on(&tb, 0, &schema, "ref").await.len(), 2);
    let n: u64 = c
        .query_first("SELECT COUNT(*) FROM ref")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 2, "reads of a broadcast table come from one shard");
    // Prepared: the same execute on both copies, one row reported, its id
    // the session's LAST_INSERT_ID().
    let ins = c
        .prep("INSERT INTO ref (w, n) VALUES (?, ?)")
        .await
        .unwrap();
    c.exec_drop(&ins, ("p", 3)).await.unwrap();
    assert_eq!(c.affected_rows(), 1);
    let id = c.last_insert_id().expect("the generated id");
    let lid: u64 = c
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lid, id);
    for shard in 0..2 {
        assert!(
            ids_on(&tb, shard, &schema, "ref").await.contains(&id),
            "shard {shard} has {id}"
        );
    }
    c.query_drop(format!("DELETE FROM ref WHERE id = {id}"))
        .await
        .unwrap();
    let r = c.query_iter("UPDATE ref SET n = n + 10").await.unwrap();
    assert_eq!(r.affected_rows(), 2, "two rows updated");
    drop(r);
    let stmt = c.prep("UPDATE ref SET w = ? WHERE n = ?").await.unwrap();
    c.exec_drop(&stmt, ("s", 11)).await.unwrap();
    assert_eq!(c.affected_rows(), 1, "one row updated (prepared)");
    let r = c.query_iter("DELETE FROM ref WHERE n = 12").await.unwrap();
    assert_eq!(r.affected_rows(), 1, "one row deleted");
    drop(r);
    for shard in 0..2 {
        let mut d = direct(&tb, shard, &schema).await;
        let rows: Vec<(String, i64)> = d.query("SELECT w, n FROM ref").await.unwrap();
        assert_eq!(rows, [("s".to_string(), 11)], "shard {shard}");
        let _ = d.disconnect().await;
    }
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test]
async fn savepoints_roll_back_on_every_shard() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    let ins = |id: u64| format!("INSERT INTO t (id, w, n) VALUES ({id}, 'x', 1)");
    // XA transaction: s1 joins after the savepoint and gets it then.
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop(ins(2)).await.unwrap();
    c.query_drop("SAVEPOINT a").await.unwrap();
    c.query_drop(ins(3)).await.unwrap();
    c.query_drop(ins(4)).await.unwrap();
    c.query_drop("SAVEPOINT b").await.unwrap();
    c.query_drop(ins(5)).await.unwrap();
    c.query_drop("ROLLBACK TO SAVEPOINT b").await.unwrap();
    c.query_drop(ins(7)).await.unwrap();
    c.query_drop("ROLLBACK WORK TO a").await.unwrap();
    // b went with the rollback to a; a stays.
    let err = c.query_drop("ROLLBACK TO SAVEPOINT b").await.unwrap_err();
    assert!(
        err.to_string().contains("1305") || err.to_string().contains("does not exist"),
        "{err}"
    );
    c.query_drop(ins(9)).await.unwrap();
    c.query_drop("RELEASE SAVEPOINT a").await.unwrap();
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [2]);
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [9]);
    // s1 in the transaction before the savepoint: it is set there too.
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop(ins(21)).await.unwrap();
    c.query_drop("SAVEPOINT c").await.unwrap();
    c.query_drop(ins(23)).await.unwrap();
    c.query_drop(ins(24)).await.unwrap();
    c.query_drop("ROLLBACK TO SAVEPOINT c").await.unwrap();
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [2]);
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [9, 21]);
    // autocommit = 0: the write shard joins after the savepoint.
    c.query_drop("SET autocommit = 0").await.unwrap();
    c.query_drop("SAVEPOINT s").await.unwrap();
    c.query_drop(ins(11)).await.unwrap();
    c.query_drop("ROLLBACK TO SAVEPOINT s").await.unwrap();
    c.query_drop(ins(13)).await.unwrap();
    c.query_drop("COMMIT").await.unwrap();
    c.query_drop("SET autocommit = 1").await.unwrap();
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [9, 13, 21]);
    // Tagged by a SQL commenter: the same statements.
    let tag = " /* controller='orders',traceparent='00-1-2-01' */";
    c.query_drop(format!("BEGIN{tag}")).await.unwrap();
    c.query_drop(format!("{}{tag}", ins(30))).await.unwrap();
    c.query_drop(format!("SAVEPOINT d{tag}")).await.unwrap();
    c.query_drop(format!("{}{tag}", ins(31))).await.unwrap();
    c.query_drop(format!("{}{tag}", ins(33))).await.unwrap();
    c.query_drop(format!("ROLLBACK TO SAVEPOINT d{tag}"))
        .await
        .unwrap();
    c.query_drop(format!("{}{tag}", ins(35))).await.unwrap();
    c.query_drop(format!("ROLLBACK{tag}")).await.unwrap();
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [2]);
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [9, 13, 21]);
    // Outside a transaction the default shard answers, as MariaDB does.
    c.query_drop("SAVEPOINT z").await.unwrap();
    let err = c.query_drop("ROLLBACK TO SAVEPOINT z").await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test]
async fn transactions_across_shards_commit_atomically() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    // BEGIN ... COMMIT with writes on both shards: one XA transaction.
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("INSERT INTO t (id, w, n) VALUES (2, 'a', 1)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO t (id, w, n) VALUES (3, 'b', 1)")
        .await
        .unwrap();
    // The transaction sees its own rows on both shards; others do not yet.
    let n: u64 = c
        .query_first("SELECT COUNT(*) FROM t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 2);
    assert!(
        ids_on(&tb, 1, &schema, "t").await.is_empty(),
        "not committed yet"
    );
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [2]);
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [3]);
    // ROLLBACK reaches every shard the transaction wrote to.
    c.query_drop("START TRANSACTION").await.unwrap();
    c.query_drop("INSERT INTO t (id, w, n) VALUES (5, 'd', 1)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO t (id, w, n) VALUES (6, 'e', 1)")
        .await
        .unwrap();
    c.query_drop("ROLLBACK").await.unwrap();
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [2]);
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [3]);
    // A statement on several shards inside the transaction is atomic on its
    // own: the duplicate on s1 undoes its s0 part, the transaction goes on.
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("INSERT INTO t (id, w, n) VALUES (10, 'f', 1)")
        .await
        .unwrap();
    let err = c
        .query_drop("INSERT INTO t (id, w, n) VALUES (14, 'g', 1), (3, 'dup', 1)")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("s1"), "{err}");
    c.query_drop("INSERT INTO t (id, w, n) VALUES (16, 'h', 1), (17, 'i', 1)")
        .await
        .unwrap();
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [2, 10, 16]);
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [3, 17]);
    // autocommit = 0 runs plain transactions: their writes stay on one shard.
    c.query_drop("SET autocommit = 0").await.unwrap();
    c.query_drop("INSERT INTO t (id, w, n) VALUES (7, 'e', 1)")
        .await
        .unwrap();
    let err = c
        .query_drop("INSERT INTO t (id, w, n) VALUES (8, 'f', 1)")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("already wrote"), "{err}");
    c.query_drop("COMMIT").await.unwrap();
    c.query_drop("SET autocommit = 1").await.unwrap();
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [3, 7, 17]);
    // So does START TRANSACTION with options (XA takes none).
    c.query_drop("START TRANSACTION READ WRITE").await.unwrap();
    c.query_drop("INSERT INTO t (id, w, n) VALUES (20, 'j', 1)")
        .await
        .unwrap();
    let err = c
        .query_drop("INSERT INTO t (id, w, n) VALUES (21, 'k', 1)")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("already wrote"), "{err}");
    c.query_drop("ROLLBACK").await.unwrap();
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test]
async fn ddl_runs_on_every_shard_and_names_the_failing_one() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("ALTER TABLE t ADD COLUMN extra INT NULL")
        .await
        .unwrap();
    for shard in 0..2 {
        let mut d = direct(&tb, shard, &schema).await;
        let cols: Vec<String> = d
            .query(format!(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{schema}' AND TABLE_NAME = 't' AND COLUMN_NAME = 'extra'"
            ))
            .await
            .unwrap();
        assert_eq!(cols, ["extra"], "shard {shard}");
        let _ = d.disconnect().await;
    }
    proxy::admin(
        &tb,
        1,
        &[&format!("ALTER TABLE `{schema}`.h ADD COLUMN only_s1 INT")],
    )
    .await;
    let err = c
        .query_drop("ALTER TABLE h ADD COLUMN only_s1 INT")
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("shard s1") && msg.contains("already ran on shard s0"),
        "{msg}"
    );
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test]
async fn a_shard_that_is_down_fails_only_what_needs_it() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("sharddown");
    proxy::admin(&tb, 0, &[&format!("CREATE DATABASE `{schema}`")]).await;
    proxy::admin(&tb, 0, &[&format!("CREATE TABLE `{schema}`.t {TABLE}")]).await;
    // s1 points at a port nobody listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let mut text = proxy::config_text_etcd(&tb, &format!("/{schema}"));
    text = text.replace(&tb.shards[1], &dead_addr);
    let cfg = idgate::config::Config::parse(&text, "test").unwrap();
    let p = Proxy::start_config_rules(cfg, &rules(&schema)).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    // Rows of shard s0 go in.
    c.query_drop("INSERT INTO t (id, w, n) VALUES (2, 'a', 1), (4, 'b', 1)")
        .await
        .unwrap();
    // A write that needs s1 too fails, names s1, and leaves nothing on s0.
    let err = c
        .query_drop("INSERT INTO t (id, w, n) VALUES (6, 'c', 1), (7, 'd', 1)")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("s1"), "{err}");
    // A scattered read fails the same way; a keyed one still works.
    let err = c.query_drop("SELECT * FROM t").await.unwrap_err();
    assert!(err.to_string().contains("s1"), "{err}");
    let n: Option<u64> = c.query_first("SELECT n FROM t WHERE id = 4").await.unwrap();
    assert_eq!(n, Some(1));
    drop(c);
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [2, 4]);
    p.stop().await;
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE IF EXISTS `{schema}`")]).await;
}

/// Snowflake ids placed by `id mod 2`: rows inserted one at a time, with
/// the clock moving between them (the low rate at which other proxies put
/// every row on one shard), and in bulk, spread evenly over both shards.
///
/// The allocator reads a fake clock moved by hand (node 0: the first in a
/// fresh etcd prefix), so the ids, and how they spread, are the same in
/// every run: no machine's speed or luck decides them.
#[tokio::test]
async fn snowflake_ids_spread_over_the_shards_at_low_and_high_rates() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("snowspread");
    proxy::create_schema(&tb, &schema).await;
    let rules = format!(
        "[[generator]]\nname = \"snow\"\nkind = \"snowflake\"\nepoch = \"2026-01-01T00:00:00Z\"\n\n\
         [[table]]\nname = \"{schema}.e\"\ncolumn = \"id\"\ngenerator = \"snow\"\nshard_key = \"id\"\nsharding = \"mod\"\n"
    );
    let clock = std::sync::Arc::new(idgate::idgen::FakeClock::new(
        idgate::idgen::parse_rfc3339_ms("2026-06-01T00:00:00Z").expect("date"),
    ));
    let p = Proxy::start_rules_clock(&tb, &rules, &format!("/{schema}"), clock.clone()).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop(format!("CREATE TABLE e {TABLE}"))
        .await
        .unwrap();
    // Low rate: one row, then two millisecond ticks. The generator reads
    // the tick from a cache its ticker task refreshes every millisecond:
    // sleeping longer than that, then yielding (the time driver runs, and
    // the ticker before this task), lets it see the new tick first.
    let snow = p.generator("snow");
    let mut fresh = 0;
    for i in 0..200 {
        let predicted = snow.stats().next_id;
        c.query_drop(format!("INSERT INTO e (w, n) VALUES ('low', {i})"))
            .await
            .unwrap();
        fresh += usize::from(c.last_insert_id() == Some(predicted));
        clock.advance(2);
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        tokio::task::yield_now().await;
    }
    eprintln!("low rate: {fresh} of 200 ids at a new tick");
    // High rate: 1,000 rows in multi-row INSERTs, one per tick.
    for _ in 0..10 {
        let rows = vec!["('high', 0)"; 100].join(", ");
        c.query_drop(format!("INSERT INTO e (w, n) VALUES {rows}"))
            .await
            .unwrap();
        clock.advance(1);
    }
    // The spread itself is measured over 30,000 ids by a unit test
    // (`idgen::snowflake` tests: every shard within 5%, at one id per tick
    // up to full ticks). Here only a gross failure (every row on one
    // shard, as before the sequence start was hashed) is checked: 200
    // rows, 60..140 per shard; 1,000 rows, 400..600.
    for (w, total, bound) in [("low", 200.0, 0.4), ("high", 1000.0, 0.2)] {
        let mut counts = Vec::new();
        for shard in 0..2 {
            let mut d = direct(&tb, shard, &schema).await;
            let n: u64 = d
                .query_first(format!("SELECT COUNT(*) FROM e WHERE w = '{w}'"))
                .await
                .unwrap()
                .unwrap();
            counts.push(n as f64);
            let _ = d.disconnect().await;
        }
        eprintln!("{w} rate: {counts:?} rows per shard");
        for n in &counts {
            let off = (n - total / 2.0).abs() / (total / 2.0);
            assert!(
                off <= bound,
                "{w} rate: {counts:?} rows per shard, {:.0}% off",
                off * 100.0
            );
        }
    }
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test]
async fn metadata_statements_and_insert_select() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("INSERT INTO t (id, w, n) VALUES (1, 'a', 1), (2, 'b', 2)")
        .await
        .unwrap();
    // What ORMs ask about a table is answered by one shard.
    let cols: Vec<Row> = c.query("DESCRIBE t").await.unwrap();
    assert_eq!(cols.len(), 4);
    let create: Vec<Row> = c.query("SHOW CREATE TABLE t").await.unwrap();
    assert_eq!(create.len(), 1);
    let _: Vec<Row> = c
        .query("EXPLAIN SELECT * FROM t WHERE n > 1")
        .await
        .unwrap();
    // INSERT ... SELECT from a sharded table would read one shard's rows.
    let err = c
        .query_drop("INSERT INTO plain SELECT * FROM t")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("INSERT ... SELECT"), "{err}");
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

/// A cursor opened by a keyed prepared SELECT lives on that key's shard:
/// COM_STMT_FETCH reads it there. A cursor over several shards is served
/// by idgate from the merged rows, as MariaDB serves one.
#[tokio::test]
async fn cursor_fetch_follows_the_keyed_shard() {
    use idgate::protocol::consts::cmd;
    use idgate::protocol::response::Expect;
    use idgate::protocol::stmt::{encode_execute, types, ParamType};
    use support::proxy::RawClient;
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    {
        let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
        c.query_drop("INSERT INTO t (id, w, n) VALUES (12, 'a', 1), (13, 'b', 2)")
            .await
            .unwrap();
    }
    let mut g = RawClient::app(p.addr, proxy::CLIENT_CAPS).await;
    assert!(proxy::err_of(&g.query(&format!("USE `{schema}`")).await).is_none());
    let prepare = |sql: &str| [&[cmd::STMT_PREPARE][..], sql.as_bytes()].concat();
    let execute = |id: u32, key: i64| {
        let v = key.to_le_bytes();
        let params: [(ParamType, Option<&[u8]>); 1] = [([types::LONGLONG, 0], Some(&v[..]))];
        let mut e = vec![cmd::STMT_EXECUTE];
        encode_execute(id, 1, 1, &params, &mut e);
        e
    };
    let r = g
        .command(&prepare("SELECT w FROM t WHERE id = ?"), Expect::Prepare)
        .await;
    let id = u32::from_le_bytes(r[0][1..5].try_into().unwrap());
    let opened = g.command(&execute(id, 13), Expect::Results).await;
    assert!(proxy::err_of(&opened).is_none(), "cursor opened on s1");
    let mut fetch = vec![cmd::STMT_FETCH];
    fetch.extend_from_slice(&id.to_le_bytes());
    fetch.extend_from_slice(&10u32.to_le_bytes());
    let rows = g.command(&fetch, Expect::Rows).await;
    assert!(
        proxy::err_of(&rows).is_none(),
        "fetch reads the cursor on s1"
    );
    assert_eq!(rows.len(), 2, "one row and the terminator: {rows:?}");
    drop(g);
    // Without the key the SELECT runs on both shards: idgate merges and
    // serves the cursor. Every packet equals what MariaDB sends for the same
    // cursor on an unsharded copy, with and without CLIENT_DEPRECATE_EOF.
    {
        let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
        for table in ["t", "plain"] {
            c.query_drop(format!(
                "INSERT INTO {table} (id, w, n) VALUES (20, 'c', 3), (21, 'd', 4), (22, 'e', 5), (23, 'f', 6), (24, 'g', 7)"
            ))
            .await
            .unwrap();
        }
    }
    use idgate::protocol::consts::cap;
    for caps in [
        proxy::CLIENT_CAPS & !cap::DEPRECATE_EOF,
        proxy::CLIENT_CAPS | cap::DEPRECATE_EOF,
    ] {
        let mut seen = Vec::new();
        for table in ["t", "plain"] {
            let mut g = RawClient::app(p.addr, caps).await;
            assert!(proxy::err_of(&g.query(&format!("USE `{schema}`")).await).is_none());
            let mut packets = Vec::new();
            // 5 rows fetched 2 at a time; 4 rows fetched 2 at a time.
            for min in [2i64, 3] {
                let r = g
                    .command(
                        &prepare(&format!(
                            "SELECT id, w FROM {table} WHERE n > ? ORDER BY id"
                        )),
                        Expect::Prepare,
                    )
                    .await;
                let id = u32::from_le_bytes(r[0][1..5].try_into().unwrap());
                let opened = g.command(&execute(id, min), Expect::Results).await;
                assert!(proxy::err_of(&opened).is_none(), "{table}: {opened:?}");
                // The column definitions name the table (and its keys).
                assert_eq!(opened.len(), 4, "{table}: {opened:?}");
                packets.push(vec![opened[0].clone(), opened[3].clone()]);
                for _ in 0..4 {
                    let mut fetch = vec![cmd::STMT_FETCH];
                    fetch.extend_from_slice(&id.to_le_bytes());
                    fetch.extend_from_slice(&2u32.to_le_bytes());
                    let rows = g.command(&fetch, Expect::Rows).await;
                    if let Some(e) = proxy::err_of(&rows) {
                        // No open cursor (its message names the shard's
                        // statement id).
                        packets.push(vec![e.code.to_le_bytes().to_vec()]);
                        break;
                    }
                    packets.push(rows);
                }
            }
            seen.push(packets);
        }
        assert_eq!(
            seen[0], seen[1],
            "sharded vs unsharded cursor, caps {caps:#x}"
        );
    }
    proxy::teardown(&tb, p, &schema).await;
}

/// A shard lost after every shard prepared: the client is told the write is
/// late on that shard, the branch stays prepared there (MariaDB keeps it
/// after the connection is gone), and idgate commits it on its next
/// connection to that shard: nothing is lost, nothing is half-done for good.
#[tokio::test]
async fn a_shard_lost_between_prepare_and_commit_gets_its_branch_committed() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    p.shared.fault_xa_commit.store(1, Ordering::Relaxed);
    let err = c
        .query_drop("INSERT INTO t (id, w, n) VALUES (20, 'a', 1), (21, 'b', 2)")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("prepared but not yet committed on shard s1"),
        "{err}"
    );
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [20], "committed on s0");
    let mine = p.shared.xa_log.get().unwrap().prefix().to_string();
    let pending = prepared_xids(&tb, 1, &mine).await;
    assert_eq!(pending.len(), 1, "the branch is prepared on s1");
    // The next statement that needs s1 opens a connection there, and idgate
    // commits the branch first.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let seen = loop {
        let seen = c
            .query_first::<String, _>("SELECT w FROM t WHERE id = 21")
            .await
            .unwrap();
        if seen.is_some() || tokio::time::Instant::now() >= deadline {
            break seen;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(seen.as_deref(), Some("b"), "the late branch was committed");
    let pending = prepared_xids(&tb, 1, &mine).await;
    assert!(pending.is_empty(), "no branch left prepared on s1");
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

/// The prepared branches on `shard` whose xid starts with `prefix`.
async fn prepared_xids(tb: &support::Testbed, shard: usize, prefix: &str) -> Vec<String> {
    let mut c = Conn::new(proxy::direct_opts(tb, shard, None))
        .await
        .unwrap();
    let rows: Vec<(i64, i64, i64, String)> = c.query("XA RECOVER").await.unwrap();
    let _ = c.disconnect().await;
    rows.into_iter()
        .map(|r| r.3)
        .filter(|x| x.starts_with(prefix))
        .collect()
}

/// idgate dies in the middle of two-phase commits: one after its commit
/// was recorded in the store, one before. The next idgate on the same store
/// (same etcd prefix) finishes the branches left prepared on both shards:
/// the first commits everywhere, the second is rolled back everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_idgate_finishes_the_two_phase_commits_a_dead_one_left() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let log_prefix = p
        .shared
        .xa_log
        .get()
        .expect("routing opens the XA commit log")
        .prefix()
        .to_string();
    // `idgate-<cluster>-<node>-`: every incarnation of this node.
    let node_prefix = log_prefix[..log_prefix.rfind('-').unwrap() + 1].to_string();
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    p.shared.fault_xa_crash.store(2, Ordering::Relaxed);
    c.query_drop("INSERT INTO t (id, w, n) VALUES (30, 'a', 1), (31, 'b', 2)")
        .await
        .unwrap_err();
    drop(c);
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    p.shared.fault_xa_crash.store(1, Ordering::Relaxed);
    c.query_drop("INSERT INTO t (id, w, n) VALUES (40, 'c', 1), (41, 'd', 2)")
        .await
        .unwrap_err();
    drop(c);
    for shard in 0..2 {
        assert_eq!(
            prepared_xids(&tb, shard, &log_prefix).await.len(),
            2,
            "both writes are left prepared on shard {shard}"
        );
        assert!(ids_on(&tb, shard, &schema, "t").await.is_empty());
    }
    p.stop().await;

    let q = Proxy::start_rules(&tb, &rules(&schema), &format!("/{schema}")).await;
    // (Accepting starts after the log is open.)
    let mut c = Conn::new(q.opts(Some(&schema))).await.unwrap();
    let next = q.shared.xa_log.get().unwrap().prefix().to_string();
    assert!(
        next.starts_with(&node_prefix) && next != log_prefix,
        "the restarted idgate takes the same node, a new incarnation: {next} after {log_prefix}"
    );
    wait_for_pass(&q, 0).await;
    for shard in 0..2 {
        assert!(
            prepared_xids(&tb, shard, &log_prefix).await.is_empty(),
            "nothing left prepared on shard {shard}"
        );
    }
    assert_eq!(
        ids_on(&tb, 0, &schema, "t").await,
        [30],
        "decided: committed"
    );
    assert_eq!(
        ids_on(&tb, 1, &schema, "t").await,
        [31],
        "decided: committed"
    );
    // And the restarted idgate works on the same rows.
    c.query_drop("INSERT INTO t (id, w, n) VALUES (40, 'c', 1), (41, 'd', 2)")
        .await
        .unwrap();
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [30, 40]);
    drop(c);
    proxy::teardown(&tb, q, &schema).await;
}

/// Two idgates share a store; one dies after recording a commit (its
/// connections gone, its node lease given up, as after a kill and the lease
/// TTL). The other, still running, commits the branches left prepared: the
/// dead one's are its business, a live one's never are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_surviving_idgate_finishes_the_commits_of_one_that_died() {
    let Some(tb) = support::testbed() else { return };
    let (a, schema) = setup(&tb).await;
    let b = Proxy::start_rules(&tb, &rules(&schema), &format!("/{schema}")).await;
    let mut cb = Conn::new(b.opts(Some(&schema))).await.unwrap();
    let prefix = |p: &Proxy| p.shared.xa_log.get().unwrap().prefix().to_string();
    let (pa, pb) = (prefix(&a), prefix(&b));
    assert_ne!(pa, pb, "two live idgates, two XA node ids");
    let mut ca = Conn::new(a.opts(Some(&schema))).await.unwrap();
    a.shared.fault_xa_crash.store(2, Ordering::Relaxed);
    ca.query_drop("INSERT INTO t (id, w, n) VALUES (50, 'a', 1), (51, 'b', 2)")
        .await
        .unwrap_err();
    drop(ca);
    // While a lives, b leaves its branches alone.
    let passes = b.shared.xa_recoveries.load(Ordering::Relaxed);
    b.shared.xa_recover_now.notify_one();
    wait_for_pass(&b, passes).await;
    for shard in 0..2 {
        assert_eq!(prepared_xids(&tb, shard, &pa).await.len(), 1);
    }
    a.stop().await;
    let passes = b.shared.xa_recoveries.load(Ordering::Relaxed);
    b.shared.xa_recover_now.notify_one();
    wait_for_pass(&b, passes).await;
    for shard in 0..2 {
        assert!(prepared_xids(&tb, shard, &pa).await.is_empty());
    }
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [50]);
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [51]);
    cb.query_drop("UPDATE t SET n = n + 1 WHERE id IN (50, 51)")
        .await
        .unwrap();
    drop(cb);
    proxy::teardown(&tb, b, &schema).await;
}

/// The commit decision cannot be written (the store fails): nothing is
/// committed anywhere, nothing stays prepared, the client gets error 1180;
/// once the store is back, the same write commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_cannot_be_recorded_is_rolled_back_on_every_shard() {
    use idgate::idgen::{Fault, MemoryStore};
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("shard");
    proxy::create_schema(&tb, &schema).await;
    let store = MemoryStore::new();
    let p = Proxy::start_store_rules(&tb, &rules(&schema), store.clone()).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop(format!("CREATE TABLE t {TABLE}"))
        .await
        .unwrap();
    let mine = p.shared.xa_log.get().unwrap().prefix().to_string();
    // Explicit ids above every reservation are confirmed in the store; an id
    // above 71, observed first, leaves 70 and 71 in this process's own
    // range, so the fault below hits the commit record, not the ids.
    c.query_drop("INSERT INTO t (id, w, n) VALUES (100, 'z', 0)")
        .await
        .unwrap();
    c.query_drop("DELETE FROM t WHERE id = 100").await.unwrap();
    store.set_fault(Fault::Fail);
    let err = c
        .query_drop("INSERT INTO t (id, w, n) VALUES (70, 'a', 1), (71, 'b', 2)")
        .await
        .unwrap_err();
    store.set_fault(Fault::None);
    assert!(
        matches!(&err, mysql_async::Error::Server(e) if e.code == 1180
            && e.message.contains("rolled back on every shard")),
        "{err}"
    );
    for shard in 0..2 {
        assert!(ids_on(&tb, shard, &schema, "t").await.is_empty());
        assert!(prepared_xids(&tb, shard, &mine).await.is_empty());
    }
    c.query_drop("INSERT INTO t (id, w, n) VALUES (70, 'a', 1), (71, 'b', 2)")
        .await
        .unwrap();
    assert_eq!(ids_on(&tb, 0, &schema, "t").await, [70]);
    assert_eq!(ids_on(&tb, 1, &schema, "t").await, [71]);
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

/// Waits until `p` has finished a recovery pass after the `passes`-th (a
/// pass takes milliseconds; the deadline is far above what a loaded
/// machine needs).
async fn wait_for_pass(p: &Proxy, passes: u64) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while p.shared.xa_recoveries.load(Ordering::Relaxed) <= passes {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no XA recovery pass within 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `SHOW WARNINGS` and the warning counts come from the shards that ran
/// the last statement: a keyed statement on s1, a multi-row INSERT IGNORE
/// split over both shards.
#[tokio::test]
async fn warnings_come_from_the_shards_of_the_last_statement() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("INSERT INTO t (id, w, n) VALUES (60, 'a', 1), (61, 'b', 2)")
        .await
        .unwrap();
    type W = (String, u32, String);
    // A keyed SELECT on s1 that warns.
    let _: Vec<(u64, i64)> = c
        .query("SELECT id, CAST('x1' AS INT) FROM t WHERE id = 61")
        .await
        .unwrap();
    let w: Vec<W> = c.query("SHOW WARNINGS").await.unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].1, 1292, "{w:?}");
    let n: Option<u64> = c.query_first("SELECT @@warning_count").await.unwrap();
    assert_eq!(n, Some(1));
    // A keyed SELECT on s0 without warnings clears them.
    let _: Vec<u64> = c.query("SELECT id FROM t WHERE id = 60").await.unwrap();
    let w: Vec<W> = c.query("SHOW WARNINGS").await.unwrap();
    assert!(w.is_empty(), "{w:?}");
    // INSERT IGNORE split over both shards, a duplicate on each.
    c.query_drop("INSERT IGNORE INTO t (id, w, n) VALUES (60, 'x', 1), (61, 'y', 2), (62, 'z', 3)")
        .await
        .unwrap();
    assert_eq!(c.affected_rows(), 1);
    let w: Vec<W> = c.query("SHOW WARNINGS").await.unwrap();
    let mut codes: Vec<String> = w.iter().map(|r| format!("{} {}", r.1, r.2)).collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            "1062 Duplicate entry '60' for key 'PRIMARY'",
            "1062 Duplicate entry '61' for key 'PRIMARY'"
        ]
    );
    let n: Option<u64> = c.query_first("SELECT @@warning_count").await.unwrap();
    assert_eq!(n, Some(2));
    let n: Option<u64> = c.query_first("SHOW COUNT(*) WARNINGS").await.unwrap();
    assert_eq!(n, Some(2));
    let w: Vec<W> = c.query("SHOW WARNINGS LIMIT 1").await.unwrap();
    assert_eq!(w.len(), 1);
    let second: Vec<W> = c.query("SHOW WARNINGS LIMIT 1, 1").await.unwrap();
    assert_eq!(second.len(), 1);
    assert_ne!(w[0].2, second[0].2);
    let e: Vec<W> = c.query("SHOW ERRORS").await.unwrap();
    assert!(e.is_empty());
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

/// With sharded tables, idgate serves one logical database: CREATE and DROP
/// DATABASE run on every shard.
#[tokio::test]
async fn databases_are_created_and_dropped_on_every_shard() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    let extra = format!("{schema}_x");
    let exists = |shard: usize, db: String| {
        let tb = tb.clone();
        async move {
            let mut d = Conn::new(proxy::direct_opts(&tb, shard, None))
                .await
                .unwrap();
            let n: Vec<String> = d
                .query(format!("SHOW DATABASES LIKE '{db}'"))
                .await
                .unwrap();
            let _ = d.disconnect().await;
            !n.is_empty()
        }
    };
    c.query_drop(format!("CREATE DATABASE `{extra}`"))
        .await
        .unwrap();
    assert!(exists(0, extra.clone()).await && exists(1, extra.clone()).await);
    c.query_drop(format!("DROP SCHEMA `{extra}`"))
        .await
        .unwrap();
    assert!(!exists(0, extra.clone()).await && !exists(1, extra.clone()).await);
    // CREATE OR REPLACE too (it went to the default shard alone before).
    c.query_drop(format!("CREATE OR REPLACE DATABASE `{extra}`"))
        .await
        .unwrap();
    assert!(exists(0, extra.clone()).await && exists(1, extra.clone()).await);
    c.query_drop(format!("DROP DATABASE IF EXISTS `{extra}`"))
        .await
        .unwrap();
    assert!(!exists(0, extra.clone()).await && !exists(1, extra.clone()).await);
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

/// sysbench `oltp_read_write` (server-side prepared statements) against
/// tables sharded over both shards, prepared through idgate: keyed reads and
/// writes, scattered and merged range reads (ORDER BY, SUM), and every
/// transaction an XA transaction over the shards it touches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sysbench_read_write_on_sharded_tables() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("shardsb");
    proxy::create_schema(&tb, &schema).await;
    let mut rules = "[[generator]]\nname = \"sb\"\nkind = \"sequence\"\nbatch = 1000\n".to_string();
    for t in 1..=2 {
        rules.push_str(&format!(
            "\n[[table]]\nname = \"{schema}.sbtest{t}\"\ncolumn = \"id\"\ngenerator = \"sb\"\nshard_key = \"id\"\nsharding = \"mod\"\n"
        ));
    }
    let p = Proxy::start_rules(&tb, &rules, &format!("/{schema}")).await;
    let args = [
        "--db-ps-mode=auto",
        "--mysql-ignore-errors=1213,1205",
        "--tables=2",
        "--table-size=2000",
        "--threads=4",
        "--time=3",
        // SELECT DISTINCT over a range cannot be merged across shards.
        "--distinct_ranges=0",
    ];
    let mine = {
        // (Accepting starts after the XA commit log is open.)
        let c = Conn::new(p.opts(Some(&schema))).await.unwrap();
        drop(c);
        p.shared.xa_log.get().unwrap().prefix().to_string()
    };
    for step in ["prepare", "run"] {
        let out = proxy::sysbench(p.addr, &schema, "oltp_read_write", &args, step).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "sysbench {step} failed:\n{stdout}\n{stderr}"
        );
        if step == "run" {
            let tx: u64 = stdout
                .lines()
                .find_map(|l| l.trim().strip_prefix("transactions:"))
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
                .unwrap_or(0);
            assert!(tx > 0, "{stdout}");
            assert!(!stderr.contains("FATAL"), "{stderr}");
        }
    }
    // The rows are split by id, and no XA branch is left behind.
    for shard in 0..2 {
        let mut d = direct(&tb, shard, &schema).await;
        let wrong: u64 = d
            .query_first(format!(
                "SELECT COUNT(*) FROM sbtest1 WHERE id % 2 <> {shard}"
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(wrong, 0, "placement on shard {shard}");
        assert!(
            prepared_xids(&tb, shard, &mine).await.is_empty(),
            "no prepared branch left on shard {shard}"
        );
        let _ = d.disconnect().await;
    }
    proxy::teardown(&tb, p, &schema).await;
}

/// What a client saw of one statement.
#[derive(Debug, PartialEq)]
struct Seen {
    affected: u64,
    last_insert_id: u64,
    warnings: u16,
    info: String,
}

async fn run(c: &mut Conn, sql: &str) -> Seen {
    let r = c.query_iter(sql).await.unwrap();
    let seen = Seen {
        affected: r.affected_rows(),
        last_insert_id: r.last_insert_id().unwrap_or(0),
        warnings: r.warnings(),
        info: r.info().into_owned(),
    };
    drop(r);
    seen
}

/// INSERT IGNORE / ON DUPLICATE KEY UPDATE into a sharded table, whose
/// rows idgate splits per shard: the client sees what MariaDB reports for
/// the whole statement on one server (the first stored generated id, else
/// the last row's id when a row was changed, else 0; `LAST_INSERT_ID()`
/// moves only when a generated row was stored), text and prepared.
#[tokio::test]
async fn upserts_split_over_shards_report_like_mariadb() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("CREATE TABLE up (id BIGINT UNSIGNED PRIMARY KEY, k VARCHAR(32) NOT NULL, u INT NULL UNIQUE, n INT NOT NULL DEFAULT 0)")
        .await
        .unwrap();
    // u = 5, 6, 7 exist on both shards (the unique key is per shard), so a
    // row with one of them is a duplicate wherever its id sends it.
    for u in 5..=7u64 {
        c.query_drop(format!(
            "INSERT INTO up (id, k, u) VALUES ({}, 'e{u}a', {u}), ({}, 'e{u}b', {u})",
            100 + 2 * u,
            101 + 2 * u
        ))
        .await
        .unwrap();
    }
    let dup = |u: u64| (5..=7).contains(&u);
    let mut fresh = 100u64;
    let mut problems = Vec::new();
    // (update list or IGNORE, u of each row); rows with other u are new.
    let cases: Vec<(&str, Vec<u64>)> = vec![
        ("odku", vec![5, 0, 0]),
        ("odku", vec![0, 6, 0]),
        ("odku", vec![0, 0, 7]),
        ("odku", vec![5, 6, 7]),
        ("same", vec![5, 6, 7]),
        ("odku", vec![5, 0, 6, 0]),
        ("ignore", vec![5, 0, 0]),
        ("ignore", vec![0, 6, 0]),
        ("ignore", vec![5, 6, 7]),
        ("ignore", vec![0, 0, 0]),
        ("odku", vec![6]),
        ("same", vec![6]),
        ("idiom", vec![7]),
        ("idiom", vec![0]),
    ];
    for (step, (kind, us)) in cases.into_iter().enumerate() {
        let rows: Vec<(String, u64)> = us
            .iter()
            .enumerate()
            .map(|(j, &u)| {
                let u = if u == 0 {
                    fresh += 1;
                    fresh
                } else {
                    u
                };
                (format!("s{step}r{j}"), u)
            })
            .collect();
        let values: Vec<String> = rows.iter().map(|(k, u)| format!("('{k}', {u})")).collect();
        let sql = match kind {
            "ignore" => format!("INSERT IGNORE INTO up (k, u) VALUES {}", values.join(", ")),
            "odku" => format!(
                "INSERT INTO up (k, u) VALUES {} ON DUPLICATE KEY UPDATE n = n + 1",
                values.join(", ")
            ),
            "same" => format!(
                "INSERT INTO up (k, u) VALUES {} ON DUPLICATE KEY UPDATE n = n",
                values.join(", ")
            ),
            _ => format!(
                "INSERT INTO up (k, u) VALUES {} ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)",
                values.join(", ")
            ),
        };
        let before: Vec<(u64, u64, i64)> = c
            .query("SELECT id, u, n FROM up WHERE u BETWEEN 5 AND 7 ORDER BY id")
            .await
            .unwrap();
        c.query_drop("SELECT LAST_INSERT_ID(3)").await.unwrap();
        let seen = run(&mut c, &sql).await;
        let after: Vec<(u64, u64, i64)> = c
            .query("SELECT id, u, n FROM up WHERE u BETWEEN 5 AND 7 ORDER BY id")
            .await
            .unwrap();
        let lid: u64 = c
            .query_first("SELECT LAST_INSERT_ID()")
            .await
            .unwrap()
            .unwrap();
        // What MariaDB reports for the same rows in one table.
        let stored: Vec<&(String, u64)> = rows.iter().filter(|(_, u)| !dup(*u)).collect();
        let dups = rows.len() - stored.len();
        let changed = if kind == "odku" { dups } else { 0 };
        let first_stored = match stored.first() {
            Some((k, _)) => {
                let id: Option<u64> = c
                    .query_first(format!("SELECT id FROM up WHERE k = '{k}'"))
                    .await
                    .unwrap();
                id
            }
            None => None,
        };
        // The existing row the last row hit: the one whose n went up (or,
        // for the idiom, the one with the last row's u on... any: both
        // qualify, so the report must be one of them).
        let last_u = rows.last().map(|r| r.1).unwrap_or(0);
        let hit: Vec<u64> = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| b.1 == last_u && (a.2 != b.2 || kind == "idiom"))
            .map(|(b, _)| b.0)
            .collect();
        let want_affected = (stored.len() + 2 * changed) as u64;
        let (want_dups, want_warnings) = match kind {
            "ignore" => (dups, dups),
            _ => (changed, 0),
        };
        let want_info = if rows.len() > 1 {
            format!(
                "Records: {}  Duplicates: {want_dups}  Warnings: {want_warnings}",
                rows.len()
            )
        } else {
            String::new()
        };
        let report_ok = match first_stored {
            Some(id) => seen.last_insert_id == id,
            None if changed > 0 || kind == "idiom" => hit.contains(&seen.last_insert_id),
            None => seen.last_insert_id == 0,
        };
        let lid_ok = match (first_stored, kind) {
            (Some(id), _) => lid == id,
            (None, "idiom") => lid == seen.last_insert_id,
            (None, _) => lid == 3,
        };
        if seen.affected != want_affected
            || seen.info != want_info
            || seen.warnings != want_warnings as u16
            || !report_ok
            || !lid_ok
        {
            problems.push(format!(
                "{sql}\n  seen {seen:?}, LAST_INSERT_ID() {lid}\n  want affected {want_affected}, info {want_info:?}, warnings {want_warnings}, first stored {first_stored:?}, hit {hit:?}"
            ));
        }
    }
    // Prepared (one shard per execute): an update, an insert, the idiom.
    let stmt = c
        .prep("INSERT INTO up (k, u) VALUES (?, ?) ON DUPLICATE KEY UPDATE n = n + 1")
        .await
        .unwrap();
    for (k, u) in [("p1", 5u64), ("p2", 900)] {
        c.query_drop("SELECT LAST_INSERT_ID(3)").await.unwrap();
        let before: Vec<(u64, i64)> = c
            .query("SELECT id, n FROM up WHERE u = 5 ORDER BY id")
            .await
            .unwrap();
        let r = c.exec_iter(&stmt, (k, u)).await.unwrap();
        let (affected, reported) = (r.affected_rows(), r.last_insert_id().unwrap_or(0));
        drop(r);
        let lid: u64 = c
            .query_first("SELECT LAST_INSERT_ID()")
            .await
            .unwrap()
            .unwrap();
        let after: Vec<(u64, i64)> = c
            .query("SELECT id, n FROM up WHERE u = 5 ORDER BY id")
            .await
            .unwrap();
        let stored: Option<u64> = c
            .query_first(format!("SELECT id FROM up WHERE k = '{k}'"))
            .await
            .unwrap();
        let ok = match stored {
            Some(id) => affected == 1 && reported == id && lid == id,
            None => {
                let hit: Vec<u64> = before
                    .iter()
                    .zip(&after)
                    .filter(|(b, a)| a.1 != b.1)
                    .map(|(b, _)| b.0)
                    .collect();
                affected == 2 && hit == [reported] && lid == 3
            }
        };
        if !ok {
            problems.push(format!("prepared ({k}, {u}): affected {affected}, reported {reported}, LAST_INSERT_ID() {lid}, stored {stored:?}"));
        }
    }
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A query of several statements that names sharded tables: each statement
/// runs as if sent alone, the client gets every result in order, and the
/// first error ends the query.
#[tokio::test]
async fn several_statements_in_one_query() {
    use mysql_async::Row;
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();

    let mut r = c
        .query_iter(
            "INSERT INTO t (w, n) VALUES ('m', 1), ('m', 2); SELECT COUNT(*) FROM t WHERE w = 'm';\n\
             UPDATE t SET n = n + 10 WHERE w = 'm'; SELECT LAST_INSERT_ID(); \
             SELECT n FROM t WHERE w = 'm' ORDER BY n",
        )
        .await
        .unwrap();
    // 1: the split INSERT's OK packet.
    let _: Vec<Row> = r.collect().await.unwrap();
    assert_eq!(r.affected_rows(), 2);
    let first = r.last_insert_id().expect("the first generated id");
    // 2: a scattered aggregate.
    let count: Vec<u64> = r.collect().await.unwrap();
    assert_eq!(count, [2]);
    // 3: an UPDATE on both shards.
    let _: Vec<Row> = r.collect().await.unwrap();
    assert_eq!(r.affected_rows(), 2);
    // 4: LAST_INSERT_ID() of the INSERT, wherever this statement runs.
    let lid: Vec<u64> = r.collect().await.unwrap();
    assert_eq!(lid, [first]);
    // 5: a merged ORDER BY.
    let ns: Vec<i64> = r.collect().await.unwrap();
    assert_eq!(ns, [11, 12]);
    assert!(r.is_empty(), "no more results");
    drop(r);
    let on: Vec<u64> = [
        ids_on(&tb, 0, &schema, "t").await,
        ids_on(&tb, 1, &schema, "t").await,
    ]
    .concat();
    assert_eq!(on.len(), 2, "each row once: {on:?}");

    // The first error ends the query; what came before it stays.
    let mut r = c
        .query_iter("SELECT COUNT(*) FROM t; SELECT nosuch FROM t; DELETE FROM t")
        .await
        .unwrap();
    let count: Vec<u64> = r.collect().await.unwrap();
    assert_eq!(count, [2]);
    let err = r.collect::<Row>().await.unwrap_err();
    assert!(err.to_string().contains("nosuch"), "{err}");
    drop(r);
    let n: Option<u64> = c.query_first("SELECT COUNT(*) FROM t").await.unwrap();
    assert_eq!(n, Some(2), "the DELETE after the error did not run");

    // A transaction inside the query, rolled back on both shards; a SET
    // that later statements on either shard see.
    c.query_drop("BEGIN; INSERT INTO t (id, w, n) VALUES (1001, 'x', 1), (1002, 'x', 1); ROLLBACK")
        .await
        .unwrap();
    assert_eq!(
        ids_on(&tb, 0, &schema, "t").await.len() + ids_on(&tb, 1, &schema, "t").await.len(),
        2
    );
    let mut r = c
        .query_iter("SET @v = 7; SELECT @v, id FROM t ORDER BY id")
        .await
        .unwrap();
    let _: Vec<Row> = r.collect().await.unwrap();
    let v: Vec<(Option<i64>, u64)> = r.collect().await.unwrap();
    drop(r);
    assert_eq!(v.len(), 2, "one row from each shard");
    assert!(v.iter().all(|(x, _)| *x == Some(7)), "{v:?}");
    // The client's status after the split autocommit INSERT: no
    // transaction open (it ran as XA and committed).
    let mut raw = proxy::RawClient::app(p.addr, proxy::CLIENT_CAPS).await;
    let reply = raw
        .query(&format!(
            "INSERT INTO `{schema}`.t (w, n) VALUES ('s', 1), ('s', 2); SELECT 1 FROM `{schema}`.t LIMIT 1"
        ))
        .await;
    let ok = idgate::protocol::reply::parse_ok(&reply[0]).expect("an OK packet");
    assert_eq!(ok.affected_rows, 2);
    use idgate::protocol::consts::status;
    assert_eq!(ok.status & status::IN_TRANS, 0, "status {:#x}", ok.status);
    assert_ne!(
        ok.status & status::MORE_RESULTS_EXISTS,
        0,
        "status {:#x}",
        ok.status
    );
    drop(raw);
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

/// A generated id on shard 1 (mod 2: odd), inserted into `t`.
async fn odd_generated_id(c: &mut Conn) -> u64 {
    let mut generated = 0;
    for i in 0..20 {
        let r = c
            .query_iter(format!("INSERT INTO t (w, n) VALUES ('g', {i})"))
            .await
            .unwrap();
        generated = r.last_insert_id().expect("an id");
        drop(r);
        if generated % 2 == 1 {
            break;
        }
    }
    assert_eq!(generated % 2, 1, "an odd id in 20 tries");
    generated
}

/// An INSERT with explicit ids only generates nothing: LAST_INSERT_ID()
/// stays the id generated on another shard before it (the explicit
/// INSERT's shard does not become the value's home).
#[tokio::test]
async fn an_insert_of_explicit_ids_keeps_the_last_insert_id_of_another_shard() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop(format!("CREATE TABLE solo {TABLE}"))
        .await
        .unwrap();
    let generated = odd_generated_id(&mut c).await;
    // Explicit ids into the unsharded rule table, on shard 0.
    c.query_drop("INSERT INTO solo (id, w, n) VALUES (5000002, 'x', 0)")
        .await
        .unwrap();
    let lid: u64 = c
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lid, generated, "the explicit INSERT kept LAST_INSERT_ID()");
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

async fn lid(c: &mut Conn) -> u64 {
    c.query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap()
}

/// The same for a table without rules (on shard 0, AUTO_INCREMENT of its
/// own): an explicit id keeps the value, a generated one replaces it.
#[tokio::test]
async fn an_explicit_id_into_a_table_without_rules_keeps_the_last_insert_id_of_another_shard() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("CREATE TABLE counted (id BIGINT AUTO_INCREMENT PRIMARY KEY, w VARCHAR(8))")
        .await
        .unwrap();
    let generated = odd_generated_id(&mut c).await;
    // The first INSERT into the table: its columns are not known yet.
    for (n, sql) in [
        "INSERT INTO counted (id, w) VALUES (77, 'x')",
        "INSERT INTO counted VALUES (78, 'y'), (79, 'z')",
    ]
    .iter()
    .enumerate()
    {
        c.query_drop(*sql).await.unwrap();
        assert_eq!(
            lid(&mut c).await,
            generated,
            "statement {n} ({sql}) kept it"
        );
    }
    let r = c
        .query_iter("INSERT INTO counted (w) VALUES ('g')")
        .await
        .unwrap();
    let own = r.last_insert_id().expect("an id");
    drop(r);
    assert_eq!(own, 80);
    assert_eq!(lid(&mut c).await, own, "a generated id replaced it");
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}
