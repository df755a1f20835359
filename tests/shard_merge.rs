//! The merge of a scattered SELECT against the real shards: a table split
//! between shard s0 and s1, its full copy in one table on s0. Every query
//! runs on both halves, is merged, and must give what the same query gives
//! on the full copy, in the text and binary protocols, with and without
//! CLIENT_DEPRECATE_EOF.

mod support;

use std::time::Duration;

use idgate::backend::{BackendConn, ConnectParams};
use idgate::protocol::column::{flags, ColumnDef};
use idgate::protocol::consts::{cap, cmd};
use idgate::protocol::response::Expect;
use idgate::protocol::row::{self, Cell};
use idgate::protocol::stmt::{self, encode_execute};
use idgate::protocol::wire::Cursor;
use idgate::shard::merge::{merge, Agg, ColumnRef, MergeSpec, OrderKey, Protocol};
use support::{proxy, Testbed};

/// Rows in the full copy.
const ROWS: u64 = 400;

/// A small deterministic generator (64-bit LCG), so a failure reproduces.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// NULL one time in `n`.
    fn null(&mut self, n: u64) -> bool {
        self.next() % n == 0
    }
}

const WORDS: [&str; 14] = [
    "alpha", "Alpha", "ALPHA", "beta", "Beta_2", "gamma", "GAMMA ", "delta", "zeta", "a_b", "aB",
    "ab", "Zulu", "b",
];

/// One row's column values as SQL literals.
fn row_values(id: u64, r: &mut Lcg) -> String {
    let mut v = vec![id.to_string()];
    v.push(if r.null(10) {
        "NULL".into()
    } else {
        ((r.next() % 41) as i64 - 20).to_string()
    });
    v.push(if r.null(20) {
        "NULL".into()
    } else {
        let x = r.next() % 1000;
        match r.next() % 3 {
            0 => x.to_string(),
            1 => (u64::MAX - x).to_string(),
            _ => ((1u64 << 63) + x).to_string(),
        }
    });
    v.push(if r.null(10) {
        "NULL".into()
    } else {
        let x = r.next() % 1_000_000_000;
        let sign = if r.next() % 2 == 0 { "-" } else { "" };
        format!("{sign}{}.{:03}", x / 1000, x % 1000)
    });
    v.push(if r.null(10) {
        "NULL".into()
    } else {
        let m = (r.next() % 20000) as i64 - 10000;
        let e = (r.next() % 21) as i64 - 8;
        format!("{}e{e}", m as f64 / 16.0)
    });
    let word = |r: &mut Lcg| {
        if r.null(20) {
            "NULL".to_string()
        } else {
            let w = WORDS[(r.next() % WORDS.len() as u64) as usize];
            let suffix = if r.next() % 3 == 0 {
                (r.next() % 10).to_string()
            } else {
                String::new()
            };
            format!("'{w}{suffix}'")
        }
    };
    v.push(word(r));
    v.push(word(r));
    v.push(if r.null(10) {
        "NULL".into()
    } else {
        // 2000-01-01 plus up to ~30 years, milliseconds.
        let secs = r.next() % (30 * 365 * 86400);
        format!(
            "'2000-01-01' + INTERVAL {secs} SECOND + INTERVAL {} MICROSECOND",
            (r.next() % 1000) * 1000
        )
    });
    v.push(if r.null(10) {
        "NULL".into()
    } else {
        let s = r.next() % 3_000_000;
        let sign = if r.next() % 2 == 0 { "-" } else { "" };
        format!("'{sign}{}:{:02}:{:02}'", s / 3600, s / 60 % 60, s % 60)
    });
    format!("({})", v.join(", "))
}

const COLUMNS: &str = "id INT PRIMARY KEY, i INT, u BIGINT UNSIGNED, d DECIMAL(12,3), f DOUBLE, \
     s VARCHAR(20) COLLATE utf8mb4_general_ci, sb VARCHAR(20) COLLATE utf8mb4_bin, \
     dt DATETIME(3), t TIME";

/// Creates the schema on both shards: `t` split between them, `whole` on s0.
async fn fixture(tb: &Testbed) -> String {
    let db = support::unique("smerge");
    let mut r = Lcg(0x5eed);
    let rows: Vec<(u64, String)> = (1..=ROWS).map(|id| (id, row_values(id, &mut r))).collect();
    let insert = |table: &str, keep: &dyn Fn(u64) -> bool| {
        let values: Vec<&str> = rows
            .iter()
            .filter(|(id, _)| keep(*id))
            .map(|(_, v)| v.as_str())
            .collect();
        format!("INSERT INTO {db}.{table} VALUES {}", values.join(", "))
    };
    // An uneven split: about 40% of the rows on s1.
    let on_s1 = |id: u64| (id * 7) % 5 < 2;
    for shard in [0, 1] {
        let mut sql = vec![
            format!("CREATE DATABASE {db} CHARACTER SET utf8mb4"),
            format!("CREATE TABLE {db}.t ({COLUMNS})"),
            insert("t", &|id| on_s1(id) == (shard == 1)),
        ];
        if shard == 0 {
            sql.push(format!("CREATE TABLE {db}.whole ({COLUMNS})"));
            sql.push(insert("whole", &|_| true));
        }
        let sql: Vec<&str> = sql.iter().map(String::as_str).collect();
        proxy::admin(tb, shard, &sql).await;
    }
    db
}

async fn connect(tb: &Testbed, shard: usize, db: &str, deprecate_eof: bool) -> BackendConn {
    let caps = if deprecate_eof {
        cap::SUPPORTED
    } else {
        cap::SUPPORTED & !cap::DEPRECATE_EOF
    };
    let name = format!("s{shard}");
    let params = ConnectParams {
        shard: &name,
        address: &tb.shards[shard],
        tls: &idgate::tls::ShardTls::default(),
        public_key: None,
        user: &tb.user,
        password: &tb.password,
        database: Some(db),
        charset: 45, // utf8mb4_general_ci
        capabilities: caps,
        ext_capabilities: 0,
        attrs: None,
        // Far above any login a loaded machine delays.
        timeout: Duration::from_secs(60),
    };
    let (conn, _) = BackendConn::connect(&params)
        .await
        .unwrap_or_else(|e| panic!("connect to {name}: {e}"));
    assert_eq!(conn.deprecate_eof(), deprecate_eof);
    conn
}

/// Runs `sql` and returns its reply's packets: COM_QUERY, or
/// COM_STMT_PREPARE + COM_STMT_EXECUTE (+ COM_STMT_CLOSE).
async fn execute(conn: &mut BackendConn, sql: &str, protocol: Protocol) -> Vec<Vec<u8>> {
    let command = |c: u8| {
        let mut p = vec![c];
        p.extend_from_slice(sql.as_bytes());
        p
    };
    match protocol {
        Protocol::Text => conn
            .run(&command(cmd::QUERY), Expect::Results)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
        Protocol::Binary => {
            let prepared = conn
                .run(&command(cmd::STMT_PREPARE), Expect::Prepare)
                .await
                .unwrap_or_else(|e| panic!("prepare {sql}: {e}"));
            let id = stmt::stmt_id(&prepared[0][1..]).expect("statement id");
            let mut body = vec![cmd::STMT_EXECUTE];
            encode_execute(id, 0, 1, &[], &mut body);
            let reply = conn
                .run(&body, Expect::Results)
                .await
                .unwrap_or_else(|e| panic!("execute {sql}: {e}"));
            let mut close = vec![cmd::STMT_CLOSE];
            close.extend_from_slice(&id.to_le_bytes());
            conn.send(&close).await.expect("close statement");
            reply
        }
    }
}

/// How a result column is compared with the full copy's.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Col {
    /// The same bytes.
    Exact,
    /// Equal ignoring case and trailing spaces (a `_ci` value where ties
    /// may pick another row's spelling).
    Ci,
    /// A floating-point sum: per-shard partial sums round differently.
    Float,
    /// Not compared (a non-key column of rows with tied keys).
    Skip,
}

/// How the rows are compared.
#[derive(Debug, Clone)]
enum Check {
    /// Row by row in order, each column as given (missing: exact).
    Rows(Vec<Col>),
    /// No ORDER BY: the same rows in any order.
    AnyOrder,
    /// No ORDER BY, with LIMIT: which rows is unspecified, only how many.
    CountOnly,
}

struct Case {
    select: &'static str,
    filter: &'static str,
    order: &'static str,
    limit: Option<u64>,
    offset: u64,
    aggregates: Option<Vec<Agg>>,
    check: Check,
}

fn case(select: &'static str, order: &'static str) -> Case {
    Case {
        select,
        filter: "",
        order,
        limit: None,
        offset: 0,
        aggregates: None,
        check: Check::Rows(vec![]),
    }
}

impl Case {
    fn filter(mut self, f: &'static str) -> Self {
        self.filter = f;
        self
    }
    fn limit(mut self, limit: Option<u64>, offset: u64) -> Self {
        self.limit = limit;
        self.offset = offset;
        self
    }
    fn aggs(mut self, a: &[Agg]) -> Self {
        self.aggregates = Some(a.to_vec());
        self
    }
    fn check(mut self, c: Check) -> Self {
        self.check = c;
        self
    }

    /// ORDER BY keys from the clause text: `name [DESC]` or a 1-based position.
    fn keys(&self) -> Vec<OrderKey> {
        self.order
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(|k| {
                let mut words = k.split_whitespace();
                let name = words.next().unwrap_or_default();
                let desc = words.next().is_some_and(|w| w.eq_ignore_ascii_case("desc"));
                let column = match name.parse::<usize>() {
                    Ok(n) => ColumnRef::Position(n - 1),
                    Err(_) => ColumnRef::Name(name.to_string()),
                };
                OrderKey { column, desc }
            })
            .collect()
    }

    fn spec(&self) -> MergeSpec {
        MergeSpec {
            order_by: self.keys(),
            limit: self.limit,
            offset: self.offset,
            aggregates: self.aggregates.clone(),
            ..MergeSpec::default()
        }
    }

    /// The statement for a shard (`t`, LIMIT offset+limit without offset)
    /// or for the full copy (`whole`, LIMIT and OFFSET as written).
    fn sql(&self, shard: bool) -> String {
        let mut s = format!(
            "SELECT {} FROM {}",
            self.select,
            if shard { "t" } else { "whole" }
        );
        if !self.filter.is_empty() {
            s += &format!(" WHERE {}", self.filter);
        }
        if !self.order.is_empty() {
            s += &format!(" ORDER BY {}", self.order);
        }
        match (shard, self.limit, self.offset) {
            (_, None, 0) => {}
            (true, None, _) => {}
            (true, Some(n), m) => s += &format!(" LIMIT {}", n + m),
            (false, n, m) => s += &format!(" LIMIT {} OFFSET {m}", n.unwrap_or(u64::MAX)),
        }
        s
    }
}

fn cases() -> Vec<Case> {
    use Col::{Ci, Exact, Float, Skip};
    let all = "id, i, u, d, f, s, sb, dt, t";
    let mut v = Vec::new();
    // Each type, both directions, made unique by id.
    for order in [
        "i, id",
        "i DESC, id DESC",
        "u, id",
        "u DESC, id",
        "d, id",
        "d DESC, id",
        "f, id",
        "f DESC, id",
        "s, id",
        "s DESC, id DESC",
        "sb, id",
        "sb DESC, id",
        "dt, id",
        "dt DESC, id",
        "t, id",
        "t DESC, id",
        // Two keys (and id).
        "i DESC, s, id",
        "s DESC, d, id DESC",
        "dt, f DESC, id",
    ] {
        v.push(case(all, order));
    }
    // Alias and positions.
    v.push(case("id, d AS amount, s AS Name", "amount DESC, id"));
    v.push(case("id, d AS amount, s AS Name", "NAME, 1"));
    v.push(case("s, id, i", "3 DESC, 2"));
    // Ties left as they are: only the key column's order is compared.
    v.push(case(all, "s").check(Check::Rows(vec![
        Skip, Skip, Skip, Skip, Skip, Ci, Skip, Skip, Skip,
    ])));
    v.push(
        case("i, id", "i DESC")
            .limit(Some(25), 0)
            .check(Check::Rows(vec![Exact, Skip])),
    );
    // LIMIT / OFFSET.
    v.push(case(all, "id").limit(Some(10), 0));
    v.push(case(all, "id").limit(Some(10), 5));
    v.push(case(all, "id DESC").limit(Some(0), 0));
    v.push(case(all, "id").limit(Some(5), 1000));
    v.push(case(all, "d DESC, id").limit(Some(7), 140));
    v.push(case(all, "f, id").limit(None, 250));
    v.push(case(all, "u DESC, id").limit(Some(1), ROWS - 1));
    // WHERE.
    v.push(case(all, "f DESC, id").filter("d > 0").limit(Some(20), 3));
    v.push(case(all, "s, id").filter("s LIKE 'a%'"));
    v.push(case(all, "t DESC, id").filter("t < '-10:00:00' OR t IS NULL"));
    v.push(case(all, "id").filter("id < 0"));
    v.push(case(all, "dt, id").filter("id = 2"));
    // No ORDER BY.
    v.push(case("id, s", "").filter("i > 5").check(Check::AnyOrder));
    v.push(case("id", "").limit(Some(7), 0).check(Check::CountOnly));
    v.push(case("id", "").limit(Some(7), 3).check(Check::CountOnly));
    // Aggregates without GROUP BY.
    use Agg::{Count, First, Max, Min, Sum};
    let a1 = "COUNT(*), SUM(i), MIN(i), MAX(i), SUM(d), MIN(d), MAX(d), COUNT(d)";
    let a1_aggs = [Count, Sum, Min, Max, Sum, Min, Max, Count];
    let a2 = "SUM(u), MIN(u), MAX(u), SUM(f), MIN(f), MAX(f), 'k' AS k";
    let a2_aggs = [Sum, Min, Max, Sum, Min, Max, First];
    let a2_check = Check::Rows(vec![Exact, Exact, Exact, Float]);
    let a3 = "MIN(s), MAX(s), MIN(sb), MAX(sb), MIN(dt), MAX(dt), MIN(t), MAX(t), COUNT(*)";
    let a3_aggs = [Min, Max, Min, Max, Min, Max, Min, Max, Count];
    let a3_check = Check::Rows(vec![Ci, Ci]);
    for filter in ["", "i > 10", "id < 0", "id = 2", "s IS NULL"] {
        v.push(case(a1, "").filter(filter).aggs(&a1_aggs));
        v.push(
            case(a2, "")
                .filter(filter)
                .aggs(&a2_aggs)
                .check(a2_check.clone()),
        );
        v.push(
            case(a3, "")
                .filter(filter)
                .aggs(&a3_aggs)
                .check(a3_check.clone()),
        );
    }
    v.push(case(a1, "").aggs(&a1_aggs).limit(Some(0), 0));
    v.push(case(a1, "").aggs(&a1_aggs).limit(Some(3), 1));
    v.push(case(a1, "1").aggs(&a1_aggs).limit(Some(1), 0));
    v
}

/// A result set taken apart: column definitions and rows of cells.
struct Decoded {
    columns: Vec<(Vec<u8>, u8, u16)>,
    rows: Vec<Vec<Option<Vec<u8>>>>,
}

fn decode(packets: &[Vec<u8>], protocol: Protocol, deprecate_eof: bool, what: &str) -> Decoded {
    let n = Cursor::new(&packets[0]).lenenc().expect("column count") as usize;
    let defs: Vec<ColumnDef> = packets[1..=n]
        .iter()
        .map(|p| ColumnDef::decode(p).unwrap_or_else(|e| panic!("{what}: {e}")))
        .collect();
    let types: Vec<u8> = defs.iter().map(|d| d.column_type).collect();
    let first_row = 1 + n + usize::from(!deprecate_eof);
    let rows = packets[first_row..packets.len() - 1]
        .iter()
        .map(|p| {
            let cells: Vec<Cell> = match protocol {
                Protocol::Text => row::text_cells(p, n),
                Protocol::Binary => row::binary_cells(p, &types),
            }
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            cells.iter().map(|c| c.map(<[u8]>::to_vec)).collect()
        })
        .collect();
    Decoded {
        columns: defs
            .iter()
            .map(|d| (d.name.to_vec(), d.column_type, d.flags & flags::UNSIGNED))
            .collect(),
        rows,
    }
}

fn float_of(cell: &[u8], protocol: Protocol) -> f64 {
    match (protocol, cell.len()) {
        (Protocol::Binary, 8) => f64::from_le_bytes(cell.try_into().unwrap()),
        (Protocol::Binary, 4) => f32::from_le_bytes(cell.try_into().unwrap()).into(),
        _ => std::str::from_utf8(cell).unwrap().parse().unwrap(),
    }
}

fn same(col: Col, a: Option<&[u8]>, b: Option<&[u8]>, protocol: Protocol) -> bool {
    match (col, a, b) {
        (Col::Skip, _, _) => true,
        (_, None, None) => true,
        (_, None, _) | (_, _, None) => false,
        (Col::Exact, Some(a), Some(b)) => a == b,
        (Col::Ci, Some(a), Some(b)) => {
            let norm = |s: &[u8]| String::from_utf8_lossy(s).trim_end().to_lowercase();
            norm(a) == norm(b)
        }
        (Col::Float, Some(a), Some(b)) => {
            let (x, y) = (float_of(a, protocol), float_of(b, protocol));
            (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
    }
}

fn compare(merged: &Decoded, full: &Decoded, check: &Check, protocol: Protocol, what: &str) {
    assert_eq!(merged.columns, full.columns, "{what}: columns");
    match check {
        Check::CountOnly => {
            assert_eq!(merged.rows.len(), full.rows.len(), "{what}: row count");
        }
        Check::AnyOrder => {
            let mut a = merged.rows.clone();
            let mut b = full.rows.clone();
            a.sort();
            b.sort();
            assert_eq!(a, b, "{what}");
        }
        Check::Rows(cols) => {
            assert_eq!(merged.rows.len(), full.rows.len(), "{what}: row count");
            for (i, (m, f)) in merged.rows.iter().zip(&full.rows).enumerate() {
                for (c, (x, y)) in m.iter().zip(f).enumerate() {
                    let col = cols.get(c).copied().unwrap_or(Col::Exact);
                    assert!(
                        same(col, x.as_deref(), y.as_deref(), protocol),
                        "{what}: row {i} column {c}: merged {:?}, full copy {:?}",
                        x.as_deref().map(String::from_utf8_lossy),
                        y.as_deref().map(String::from_utf8_lossy),
                    );
                }
            }
        }
    }
}

/// Each result column's collation, by the table column it comes from.
fn collations(
    reply: &[Vec<u8>],
    deprecate_eof: bool,
) -> Vec<Option<&'static idgate::collation::Collation>> {
    let split = idgate::shard::reply::split(reply, deprecate_eof).expect("a result set");
    (1..=split.columns.len())
        .map(|i| {
            let (_, _, column) = ColumnDef::origin(&split.head[i]).expect("column definition");
            // MIN(s) / MAX(sb): the column the aggregate reads.
            let name = split.columns[i - 1].name;
            let read = match name.iter().position(|&b| b == b'(') {
                Some(p) if column.is_empty() => name[p + 1..].strip_suffix(b")").unwrap_or(b""),
                _ => column,
            };
            match read {
                b"s" => idgate::collation::by_name("utf8mb4_general_ci"),
                b"sb" => idgate::collation::by_name("utf8mb4_bin"),
                _ => None,
            }
        })
        .collect()
}

#[tokio::test]
async fn merged_results_equal_the_full_copys() {
    let Some(tb) = support::testbed() else { return };
    let db = fixture(&tb).await;
    let cases = cases();
    let mut checked = 0;
    for deprecate_eof in [false, true] {
        let mut s0 = connect(&tb, 0, &db, deprecate_eof).await;
        let mut s1 = connect(&tb, 1, &db, deprecate_eof).await;
        for protocol in [Protocol::Text, Protocol::Binary] {
            for c in &cases {
                let shard_sql = c.sql(true);
                let full_sql = c.sql(false);
                let what = format!("{full_sql} [{protocol:?}, deprecate_eof={deprecate_eof}]");
                let replies = vec![
                    execute(&mut s0, &shard_sql, protocol).await,
                    execute(&mut s1, &shard_sql, protocol).await,
                ];
                // The collations idgate learns from information_schema.
                let mut spec = c.spec();
                spec.collations = collations(&replies[0], deprecate_eof);
                let merged = merge(&replies, &spec, protocol, deprecate_eof)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let full = execute(&mut s0, &full_sql, protocol).await;
                let merged = decode(&merged, protocol, deprecate_eof, &what);
                let full = decode(&full, protocol, deprecate_eof, &what);
                compare(&merged, &full, &c.check, protocol, &what);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, cases.len() * 4);
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE {db}")]).await;
    proxy::admin(&tb, 1, &[&format!("DROP DATABASE {db}")]).await;
}

/// The data really is split, and the tie-breaking cases really have ties:
/// otherwise the comparisons above would prove less than they claim.
#[tokio::test]
async fn the_fixture_has_rows_on_both_shards_and_case_insensitive_ties() {
    let Some(tb) = support::testbed() else { return };
    let db = fixture(&tb).await;
    let mut counts = Vec::new();
    for shard in [0, 1] {
        let mut c = connect(&tb, shard, &db, false).await;
        let rows = c
            .query_rows("SELECT COUNT(*), COUNT(DISTINCT s), COUNT(DISTINCT BINARY s) FROM t")
            .await
            .expect("count");
        let n: u64 = rows[0][0].as_deref().unwrap().parse().unwrap();
        let ci: u64 = rows[0][1].as_deref().unwrap().parse().unwrap();
        let bin: u64 = rows[0][2].as_deref().unwrap().parse().unwrap();
        assert!(
            ci < bin,
            "shard {shard}: strings equal only case-insensitively"
        );
        counts.push(n);
    }
    assert!(counts.iter().all(|&n| n > ROWS / 4), "{counts:?}");
    assert_eq!(counts.iter().sum::<u64>(), ROWS);
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE {db}")]).await;
    proxy::admin(&tb, 1, &[&format!("DROP DATABASE {db}")]).await;
}
