//! Property tests of the SQL rewriter: nothing a client sends can panic it,
//! and the fast path and the sqlparser path agree on every INSERT shape both
//! accept.

use std::path::Path;
use std::sync::Arc;

use idgate::rules::RuleSet;
use idgate::sql::{
    plan_prepare, plan_prepare_with, plan_query, plan_query_with, BoundId, Engine, Plan, PlanCtx,
    PreparePlan, Report, Upserts,
};
use proptest::prelude::*;

const RULES: &str = r#"
[[generator]]
name = "orders"
kind = "sequence"
[[table]]
name = "shop.orders"
column = "id"
generator = "orders"
[[table]]
name = "items"
column = "item_id"
generator = "orders"
"#;

fn rules() -> RuleSet {
    RuleSet::from_toml(Path::new("t.toml"), RULES, &["s0"], &|_| Ok(())).unwrap()
}

fn columns(schema: &str, table: &str) -> Option<Arc<[String]>> {
    let cols: &[&str] = match (schema, table) {
        ("shop", "orders") => &["id", "sku", "qty"],
        ("shop", "items") => &["name", "item_id", "qty"],
        _ => return None,
    };
    Some(cols.iter().map(|s| s.to_string()).collect())
}

fn ctx(navoz: bool) -> PlanCtx<'static> {
    PlanCtx {
        schema: Some("shop"),
        no_auto_value_on_zero: navoz,
        no_backslash_escapes: false,
        ansi_quotes: false,
        columns: &columns,
        mentions: None,
    }
}

/// Plans, renders, and prepares `sql`; must never panic.
fn exercise(sql: &str, rules: &RuleSet) {
    // What the text mentions, found first (as a session does once per
    // command), changes no plan: it only spares scans for absent words.
    let mentions = Some(idgate::sql::statement::mentions::Mentions::of(
        sql.as_bytes(),
    ));
    assert_eq!(
        idgate::sql::plan::passes_in_every_mode_with(sql, mentions),
        idgate::sql::plan::passes_in_every_mode(sql),
        "{sql:?}"
    );
    for navoz in [false, true] {
        let c = ctx(navoz);
        let with_mentions = PlanCtx {
            mentions,
            ..ctx(navoz)
        };
        assert_eq!(
            plan_query_with(sql, rules, &with_mentions, Engine::Auto),
            plan_query_with(sql, rules, &c, Engine::Auto),
            "{sql:?}"
        );
        for engine in [Engine::Auto, Engine::FastOnly, Engine::SqlParserOnly] {
            if let Ok(Plan::Rewrite(r)) = plan_query_with(sql, rules, &c, engine) {
                let ids: Vec<u64> = (1..=r.total_ids() as u64).collect();
                let mut out = String::new();
                r.render(&ids, Some(7), &mut out).unwrap();
                let _ = r.render(&ids[..ids.len().saturating_sub(1)], None, &mut out);
                // Every statement tracked the way a MariaDB shard allows.
                let all = Upserts {
                    track: true,
                    returning: true,
                };
                let reports: Vec<Report> =
                    r.statements().iter().map(|s| s.report(all, true)).collect();
                r.render_with(&ids, None, &|i| reports[i], &mut out)
                    .unwrap();
                for s in r.statements() {
                    assert!(s.range.end <= sql.len());
                }
            }
        }
        let tracked = plan_prepare_with(
            sql,
            rules,
            &c,
            Upserts {
                track: true,
                returning: true,
            },
        );
        for plan in [plan_prepare(sql, rules, &c), tracked] {
            let Ok(PreparePlan::Rewrite(p)) = plan else {
                continue;
            };
            for b in [
                BoundId::Null,
                BoundId::Int(0),
                BoundId::Int(5),
                BoundId::Other,
            ] {
                let ex = p.execute(&|_| b, navoz);
                let ids: Vec<u64> = (1..=ex.demand as u64).collect();
                let params = ex.backend_params(&p, &ids).unwrap();
                assert_eq!(params.len(), p.params.len());
            }
        }
    }
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("NULL".to_string()),
        Just("null".to_string()),
        Just("DEFAULT".to_string()),
        Just("0".to_string()),
        Just("'0'".to_string()),
        (1u64..1_000_000).prop_map(|n| n.to_string()),
        (1u64..1000).prop_map(|n| format!("'{n}'")),
        Just("'a''b\\'c\\\\'".to_string()),
        Just("'é, (ü)'".to_string()),
        Just("\"dq; x\"".to_string()),
        Just("(1 + 2)".to_string()),
        Just("concat('a', ',', 'b')".to_string()),
        Just("_utf8mb4'x'".to_string()),
        Just("-5".to_string()),
        Just("X'41'".to_string()),
        Just("1.5".to_string()),
        Just("LAST_INSERT_ID()".to_string()),
        Just("NOW()".to_string()),
    ]
}

fn ws() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => Just(" "),
        1 => Just("  "),
        1 => Just("\n"),
        1 => Just(" /* c, ( */ "),
        1 => Just(" -- c\n"),
        1 => Just(" # c\n"),
    ]
}

#[derive(Debug, Clone)]
struct InsertCase {
    verb: &'static str,
    into: bool,
    table: &'static str,
    columns: Option<Vec<usize>>, // indexes into [id, sku, qty]
    set_form: bool,
    value_kw: &'static str,
    rows: Vec<Vec<String>>,
    trailer: &'static str,
    gap: &'static str,
    prefix: &'static str,
}

fn case() -> impl Strategy<Value = InsertCase> {
    (
        prop_oneof![
            Just("INSERT"),
            Just("REPLACE"),
            Just("INSERT IGNORE"),
            Just("insert low_priority"),
            Just("INSERT HIGH_PRIORITY IGNORE"),
            Just("INSERT /*+ NO_ICP(t) */"),
        ],
        any::<bool>(),
        prop_oneof![Just("orders"), Just("shop.orders"), Just("`orders`"), Just("`shop`.`orders`"), Just("shop . orders")],
        prop_oneof![
            1 => Just(None),
            4 => proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3).prop_shuffle().prop_map(Some),
        ],
        prop_oneof![4 => Just(false), 1 => Just(true)],
        prop_oneof![Just("VALUES"), Just("VALUE"), Just("values")],
        proptest::collection::vec(proptest::collection::vec(value(), 3), 1..5),
        prop_oneof![
            Just(""),
            Just(" ON DUPLICATE KEY UPDATE qty = VALUES(qty) + 1"),
            Just(" ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)"),
            Just(" AS new ON DUPLICATE KEY UPDATE qty = new.qty"),
            Just(" RETURNING id"),
            Just(" ON DUPLICATE KEY UPDATE qty = (1), sku = 'x' RETURNING id /* c */"),
            Just(" ON DUPLICATE KEY UPDATE qty = qty -- c"),
            Just(";"),
            Just("; SELECT LAST_INSERT_ID()"),
        ],
        ws(),
        prop_oneof![Just(""), Just("SELECT 1;"), Just("/* lead */ ")],
    )
        .prop_map(|(verb, into, table, columns, set_form, value_kw, rows, trailer, gap, prefix)| InsertCase {
            verb,
            into,
            table,
            columns,
            set_form,
            value_kw,
            rows,
            trailer,
            gap,
            prefix,
        })
}

const NAMES: [&str; 3] = ["id", "sku", "qty"];

impl InsertCase {
    fn sql(&self) -> String {
        let g = self.gap;
        let mut s = format!("{}{}{g}", self.prefix, self.verb);
        if self.into {
            s.push_str(&format!("INTO{g}"));
        }
        s.push_str(self.table);
        if self.set_form {
            let cols = self.columns.clone().unwrap_or_else(|| vec![1, 2]);
            let row = self.rows.first().cloned().unwrap_or_default();
            let items: Vec<String> = cols
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    format!(
                        "{} ={g}{}",
                        NAMES[*c],
                        row.get(i).cloned().unwrap_or_else(|| "1".into())
                    )
                })
                .collect();
            s.push_str(&format!(" SET{g}{}", items.join(&format!(",{g}"))));
        } else {
            let width = match &self.columns {
                Some(cols) => {
                    let names: Vec<&str> = cols.iter().map(|c| NAMES[*c]).collect();
                    s.push_str(&format!("{g}({})", names.join(&format!(",{g}"))));
                    cols.len()
                }
                None => 3,
            };
            s.push_str(&format!("{g}{}{g}", self.value_kw));
            let rows: Vec<String> = self
                .rows
                .iter()
                .map(|r| format!("({})", r[..width].join(&format!(",{g}"))))
                .collect();
            s.push_str(&rows.join(&format!(",{g}")));
        }
        s.push_str(self.trailer);
        s
    }
}

/// The rewrite (and, tracked as on MariaDB, the rewrite of upserts) and
/// what was planned per statement.
type Rendered = (String, String, Vec<(usize, Vec<u64>)>);

fn render(plan: Plan) -> Rendered {
    match plan {
        Plan::Rewrite(r) => {
            let ids: Vec<u64> = (0..r.total_ids() as u64).map(|i| 1000 + i).collect();
            let info = r
                .statements()
                .iter()
                .map(|s| (s.generated, s.explicit.clone()))
                .collect();
            let all = Upserts {
                track: true,
                returning: true,
            };
            let alone = r.statements().len() == 1;
            let reports: Vec<Report> = r
                .statements()
                .iter()
                .map(|s| s.report(all, alone))
                .collect();
            let mut tracked = String::new();
            r.render_with(&ids, None, &|i| reports[i], &mut tracked)
                .unwrap();
            (r.render_to_string(&ids, Some(5)).unwrap(), tracked, info)
        }
        other => (format!("{other:?}"), String::new(), Vec::new()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn fast_path_and_sqlparser_agree(case in case(), navoz in any::<bool>()) {
        let sql = case.sql();
        let rules = rules();
        let c = ctx(navoz);
        let fast = plan_query_with(&sql, &rules, &c, Engine::FastOnly);
        let slow = plan_query_with(&sql, &rules, &c, Engine::SqlParserOnly);
        // The fast path handles every generated shape.
        prop_assert!(fast.is_ok(), "fast path failed on {sql}: {fast:?}");
        match (fast, slow) {
            (Ok(f), Ok(s)) => prop_assert_eq!(render(f), render(s), "{}", sql),
            (Ok(_), Err(e)) => {
                // sqlparser lacks some MySQL forms; it must then refuse, not
                // misplan.
                prop_assert!(e.code() == 1064 || e.code() == 1235, "{sql}: {e}");
            }
            _ => {}
        }
        exercise(&sql, &rules);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let sql = String::from_utf8_lossy(&bytes);
        exercise(&sql, &rules());
    }

    #[test]
    fn sqlish_noise_never_panics(parts in proptest::collection::vec(prop_oneof![
        Just("INSERT "), Just("INTO "), Just("orders"), Just("shop."), Just("("), Just(")"), Just(","), Just("'"),
        Just("\""), Just("`"), Just("\\"), Just("/*"), Just("*/"), Just("/*!"), Just("-- "), Just("#"), Just("\n"),
        Just(";"), Just("VALUES"), Just("SET "), Just("id"), Just("="), Just("NULL"), Just("0"), Just("?"),
        Just("LAST_INSERT_ID"), Just("@@identity"), Just("SELECT "), Just("é"), Just(" AS "), Just("ON "),
        Just("PARTITION"), Just("REPLACE "), Just("PREPARE s FROM "), Just("CREATE PROCEDURE "), Just("BEGIN NOT ATOMIC "),
        Just("UPDATE "), Just("last_insert_id("), Just("@@session.identity"), Just("@"), Just("_"),
    ], 0..40)) {
        let sql: String = parts.concat();
        exercise(&sql, &rules());
    }

    #[test]
    fn mutated_inserts_never_panic(case in case(), edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<char>()), 1..6)) {
        let mut sql: Vec<char> = case.sql().chars().collect();
        for (idx, op, ch) in edits {
            if sql.is_empty() {
                sql.push(ch);
                continue;
            }
            let i = idx.index(sql.len());
            match op {
                0 => sql.insert(i, ch),
                1 => { sql.remove(i); }
                _ => sql[i] = ch,
            }
        }
        let sql: String = sql.into_iter().collect();
        exercise(&sql, &rules());
    }
}

#[test]
fn prepared_fuzz_smoke() {
    let rules = rules();
    for sql in [
        "INSERT INTO orders (id, sku) VALUES (?, ?), (?, ?), (NULL, ?)",
        "INSERT INTO orders VALUES (?, ?, ?)",
        "INSERT INTO items (name) VALUES (?)",
        "INSERT INTO orders SET id = ?, sku = ?",
    ] {
        match plan_prepare(sql, &rules, &ctx(false)).unwrap() {
            PreparePlan::Rewrite(p) => {
                let q = p.backend_sql.matches('?').count();
                assert_eq!(q, p.params.len(), "{}", p.backend_sql);
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
    assert!(matches!(
        plan_query("INSERT INTO orders VALUES (1, 'a', 2)", &rules, &ctx(false)),
        Ok(Plan::Rewrite(_))
    ));
}

/// The differential test is only meaningful if sqlparser accepts most
/// generated shapes: count them.
#[test]
fn differential_coverage() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let rules = rules();
    let mut runner = TestRunner::deterministic();
    let (mut both, mut total) = (0, 0);
    let mut rejected = Vec::new();
    for _ in 0..300 {
        let sql = case().new_tree(&mut runner).unwrap().current().sql();
        total += 1;
        let c = ctx(false);
        let fast = plan_query_with(&sql, &rules, &c, Engine::FastOnly);
        let slow = plan_query_with(&sql, &rules, &c, Engine::SqlParserOnly);
        match (fast, slow) {
            (Ok(f), Ok(s)) => {
                assert_eq!(render(f), render(s), "{sql}");
                both += 1;
            }
            (_, Err(e)) => rejected.push(format!("{sql} => {e}")),
            (Err(e), _) => panic!("{sql}: {e}"),
        }
    }
    eprintln!(
        "both parsers planned {both} of {total}; sqlparser refused e.g. {:#?}",
        rejected.iter().take(5).collect::<Vec<_>>()
    );
    assert!(both * 2 > total, "only {both} of {total}");
}

/// `shop.lines` is sharded by `k`, not by its id column.
const BY_KEY: &str = r#"
[[generator]]
name = "g"
kind = "sequence"
[[table]]
name = "shop.lines"
column = "id"
generator = "g"
shard_key = "k"
sharding = "hash"
"#;

/// A shard key literal as a client writes it, and the value MariaDB reads.
fn key_literal() -> impl Strategy<Value = (String, idgate::sql::route::KeyValue)> {
    use idgate::sql::route::KeyValue;
    let text = proptest::collection::vec(
        prop_oneof![
            Just('\''),
            Just('\\'),
            Just('"'),
            Just(','),
            Just('('),
            Just(')'),
            Just('é'),
            Just('?'),
            Just(';'),
            proptest::char::range('a', 'z'),
        ],
        0..12,
    )
    .prop_map(|cs| cs.into_iter().collect::<String>());
    prop_oneof![
        any::<i64>().prop_map(|n| (n.to_string(), KeyValue::Int(i128::from(n)))),
        text.prop_map(|s| {
            let sql = format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"));
            (sql, KeyValue::Str(s.into_bytes()))
        }),
        Just(("NULL".to_string(), KeyValue::Null)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Every row of an INSERT into a table sharded by another column is
    /// placed by exactly the value it writes there, by both parsers, with a
    /// column list, without one, and as INSERT ... SET.
    #[test]
    fn rows_carry_the_key_they_write(
        rows in proptest::collection::vec((value(), key_literal(), value()), 1..6),
        form in 0u8..3,
        spaces in ws(),
    ) {
        use idgate::sql::route::KeyArg;
        let rules = RuleSet::from_toml(Path::new("t.toml"), BY_KEY, &["s0", "s1"], &|_| Ok(())).unwrap();
        let cols = |_: &str, t: &str| -> Option<Arc<[String]>> {
            (t == "lines").then(|| ["a", "k", "id", "b"].iter().map(|s| s.to_string()).collect())
        };
        let c = PlanCtx { columns: &cols, ..ctx(false) };
        let (sql, want): (String, Vec<_>) = match form {
            0 => {
                let body: Vec<String> = rows.iter().map(|(a, (k, _), b)| format!("({a},{spaces}{k}, {b})")).collect();
                (format!("INSERT INTO lines (a, `K`, b) VALUES {}", body.join(",")), rows.iter().map(|r| r.1 .1.clone()).collect())
            }
            1 => {
                let body: Vec<String> = rows.iter().map(|(a, (k, _), b)| format!("({a}, {k},{spaces}NULL, {b})")).collect();
                (format!("INSERT INTO lines VALUES {}", body.join(", ")), rows.iter().map(|r| r.1 .1.clone()).collect())
            }
            _ => {
                let (a, (k, v), b) = &rows[0];
                (format!("INSERT INTO lines SET a = {a},{spaces}lines.k = {k}, b = {b}"), vec![v.clone()])
            }
        };
        for engine in [Engine::FastOnly, Engine::SqlParserOnly] {
            match plan_query_with(&sql, &rules, &c, engine) {
                Ok(Plan::Rewrite(r)) => {
                    let got: Vec<_> = r.statements()[0].shard_keys.iter().map(|k| match k {
                        KeyArg::Value(v) => v.clone(),
                        KeyArg::Param(i) => panic!("a parameter {i} in {sql}"),
                    }).collect();
                    prop_assert_eq!(&got, &want, "{:?}: {}", engine, sql);
                }
                // sqlparser lacks some MySQL forms: it may refuse, never misplan.
                Err(e) if engine == Engine::SqlParserOnly => prop_assert!(e.code() == 1064 || e.code() == 1235, "{sql}: {e}"),
                other => prop_assert!(false, "{:?} on {}: {:?}", engine, sql, other),
            }
        }
    }
}
