//! Prepared multi-row INSERTs whose rows go to several shards (issue 5),
//! on the test bed's two real MariaDB shards. idgate runs such an execute
//! as its text form (`frontend/inline.rs`), split by row like a text INSERT.
//!
//! The test that matters is differential: the same raw COM_STMT_EXECUTE,
//! with a value of every binary-protocol type (and long data), is sent to
//! MariaDB directly into an AUTO_INCREMENT table and through idgate into a
//! sharded table; every stored value must be the same. Then real drivers:
//! mysql_async batches over both shards, in a transaction that rolls back,
//! with a string shard key, under `NO_BACKSLASH_ESCAPES` and a latin1
//! connection.

mod support;

use idgate::protocol::consts::cmd;
use idgate::protocol::reply;
use idgate::protocol::response::Expect;
use idgate::protocol::stmt::types;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use support::proxy::{self, Proxy, RawClient};

fn rules(schema: &str) -> String {
    format!(
        "[[generator]]\nname = \"seq\"\nkind = \"sequence\"\nbatch = 50\n\n\
         [[table]]\nname = \"{schema}.vals\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"id\"\nsharding = \"mod\"\n\n\
         [[table]]\nname = \"{schema}.items\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"order_id\"\nsharding = \"mod\"\n\n\
         [[table]]\nname = \"{schema}.acct\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"code\"\nsharding = \"hash\"\n\n\
         [[table]]\nname = \"{schema}.tags\"\ncolumn = \"id\"\ngenerator = \"seq\"\nbroadcast = true\n"
    )
}

/// The columns of `vals` (and of the direct reference table `ref`): one per
/// binary-protocol type the test binds.
const COLUMNS: &str = "tiny TINYINT, small SMALLINT UNSIGNED, med MEDIUMINT, i INT, big BIGINT UNSIGNED, \
     yr YEAR, f FLOAT, x DOUBLE, m DECIMAL(30,10), d DATE, dt DATETIME(6), ts TIMESTAMP(6) NULL, \
     t TIME(6), s VARCHAR(64) CHARACTER SET utf8mb4, b BLOB, j VARCHAR(64), e VARCHAR(8), n INT NULL";

/// Every column's value as text, comparable across tables.
const SHOW: &str =
    "CONCAT_WS('|', tiny, small, med, i, big, yr, f, x, m, d, dt, IFNULL(ts, 'null'), t, \
     HEX(s), HEX(b), j, e, IFNULL(n, 'null'))";

/// A small broadcast table (and its AUTO_INCREMENT reference): upserts.
const TAGS: &str =
    "id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, name VARCHAR(16) NOT NULL UNIQUE, n INT NOT NULL DEFAULT 1";

async fn setup(tb: &support::Testbed) -> (Proxy, String) {
    let schema = support::unique("psplit");
    proxy::create_schema(tb, &schema).await;
    let p = Proxy::start_rules(tb, &rules(&schema), &format!("/{schema}")).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop(format!(
        "CREATE TABLE vals (id BIGINT UNSIGNED PRIMARY KEY, {COLUMNS})"
    ))
    .await
    .unwrap();
    c.query_drop("CREATE TABLE items (id BIGINT UNSIGNED PRIMARY KEY, order_id BIGINT NOT NULL, sku VARCHAR(32) CHARACTER SET utf8mb4 NOT NULL)")
        .await
        .unwrap();
    c.query_drop("CREATE TABLE acct (id BIGINT UNSIGNED PRIMARY KEY, code VARCHAR(16) NOT NULL, name VARCHAR(32))")
        .await
        .unwrap();
    c.query_drop(format!("CREATE TABLE tags ({TAGS})"))
        .await
        .unwrap();
    drop(c);
    proxy::admin(
        tb,
        0,
        &[
            &format!(
                "CREATE TABLE `{schema}`.ref (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, {COLUMNS})"
            ),
            &format!("CREATE TABLE `{schema}`.tags_ref ({TAGS}) AUTO_INCREMENT = 1000"),
        ],
    )
    .await;
    (p, schema)
}

/// A binary-protocol parameter: type code, flags, value (`None`: NULL).
type Param = (u8, u8, Option<Vec<u8>>);

/// One row's parameters: `id` NULL (generated), then a value per column;
/// `k` varies the values between rows.
fn row(k: i64) -> Vec<Param> {
    let date = |y: u16, mo: u8, d: u8| [&y.to_le_bytes()[..], &[mo, d]].concat();
    let mut dt = date(2024, 2, 29);
    dt.extend_from_slice(&[23, 59, 58]);
    dt.extend_from_slice(&(123_456 + k as u32).to_le_bytes());
    // TIME: negative, 1 day 2:03:04.5
    let mut t = vec![1u8];
    t.extend_from_slice(&1u32.to_le_bytes());
    t.extend_from_slice(&[2, 3, 4]);
    t.extend_from_slice(&500_000u32.to_le_bytes());
    vec![
        (types::LONGLONG, 0, None),
        (types::TINY, 0, Some(vec![(-5 - k) as u8])),
        (types::SHORT, 0x80, Some(65535u16.to_le_bytes().to_vec())),
        (
            types::LONG,
            0,
            Some((-8_000_000i32 + k as i32).to_le_bytes().to_vec()),
        ),
        (types::LONG, 0, Some(i32::MIN.to_le_bytes().to_vec())),
        (types::LONGLONG, 0x80, Some(u64::MAX.to_le_bytes().to_vec())),
        (types::SHORT, 0, Some(2024u16.to_le_bytes().to_vec())),
        (
            types::FLOAT,
            0,
            Some((0.1f32 + k as f32).to_le_bytes().to_vec()),
        ),
        (
            types::DOUBLE,
            0,
            Some(
                (-1.234_567_890_123_456_7e-300 * (k + 1) as f64)
                    .to_le_bytes()
                    .to_vec(),
            ),
        ),
        (
            types::NEWDECIMAL,
            0,
            Some(format!("-12345678901234567890.012345678{k}").into_bytes()),
        ),
        (types::DATE, 0, Some(date(2024, 2, 29))),
        (types::DATETIME, 0, Some(dt.clone())),
        (types::TIMESTAMP, 0, Some(dt[..7].to_vec())),
        (types::TIME, 0, Some(t)),
        (
            types::VAR_STRING,
            0,
            Some(format!("it's a \\ '{k}' ünïcødé ? \0 end").into_bytes()),
        ),
        (
            types::BLOB,
            0,
            Some(vec![0, 0xff, b'\\', b'\'', 0x80, k as u8]),
        ),
        (types::STRING, 0, Some(b"--1 /* ? */".to_vec())),
        (types::VAR_STRING, 0, Some(format!("v{k}").into_bytes())),
        (types::LONG, 0, None),
    ]
}

/// COM_STMT_EXECUTE of statement `id` with `params` (types sent); the
/// parameters in `long` carry no value (sent as long data).
fn execute(id: u32, params: &[Param], long: &[usize]) -> Vec<u8> {
    let mut e = vec![cmd::STMT_EXECUTE];
    e.extend_from_slice(&id.to_le_bytes());
    e.push(0);
    e.extend_from_slice(&1u32.to_le_bytes());
    let mut bitmap = vec![0u8; params.len().div_ceil(8)];
    for (i, p) in params.iter().enumerate() {
        if p.2.is_none() {
            bitmap[i / 8] |= 1 << (i % 8);
        }
    }
    e.extend_from_slice(&bitmap);
    e.push(1);
    for p in params {
        e.extend_from_slice(&[p.0, p.1]);
    }
    for (i, p) in params.iter().enumerate() {
        let Some(v) = &p.2 else { continue };
        if long.contains(&i) {
            continue;
        }
        match p.0 {
            types::TINY
            | types::SHORT
            | types::YEAR
            | types::INT24
            | types::LONG
            | types::LONGLONG
            | types::FLOAT
            | types::DOUBLE => e.extend_from_slice(v),
            types::DATE | types::DATETIME | types::TIMESTAMP | types::TIME => {
                e.push(v.len() as u8);
                e.extend_from_slice(v);
            }
            _ => {
                assert!(v.len() < 251);
                e.push(v.len() as u8);
                e.extend_from_slice(v);
            }
        }
    }
    e
}

fn long_data(id: u32, param: u16, chunk: &[u8]) -> Vec<u8> {
    [
        &[cmd::STMT_SEND_LONG_DATA][..],
        &id.to_le_bytes(),
        &param.to_le_bytes(),
        chunk,
    ]
    .concat()
}

/// Prepares `sql` and runs one execute of `params` (with long data for
/// the parameter `long_param`, in two chunks); returns the reply.
async fn prepare_and_execute(
    c: &mut RawClient,
    sql: &str,
    params: &[Param],
    long_param: usize,
) -> Vec<Vec<u8>> {
    let prepare = [&[cmd::STMT_PREPARE][..], sql.as_bytes()].concat();
    let r = c.command(&prepare, Expect::Prepare).await;
    assert_eq!(r[0][0], 0, "prepare {sql}: {:?}", proxy::err_of(&r));
    let id = u32::from_le_bytes([r[0][1], r[0][2], r[0][3], r[0][4]]);
    let v = params[long_param].2.clone().expect("a long-data value");
    let (a, b) = v.split_at(v.len() / 2);
    c.send(&long_data(id, long_param as u16, a)).await;
    c.send(&long_data(id, long_param as u16, b)).await;
    c.command(&execute(id, params, &[long_param]), Expect::Results)
        .await
}

#[tokio::test]
async fn every_bound_type_is_stored_as_mariadb_stores_it() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let params: Vec<Param> = (0..3).flat_map(row).collect();
    let per_row = params.len() / 3;
    let marks = format!("({})", vec!["?"; per_row].join(", "));
    let cols = "id, tiny, small, med, i, big, yr, f, x, m, d, dt, ts, t, s, b, j, e, n";
    let values = format!("{marks}, {marks}, {marks}");
    // Row 2's BLOB goes as long data.
    let long_param = per_row + 15;

    let mut direct = RawClient::direct(&tb, 0, proxy::CLIENT_CAPS).await;
    direct.exec_ok("SET time_zone = '+00:00'").await;
    let want = prepare_and_execute(
        &mut direct,
        &format!("INSERT INTO `{schema}`.ref ({cols}) VALUES {values}"),
        &params,
        long_param,
    )
    .await;
    assert_eq!(want[0][0], 0, "directly: {:?}", proxy::err_of(&want));
    let want = reply::parse_ok(&want[0]).expect("direct: an OK packet");

    let mut g = RawClient::app(p.addr, proxy::CLIENT_CAPS).await;
    g.exec_ok("SET time_zone = '+00:00'").await;
    let got = prepare_and_execute(
        &mut g,
        &format!("INSERT INTO `{schema}`.vals ({cols}) VALUES {values}"),
        &params,
        long_param,
    )
    .await;
    assert_eq!(got[0][0], 0, "through idgate: {:?}", proxy::err_of(&got));
    let got = reply::parse_ok(&got[0]).expect("an OK packet");
    assert_eq!(got.affected_rows, 3);
    assert_eq!(got.affected_rows, want.affected_rows);
    assert_eq!(got.warnings, want.warnings, "warnings");
    drop(g);
    drop(direct);

    // The rows, by id, from both shards; the reference, by its id.
    let mut stored: Vec<(u64, usize, String)> = Vec::new();
    for shard in 0..2 {
        let mut d = Conn::new(proxy::direct_opts(&tb, shard, Some(&schema)))
            .await
            .unwrap();
        d.query_drop("SET time_zone = '+00:00'").await.unwrap();
        let rows: Vec<(u64, String)> = d
            .query(format!("SELECT id, {SHOW} FROM vals ORDER BY id"))
            .await
            .unwrap();
        stored.extend(rows.into_iter().map(|(id, v)| (id, shard, v)));
        let _ = d.disconnect().await;
    }
    stored.sort();
    let mut d = Conn::new(proxy::direct_opts(&tb, 0, Some(&schema)))
        .await
        .unwrap();
    d.query_drop("SET time_zone = '+00:00'").await.unwrap();
    let reference: Vec<String> = d
        .query(format!("SELECT {SHOW} FROM ref ORDER BY id"))
        .await
        .unwrap();
    let _ = d.disconnect().await;
    assert_eq!(stored.len(), 3, "three rows: {stored:?}");
    for ((id, shard, v), r) in stored.iter().zip(&reference) {
        assert_eq!(*shard as u64, id % 2, "row {id} is on its shard");
        assert_eq!(v, r, "row {id}: stored through idgate vs directly");
    }
    assert!(
        stored.iter().any(|s| s.1 == 0) && stored.iter().any(|s| s.1 == 1),
        "the rows went to both shards: {stored:?}"
    );
    assert_eq!(got.last_insert_id, stored[0].0, "the first generated id");
    proxy::teardown(&tb, p, &schema).await;
}

/// The `(id, order_id, sku)` rows of `items` on each shard.
async fn items(tb: &support::Testbed, schema: &str) -> [Vec<(u64, i64, String)>; 2] {
    let mut out: [Vec<(u64, i64, String)>; 2] = Default::default();
    for (shard, rows) in out.iter_mut().enumerate() {
        let mut d = Conn::new(proxy::direct_opts(tb, shard, Some(schema)))
            .await
            .unwrap();
        *rows = d
            .query("SELECT id, order_id, sku FROM items ORDER BY id")
            .await
            .unwrap();
        let _ = d.disconnect().await;
    }
    out
}

#[tokio::test]
async fn driver_batches_over_shards() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();

    // mysql_async's prepared batch, as an ORM's batch insert sends it.
    let stmt = c
        .prep("INSERT INTO items (order_id, sku) VALUES (?, ?), (?, ?), (?, ?)")
        .await
        .unwrap();
    c.exec_drop(&stmt, (1, "one", 2, "two", 3, "it's \\ three"))
        .await
        .unwrap();
    assert_eq!(c.affected_rows(), 3);
    let first = c.last_insert_id().expect("lastrowid");
    let lid: Option<u64> = c.query_first("SELECT LAST_INSERT_ID()").await.unwrap();
    assert_eq!(lid, Some(first));
    let [s0, s1] = items(&tb, &schema).await;
    assert_eq!(s0.iter().map(|r| r.1).collect::<Vec<_>>(), [2]);
    assert_eq!(s1.iter().map(|r| r.1).collect::<Vec<_>>(), [1, 3]);
    assert_eq!(s1[0].0, first, "the first row carries the reported id");
    assert_eq!(s1[1].2, "it's \\ three");

    // In a transaction that rolls back: nothing stays on either shard.
    c.query_drop("BEGIN").await.unwrap();
    c.exec_drop(&stmt, (4, "r", 5, "r", 6, "r")).await.unwrap();
    c.query_drop("ROLLBACK").await.unwrap();
    let [s0, s1] = items(&tb, &schema).await;
    assert_eq!(s0.len() + s1.len(), 3, "rolled back on both shards");

    // NO_BACKSLASH_ESCAPES and a latin1 connection: the values as bound.
    c.query_drop("SET sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
        .await
        .unwrap();
    c.query_drop("SET NAMES latin1").await.unwrap();
    // "cé" in latin1 (not UTF-8), and a backslash.
    c.exec_drop(&stmt, (7, b"c\xe9".to_vec(), 8, "a\\b", 9, "x''y"))
        .await
        .unwrap();
    c.query_drop("SET NAMES utf8mb4").await.unwrap();
    let got: Vec<(i64, String)> = c
        .query("SELECT order_id, sku FROM items WHERE order_id IN (7, 8, 9) ORDER BY order_id")
        .await
        .unwrap();
    assert_eq!(
        got,
        [
            (7, "cé".to_string()),
            (8, "a\\b".to_string()),
            (9, "x''y".to_string())
        ]
    );

    // Hash of a string key: each row where CRC32(WEIGHT_STRING(RTRIM(code))) % 2 says.
    c.exec_drop(
        "INSERT INTO acct (code, name) VALUES (?, ?), (?, ?), (?, ?), (?, ?)",
        ("a", "n", "b", "n", "c", "n", "d", "n"),
    )
    .await
    .unwrap();
    let mut shards_used = 0;
    for shard in 0..2u32 {
        let mut d = Conn::new(proxy::direct_opts(&tb, shard as usize, Some(&schema)))
            .await
            .unwrap();
        let n: u32 = d
            .query_first("SELECT COUNT(*) FROM acct")
            .await
            .unwrap()
            .unwrap();
        let wrong: u32 = d
            .exec_first(
                "SELECT COUNT(*) FROM acct WHERE CRC32(WEIGHT_STRING(RTRIM(code))) % 2 <> ?",
                (shard,),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(wrong, 0, "shard {shard}");
        if n > 0 {
            shards_used += 1;
        }
        let _ = d.disconnect().await;
    }
    assert_eq!(shards_used, 2);

    // RETURNING rows of several shards would come back as text: refused.
    let e = c
        .exec_drop(
            "INSERT INTO items (order_id, sku) VALUES (?, 'a'), (?, 'b') RETURNING id",
            (10, 11),
        )
        .await
        .unwrap_err();
    match e {
        mysql_async::Error::Server(e) => {
            assert_eq!(e.code, 1235, "{e:?}");
            assert!(e.message.contains("RETURNING"), "{}", e.message);
            assert!(e.message.contains("items"), "{}", e.message);
        }
        other => panic!("{other}"),
    }
    drop(c);
    proxy::teardown(&tb, p, &schema).await;
}

/// What one execute of an upsert reported: affected rows, and the name of
/// the row whose id is the last insert id (`-` for 0, `?` for no row).
async fn upsert_steps(c: &mut Conn, table: &str) -> Vec<(u64, String)> {
    let odku = c
        .prep(format!(
            "INSERT INTO {table} (name) VALUES (?) ON DUPLICATE KEY UPDATE n = n + 1"
        ))
        .await
        .unwrap();
    let ignore = c
        .prep(format!(
            "INSERT IGNORE INTO {table} (name, n) VALUES (?, 5)"
        ))
        .await
        .unwrap();
    let mut out = Vec::new();
    for (stmt, name) in [
        (&odku, "a"),
        (&odku, "a"),
        (&odku, "b"),
        (&ignore, "b"),
        (&ignore, "c"),
        (&odku, "c"),
    ] {
        c.exec_drop(stmt, (name,)).await.unwrap();
        let affected = c.affected_rows();
        let lid = c.last_insert_id().unwrap_or(0);
        let who: Option<String> = c
            .exec_first(format!("SELECT name FROM {table} WHERE id = ?"), (lid,))
            .await
            .unwrap();
        let who = match (lid, who) {
            (0, _) => "-".to_string(),
            (_, Some(n)) => n,
            (_, None) => "?".to_string(),
        };
        out.push((affected, who));
    }
    out
}

/// Prepared INSERT IGNORE / ON DUPLICATE KEY UPDATE into a broadcast
/// table (refused before): run as text on every copy, reporting what
/// MariaDB reports for the same executes on an AUTO_INCREMENT table.
#[tokio::test]
async fn prepared_upserts_into_a_broadcast_table() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut d = Conn::new(proxy::direct_opts(&tb, 0, Some(&schema)))
        .await
        .unwrap();
    let want = upsert_steps(&mut d, "tags_ref").await;
    let _ = d.disconnect().await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    let got = upsert_steps(&mut c, "tags").await;
    assert_eq!(
        got, want,
        "(affected rows, row of the last insert id) per execute"
    );
    drop(c);
    let mut copies = Vec::new();
    for shard in 0..2 {
        let mut d = Conn::new(proxy::direct_opts(&tb, shard, Some(&schema)))
            .await
            .unwrap();
        let rows: Vec<(u64, String, i32)> = d
            .query("SELECT id, name, n FROM tags ORDER BY id")
            .await
            .unwrap();
        let _ = d.disconnect().await;
        copies.push(rows);
    }
    assert_eq!(copies[0], copies[1], "the copies are the same");
    let names: Vec<(&str, i32)> = copies[0].iter().map(|r| (r.1.as_str(), r.2)).collect();
    assert_eq!(names, [("a", 2), ("b", 1), ("c", 6)]);
    proxy::teardown(&tb, p, &schema).await;
}
