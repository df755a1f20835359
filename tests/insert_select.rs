//! INSERT ... SELECT into rule tables (issue 17), against a real idgate
//! process on the test bed's two MariaDB shards.
//!
//! Differential: each statement also runs directly on shard 0 into `ref`,
//! a copy of the target with `id BIGINT AUTO_INCREMENT`, and the client
//! must see the same affected rows, info text, warnings and last insert
//! id, and the tables must hold the same rows (ids included: the
//! generator and the AUTO_INCREMENT both start at 1).
//!
//! - values of every kind (NULL and 'NULL', binary bytes with quotes,
//!   backslashes and NUL, multi-byte text, decimals, FLOAT/DOUBLE, dates,
//!   times, BIT) and conversions between types (a binary string into an
//!   INT column, BIT into INT, FLOAT into VARCHAR, DATE into INT) in
//!   strict and non-strict mode;
//! - sources on each placement: the default shard, a sharded table
//!   (scattered, ORDER BY and LIMIT), a broadcast table, the target itself;
//! - explicit ids kept and observed, LAST_INSERT_ID();
//! - all or nothing when one shard refuses its rows;
//! - 200k rows with idgate's peak RSS bounded;
//! - the forms idgate refuses, with the table named.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Row, Value};
use support::process::{Idgate, Options};
use support::proxy;
use support::Testbed;

const COLS: &str = "n INT NULL, s VARCHAR(40) CHARACTER SET utf8mb4 NULL, b VARBINARY(40) NULL, \
    d DECIMAL(12,3) NULL, f FLOAT NULL, g DOUBLE NULL, dt DATETIME(3) NULL, dd DATE NULL, \
    tm TIME NULL, bits BIT(8) NULL";
const NAMES: &str = "n, s, b, d, f, g, dt, dd, tm, bits";

fn rules(schema: &str) -> String {
    format!(
        "[[generator]]\nname = \"g_{schema}\"\nkind = \"sequence\"\nbatch = 100\nstart = 1\n\n\
         [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"g_{schema}\"\nshard_key = \"id\"\nsharding = \"mod\"\n\n\
         [[generator]]\nname = \"h_{schema}\"\nkind = \"sequence\"\nbatch = 100\nstart = 1\n\n\
         [[table]]\nname = \"{schema}.conv\"\ncolumn = \"id\"\ngenerator = \"h_{schema}\"\nshard_key = \"id\"\nsharding = \"mod\"\n\n\
         [[generator]]\nname = \"k_{schema}\"\nkind = \"sequence\"\nbatch = 100\nstart = 1\n\n\
         [[table]]\nname = \"{schema}.sh\"\ncolumn = \"id\"\ngenerator = \"k_{schema}\"\nshard_key = \"id\"\nsharding = \"mod\"\n\n\
         [[generator]]\nname = \"o_{schema}\"\nkind = \"sequence\"\nbatch = 100\nstart = 1\n\n\
         [[table]]\nname = \"{schema}.one\"\ncolumn = \"id\"\ngenerator = \"o_{schema}\"\n\n\
         [[generator]]\nname = \"b_{schema}\"\nkind = \"sequence\"\nbatch = 100\nstart = 1\n\n\
         [[table]]\nname = \"{schema}.bc\"\ncolumn = \"id\"\ngenerator = \"b_{schema}\"\nbroadcast = true\n"
    )
}

struct Bed {
    tb: Testbed,
    p: Idgate,
    schema: String,
}

impl Bed {
    async fn new() -> Option<Bed> {
        let tb = support::testbed()?;
        let schema = support::unique("insel");
        proxy::create_schema(&tb, &schema).await;
        let p = Idgate::start(
            &tb,
            &Options {
                rules: rules(&schema),
                etcd_prefix: format!("/{schema}"),
                ..Options::default()
            },
        );
        Some(Bed { tb, p, schema })
    }

    fn opts(&self) -> OptsBuilder {
        OptsBuilder::default()
            .ip_or_hostname(self.p.mysql.ip().to_string())
            .tcp_port(self.p.mysql.port())
            .user(Some("app"))
            .pass(Some("secret"))
            .db_name(Some(self.schema.clone()))
            .prefer_socket(false)
    }

    async fn idgate(&self) -> Conn {
        Conn::new(self.opts()).await.expect("connect to idgate")
    }

    async fn direct(&self, shard: usize) -> Conn {
        Conn::new(proxy::direct_opts(&self.tb, shard, Some(&self.schema)))
            .await
            .expect("connect to the shard")
    }

    async fn on_each(&self, sql: &[String]) {
        for shard in 0..self.tb.shards.len() {
            let sql: Vec<&str> = sql.iter().map(String::as_str).collect();
            let mut all = vec![format!("USE `{}`", self.schema)];
            all.extend(sql.iter().map(|s| s.to_string()));
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            proxy::admin(&self.tb, shard, &all).await;
        }
    }

    async fn on(&self, shard: usize, sql: &[String]) {
        let mut all = vec![format!("USE `{}`", self.schema)];
        all.extend(sql.iter().cloned());
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        proxy::admin(&self.tb, shard, &all).await;
    }

    async fn finish(self) {
        for shard in 0..self.tb.shards.len() {
            proxy::admin(
                &self.tb,
                shard,
                &[&format!("DROP DATABASE IF EXISTS `{}`", self.schema)],
            )
            .await;
        }
        drop(self.p);
    }
}

/// What the client saw of a write.
#[derive(Debug, PartialEq)]
struct Outcome {
    affected: u64,
    last_insert_id: Option<u64>,
    info: String,
    warnings: u16,
    show_warnings: Vec<(String, u16)>,
}

async fn run(c: &mut Conn, sql: &str) -> Result<Outcome, (u16, String)> {
    match c.query_drop(sql).await {
        Ok(()) => {
            let affected = c.affected_rows();
            let last_insert_id = c.last_insert_id();
            let info = c.info().to_string();
            let warnings = c.get_warnings();
            Ok(Outcome {
                affected,
                last_insert_id,
                info,
                warnings,
                show_warnings: Vec::new(),
            })
        }
        Err(mysql_async::Error::Server(e)) => Err((e.code, e.message)),
        Err(e) => panic!("{sql}: {e}"),
    }
}

fn rows(r: Vec<Row>) -> Vec<Vec<Value>> {
    r.into_iter().map(Row::unwrap).collect()
}

/// The same statement through idgate into `target` and directly on shard
/// 0 into `reference`: same reply, same rows.
async fn differential(
    bed: &Bed,
    ig: &mut Conn,
    direct: &mut Conn,
    stmt: &str,
    target: &str,
    reference: &str,
    (select, order): (&str, &str),
) -> Result<Outcome, (u16, String)> {
    // MariaDB reserves AUTO_INCREMENT values for INSERT ... SELECT in
    // doubling blocks (1, 2, 4, ...) and leaves the unused ones as a gap;
    // idgate takes one id per row. The reference starts each statement at
    // MAX(id) + 1, as the generator does.
    direct
        .query_drop(format!("ALTER TABLE {reference} AUTO_INCREMENT = 1"))
        .await
        .expect("reset AUTO_INCREMENT");
    let through = run(ig, &stmt.replace("{T}", target)).await;
    let mine = run(direct, &stmt.replace("{T}", reference)).await;
    match (&through, &mine) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{stmt}"),
        (Err((ca, ma)), Err((cb, mb))) => {
            assert_eq!(ca, cb, "{stmt}: idgate said {ma}, MariaDB {mb}");
        }
        _ => panic!("{stmt}: idgate {through:?}, MariaDB {mine:?}"),
    }
    let got: Vec<Row> = ig
        .query(format!("SELECT {select} FROM {target} ORDER BY {order}"))
        .await
        .expect("read target");
    let want: Vec<Row> = direct
        .query(format!("SELECT {select} FROM {reference} ORDER BY {order}"))
        .await
        .expect("read reference");
    // Without the ids (first column) when `select` does not start with `*`.
    let cut = |r: Vec<Row>| -> Vec<Vec<Value>> {
        rows(r)
            .into_iter()
            .map(|mut v| {
                if select != "*" && !v.is_empty() {
                    v.remove(0);
                }
                v
            })
            .collect()
    };
    assert_eq!(cut(got), cut(want), "{stmt}: stored rows");
    let _ = bed;
    through
}

const SRC_ROWS: &str = "(1, 1, 'plain', 'abc', 1.5, 0.1, 0.1, '2024-02-29 10:11:12.345', '2024-02-29', '-26:03:04', 5),\
    (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),\
    (3, 0, 'NULL', 'NULL', -0.5, -1e-7, 1e300, '1999-12-31 23:59:59', '1000-01-01', '838:59:59', 255),\
    (4, -7, 'caf\u{e9} \u{1F600} \\\\ \\' \"', x'00270A5C22FF', 999999999.999, 3.4e38, -2.2250738585072014e-308, '2038-01-19 03:14:07.999', '9999-12-31', '00:00:00', 0),\
    (5, 42, '', '', 0, 0, 0, '2024-01-01 00:00:00', '2024-01-01', '12:00:00.5', 128)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_of_every_kind_match_mariadb() {
    let Some(bed) = Bed::new().await else { return };
    bed.on_each(&[
        format!("CREATE TABLE t (id BIGINT PRIMARY KEY, {COLS})"),
        "CREATE TABLE conv (id BIGINT PRIMARY KEY, a INT NULL, c INT NULL, e VARCHAR(60) NULL, h INT NULL, i VARCHAR(60) NULL, j DECIMAL(6,1) NULL)".to_string(),
    ])
    .await;
    bed.on(
        0,
        &[
            format!("CREATE TABLE src (k INT PRIMARY KEY, {COLS})"),
            format!("INSERT INTO src VALUES {SRC_ROWS}"),
            format!("CREATE TABLE ref (id BIGINT AUTO_INCREMENT PRIMARY KEY, {COLS})"),
            "CREATE TABLE refconv (id BIGINT AUTO_INCREMENT PRIMARY KEY, a INT NULL, c INT NULL, e VARCHAR(60) NULL, h INT NULL, i VARCHAR(60) NULL, j DECIMAL(6,1) NULL)".into(),
        ],
    )
    .await;
    let mut ig = bed.idgate().await;
    let mut direct = bed.direct(0).await;
    // Every kind of value, in the SELECT's order.
    let o = differential(
        &bed,
        &mut ig,
        &mut direct,
        &format!("INSERT INTO {{T}} ({NAMES}) SELECT {NAMES} FROM src ORDER BY k DESC"),
        "t",
        "ref",
        ("*", "id"),
    )
    .await
    .expect("copied");
    assert_eq!(o.affected, 5);
    assert_eq!(o.last_insert_id, Some(1));
    assert_eq!(o.info, "Records: 5  Duplicates: 0  Warnings: 0");
    // Again: ids go on from where they were, as AUTO_INCREMENT's do; one row.
    let o = differential(
        &bed,
        &mut ig,
        &mut direct,
        &format!("INSERT INTO {{T}} ({NAMES}) SELECT {NAMES} FROM src WHERE k = 4"),
        "t",
        "ref",
        ("*", "id"),
    )
    .await
    .expect("copied");
    assert_eq!(o.last_insert_id, Some(6));
    assert_eq!(o.info, "Records: 1  Duplicates: 0  Warnings: 0");
    // LAST_INSERT_ID() is the statement's first id, on either connection.
    let lid: Option<u64> = ig
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .expect("lid");
    let lid_direct: Option<u64> = direct
        .query_first("SELECT LAST_INSERT_ID()")
        .await
        .expect("lid");
    assert_eq!(lid, lid_direct);
    // A latin1 connection: the text (with characters latin1 lacks) is
    // copied as stored, not as the connection would show it.
    ig.query_drop("SET NAMES latin1").await.expect("names");
    direct.query_drop("SET NAMES latin1").await.expect("names");
    differential(
        &bed,
        &mut ig,
        &mut direct,
        &format!("INSERT INTO {{T}} ({NAMES}) SELECT {NAMES} FROM src WHERE k = 4"),
        "t",
        "ref",
        ("id, HEX(s), HEX(b)", "id"),
    )
    .await
    .expect("copied");
    ig.query_drop("SET NAMES utf8mb4").await.expect("names");
    direct.query_drop("SET NAMES utf8mb4").await.expect("names");
    // Conversions between types, non-strict (warnings) and strict (errors).
    for mode in ["''", "'STRICT_TRANS_TABLES'"] {
        ig.query_drop(format!("SET sql_mode = {mode}"))
            .await
            .expect("mode");
        direct
            .query_drop(format!("SET sql_mode = {mode}"))
            .await
            .expect("mode");
        for stmt in [
            // A binary string, BIT, FLOAT and DATE into INT and VARCHAR columns.
            "INSERT INTO {T} (a, c, e, h, i, j) SELECT b, bits, f, dd, dt, d FROM src WHERE k IN (1, 5) ORDER BY k",
            // NULL into columns, and a string that is not a number.
            "INSERT INTO {T} (a, c, e, h, i, j) SELECT s, n, g, tm, b, g FROM src ORDER BY k",
        ] {
            let _ = differential(
                &bed,
                &mut ig,
                &mut direct,
                stmt,
                "conv",
                "refconv",
                // A failed statement leaves a different gap of ids.
                ("id, a, c, e, h, i, j", "id"),
            )
            .await;
        }
    }
    bed.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_on_each_placement() {
    let Some(bed) = Bed::new().await else { return };
    let cols = "n INT NULL, s VARCHAR(20) NULL";
    bed.on_each(&[
        format!("CREATE TABLE t (id BIGINT PRIMARY KEY, {cols})"),
        format!("CREATE TABLE sh (id BIGINT PRIMARY KEY, {cols})"),
        format!("CREATE TABLE bc (id BIGINT PRIMARY KEY, {cols})"),
    ])
    .await;
    bed.on(
        0,
        &[
            format!("CREATE TABLE ref (id BIGINT AUTO_INCREMENT PRIMARY KEY, {cols})"),
            format!("CREATE TABLE shref (id BIGINT PRIMARY KEY, {cols})"),
        ],
    )
    .await;
    let mut ig = bed.idgate().await;
    let mut direct = bed.direct(0).await;
    // A sharded source (rows on both shards, placed by idgate), its copy on
    // shard 0 for the reference; a broadcast source.
    for i in 1..=30 {
        let v = format!("({}, 'r{}')", (i * 37) % 100, i % 7);
        ig.query_drop(format!("INSERT INTO sh (n, s) VALUES {v}"))
            .await
            .expect("sh");
        ig.query_drop(format!("INSERT INTO bc (n, s) VALUES {v}"))
            .await
            .expect("bc");
    }
    let copy: Vec<Row> = ig.query("SELECT id, n, s FROM sh").await.expect("sh rows");
    for r in copy {
        let (id, n, s): (u64, Option<i64>, Option<String>) = mysql_async::from_row(r);
        direct
            .exec_drop("INSERT INTO shref VALUES (?, ?, ?)", (id, n, s))
            .await
            .expect("shref");
    }
    let on_each: Vec<u64> = {
        let mut v = Vec::new();
        for shard in 0..2 {
            let mut c = bed.direct(shard).await;
            v.push(
                c.query_first("SELECT COUNT(*) FROM sh")
                    .await
                    .expect("count")
                    .unwrap_or(0),
            );
        }
        v
    };
    assert!(
        on_each.iter().all(|&n| n > 0),
        "sharded source on both shards: {on_each:?}"
    );
    for (src, reference_src) in [
        // (A scattered ORDER BY names select-list columns: the merge reads them.)
        (
            "sh ORDER BY n DESC LIMIT 2, 11",
            "shref ORDER BY n DESC LIMIT 2, 11",
        ),
        ("sh ORDER BY 1", "shref ORDER BY 1"),
        ("bc ORDER BY n, id", "bc ORDER BY n, id"),
    ] {
        let through = format!("INSERT INTO t (n, s) SELECT n, s FROM {src}");
        let mine = format!("INSERT INTO ref (n, s) SELECT n, s FROM {reference_src}");
        let (a, b) = both(&mut ig, &mut direct, &through, &mine).await;
        assert_eq!(a, b, "{through}");
        same_rows(&mut ig, &mut direct, &through).await;
    }
    // The target itself: read whole before any row is written (explicit
    // ids, ordered by a selected column: a scattered merge orders by those).
    let (a, b) = both(
        &mut ig,
        &mut direct,
        "INSERT INTO t (id, n, s) SELECT id + 2000, n, s FROM t ORDER BY 1",
        "INSERT INTO ref (id, n, s) SELECT id + 2000, n, s FROM ref ORDER BY 1",
    )
    .await;
    assert_eq!(a, b);
    same_rows(&mut ig, &mut direct, "self copy").await;
    // Explicit ids are kept (and observed: later ids come above them); an
    // explicit-only statement reports its last row's id.
    let (a, b) = both(
        &mut ig,
        &mut direct,
        "INSERT INTO t (id, n) SELECT id + 1000, n FROM t WHERE id <= 3 ORDER BY 1",
        "INSERT INTO ref (id, n) SELECT id + 1000, n FROM ref WHERE id <= 3 ORDER BY 1",
    )
    .await;
    assert_eq!(a, b);
    assert_eq!(a.last_insert_id, Some(1003));
    let (a, b) = both(
        &mut ig,
        &mut direct,
        "INSERT INTO t (n) SELECT 7",
        "INSERT INTO ref (n) SELECT 7",
    )
    .await;
    assert_eq!(a, b, "a generated id after explicit ones");
    // Column count and refused forms.
    let e = run(&mut ig, "INSERT INTO t (n, s) SELECT n FROM sh")
        .await
        .expect_err("count");
    assert_eq!(e.0, 1136);
    for form in [
        "INSERT INTO t (n) SELECT n FROM bc ON DUPLICATE KEY UPDATE n = 1",
        "INSERT INTO t (n) SELECT n FROM bc RETURNING id",
    ] {
        let e = run(&mut ig, form).await.expect_err(form);
        assert_eq!(e.0, 1235, "{form}: {}", e.1);
        assert!(
            e.1.contains(&format!("{}.t", bed.schema)),
            "{form}: {}",
            e.1
        );
    }
    bed.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_when_one_shard_refuses() {
    let Some(bed) = Bed::new().await else { return };
    bed.on(
        0,
        &["CREATE TABLE t (id BIGINT PRIMARY KEY, n INT NOT NULL)".into()],
    )
    .await;
    // Shard 1's copy refuses big values.
    bed.on(
        1,
        &["CREATE TABLE t (id BIGINT PRIMARY KEY, n INT NOT NULL, CHECK (n < 150))".into()],
    )
    .await;
    bed.on(
        0,
        &[
            "CREATE TABLE src (n INT NOT NULL)".into(),
            "INSERT INTO src SELECT seq FROM seq_1_to_5000".into(),
        ],
    )
    .await;
    let mut ig = bed.idgate().await;
    let e = run(&mut ig, "INSERT INTO t (n) SELECT n FROM src ORDER BY n")
        .await
        .expect_err("shard 1 refuses");
    assert_eq!(e.0, 4025, "{}", e.1);
    for shard in 0..2 {
        let mut c = bed.direct(shard).await;
        let n: Option<u64> = c
            .query_first("SELECT COUNT(*) FROM t")
            .await
            .expect("count");
        assert_eq!(n, Some(0), "shard {shard} kept rows of a failed statement");
    }
    // The session goes on.
    let o = run(&mut ig, "INSERT INTO t (n) SELECT n FROM src WHERE n < 100")
        .await
        .expect("ok");
    assert_eq!(o.affected, 99);
    bed.finish().await;
}

/// `through` via idgate, then `mine` directly on the reference (after
/// [`reset`]): both outcomes, each expected to succeed.
async fn both(ig: &mut Conn, direct: &mut Conn, through: &str, mine: &str) -> (Outcome, Outcome) {
    let a = run(ig, through).await.expect(through);
    reset(direct).await;
    let b = run(direct, mine).await.expect(mine);
    (a, b)
}

/// The rows of `t` through idgate equal those of `ref` directly.
async fn same_rows(ig: &mut Conn, direct: &mut Conn, what: &str) {
    let got: Vec<Row> = ig.query("SELECT * FROM t ORDER BY id").await.expect("t");
    let want: Vec<Row> = direct
        .query("SELECT * FROM ref ORDER BY id")
        .await
        .expect("ref");
    assert_eq!(rows(got), rows(want), "{what}");
}

/// `ref` goes on at MAX(id) + 1 (see `differential`).
async fn reset(direct: &mut Conn) {
    direct
        .query_drop("ALTER TABLE ref AUTO_INCREMENT = 1")
        .await
        .expect("reset AUTO_INCREMENT");
}

/// `kB` of idgate's /proc status line `key`.
fn status_kb(p: &Idgate, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{}/status", p.child.id())).expect("status");
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("status line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_copy_in_bounded_memory() {
    let Some(bed) = Bed::new().await else { return };
    const ROWS: u64 = 200_000;
    bed.on_each(&[
        "CREATE TABLE t (id BIGINT PRIMARY KEY, n INT NOT NULL, s VARCHAR(200) NOT NULL)".into(),
    ])
    .await;
    bed.on(
        0,
        &[
            "CREATE TABLE src (n INT NOT NULL, s VARCHAR(200) NOT NULL)".into(),
            format!(
                "INSERT INTO src SELECT seq, REPEAT(CHAR(97 + seq % 26), 150) FROM seq_1_to_{ROWS}"
            ),
        ],
    )
    .await;
    let mut ig = bed.idgate().await;
    let before = status_kb(&bed.p, "VmHWM");
    let o = run(&mut ig, "INSERT INTO t (n, s) SELECT n, s FROM src")
        .await
        .expect("copy");
    let after = status_kb(&bed.p, "VmHWM");
    assert_eq!(o.affected, ROWS);
    assert_eq!(
        o.info,
        format!("Records: {ROWS}  Duplicates: 0  Warnings: 0")
    );
    let mut total = 0;
    for shard in 0..2 {
        let mut c = bed.direct(shard).await;
        let n: Option<u64> = c
            .query_first("SELECT COUNT(DISTINCT id) FROM t")
            .await
            .expect("count");
        let n = n.unwrap_or(0);
        assert!(n > 0, "shard {shard} got no rows");
        total += n;
    }
    assert_eq!(total, ROWS);
    // The rows are ~30 MB as text; idgate holds a fetch and a batch per shard.
    eprintln!("idgate VmHWM before {before} kB, after {after} kB");
    assert!(
        after < before + 48 * 1024,
        "idgate's peak RSS grew from {before} kB to {after} kB copying {ROWS} rows"
    );
    bed.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_and_replace_match_mariadb() {
    let Some(bed) = Bed::new().await else { return };
    let cols = "u INT NOT NULL, n INT NULL, UNIQUE KEY (u)";
    bed.on_each(&["CREATE TABLE t (id BIGINT PRIMARY KEY, n INT NULL)".to_string()])
        .await;
    bed.on(
        0,
        &[
            format!("CREATE TABLE one (id BIGINT PRIMARY KEY, {cols})"),
            format!("CREATE TABLE ref (id BIGINT AUTO_INCREMENT PRIMARY KEY, {cols})"),
            "CREATE TABLE tref (id BIGINT AUTO_INCREMENT PRIMARY KEY, n INT NULL)".into(),
            "CREATE TABLE src (k INT PRIMARY KEY, u INT NOT NULL, n INT NULL)".into(),
            // u = 2 and 5 will be in the target; 7 comes twice.
            "INSERT INTO src VALUES (1, 2, 10), (2, 3, 20), (3, 7, 30), (4, 5, 40), (5, 7, 50), (6, 9, NULL)".into(),
        ],
    )
    .await;
    let mut ig = bed.idgate().await;
    let mut direct = bed.direct(0).await;
    // The same rows in both targets, ids included.
    for (u, n) in [(2, 1), (5, 2)] {
        ig.query_drop(format!("INSERT INTO one (u, n) VALUES ({u}, {n})"))
            .await
            .expect("one");
        direct
            .query_drop(format!("INSERT INTO ref (u, n) VALUES ({u}, {n})"))
            .await
            .expect("ref");
    }
    // MariaDB gives an ignored row's AUTO_INCREMENT value to the next row
    // (idgate's ids are taken before the rows are sent, as for a multi-row
    // INSERT IGNORE): compared here are everything but the id values, and
    // that the id reported is the id of the same row (by its unique `u`).
    let stmts = [
        // The first row ignored: the first id reported is the first stored.
        "INSERT IGNORE INTO {T} (u, n) SELECT u, n FROM src ORDER BY k",
        // Every row ignored.
        "INSERT IGNORE INTO {T} (u, n) SELECT u, n FROM src ORDER BY k",
        // One row, ignored, then stored.
        "INSERT IGNORE INTO {T} (u, n) SELECT u, n FROM src WHERE k = 1",
        "INSERT IGNORE INTO {T} (u, n) SELECT u + 100, n FROM src WHERE k = 1",
        // Replacing rows (deleted, inserted with new ids).
        "REPLACE INTO {T} (u, n) SELECT u, n + 1 FROM src ORDER BY k",
        "REPLACE INTO {T} (u, n) SELECT u, n FROM src WHERE k = 2",
    ];
    for stmt in stmts {
        let mut a = run(&mut ig, &stmt.replace("{T}", "one")).await.expect(stmt);
        let mut b = run(&mut direct, &stmt.replace("{T}", "ref"))
            .await
            .expect(stmt);
        // The row each reported id names, by `u`.
        let u_of = |lid: Option<u64>, table: &'static str| (lid.filter(|&v| v > 0), table);
        let (la, lb) = (u_of(a.last_insert_id, "one"), u_of(b.last_insert_id, "ref"));
        let ua: Option<i64> = match la.0 {
            Some(v) => ig
                .query_first(format!("SELECT u FROM one WHERE id = {v}"))
                .await
                .expect("u"),
            None => None,
        };
        let ub: Option<i64> = match lb.0 {
            Some(v) => direct
                .query_first(format!("SELECT u FROM ref WHERE id = {v}"))
                .await
                .expect("u"),
            None => None,
        };
        assert_eq!(
            ua, ub,
            "{stmt}: the row whose id is reported ({a:?} / {b:?})"
        );
        assert_eq!(la.0.is_some(), lb.0.is_some(), "{stmt}");
        a.last_insert_id = None;
        b.last_insert_id = None;
        assert_eq!(a, b, "{stmt}");
        let got: Vec<(i64, Option<i64>)> = ig
            .query("SELECT u, n FROM one ORDER BY u")
            .await
            .expect("one");
        let want: Vec<(i64, Option<i64>)> = direct
            .query("SELECT u, n FROM ref ORDER BY u")
            .await
            .expect("ref");
        assert_eq!(got, want, "{stmt}: stored rows");
        // LAST_INSERT_ID() names the same row too.
        let lid: Option<u64> = ig
            .query_first("SELECT LAST_INSERT_ID()")
            .await
            .expect("lid");
        let want: Option<u64> = direct
            .query_first("SELECT LAST_INSERT_ID()")
            .await
            .expect("lid");
        let ua: Option<i64> = ig
            .query_first(format!("SELECT u FROM one WHERE id = {}", lid.unwrap_or(0)))
            .await
            .expect("u");
        let ub: Option<i64> = direct
            .query_first(format!(
                "SELECT u FROM ref WHERE id = {}",
                want.unwrap_or(0)
            ))
            .await
            .expect("u");
        assert_eq!(ua, ub, "{stmt}: LAST_INSERT_ID() {lid:?} / {want:?}");
    }
    // INSERT IGNORE over both shards: explicit ids collide on the shard
    // that holds them.
    for stmt in [
        "INSERT IGNORE INTO {T} (n) SELECT n FROM src ORDER BY k",
        "INSERT IGNORE INTO {T} (id, n) SELECT k * 2, n FROM src ORDER BY k",
        "INSERT IGNORE INTO {T} (n) SELECT n FROM src ORDER BY k",
    ] {
        differential(&bed, &mut ig, &mut direct, stmt, "t", "tref", ("*", "id"))
            .await
            .expect(stmt);
    }
    bed.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_transaction() {
    let Some(bed) = Bed::new().await else { return };
    bed.on_each(&["CREATE TABLE t (id BIGINT PRIMARY KEY, n INT NOT NULL)".into()])
        .await;
    bed.on(
        0,
        &[
            "CREATE TABLE one (id BIGINT PRIMARY KEY, u INT NOT NULL, n INT NULL, UNIQUE KEY (u))"
                .into(),
            "CREATE TABLE src (u INT NOT NULL, n TINYINT NULL)".into(),
            "INSERT INTO src VALUES (1, 1), (2, 2), (3, 3)".into(),
        ],
    )
    .await;
    let mut ig = bed.idgate().await;
    let count = |c: &'static str| format!("SELECT COUNT(*) FROM {c}");
    // Rolled back with the transaction.
    ig.query_drop("BEGIN").await.expect("begin");
    run(&mut ig, "INSERT INTO one (u, n) SELECT u, n FROM src")
        .await
        .expect("in txn");
    let n: Option<u64> = ig.query_first(count("one")).await.expect("count");
    assert_eq!(n, Some(3), "the transaction sees its rows");
    ig.query_drop("ROLLBACK").await.expect("rollback");
    let n: Option<u64> = ig.query_first(count("one")).await.expect("count");
    assert_eq!(n, Some(0));
    // A statement that fails is undone alone; the transaction goes on.
    ig.query_drop("BEGIN").await.expect("begin");
    run(
        &mut ig,
        "INSERT INTO one (u, n) SELECT u, n FROM src WHERE u = 1",
    )
    .await
    .expect("first");
    let e = run(
        &mut ig,
        "INSERT INTO one (u, n) SELECT u + 10, n FROM src UNION ALL SELECT 1, 9",
    )
    .await
    .expect_err("duplicate u");
    assert_eq!(e.0, 1062, "{}", e.1);
    ig.query_drop("COMMIT").await.expect("commit");
    let got: Vec<(i64, Option<i64>)> = ig
        .query("SELECT u, n FROM one ORDER BY u")
        .await
        .expect("one");
    assert_eq!(got, vec![(1, Some(1))]);
    // A target over two shards inside a transaction: refused like any
    // write that would reach a second shard, nothing written.
    ig.query_drop("BEGIN").await.expect("begin");
    let r = run(&mut ig, "INSERT INTO t (n) SELECT n FROM src").await;
    ig.query_drop("ROLLBACK").await.expect("rollback");
    if let Err((code, msg)) = &r {
        assert!(msg.contains("shard"), "{code}: {msg}");
    }
    for shard in 0..2 {
        let mut c = bed.direct(shard).await;
        let n: Option<u64> = c.query_first(count("t")).await.expect("count");
        assert_eq!(n, Some(0), "shard {shard}: {r:?}");
    }
    bed.finish().await;
}
