//! Tables sharded by another column than the id idgate fills (issue 5), on
//! the test bed's two real MariaDB shards: order items placed by their
//! order, accounts by a string code. Each row goes where its shard key
//! value maps, ids stay unique across shards, a keyed read of one order
//! touches one shard, and rows idgate cannot place are refused by name.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use support::proxy::{self, Proxy};

fn rules(schema: &str) -> String {
    format!(
        "[[generator]]\nname = \"seq\"\nkind = \"sequence\"\nbatch = 50\n\n\
         [[table]]\nname = \"{schema}.items\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"order_id\"\nsharding = \"mod\"\n\n\
         [[table]]\nname = \"{schema}.acct\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"code\"\nsharding = \"hash\"\n\n\
         [[table]]\nname = \"{schema}.docs\"\ncolumn = \"id\"\ngenerator = \"seq\"\n"
    )
}

async fn setup(tb: &support::Testbed) -> (Proxy, String) {
    let schema = support::unique("bycol");
    proxy::create_schema(tb, &schema).await;
    // A small max_packet: the long-data test goes past it.
    let text = proxy::config_text_etcd(tb, &format!("/{schema}")).replacen(
        "listen = \"127.0.0.1:0\"\n",
        "listen = \"127.0.0.1:0\"\nmax_packet = 65536\n",
        1,
    );
    let cfg = idgate::config::Config::parse(&text, "test").expect("test config");
    let p = Proxy::start_config_rules(cfg, &rules(&schema)).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    // DDL on a sharded table runs on every shard.
    c.query_drop(
        "CREATE TABLE items (id BIGINT UNSIGNED PRIMARY KEY, order_id BIGINT NOT NULL, sku VARCHAR(16) NOT NULL, qty INT NOT NULL DEFAULT 1, note BLOB NULL)",
    )
    .await
    .unwrap();
    c.query_drop("CREATE TABLE acct (id BIGINT UNSIGNED PRIMARY KEY, code VARCHAR(16) NOT NULL, name VARCHAR(32))")
        .await
        .unwrap();
    (p, schema)
}

/// `(id, order_id)` of every item stored on `shard`, read directly.
async fn items_on(tb: &support::Testbed, shard: usize, schema: &str) -> Vec<(u64, i64)> {
    let mut c = Conn::new(proxy::direct_opts(tb, shard, Some(schema)))
        .await
        .unwrap();
    let rows = c
        .query("SELECT id, order_id FROM items ORDER BY id")
        .await
        .unwrap();
    let _ = c.disconnect().await;
    rows
}

#[tokio::test]
async fn rows_go_to_the_shard_of_their_shard_key_column() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();

    // A multi-row INSERT over both shards is split; the client sees one OK.
    let r = c
        .query_iter(
            "INSERT INTO items (order_id, sku) VALUES (7, 'a'), (8, 'b'), (7, 'c'), (-3, 'd')",
        )
        .await
        .unwrap();
    let (affected, first) = (r.affected_rows(), r.last_insert_id());
    drop(r);
    assert_eq!(affected, 4);
    let first = first.expect("the first generated id");
    let lid: u64 = c
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lid, first);
    let sku: Option<String> = c
        .query_first(format!(
            "SELECT sku FROM items WHERE order_id = 7 AND id = {first}"
        ))
        .await
        .unwrap();
    assert_eq!(
        sku.as_deref(),
        Some("a"),
        "the first row carries the reported id"
    );

    // INSERT ... SET, no column list (the table's column order), explicit id.
    c.query_drop("INSERT INTO items SET sku = 's', order_id = 10")
        .await
        .unwrap();
    c.query_drop("INSERT INTO items VALUES (NULL, 11, 'n', 2, NULL)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO items (id, order_id, sku) VALUES (900001, 12, 'x')")
        .await
        .unwrap();

    // Prepared: the shard comes from the bound order_id at each execute,
    // the id from idgate; the driver's last insert id is the stored row's.
    let stmt = c
        .prep("INSERT INTO items (sku, order_id, qty) VALUES (?, ?, ?)")
        .await
        .unwrap();
    for order in [20i64, 21, 22, 23] {
        c.exec_drop(&stmt, ("p", order, 5)).await.unwrap();
        let id = c.last_insert_id().expect("lastrowid");
        let back: Option<i64> = c
            .exec_first("SELECT order_id FROM items WHERE id = ?", (id,))
            .await
            .unwrap();
        assert_eq!(
            back,
            Some(order),
            "row {id} is found by its id (scattered read)"
        );
    }
    // A prepared statement with a literal shard key.
    c.exec_drop("INSERT INTO items (order_id, sku) VALUES (31, ?)", ("lit",))
        .await
        .unwrap();

    let mut all = Vec::new();
    for shard in 0..2 {
        let rows = items_on(&tb, shard, &schema).await;
        assert!(!rows.is_empty(), "shard {shard} has rows");
        for (id, order) in &rows {
            assert_eq!(
                order.rem_euclid(2) as usize,
                shard,
                "item {id} of order {order} is on shard {shard}"
            );
        }
        all.extend(rows.into_iter().map(|(id, _)| id));
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(n, all.len(), "no id on two shards");
    assert_eq!(n, 4 + 3 + 4 + 1, "no row lost");

    // A string shard key: hash is MariaDB's CRC32 of its weight string in the
    // column's collation (utf8mb4_general_ci), trailing spaces not counted.
    c.query_drop("INSERT INTO acct (code, name) VALUES ('alpha', 'a'), ('beta', 'b'), ('gamma', 'g'), ('delta', 'd'), ('k\\'x', 'q')")
        .await
        .unwrap();
    let stmt = c.prep("INSERT INTO acct (code) VALUES (?)").await.unwrap();
    for code in ["e1", "e2", "e3", "e4"] {
        c.exec_drop(&stmt, (code,)).await.unwrap();
    }
    let mut total = 0;
    for shard in 0..2 {
        let mut d = Conn::new(proxy::direct_opts(&tb, shard, Some(&schema)))
            .await
            .unwrap();
        let wrong: u64 = d
            .query_first(format!(
                "SELECT COUNT(*) FROM acct WHERE CRC32(WEIGHT_STRING(RTRIM(code))) % 2 <> {shard}"
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(wrong, 0, "shard {shard} holds only its codes");
        let here: u64 = d
            .query_first("SELECT COUNT(*) FROM acct")
            .await
            .unwrap()
            .unwrap();
        total += here;
        let _ = d.disconnect().await;
    }
    assert_eq!(total, 9);
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test]
async fn one_orders_items_are_read_and_written_on_its_shard_alone() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    {
        let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
        c.query_drop("INSERT INTO items (order_id, sku) VALUES (41, 'a'), (41, 'b'), (42, 'c'), (43, 'd'), (41, 'e')")
            .await
            .unwrap();
    }
    let mut c = Conn::new(p.opts(None)).await.unwrap();
    c.query_drop("SELECT 1").await.unwrap();
    let before = p.shard_connects();
    let skus: Vec<String> = c
        .query(format!(
            "SELECT sku FROM `{schema}`.items WHERE order_id = 41 ORDER BY sku"
        ))
        .await
        .unwrap();
    assert_eq!(skus, ["a", "b", "e"]);
    let n: Option<u64> = c
        .exec_first(
            format!("SELECT COUNT(*) FROM `{schema}`.items WHERE order_id IN (?, ?)"),
            (43, 41),
        )
        .await
        .unwrap();
    assert_eq!(n, Some(4));
    c.query_drop(format!(
        "UPDATE `{schema}`.items SET qty = qty + 1 WHERE order_id = 41"
    ))
    .await
    .unwrap();
    assert_eq!(c.affected_rows(), 3);
    c.exec_drop(
        format!("DELETE FROM `{schema}`.items WHERE order_id = ? AND sku = 'e'"),
        (41,),
    )
    .await
    .unwrap();
    assert_eq!(c.affected_rows(), 1);
    assert_eq!(
        p.shard_connects()[0],
        before[0],
        "statements keyed on odd orders opened no connection to s0"
    );
    // By id (not the shard key): every shard is asked, the row is found.
    let id: u64 = c
        .query_first(format!("SELECT MIN(id) FROM `{schema}`.items"))
        .await
        .unwrap()
        .unwrap();
    let order: Option<i64> = c
        .query_first(format!(
            "SELECT order_id FROM `{schema}`.items WHERE id = {id}"
        ))
        .await
        .unwrap();
    assert_eq!(order, Some(41));
    // Moving a row to another order (and shard) is refused.
    let err = c
        .query_drop(format!(
            "UPDATE `{schema}`.items SET order_id = 42 WHERE order_id = 41"
        ))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("shard key"), "{err}");
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test]
async fn rows_idgate_cannot_place_are_refused_by_name() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    let refused = |e: mysql_async::Error| match e {
        mysql_async::Error::Server(s) => (s.code, s.message),
        other => panic!("{other}"),
    };
    let cases: &[(&str, &str)] = &[
        ("INSERT INTO items (sku) VALUES ('a')", "leaves it out of its column list"),
        ("INSERT INTO items (order_id, sku) VALUES (1, 'a'), (1 + 1, 'b')", "row 2 of the INSERT into sharded table"),
        ("INSERT INTO items SET sku = 'a'", "gives it no value"),
        (
            "INSERT INTO items (order_id, sku) VALUES (5, 'a') ON DUPLICATE KEY UPDATE order_id = 6",
            "ON DUPLICATE KEY UPDATE of shard key column `order_id`",
        ),
        ("INSERT INTO items (order_id, sku) VALUES (NULL, 'a')", "order_id"),
    ];
    for (sql, says) in cases {
        let (code, message) = refused(c.query_drop(*sql).await.unwrap_err());
        assert_eq!(code, 1235, "{sql}: {message}");
        assert!(message.contains(says), "{sql}: {message}");
        assert!(message.contains("items"), "{sql}: {message}");
    }
    // Prepared: a NULL shard key (a multi-row execute over both shards
    // runs split: `shard_prepared_split.rs`).
    let (code, message) = refused(
        c.exec_drop(
            "INSERT INTO items (order_id, sku) VALUES (?, 'a')",
            (None::<i64>,),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 1235, "{message}");
    // Keeping the key on a duplicate is fine (the row stays on its shard).
    c.query_drop("INSERT INTO items (id, order_id, sku) VALUES (77, 5, 'a') ON DUPLICATE KEY UPDATE order_id = VALUES(order_id), qty = qty + 1")
        .await
        .unwrap();
    c.query_drop("INSERT INTO items (id, order_id, sku) VALUES (77, 5, 'a') ON DUPLICATE KEY UPDATE order_id = VALUES(order_id), qty = qty + 1")
        .await
        .unwrap();
    let qty: Option<i64> = c
        .query_first("SELECT qty FROM items WHERE order_id = 5 AND id = 77")
        .await
        .unwrap();
    assert_eq!(qty, Some(2));
    // Nothing refused reached a shard.
    let mut stored = 0;
    for shard in 0..2 {
        stored += items_on(&tb, shard, &schema).await.len();
    }
    assert_eq!(stored, 1);
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

/// COM_STMT_SEND_LONG_DATA for statements whose shard is chosen at execute:
/// idgate holds the data until the execute picks the shard, then sends it
/// there (before, it went to the shard of the previous execute).
#[tokio::test]
async fn long_data_reaches_the_shard_the_execute_picks() {
    use idgate::protocol::consts::cmd;
    use idgate::protocol::response::Expect;
    use idgate::protocol::stmt::types;
    use support::proxy::RawClient;
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut g = RawClient::app(p.addr, proxy::CLIENT_CAPS).await;
    let prepare = |sql: String| [&[cmd::STMT_PREPARE][..], sql.as_bytes()].concat();
    let id_of = |r: &[Vec<u8>]| {
        assert_eq!(r[0][0], 0, "prepared: {r:?}");
        u32::from_le_bytes([r[0][1], r[0][2], r[0][3], r[0][4]])
    };
    let long_data = |id: u32, param: u16, chunk: &[u8]| {
        [
            &[cmd::STMT_SEND_LONG_DATA][..],
            &id.to_le_bytes(),
            &param.to_le_bytes(),
            chunk,
        ]
        .concat()
    };
    // An execute of (BIGINT, BLOB sent as long data): no value for the blob.
    let exec = |id: u32, key: i64| {
        let mut e = vec![cmd::STMT_EXECUTE];
        e.extend_from_slice(&id.to_le_bytes());
        e.push(0);
        e.extend_from_slice(&1u32.to_le_bytes());
        e.push(0); // null bitmap
        e.push(1); // types follow
        e.extend_from_slice(&[types::LONGLONG, 0, 0xfc, 0]);
        e.extend_from_slice(&key.to_le_bytes());
        e
    };
    let ins = id_of(
        &g.command(
            &prepare(format!(
                "INSERT INTO `{schema}`.items (order_id, sku, note) VALUES (?, 'ld', ?)"
            )),
            Expect::Prepare,
        )
        .await,
    );
    for (order, chunks) in [
        (6i64, [&b"even "[..], b"\0\xffsix"]),
        (7, [b"odd ", b"seven"]),
        (9, [b"nine", b""]),
    ] {
        for c in chunks {
            g.send(&long_data(ins, 1, c)).await;
        }
        let r = g.command(&exec(ins, order), Expect::Results).await;
        assert_eq!(
            r[0][0],
            0,
            "INSERT with long data for order {order}: {:?}",
            proxy::err_of(&r)
        );
    }
    // Each row is on its order's shard, with exactly its long data.
    for (shard, want) in [
        (0usize, vec![(6i64, b"even \0\xffsix".to_vec())]),
        (1, vec![(7, b"odd seven".to_vec()), (9, b"nine".to_vec())]),
    ] {
        let mut d = Conn::new(proxy::direct_opts(&tb, shard, Some(&schema)))
            .await
            .unwrap();
        let got: Vec<(i64, Vec<u8>)> = d
            .query("SELECT order_id, note FROM items ORDER BY order_id")
            .await
            .unwrap();
        assert_eq!(got, want, "shard {shard}");
        let _ = d.disconnect().await;
    }
    // An INSERT into a rule table that is not sharded: idgate re-encodes
    // the execute with the id it adds, leaving the long-data value out.
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("CREATE TABLE docs (id BIGINT UNSIGNED PRIMARY KEY, n BIGINT, body BLOB)")
        .await
        .unwrap();
    let doc = id_of(
        &g.command(
            &prepare(format!(
                "INSERT INTO `{schema}`.docs (n, body) VALUES (?, ?)"
            )),
            Expect::Prepare,
        )
        .await,
    );
    g.send(&long_data(doc, 1, b"a long ")).await;
    g.send(&long_data(doc, 1, b"body")).await;
    let r = g.command(&exec(doc, 5), Expect::Results).await;
    assert_eq!(r[0][0], 0, "INSERT with long data: {:?}", proxy::err_of(&r));
    let stored: Option<(u64, Vec<u8>)> = c
        .query_first("SELECT id, body FROM docs WHERE n = 5")
        .await
        .unwrap();
    let (doc_id, body) = stored.expect("the row");
    assert!(doc_id > 0);
    assert_eq!(body, b"a long body");
    drop(c);
    // A keyed SELECT whose other parameter is long data.
    let sel = id_of(
        &g.command(
            &prepare(format!(
                "SELECT sku FROM `{schema}`.items WHERE order_id = ? AND note = ?"
            )),
            Expect::Prepare,
        )
        .await,
    );
    g.send(&long_data(sel, 1, b"odd seven")).await;
    let r = g.command(&exec(sel, 7), Expect::Results).await;
    assert!(proxy::err_of(&r).is_none(), "{:?}", proxy::err_of(&r));
    assert!(
        r.iter().any(|p| p.ends_with(b"\x02ld")),
        "the row of order 7: {r:?}"
    );
    // More long data than max_packet (65536 here) over the session's
    // statements: the execute is refused (1153), and the next one is fine.
    let chunk = vec![b'x'; 40_000];
    g.send(&long_data(ins, 1, &chunk)).await;
    g.send(&long_data(sel, 1, &chunk)).await;
    let r = g.command(&exec(sel, 7), Expect::Results).await;
    let e = proxy::err_of(&r).expect("refused");
    assert_eq!(e.code, 1153, "{e}");
    assert!(e.message.contains("max_packet"), "{e}");
    let r = g.command(&exec(ins, 8), Expect::Results).await;
    assert_eq!(r[0][0], 0, "within the limit: {:?}", proxy::err_of(&r));
    g.send(&long_data(sel, 1, b"odd seven")).await;
    let r = g.command(&exec(sel, 7), Expect::Results).await;
    assert!(
        r.iter().any(|p| p.ends_with(b"\x02ld")),
        "after the refusal: {r:?}"
    );
    // Reset drops held data: the next execute has none, so note = '' finds nothing.
    g.send(&long_data(sel, 1, b"odd seven")).await;
    let mut reset = vec![cmd::STMT_RESET];
    reset.extend_from_slice(&sel.to_le_bytes());
    let r = g.command(&reset, Expect::Single).await;
    assert_eq!(r[0][0], 0);
    let r = g.command(&exec(sel, 7), Expect::Results).await;
    assert!(
        !r.iter().any(|p| p.ends_with(b"\x02ld")),
        "reset dropped the data: {r:?}"
    );
    drop(g);
    proxy::teardown(&tb, p, &schema).await;
}
