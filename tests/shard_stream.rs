//! Scattered reads in bounded memory (issue 22), against a real idgate
//! process on the test bed's three MariaDB shards: a table `t` sharded by
//! id (mod) and, for comparison, its full copy `plain` on shard 0.
//!
//! - a scattered ORDER BY over a table far larger than
//!   `server.max_result_buffer` is read whole and equals the same query on
//!   the unsharded copy, row for row (text and binary protocols);
//! - a client that reads slowly keeps idgate's resident memory flat
//!   (VmHWM of the process, with a wide margin);
//! - a client that disconnects mid-stream leaves no shard thread running
//!   its query, and the shards serve other sessions on the table;
//! - a statement that would hold more than the cap gets error 1038 naming
//!   it, and the session (and another one) goes on;
//! - a merged cursor pulls through the merge, and another statement of the
//!   session in between reads the cursor's rest into memory under the cap
//!   (over it, the next fetch gets 1038).

mod support;

use std::time::{Duration, Instant};

use idgate::protocol::consts::cmd;
use idgate::protocol::response::Expect;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Row, Value};
use support::process::{Idgate, Options};
use support::proxy::{self, LoginSpec, RawClient};
use support::Testbed;

const TABLE: &str = "(id BIGINT UNSIGNED PRIMARY KEY, k INT NULL, \
    note VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL, d DECIMAL(12,3) NULL)";

/// The columns of row `seq`, as a SELECT over MariaDB's sequence table: a
/// key with ties and NULLs, a ~130-byte string whose order needs the
/// collation (case varies), a decimal.
const ROW: &str = "seq, IF(seq % 17 = 0, NULL, (seq * 7919) % 1000), \
    CONCAT(IF(seq % 2 = 0, 'Note ', 'note '), REPEAT(CHAR(97 + seq % 26), 120), seq), seq / 7";

fn rules(schema: &str) -> String {
    format!(
        "[[generator]]\nname = \"seq\"\nkind = \"sequence\"\nbatch = 50\n\n\
         [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"id\"\nsharding = \"mod\"\n"
    )
}

/// idgate with the rules of `schema` and `server_extra` in `[server]`.
fn start(tb: &Testbed, schema: &str, server_extra: &str) -> Idgate {
    Idgate::start(
        tb,
        &Options {
            rules: rules(schema),
            etcd_prefix: format!("/{schema}"),
            server_extra: server_extra.into(),
            ..Options::default()
        },
    )
}

fn opts(p: &Idgate, schema: &str) -> OptsBuilder {
    OptsBuilder::default()
        .ip_or_hostname(p.mysql.ip().to_string())
        .tcp_port(p.mysql.port())
        .user(Some("app"))
        .pass(Some("secret"))
        .db_name(Some(schema))
        .prefer_socket(false)
}

/// The schema on every shard with `rows` rows in `t` (each on the shard
/// its id maps to) and, if `plain`, all of them in `plain` on shard 0.
async fn fill(tb: &Testbed, rows: u64, plain: bool) -> String {
    let schema = support::unique("stream");
    proxy::create_schema(tb, &schema).await;
    let n = tb.shards.len();
    for shard in 0..n {
        let mut sql = vec![
            format!("USE `{schema}`"),
            format!("CREATE TABLE `{schema}`.t {TABLE}"),
            format!(
                "INSERT INTO `{schema}`.t SELECT {ROW} FROM seq_1_to_{rows} WHERE seq % {n} = {shard}"
            ),
        ];
        if plain && shard == 0 {
            sql.push(format!("CREATE TABLE `{schema}`.plain {TABLE}"));
            sql.push(format!(
                "INSERT INTO `{schema}`.plain SELECT {ROW} FROM seq_1_to_{rows}"
            ));
        }
        let sql: Vec<&str> = sql.iter().map(String::as_str).collect();
        proxy::admin(tb, shard, &sql).await;
    }
    schema
}

async fn drop_schema(tb: &Testbed, schema: &str) {
    for shard in 0..tb.shards.len() {
        proxy::admin(tb, shard, &[&format!("DROP DATABASE IF EXISTS `{schema}`")]).await;
    }
}

fn values(rows: Vec<Row>) -> Vec<Vec<Value>> {
    rows.into_iter().map(Row::unwrap).collect()
}

/// `kB` of idgate's /proc status line `key` (VmRSS, VmHWM).
fn status_kb(p: &Idgate, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{}/status", p.child.id())).expect("status");
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc status"))
}

/// Threads of shard `shard` running a statement that starts with `prefix`
/// in `schema`.
async fn running(tb: &Testbed, shard: usize, schema: &str, prefix: &str) -> u64 {
    let mut c = Conn::new(proxy::direct_opts(tb, shard, None))
        .await
        .unwrap();
    let n: Option<u64> = c
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ? AND INFO LIKE CONCAT(?, '%')",
            (schema, prefix),
        )
        .await
        .unwrap();
    let _ = c.disconnect().await;
    n.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_scatter_larger_than_the_cap_equals_one_table() {
    let Some(tb) = support::testbed() else { return };
    // 20,000 rows of about 150 bytes (3 MB) through a 256 KiB cap.
    let schema = fill(&tb, 20_000, true).await;
    let p = start(&tb, &schema, "max_result_buffer = 262144");
    let mut via = Conn::new(opts(&p, &schema)).await.unwrap();
    let mut direct = Conn::new(proxy::direct_opts(&tb, 0, Some(&schema)))
        .await
        .unwrap();
    for q in [
        "SELECT id, k, note, d FROM {} ORDER BY k, id",
        "SELECT id, note FROM {} ORDER BY note DESC, id",
        "SELECT d, id, k FROM {} ORDER BY d DESC LIMIT 300 OFFSET 12000",
        "SELECT id, k FROM {} ORDER BY k DESC, id LIMIT 7",
        "SELECT COUNT(*), SUM(d), MIN(note), MAX(k), MIN(k) FROM {}",
    ] {
        let sharded = q.replace("{}", "t");
        let whole = q.replace("{}", "plain");
        let got = values(via.query(&sharded).await.unwrap());
        let want = values(direct.query(&whole).await.unwrap());
        assert!(!want.is_empty(), "{whole}");
        assert_eq!(got.len(), want.len(), "{sharded}: row count");
        assert!(got == want, "{sharded}: rows differ (text protocol)");
        // The binary protocol (a prepared statement).
        let got = values(via.exec(&sharded, ()).await.unwrap());
        let want = values(direct.exec(&whole, ()).await.unwrap());
        assert!(got == want, "{sharded}: rows differ (binary protocol)");
    }
    drop(via);
    drop(direct);
    drop(p);
    drop_schema(&tb, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_keeps_idgate_memory_flat() {
    let Some(tb) = support::testbed() else { return };
    // 400,000 rows of about 150 bytes: 60 MB of rows, against a 4 MiB cap.
    const ROWS: u64 = 400_000;
    const CAP: u64 = 4 << 20;
    let schema = fill(&tb, ROWS, false).await;
    let p = start(&tb, &schema, &format!("max_result_buffer = {CAP}"));
    let mut c = Conn::new(opts(&p, &schema)).await.unwrap();
    // Warm up: the session, its shard connections and the column cache.
    let _: Vec<Row> = c
        .query("SELECT id, k, note FROM t ORDER BY id LIMIT 10")
        .await
        .unwrap();
    let before = status_kb(&p, "VmRSS");
    let mut result = c
        .query_iter("SELECT id, k, note FROM t ORDER BY id")
        .await
        .unwrap();
    let mut n = 0u64;
    let mut last = 0u64;
    while let Some(row) = result.next().await.unwrap() {
        let id: u64 = row.get(0).unwrap();
        assert!(id > last, "ids in order: {id} after {last}");
        last = id;
        n += 1;
        if n % 4000 == 0 {
            // A slow reader: idgate must hold the shards back, not buffer.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    drop(result);
    assert_eq!(n, ROWS);
    let peak = status_kb(&p, "VmHWM");
    let growth = peak.saturating_sub(before) * 1024;
    eprintln!("idgate VmRSS before {before} kB, VmHWM after {peak} kB: growth {growth} bytes");
    assert!(
        growth < 5 * CAP,
        "idgate's peak RSS grew by {growth} bytes while streaming {ROWS} rows (cap {CAP})"
    );
    drop(c);
    drop(p);
    drop_schema(&tb, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_stream_leaves_no_shard_connection_stuck() {
    let Some(tb) = support::testbed() else { return };
    const ROWS: u64 = 200_000;
    let schema = fill(&tb, ROWS, false).await;
    let p = start(&tb, &schema, "");
    let q = "SELECT id, note FROM t ORDER BY id";
    {
        let mut g = RawClient::connect(p.mysql, &LoginSpec::new("app", "secret").db(&schema))
            .await
            .expect_ok();
        let mut payload = vec![cmd::QUERY];
        payload.extend_from_slice(q.as_bytes());
        g.send(&payload).await;
        // The column head and some rows, then the client is gone.
        for _ in 0..100 {
            assert!(g.read().await.is_some(), "rows before the disconnect");
        }
    }
    // Every shard ends the query (bounded polling: it was abandoned, not
    // left waiting for a reader).
    let deadline = Instant::now() + Duration::from_secs(60);
    for shard in 0..tb.shards.len() {
        while running(&tb, shard, &schema, q).await > 0 {
            assert!(
                Instant::now() < deadline,
                "shard {shard} still runs the abandoned query after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Other sessions use the table through idgate.
    let mut c = Conn::new(opts(&p, &schema)).await.unwrap();
    let count: Option<u64> = c.query_first("SELECT COUNT(*) FROM t").await.unwrap();
    assert_eq!(count, Some(ROWS));
    c.query_drop("UPDATE t SET k = 5 WHERE id = 1")
        .await
        .unwrap();
    let ids: Vec<u64> = c
        .query("SELECT id FROM t ORDER BY id LIMIT 5")
        .await
        .unwrap();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    drop(c);
    drop(p);
    drop_schema(&tb, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_cap_is_error_1038_and_the_sessions_go_on() {
    let Some(tb) = support::testbed() else { return };
    let schema = fill(&tb, 30, false).await;
    let p = start(&tb, &schema, "max_result_buffer = 65536");
    let mut other = Conn::new(opts(&p, &schema)).await.unwrap();
    let mut c = Conn::new(opts(&p, &schema)).await.unwrap();
    // One 40 KB row per shard is held by the merge: 120 KB > 64 KiB.
    let e = c
        .query_drop("SELECT id, REPEAT(note, 300) AS big FROM t ORDER BY id")
        .await
        .unwrap_err();
    match e {
        mysql_async::Error::Server(s) => {
            assert_eq!(s.code, 1038, "{s:?}");
            assert!(
                s.message.contains("server.max_result_buffer (65536 bytes)"),
                "{}",
                s.message
            );
        }
        other => panic!("expected error 1038, got {other:?}"),
    }
    // The same session goes on, on the same shard connections.
    let ids: Vec<u64> = c.query("SELECT id FROM t ORDER BY id DESC").await.unwrap();
    assert_eq!(ids, (1..=30).rev().collect::<Vec<u64>>());
    let lens: Vec<(u64, u64)> = c
        .query("SELECT id, LENGTH(REPEAT(note, 300)) FROM t ORDER BY id LIMIT 2")
        .await
        .unwrap();
    assert_eq!(lens.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
    // So does another session.
    let n: Option<u64> = other.query_first("SELECT COUNT(*) FROM t").await.unwrap();
    assert_eq!(n, Some(30));
    drop(c);
    drop(other);
    drop(p);
    drop_schema(&tb, &schema).await;
}

fn prepare(sql: &str) -> Vec<u8> {
    let mut p = vec![cmd::STMT_PREPARE];
    p.extend_from_slice(sql.as_bytes());
    p
}

/// COM_STMT_EXECUTE of statement `id` (no parameters) opening a read-only cursor.
fn execute_cursor(id: u32) -> Vec<u8> {
    let mut p = vec![cmd::STMT_EXECUTE];
    p.extend_from_slice(&id.to_le_bytes());
    p.push(1); // CURSOR_TYPE_READ_ONLY
    p.extend_from_slice(&1u32.to_le_bytes());
    p
}

fn fetch(id: u32, n: u32) -> Vec<u8> {
    let mut p = vec![cmd::STMT_FETCH];
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&n.to_le_bytes());
    p
}

/// Opens a cursor on `sql` and returns its statement id.
async fn open_cursor(g: &mut RawClient, sql: &str) -> u32 {
    let r = g.command(&prepare(sql), Expect::Prepare).await;
    assert!(proxy::err_of(&r).is_none(), "{sql}: {r:?}");
    let id = u32::from_le_bytes(r[0][1..5].try_into().unwrap());
    let opened = g.command(&execute_cursor(id), Expect::Results).await;
    assert!(proxy::err_of(&opened).is_none(), "{sql}: {opened:?}");
    id
}

/// Rows of one fetch (the terminator dropped) and whether it was the last.
async fn fetch_rows(g: &mut RawClient, id: u32, n: u32) -> Result<(Vec<Vec<u8>>, bool), u16> {
    let mut r = g.command(&fetch(id, n), Expect::Rows).await;
    if let Some(e) = proxy::err_of(&r) {
        return Err(e.code);
    }
    let end = r.pop().expect("terminator");
    let st = u16::from_le_bytes([end[3], end[4]]);
    Ok((r, st & idgate::protocol::consts::status::LAST_ROW_SENT != 0))
}

/// Every row of a cursor, `n` per fetch.
async fn drain_cursor(g: &mut RawClient, id: u32, n: u32) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    loop {
        let (rows, last) = fetch_rows(g, id, n).await.expect("fetch");
        all.extend(rows);
        if last {
            return all;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_cursor_pulls_through_the_merge() {
    let Some(tb) = support::testbed() else { return };
    // 3,000 rows of about 150 bytes (450 KB) through a 256 KiB cap.
    let schema = fill(&tb, 3_000, true).await;
    let p = start(&tb, &schema, "max_result_buffer = 262144");
    let spec = LoginSpec::new("app", "secret").db(&schema);
    let mut g = RawClient::connect(p.mysql, &spec).await.expect_ok();
    let mut d = RawClient::direct(&tb, 0, proxy::CLIENT_CAPS).await;
    assert!(proxy::err_of(&d.query(&format!("USE `{schema}`")).await).is_none());
    let q = "SELECT id, k, note, d FROM {} ORDER BY note, id";
    // Read whole through the cursor: the rows of the unsharded copy.
    let id = open_cursor(&mut g, &q.replace("{}", "t")).await;
    let got = drain_cursor(&mut g, id, 700).await;
    let did = open_cursor(&mut d, &q.replace("{}", "plain")).await;
    let want = drain_cursor(&mut d, did, 700).await;
    assert_eq!(got.len(), 3000);
    assert!(got == want, "cursor rows differ from the unsharded copy's");
    // Another statement while the cursor is open: its rest (under the
    // cap) is read into memory, and fetching goes on where it was.
    let small = "SELECT id, k, note, d FROM {} ORDER BY note, id LIMIT 1000";
    let id = open_cursor(&mut g, &small.replace("{}", "t")).await;
    let (mut rows, _) = fetch_rows(&mut g, id, 10).await.expect("fetch");
    let r = g.query("SELECT COUNT(*) FROM t").await;
    assert!(proxy::err_of(&r).is_none(), "{r:?}");
    rows.extend(drain_cursor(&mut g, id, 100).await);
    assert!(
        rows[..] == want[..1000],
        "cursor rows after another statement"
    );
    // Over the cap: the next fetch fails with 1038, the session goes on.
    let id = open_cursor(&mut g, &q.replace("{}", "t")).await;
    fetch_rows(&mut g, id, 10).await.expect("fetch");
    let r = g.query("SELECT COUNT(*) FROM t").await;
    assert!(proxy::err_of(&r).is_none(), "{r:?}");
    assert_eq!(fetch_rows(&mut g, id, 10).await.unwrap_err(), 1038);
    let r = g.query("SELECT id FROM t ORDER BY id LIMIT 3").await;
    assert!(proxy::err_of(&r).is_none(), "{r:?}");
    drop(g);
    drop(d);
    drop(p);
    drop_schema(&tb, &schema).await;
}
