//! Explicit ids, differentially (issue 12): every form an application can
//! write an id in (literals of every type, expressions, variables,
//! subqueries, `INSERT ... SET`, `REPLACE`, `ON DUPLICATE KEY UPDATE id =`,
//! `UPDATE ... SET id =`) and every binary-protocol parameter type, each
//! bound with its own wire type by a raw COM_STMT_EXECUTE, runs once against
//! an AUTO_INCREMENT table on MariaDB directly (shard 0) and once against a
//! rule table through idgate, each case on a fresh table pair (and, through
//! idgate, its own fresh sequence generator, so every explicit id is above
//! everything that generator issued before).
//!
//! Both sides must show the same: every statement's OK packet (affected
//! rows, last_insert_id, warnings) or error code, `SELECT LAST_INSERT_ID()`
//! after every statement, and every stored id. A generated id is compared
//! by what it belongs to (the statement that reported it, the row that
//! holds it), since the two counters need not issue the same numbers; an id
//! the application wrote is compared as a number. On both sides, every
//! generated id is above every id stored before its statement.

mod support;

use idgate::protocol::consts::cmd;
use idgate::protocol::reply;
use idgate::protocol::response::Expect;
use idgate::protocol::stmt::types;
use std::collections::HashMap;
use support::proxy::{self, LoginSpec, Proxy, RawClient};

/// A binary-protocol parameter: type code, flags (0x80: unsigned), value
/// as sent (`None`: NULL).
type Param = (u8, u8, Option<Vec<u8>>);

const UNSIGNED: u8 = 0x80;

fn int_param(ty: u8, flags: u8, le_bytes: &[u8]) -> Param {
    (ty, flags, Some(le_bytes.to_vec()))
}

fn str_param(ty: u8, s: &str) -> Param {
    (ty, 0, Some(s.as_bytes().to_vec()))
}

/// One statement of a case. `tbl` in the SQL is the case's table.
#[derive(Clone)]
enum Sql {
    Text(String),
    Exec(String, Vec<Param>),
}

#[derive(Clone)]
struct Step {
    sql: Sql,
    /// The statement stores a row with a generated id.
    generates: bool,
}

struct Case {
    name: String,
    steps: Vec<Step>,
    /// Keys `k` of the rows whose id is generated.
    gen_keys: Vec<i64>,
    /// Where idgate is documented to differ from MariaDB (README,
    /// "Semantics"): what idgate shows instead.
    documented: Vec<Doc>,
}

/// A documented difference: what idgate shows, labelled, where MariaDB
/// shows something else.
#[derive(Clone)]
enum Doc {
    /// Statement `.0`'s reply.
    Reply(usize, &'static str),
    /// The stored rows.
    Rows(&'static [(i64, &'static str)]),
}

fn text(sql: &str) -> Step {
    Step {
        sql: Sql::Text(sql.to_string()),
        generates: false,
    }
}

fn exec(sql: &str, params: Vec<Param>) -> Step {
    Step {
        sql: Sql::Exec(sql.to_string(), params),
        generates: false,
    }
}

fn generating(mut s: Step) -> Step {
    s.generates = true;
    s
}

/// A generated row with key `k`.
fn gen(k: i64) -> Step {
    generating(text(&format!("INSERT INTO tbl (k) VALUES ({k})")))
}

/// The usual shape: a generated row (k = 1), `stmt` (which writes k = 2),
/// a generated row (k = 3) that must land above whatever `stmt` stored.
fn around(name: &str, stmt: Step) -> Case {
    let mut gen_keys = vec![1, 3];
    if stmt.generates {
        gen_keys.push(2);
    }
    Case {
        name: name.to_string(),
        steps: vec![gen(1), stmt, gen(3)],
        gen_keys,
        documented: Vec::new(),
    }
}

/// The prepared INSERT every parameter type is bound to.
const BIND: &str = "INSERT INTO tbl (id, k) VALUES (?, 2)";

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    // Text protocol: literals of every kind, expressions, variables and
    // subqueries, each statement form.
    for (name, sql) in [
        ("decimal 30.0", "INSERT INTO tbl VALUES (30.0, 2)"),
        ("hex 0x21", "INSERT INTO tbl VALUES (0x21, 2)"),
        // MariaDB stores 34: an exact number rounds half away from zero.
        ("decimal 33.5", "INSERT INTO tbl VALUES (33.5, 2)"),
        ("string ' 40'", "INSERT INTO tbl VALUES (' 40', 2)"),
        ("double 3.2e1", "INSERT INTO tbl VALUES (3.2e1, 2)"),
        ("double 32.5e0", "INSERT INTO tbl VALUES (32.5e0, 2)"),
        ("expression 50+1", "INSERT INTO tbl VALUES (50+1, 2)"),
        ("subquery", "INSERT INTO tbl VALUES ((SELECT 60), 2)"),
        ("cast", "INSERT INTO tbl VALUES (CAST('61' AS SIGNED), 2)"),
        ("bit b'1000001'", "INSERT INTO tbl VALUES (b'1000001', 2)"),
        ("string '+41'", "INSERT INTO tbl VALUES ('+41', 2)"),
        ("string '4.45e1'", "INSERT INTO tbl VALUES ('4.45e1', 2)"),
        ("introducer", "INSERT INTO tbl VALUES (_latin1'62', 2)"),
        ("column list", "INSERT INTO tbl (k, id) VALUES (2, 63)"),
        ("INSERT SET", "INSERT INTO tbl SET id = 70, k = 2"),
        ("INSERT SET expr", "INSERT INTO tbl SET k = 2, id = 70 + 1"),
        ("REPLACE", "REPLACE INTO tbl VALUES (80, 2)"),
        (
            "multi-row",
            "INSERT INTO tbl VALUES (90, 2), (NULL, 4), (95, 5)",
        ),
    ] {
        let mut c = around(name, text(sql));
        if name == "multi-row" {
            c.steps[1].generates = true;
            c.gen_keys.push(4);
        }
        v.push(c);
    }
    // Values that convert to 0 get a generated id, as with AUTO_INCREMENT.
    for (name, sql) in [
        ("decimal 0.4", "INSERT INTO tbl VALUES (0.4, 2)"),
        ("string '0'", "INSERT INTO tbl VALUES ('0', 2)"),
        ("hex 0x00", "INSERT INTO tbl VALUES (0x00, 2)"),
        ("FALSE", "INSERT INTO tbl VALUES (FALSE, 2)"),
    ] {
        v.push(around(name, generating(text(sql))));
    }
    v.push(Case {
        name: "variable @v".into(),
        steps: vec![
            gen(1),
            text("SET @v = 55"),
            text("INSERT INTO tbl VALUES (@v, 2)"),
            gen(3),
        ],
        gen_keys: vec![1, 3],
        documented: Vec::new(),
    });
    // TRUE is 1: no generated row before it.
    v.push(Case {
        name: "TRUE".into(),
        steps: vec![text("INSERT INTO tbl VALUES (TRUE, 2)"), gen(3)],
        gen_keys: vec![3],
        documented: Vec::new(),
    });
    // REPLACE over the generated row (same unique k): deleted and inserted.
    v.push(Case {
        name: "REPLACE over a row".into(),
        steps: vec![gen(1), text("REPLACE INTO tbl VALUES (85, 1)"), gen(3)],
        gen_keys: vec![3],
        documented: Vec::new(),
    });
    // ON DUPLICATE KEY UPDATE id = 300: the found row (k = 1) gets id 300.
    for (name, stmt) in [
        (
            "upsert, id generated",
            text("INSERT INTO tbl (k) VALUES (1) ON DUPLICATE KEY UPDATE id = 300"),
        ),
        (
            "upsert, id explicit",
            text("INSERT INTO tbl (id, k) VALUES (5, 1) ON DUPLICATE KEY UPDATE id = 300"),
        ),
        (
            "upsert, no duplicate",
            text("INSERT INTO tbl (id, k) VALUES (310, 2) ON DUPLICATE KEY UPDATE id = 320"),
        ),
        (
            "prepared upsert, DOUBLE",
            exec(
                "INSERT INTO tbl (k) VALUES (1) ON DUPLICATE KEY UPDATE id = ?",
                vec![int_param(types::DOUBLE, 0, &330.5f64.to_le_bytes())],
            ),
        ),
    ] {
        // Documented difference (README, "Semantics", INSERT IGNORE / ON
        // DUPLICATE KEY UPDATE: "A statement with only explicit ids reports
        // the last of them (MariaDB: the updated row's id when the
        // duplicate is on another unique key)"): MariaDB reports 300, the
        // updated row's id; idgate reports 5, the id the row proposed. The
        // stored ids and LAST_INSERT_ID() are the same.
        let documented = if name == "upsert, id explicit" {
            vec![Doc::Reply(
                1,
                "OK affected 2, last_insert_id lit:5, warnings 0",
            )]
        } else {
            Vec::new()
        };
        v.push(Case {
            name: name.into(),
            steps: vec![gen(1), stmt, gen(3)],
            gen_keys: vec![3],
            documented,
        });
    }
    // UPDATE of the id.
    for (name, stmt) in [
        ("UPDATE", text("UPDATE tbl SET id = 200 WHERE id = 24")),
        (
            "prepared UPDATE, DECIMAL",
            exec(
                "UPDATE tbl SET id = ? WHERE id = 24",
                vec![str_param(types::NEWDECIMAL, "200.5")],
            ),
        ),
        (
            "prepared UPDATE, LONGLONG",
            exec(
                "UPDATE tbl SET id = ? WHERE k = ?",
                vec![
                    int_param(types::LONGLONG, 0, &210i64.to_le_bytes()),
                    int_param(types::LONGLONG, 0, &2i64.to_le_bytes()),
                ],
            ),
        ),
    ] {
        v.push(Case {
            name: name.into(),
            steps: vec![gen(1), text("INSERT INTO tbl VALUES (24, 2)"), stmt, gen(3)],
            gen_keys: vec![1, 3],
            documented: Vec::new(),
        });
    }

    // Binary protocol: the id bound as every parameter type, on the wire.
    let binds: Vec<(&str, Param)> = vec![
        ("TINY", int_param(types::TINY, 0, &[70])),
        // 200 unsigned; read as signed it would be -56.
        ("TINY unsigned", int_param(types::TINY, UNSIGNED, &[200])),
        (
            "SHORT",
            int_param(types::SHORT, 0, &30_000i16.to_le_bytes()),
        ),
        (
            "SHORT unsigned",
            int_param(types::SHORT, UNSIGNED, &60_000u16.to_le_bytes()),
        ),
        ("LONG", int_param(types::LONG, 0, &100_000i32.to_le_bytes())),
        (
            "LONG unsigned",
            int_param(types::LONG, UNSIGNED, &3_000_000_000u32.to_le_bytes()),
        ),
        (
            "LONGLONG",
            int_param(types::LONGLONG, 0, &5_000_000_000i64.to_le_bytes()),
        ),
        (
            "LONGLONG unsigned",
            int_param(types::LONGLONG, UNSIGNED, &6_000_000_000u64.to_le_bytes()),
        ),
        // rint: half to even, 76.5 is 76.
        ("FLOAT", int_param(types::FLOAT, 0, &76.5f32.to_le_bytes())),
        (
            "DOUBLE",
            int_param(types::DOUBLE, 0, &88.5f64.to_le_bytes()),
        ),
        (
            "DOUBLE integral",
            int_param(types::DOUBLE, 0, &7000.0f64.to_le_bytes()),
        ),
        // An exact decimal: half away from zero, 100.
        ("NEWDECIMAL", str_param(types::NEWDECIMAL, "99.5")),
        ("DECIMAL", str_param(types::DECIMAL, "101")),
        ("VAR_STRING", str_param(types::VAR_STRING, " 110")),
        (
            "VAR_STRING exponent",
            str_param(types::VAR_STRING, "1.115e2"),
        ),
        ("STRING", str_param(types::STRING, "+113")),
        ("BLOB", str_param(types::BLOB, "120")),
    ];
    for (name, p) in binds {
        v.push(around(&format!("bound {name}"), exec(BIND, vec![p])));
    }
    // Bound values that generate: NULL, 0 of any type, a string '0'.
    for (name, p) in [
        ("NULL", (types::NULL, 0, None)),
        ("LONGLONG NULL", (types::LONGLONG, 0, None)),
        ("LONG 0", int_param(types::LONG, 0, &0i32.to_le_bytes())),
        (
            "DOUBLE 0.4",
            int_param(types::DOUBLE, 0, &0.4f64.to_le_bytes()),
        ),
        ("VAR_STRING '0'", str_param(types::VAR_STRING, "0")),
    ] {
        v.push(around(
            &format!("bound {name}"),
            generating(exec(BIND, vec![p])),
        ));
    }
    // Other prepared forms.
    v.push(around(
        "prepared INSERT SET, DOUBLE",
        exec(
            "INSERT INTO tbl SET id = ?, k = 2",
            vec![int_param(types::DOUBLE, 0, &130.0f64.to_le_bytes())],
        ),
    ));
    v.push(around(
        "prepared REPLACE, VAR_STRING",
        exec(
            "REPLACE INTO tbl (id, k) VALUES (?, 2)",
            vec![str_param(types::VAR_STRING, "140")],
        ),
    ));
    v.push(around(
        "prepared expression ? + 1",
        exec(
            "INSERT INTO tbl (id, k) VALUES (? + 1, 2)",
            vec![int_param(types::LONG, 0, &149i32.to_le_bytes())],
        ),
    ));
    v
}

// ---------------------------------------------------------------------------
// Running a case on one side.

/// What one statement got.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Ok {
        affected_rows: u64,
        last_insert_id: u64,
        warnings: u16,
    },
    Err(u16, String),
}

/// One statement's outcome on one side, raw.
#[derive(Debug)]
struct Outcome {
    reply: Reply,
    /// `SELECT LAST_INSERT_ID()` right after.
    last_insert_id: u64,
    /// The largest id stored before the statement (0: none).
    max_before: i128,
}

/// The single value of a one-row, one-column text result (`None`: NULL).
async fn query_value(c: &mut RawClient, sql: &str) -> Option<String> {
    let r = c.query(sql).await;
    assert!(
        proxy::err_of(&r).is_none(),
        "{sql}: {:?}",
        proxy::err_of(&r)
    );
    // Column count, column definition, EOF, the row, EOF.
    let row = &r[3];
    if row[0] == 0xfb {
        return None;
    }
    assert!(row[0] < 251, "short value");
    let n = row[0] as usize;
    Some(String::from_utf8(row[1..1 + n].to_vec()).unwrap())
}

async fn query_int<T: std::str::FromStr>(c: &mut RawClient, sql: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    query_value(c, sql)
        .await
        .unwrap_or_else(|| panic!("{sql}: NULL"))
        .parse()
        .unwrap()
}

fn reply_of(r: &[Vec<u8>]) -> Reply {
    if let Some(e) = proxy::err_of(r) {
        return Reply::Err(e.code, e.message.clone());
    }
    assert_eq!(r.len(), 1, "one OK packet, no result set");
    let ok = reply::parse_ok(&r[0]).expect("an OK packet");
    Reply::Ok {
        affected_rows: ok.affected_rows,
        last_insert_id: ok.last_insert_id,
        warnings: ok.warnings,
    }
}

/// COM_STMT_EXECUTE of statement `id` with `params` (types sent).
fn execute_packet(id: u32, params: &[Param]) -> Vec<u8> {
    let mut e = vec![cmd::STMT_EXECUTE];
    e.extend_from_slice(&id.to_le_bytes());
    e.push(0);
    e.extend_from_slice(&1u32.to_le_bytes());
    if params.is_empty() {
        return e;
    }
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
    for p in params {
        let Some(v) = &p.2 else { continue };
        match p.0 {
            types::TINY
            | types::SHORT
            | types::LONG
            | types::LONGLONG
            | types::FLOAT
            | types::DOUBLE => e.extend_from_slice(v),
            _ => {
                assert!(v.len() < 251);
                e.push(v.len() as u8);
                e.extend_from_slice(v);
            }
        }
    }
    e
}

async fn run_step(c: &mut RawClient, sql: &Sql, table: &str) -> Reply {
    match sql {
        Sql::Text(s) => reply_of(&c.query(&s.replace("tbl", table)).await),
        Sql::Exec(s, params) => {
            let s = s.replace("tbl", table);
            let prepare = [&[cmd::STMT_PREPARE][..], s.as_bytes()].concat();
            let r = c.command(&prepare, Expect::Prepare).await;
            if let Some(e) = proxy::err_of(&r) {
                return Reply::Err(e.code, e.message.clone());
            }
            let id = u32::from_le_bytes([r[0][1], r[0][2], r[0][3], r[0][4]]);
            let reply = reply_of(
                &c.command(&execute_packet(id, params), Expect::Results)
                    .await,
            );
            let close = [&[cmd::STMT_CLOSE][..], &id.to_le_bytes()].concat();
            c.send(&close).await;
            reply
        }
    }
}

/// What one side saw of a case: each statement's outcome and the stored
/// `(k, id)` rows.
#[derive(Debug)]
struct Run {
    outcomes: Vec<Outcome>,
    rows: Vec<(i64, i128)>,
}

async fn run_case(c: &mut RawClient, case: &Case, table: &str) -> Run {
    let mut outcomes = Vec::new();
    for step in &case.steps {
        let max_before = query_int(c, &format!("SELECT COALESCE(MAX(id), 0) FROM {table}")).await;
        let reply = run_step(c, &step.sql, table).await;
        let last_insert_id = query_int(c, "SELECT LAST_INSERT_ID()").await;
        outcomes.push(Outcome {
            reply,
            last_insert_id,
            max_before,
        });
    }
    let n = query_int(c, &format!("SELECT COUNT(*) FROM {table}")).await;
    let mut rows = Vec::new();
    for i in 0..n {
        let kv = query_value(
            c,
            &format!("SELECT CONCAT(k, ' ', id) FROM {table} ORDER BY k LIMIT {i}, 1"),
        )
        .await
        .unwrap();
        let (k, id) = kv.split_once(' ').unwrap();
        rows.push((k.parse().unwrap(), id.parse().unwrap()));
    }
    Run { outcomes, rows }
}

/// A run with every generated id replaced by what it belongs to.
#[derive(Debug, PartialEq)]
struct Labelled {
    /// Per statement: the reply (error: its code only) and LAST_INSERT_ID().
    steps: Vec<(String, String)>,
    rows: Vec<(i64, String)>,
}

fn label_run(case: &Case, run: &Run) -> Labelled {
    let mut names: HashMap<i128, String> = HashMap::new();
    for (i, (step, o)) in case.steps.iter().zip(&run.outcomes).enumerate() {
        if let (true, Reply::Ok { last_insert_id, .. }) = (step.generates, &o.reply) {
            names.insert(*last_insert_id as i128, format!("gen:statement {i}"));
        }
    }
    for (k, id) in &run.rows {
        if case.gen_keys.contains(k) {
            names.entry(*id).or_insert_with(|| format!("gen:row {k}"));
        }
    }
    let label = |id: i128| {
        names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("lit:{id}"))
    };
    Labelled {
        steps: run
            .outcomes
            .iter()
            .map(|o| {
                let reply = match &o.reply {
                    Reply::Ok {
                        affected_rows,
                        last_insert_id,
                        warnings,
                    } => format!(
                        "OK affected {affected_rows}, last_insert_id {}, warnings {warnings}",
                        label(*last_insert_id as i128)
                    ),
                    Reply::Err(code, _) => format!("ERR {code}"),
                };
                (reply, label(o.last_insert_id as i128))
            })
            .collect(),
        rows: run.rows.iter().map(|(k, id)| (*k, label(*id))).collect(),
    }
}

/// Every generated id is above every id stored before its statement; no
/// statement failed (unless `allow_errors`).
fn check_run(case: &Case, run: &Run, side: &str, allow_errors: bool) {
    for (i, (step, o)) in case.steps.iter().zip(&run.outcomes).enumerate() {
        match &o.reply {
            Reply::Err(..) if allow_errors => {}
            Reply::Err(code, msg) => {
                panic!("{}, {side}: statement {i} failed: {code} {msg}", case.name)
            }
            Reply::Ok { last_insert_id, .. } if step.generates => assert!(
                *last_insert_id as i128 > o.max_before,
                "{}, {side}: statement {i} generated {last_insert_id}, but {} was stored before",
                case.name,
                o.max_before
            ),
            Reply::Ok { .. } => {}
        }
    }
}

fn rules(schema: &str, n: usize) -> String {
    let mut r = String::new();
    for i in 0..n {
        r.push_str(&format!(
            "[[generator]]\nname = \"g{i}\"\nkind = \"sequence\"\nbatch = 10\n\n\
             [[table]]\nname = \"{schema}.c{i}\"\ncolumn = \"id\"\ngenerator = \"g{i}\"\n\n"
        ));
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_form_and_bound_type_reports_and_stores_what_mariadb_does() {
    let Some(tb) = support::testbed() else { return };
    run_cases(&tb, &cases(), "xdiff", false).await;
}

/// Runs every case on its own table pair (directly and through idgate,
/// each in a fresh session) and compares; `allow_errors`: a statement may
/// fail (on both sides alike), else any error fails the test.
async fn run_cases(tb: &support::Testbed, cases: &[Case], tag: &str, allow_errors: bool) {
    let tb = tb.clone();
    let schema = support::unique(tag);
    let reference = format!("{schema}_ai");
    let mut ddl = vec![
        format!("CREATE DATABASE `{schema}`"),
        format!("CREATE DATABASE `{reference}`"),
    ];
    for i in 0..cases.len() {
        ddl.push(format!(
            "CREATE TABLE `{schema}`.c{i} (id BIGINT PRIMARY KEY, k INT NOT NULL UNIQUE)"
        ));
        ddl.push(format!(
            "CREATE TABLE `{reference}`.c{i} (id BIGINT AUTO_INCREMENT PRIMARY KEY, k INT NOT NULL UNIQUE)"
        ));
    }
    let ddl: Vec<&str> = ddl.iter().map(String::as_str).collect();
    proxy::admin(&tb, 0, &ddl).await;
    let p = Proxy::start_rules(
        &tb,
        &rules(&schema, cases.len()),
        &format!("/{tag}-{schema}"),
    )
    .await;

    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let table = format!("c{i}");
        // A fresh session on each side, so LAST_INSERT_ID() starts at 0.
        let mut direct = RawClient::connect(
            tb.shards[0].parse().unwrap(),
            &LoginSpec::new(&tb.user, &tb.password).db(&reference),
        )
        .await
        .expect_ok();
        let mut through = RawClient::connect(
            p.addr,
            &LoginSpec::new(proxy::USER, proxy::PASSWORD).db(&schema),
        )
        .await
        .expect_ok();
        let want = run_case(&mut direct, case, &table).await;
        let got = run_case(&mut through, case, &table).await;
        check_run(case, &want, "directly", allow_errors);
        check_run(case, &got, "through idgate", allow_errors);
        let (w, mut g) = (label_run(case, &want), label_run(case, &got));
        eprintln!(
            "{}:\n  directly:       {w:?}\n  through idgate: {g:?}",
            case.name
        );
        for d in &case.documented {
            match d {
                Doc::Reply(i, documented) => {
                    assert_eq!(
                        g.steps[*i].0, *documented,
                        "{}: idgate as documented",
                        case.name
                    );
                    g.steps[*i].0 = w.steps[*i].0.clone();
                }
                Doc::Rows(rows) => {
                    let rows: Vec<(i64, String)> =
                        rows.iter().map(|(k, l)| (*k, l.to_string())).collect();
                    assert_eq!(g.rows, rows, "{}: idgate as documented", case.name);
                    g.rows = w.rows.clone();
                }
            }
        }
        if w != g {
            failures.push(format!(
                "{}:\n  directly:       {w:?}\n  through idgate: {g:?}",
                case.name
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    p.stop().await;
    for db in [&schema, &reference] {
        proxy::admin(&tb, 0, &[&format!("DROP DATABASE IF EXISTS `{db}`")]).await;
    }
}

/// Runs `case` on a fresh AUTO_INCREMENT table directly and a fresh rule
/// table through idgate (schemas named after `tag`): (directly, through
/// idgate).
async fn run_both(tb: &support::Testbed, tag: &str, case: &Case) -> (Run, Run) {
    let schema = support::unique(tag);
    let reference = format!("{schema}_ai");
    proxy::admin(
        tb,
        0,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &format!("CREATE DATABASE `{reference}`"),
            &format!("CREATE TABLE `{schema}`.c0 (id BIGINT PRIMARY KEY, k INT NOT NULL UNIQUE)"),
            &format!(
                "CREATE TABLE `{reference}`.c0 (id BIGINT AUTO_INCREMENT PRIMARY KEY, k INT NOT NULL UNIQUE)"
            ),
        ],
    )
    .await;
    let p = Proxy::start_rules(tb, &rules(&schema, 1), &format!("/{tag}-{schema}")).await;
    let mut direct = RawClient::connect(
        tb.shards[0].parse().unwrap(),
        &LoginSpec::new(&tb.user, &tb.password).db(&reference),
    )
    .await
    .expect_ok();
    let mut through = RawClient::connect(
        p.addr,
        &LoginSpec::new(proxy::USER, proxy::PASSWORD).db(&schema),
    )
    .await
    .expect_ok();
    let want = run_case(&mut direct, case, "c0").await;
    let got = run_case(&mut through, case, "c0").await;
    eprintln!("directly: {want:?}\nthrough idgate: {got:?}");
    drop((direct, through));
    p.stop().await;
    for db in [&schema, &reference] {
        proxy::admin(tb, 0, &[&format!("DROP DATABASE IF EXISTS `{db}`")]).await;
    }
    (want, got)
}

/// Documented difference (README, "Semantics", expressions: "an expression
/// that yields NULL is refused by the shard (MariaDB would generate an
/// id...)"): an id written as an expression that turns out NULL gets a
/// generated id from MariaDB's AUTO_INCREMENT, and an error through idgate,
/// which stores nothing; the session goes on, and the next generated id is
/// above everything stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expression_that_yields_null_is_refused() {
    let Some(tb) = support::testbed() else { return };
    let stmts = [
        text("INSERT INTO tbl VALUES (@nothing, 2)"),
        text("INSERT INTO tbl VALUES ((SELECT NULL), 3)"),
        exec(
            "INSERT INTO tbl (id, k) VALUES (? + 1, 4)",
            vec![(types::LONGLONG, 0, None)],
        ),
    ];
    let case = Case {
        name: "NULL expressions".into(),
        steps: [vec![gen(1)], stmts.to_vec(), vec![gen(5)]].concat(),
        gen_keys: vec![1, 2, 3, 4, 5],
        documented: Vec::new(),
    };
    let (want, got) = run_both(&tb, "xdnull", &case).await;
    for i in 1..=stmts.len() {
        // MariaDB: a generated id.
        assert!(
            matches!(want.outcomes[i].reply, Reply::Ok { affected_rows: 1, last_insert_id, .. } if last_insert_id as i128 > want.outcomes[i].max_before),
            "directly, statement {i}: {:?}",
            want.outcomes[i]
        );
        // idgate: refused by the shard (1048, "Column 'id' cannot be
        // null", what MariaDB says of NULL in a NOT NULL column without
        // AUTO_INCREMENT), nothing stored.
        assert!(
            matches!(got.outcomes[i].reply, Reply::Err(1048, _)),
            "through idgate, statement {i}: {:?}",
            got.outcomes[i]
        );
    }
    assert_eq!(want.rows.len(), 5);
    assert_eq!(got.rows.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 5]);
    let last = got.outcomes.last().unwrap();
    assert!(
        matches!(last.reply, Reply::Ok { last_insert_id, .. } if last_insert_id as i128 > last.max_before)
    );
}

/// Documented difference (README, "Semantics", expressions: "in a
/// multi-row INSERT in non-strict mode ... stores 0"): in non-strict mode
/// (`sql_mode = ''`), a multi-row INSERT whose id is an expression that
/// yields NULL: MariaDB's AUTO_INCREMENT generates an id for that row;
/// through idgate the non-strict shard stores 0 with warning 1048, as it
/// does for NULL in any NOT NULL column of a multi-row INSERT. The other
/// row's explicit id is kept and observed: the next generated id is above
/// it. (0 is never a generated id, so nothing collides with it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_strict_null_expression_in_a_multi_row_insert_stores_0() {
    let Some(tb) = support::testbed() else { return };
    let case = Case {
        name: "non-strict NULL expression, multi-row".into(),
        steps: vec![
            text("SET SESSION sql_mode = ''"),
            gen(1),
            generating(text("INSERT INTO tbl VALUES (@nothing, 2), (70, 4)")),
            gen(3),
        ],
        gen_keys: vec![1, 2, 3],
        documented: Vec::new(),
    };
    let (want, got) = run_both(&tb, "xnull", &case).await;
    let id_of = |run: &Run, k: i64| run.rows.iter().find(|r| r.0 == k).map(|r| r.1);
    // MariaDB: a generated id for k = 2, above what was stored before.
    assert!(
        matches!(
            want.outcomes[2].reply,
            Reply::Ok {
                affected_rows: 2,
                warnings: 0,
                ..
            }
        ),
        "{:?}",
        want.outcomes[2]
    );
    assert!(id_of(&want, 2).is_some_and(|id| id > want.outcomes[2].max_before && id != 70));
    // idgate: 0 with warning 1048 for k = 2; 70 kept for k = 4.
    assert!(
        matches!(
            got.outcomes[2].reply,
            Reply::Ok {
                affected_rows: 2,
                warnings: 1,
                ..
            }
        ),
        "{:?}",
        got.outcomes[2]
    );
    assert_eq!(id_of(&got, 2), Some(0));
    assert_eq!(id_of(&got, 4), Some(70));
    // Both: the next generated id is above everything stored.
    for run in [&want, &got] {
        let id = id_of(run, 3).expect("row k = 3");
        assert!(id > 70, "{run:?}");
    }
}

/// Rarer forms, sql_modes and values out of range; a statement may fail,
/// as long as it fails alike on both sides.
fn edge_cases() -> Vec<Case> {
    let mut v = Vec::new();
    let non_strict = || text("SET SESSION sql_mode = ''");
    for (name, stmt) in [
        (
            "hex string X'3737'",
            text("INSERT INTO tbl VALUES (X'3737', 2)"),
        ),
        (
            "CAST AS DECIMAL",
            text("INSERT INTO tbl VALUES (CAST(33.5 AS DECIMAL(5,1)), 2)"),
        ),
        (
            "string expression",
            text("INSERT INTO tbl VALUES (CONCAT('3', '5.5'), 2)"),
        ),
        (
            "huge literal",
            text("INSERT INTO tbl VALUES (18446744073709551615, 2)"),
        ),
        (
            "bound VAR_STRING '33.5'",
            exec(BIND, vec![str_param(types::VAR_STRING, "33.5")]),
        ),
        (
            "bound VAR_STRING '1e3'",
            exec(BIND, vec![str_param(types::VAR_STRING, "1e3")]),
        ),
        (
            "bound VAR_STRING ' 12 '",
            exec(BIND, vec![str_param(types::VAR_STRING, " 12 ")]),
        ),
        (
            "bound expression ? * 2, DOUBLE",
            exec(
                "INSERT INTO tbl (id, k) VALUES (? * 2, 2)",
                vec![int_param(types::DOUBLE, 0, &10.25f64.to_le_bytes())],
            ),
        ),
    ] {
        v.push(around(name, stmt));
    }
    for (name, stmt) in [
        ("DEFAULT", text("INSERT INTO tbl VALUES (DEFAULT, 2)")),
        (
            "bound DOUBLE -0.4",
            exec(
                BIND,
                vec![int_param(types::DOUBLE, 0, &(-0.4f64).to_le_bytes())],
            ),
        ),
        (
            "bound NEWDECIMAL '0.49'",
            exec(BIND, vec![str_param(types::NEWDECIMAL, "0.49")]),
        ),
    ] {
        v.push(around(name, generating(stmt)));
    }
    let case = |name: &str, steps: Vec<Step>, gen_keys: Vec<i64>| Case {
        name: name.into(),
        steps,
        gen_keys,
        documented: Vec::new(),
    };
    v.push(case(
        "non-strict '77abc'",
        vec![
            non_strict(),
            gen(1),
            text("INSERT INTO tbl VALUES ('77abc', 2)"),
            gen(3),
        ],
        vec![1, 3],
    ));
    v.push(case(
        "non-strict bound '78abc'",
        vec![
            non_strict(),
            gen(1),
            exec(BIND, vec![str_param(types::VAR_STRING, "78abc")]),
            gen(3),
        ],
        vec![1, 3],
    ));
    v.push(case(
        "NO_AUTO_VALUE_ON_ZERO 0",
        vec![
            text("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO')"),
            gen(1),
            text("INSERT INTO tbl VALUES (0, 2)"),
            gen(3),
        ],
        vec![1, 3],
    ));
    v.push(case(
        "upsert id = VALUES(id)",
        vec![
            gen(1),
            text("INSERT INTO tbl (id, k) VALUES (400, 1) ON DUPLICATE KEY UPDATE id = VALUES(id)"),
            gen(3),
        ],
        vec![3],
    ));
    v.push(case(
        "upsert id = LAST_INSERT_ID(id)",
        vec![
            gen(1),
            text("INSERT INTO tbl (k) VALUES (1) ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)"),
            gen(3),
        ],
        vec![1, 3],
    ));
    v.push(case(
        "multi-row upsert",
        vec![
            gen(1),
            text(
                "INSERT INTO tbl (id, k) VALUES (40, 2), (41, 1) ON DUPLICATE KEY UPDATE id = 500",
            ),
            gen(3),
        ],
        vec![3],
    ));
    v.push(case(
        "INSERT IGNORE duplicate",
        vec![
            gen(1),
            text("INSERT INTO tbl VALUES (30, 2)"),
            text("INSERT IGNORE INTO tbl VALUES (30, 4)"),
            gen(3),
        ],
        vec![1, 3],
    ));
    v.push(case(
        "REPLACE generated over a row",
        vec![
            gen(1),
            generating(text("REPLACE INTO tbl (k) VALUES (1)")),
            gen(3),
        ],
        vec![1, 3],
    ));
    v.push(case(
        "UPDATE every row",
        vec![gen(1), gen(2), text("UPDATE tbl SET id = k + 1000"), gen(3)],
        vec![3],
    ));
    v.push(case(
        "UPDATE ORDER BY LIMIT",
        vec![
            gen(1),
            gen(2),
            text("UPDATE tbl SET id = 500 ORDER BY k DESC LIMIT 1"),
            gen(3),
        ],
        vec![1, 3],
    ));
    v.push(case(
        "UPDATE to a variable",
        vec![
            gen(1),
            text("SET @v = 600"),
            text("UPDATE tbl SET id = @v"),
            gen(3),
        ],
        vec![3],
    ));
    // Out of range for BIGINT: MariaDB refuses the row with 1264 ("Out of
    // range value"); idgate refuses such a bound id itself with 1366, as
    // documented (README, "Semantics", bound parameters: "one idgate
    // cannot convert exactly ... is refused with error 1366"). Nothing is
    // stored either way.
    for (name, p) in [
        (
            "bound LONGLONG unsigned 2^63 + 1",
            int_param(types::LONGLONG, UNSIGNED, &((1u64 << 63) + 1).to_le_bytes()),
        ),
        (
            "bound DOUBLE 1e300",
            int_param(types::DOUBLE, 0, &1e300f64.to_le_bytes()),
        ),
    ] {
        let mut c = around(name, exec(BIND, vec![p]));
        c.documented = vec![Doc::Reply(1, "ERR 1366")];
        v.push(c);
    }
    for c in &mut v {
        c.documented = match c.name.as_str() {
            // Documented (README, "Semantics", bound parameters: "a string
            // that is not a number is refused with error 1366"): MariaDB in
            // non-strict mode stores 78 with a warning; idgate refuses the
            // execute and stores nothing.
            "non-strict bound '78abc'" => vec![
                Doc::Reply(2, "ERR 1366"),
                Doc::Rows(&[(1, "gen:statement 1"), (3, "gen:statement 3")]),
            ],
            // Documented (README, "Semantics", INSERT IGNORE / ON DUPLICATE
            // KEY UPDATE: "A statement with only explicit ids reports the
            // last of them"): MariaDB reports 500, the last row's id as
            // updated; idgate reports 41, the id that row proposed.
            "multi-row upsert" => vec![Doc::Reply(
                1,
                "OK affected 3, last_insert_id lit:41, warnings 0",
            )],
            _ => std::mem::take(&mut c.documented),
        };
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rarer_forms_and_modes_report_and_store_what_mariadb_does() {
    let Some(tb) = support::testbed() else { return };
    run_cases(&tb, &edge_cases(), "xedge", true).await;
}

/// A negative explicit id: MariaDB's OK packet reports it (as the unsigned
/// 64-bit two's complement, 18446744073709551611 for -5), as it reports
/// any explicit id of an explicit-only statement, and so does idgate:
/// literal, captured and bound (a negative id is never a generated one, so
/// nothing is observed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_explicit_ids_are_reported_as_mariadb_reports_them() {
    let Some(tb) = support::testbed() else { return };
    let cases = vec![
        around("negative literal", text("INSERT INTO tbl VALUES (-5, 2)")),
        around(
            "negative subquery",
            text("INSERT INTO tbl VALUES ((SELECT -6), 2)"),
        ),
        around(
            "bound TINY -3",
            exec(BIND, vec![int_param(types::TINY, 0, &[0xfd])]),
        ),
        // An exact decimal rounds half away from zero: -1.
        around(
            "bound NEWDECIMAL '-0.5'",
            exec(BIND, vec![str_param(types::NEWDECIMAL, "-0.5")]),
        ),
    ];
    run_cases(&tb, &cases, "xneg", false).await;
}
