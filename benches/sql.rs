//! Criterion benchmarks of the SQL hot path, each beside a full sqlparser
//! parse of the same text (the baseline the fast path is measured against).
//!
//! Targets: classify + plan + render <= 2 us for a one-row INSERT, <= 20 us
//! for a 100-row INSERT, <= 200 ns for a statement on a non-rule table.
//! `plan_sharded_*`: the same INSERTs into a table sharded by its id
//! (`by_id`) and by another column (`by_column`: each row's value of it is
//! read too), planned as the session plans a routed INSERT.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use idgate::rules::RuleSet;
use idgate::sql::{plan_query, Plan, PlanCtx};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::{Parser, ParserOptions};

const RULES: &str = r#"
[[generator]]
name = "orders"
kind = "sequence"
[[table]]
name = "shop.orders"
column = "id"
generator = "orders"
[[table]]
name = "shop.by_id"
column = "id"
generator = "orders"
shard_key = "id"
sharding = "mod"
[[table]]
name = "shop.by_column"
column = "id"
generator = "orders"
shard_key = "customer_id"
sharding = "mod"
"#;

fn columns(_: &str, _: &str) -> Option<Arc<[String]>> {
    None
}

fn sqlparser_parse(sql: &str) -> usize {
    let d = MySqlDialect {};
    Parser::new(&d)
        .with_options(ParserOptions::new().with_unescape(false))
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
        .map(|s| s.len())
        .unwrap_or(0)
}

fn plan_render(
    sql: &str,
    rules: &RuleSet,
    ctx: &PlanCtx<'_>,
    ids: &[u64],
    out: &mut String,
) -> usize {
    out.clear();
    match plan_query(sql, rules, ctx) {
        Ok(Plan::Rewrite(r)) => {
            let n = r.total_ids();
            let _ = r.render(ids.get(..n).unwrap_or(&[]), None, out);
            out.len()
        }
        Ok(Plan::Passthrough) => 0,
        _ => usize::MAX,
    }
}

fn bench(c: &mut Criterion) {
    let rules = RuleSet::from_toml(Path::new("bench.toml"), RULES, &["s0", "s1"], &|_| Ok(()))
        .expect("rules");
    let ctx = PlanCtx {
        schema: Some("shop"),
        no_auto_value_on_zero: false,
        no_backslash_escapes: false,
        ansi_quotes: false,
        columns: &columns,
        mentions: None,
    };
    let ids: Vec<u64> = (1_000_000..1_000_200).collect();
    let one = "INSERT INTO orders (customer_id, sku, qty, note) VALUES (42, 'sku-1', 3, 'x')";
    let mut many = String::from("INSERT INTO orders (customer_id, sku, qty, note) VALUES ");
    for i in 0..100 {
        if i > 0 {
            many.push_str(", ");
        }
        many.push_str(&format!("({i}, 'sku-{i}', {}, 'note {i}')", i % 7));
    }
    let select = "SELECT id, customer_id, sku FROM shop.orders WHERE id = 42";
    let other_insert = "INSERT INTO shop.customers (name, email) VALUES ('a', 'a@example.com')";
    let mut out = String::with_capacity(16 * 1024);

    assert_eq!(sqlparser_parse(one), 1);
    assert_eq!(sqlparser_parse(&many), 1);
    println!(
        "one-row INSERT is {} bytes, 100-row INSERT is {} bytes",
        one.len(),
        many.len()
    );

    let mut g = c.benchmark_group("sql");
    g.bench_function("sqlparser_parse_1row", |b| {
        b.iter(|| sqlparser_parse(black_box(one)))
    });
    g.bench_function("plan_render_1row", |b| {
        b.iter(|| plan_render(black_box(one), &rules, &ctx, &ids, &mut out))
    });
    g.bench_function("sqlparser_parse_100rows", |b| {
        b.iter(|| sqlparser_parse(black_box(&many)))
    });
    g.bench_function("plan_render_100rows", |b| {
        b.iter(|| plan_render(black_box(&many), &rules, &ctx, &ids, &mut out))
    });
    for table in ["by_id", "by_column"] {
        let one = one.replace("orders", table);
        let many = many.replace("INTO orders", &format!("INTO {table}"));
        assert!(matches!(
            plan_query(&one, &rules, &ctx),
            Ok(Plan::Rewrite(_))
        ));
        g.bench_function(format!("plan_sharded_{table}_1row"), |b| {
            b.iter(|| plan_query(black_box(&one), &rules, &ctx))
        });
        g.bench_function(format!("plan_sharded_{table}_100rows"), |b| {
            b.iter(|| plan_query(black_box(&many), &rules, &ctx))
        });
    }
    g.bench_function("passthrough_select", |b| {
        b.iter(|| plan_query(black_box(select), &rules, &ctx))
    });
    g.bench_function("passthrough_insert_other_table", |b| {
        b.iter(|| plan_query(black_box(other_insert), &rules, &ctx))
    });
    // What every INSERT pays first while rules are loaded: the check for
    // an INSERT ... SELECT form (`write/insel.rs`), which stops at VALUES.
    let modes = idgate::sql::route::Modes::default();
    assert!(idgate::sql::insel::parse(other_insert, modes).is_none());
    g.bench_function("insel_check_values_insert", |b| {
        b.iter(|| idgate::sql::insel::parse(black_box(other_insert), modes).is_none())
    });
    // ... which it pays only when the bytes hold the word SELECT.
    assert!(!idgate::sql::insel::may_be(other_insert.as_bytes()));
    g.bench_function("insel_prefilter_values_insert", |b| {
        b.iter(|| idgate::sql::insel::may_be(black_box(other_insert.as_bytes())))
    });
    // UPDATEs: of a table without rule (sysbench's), of a rule table that
    // leaves the id alone, and of the id column (captured, `sql::update`).
    let other_update = "UPDATE shop.customers SET name = 'b' WHERE id = 7";
    let rule_update = "UPDATE shop.orders SET qty = qty + 1 WHERE id = 42";
    let id_update = "UPDATE shop.orders SET id = id + 1000 WHERE id = 42";
    assert!(matches!(
        plan_query(other_update, &rules, &ctx),
        Ok(Plan::Passthrough)
    ));
    assert!(matches!(
        plan_query(rule_update, &rules, &ctx),
        Ok(Plan::Passthrough)
    ));
    assert!(matches!(
        plan_query(id_update, &rules, &ctx),
        Ok(Plan::Rewrite(_))
    ));
    g.bench_function("passthrough_update_other_table", |b| {
        b.iter(|| plan_query(black_box(other_update), &rules, &ctx))
    });
    g.bench_function("plan_update_rule_table_not_id", |b| {
        b.iter(|| plan_query(black_box(rule_update), &rules, &ctx))
    });
    g.bench_function("plan_update_id", |b| {
        b.iter(|| plan_query(black_box(id_update), &rules, &ctx))
    });
    g.finish();
}

/// The head of every COM_QUERY: `sql::statement::classify` (one keyword
/// read, then only that keyword's parser) beside asking each parser in
/// turn, which is what the session did before there was one
/// classification (with routing on).
fn classify(c: &mut Criterion) {
    use idgate::sql::statement::{self, admin, diag, kill, txn};
    fn every_parser(sql: &[u8]) -> bool {
        admin::parse(sql).is_some()
            || kill::parse(sql).is_some()
            || diag::classify(sql).is_some()
            || txn::classify(sql) != txn::TxnStmt::Other
            || txn::savepoint_stmt(sql).is_some()
    }
    let mut g = c.benchmark_group("classify");
    for (name, sql) in [
        ("select", "SELECT c FROM sbtest1 WHERE id = 4242"),
        (
            "insert",
            "INSERT INTO shop.orders (sku, qty) VALUES ('a', 1)",
        ),
        ("commit", "COMMIT"),
        // Passes the cheap check for sequence calls (`sequences`).
        (
            "nextval",
            "INSERT INTO shop.orders (id, qty) VALUES (NEXTVAL(idgate.orders), 1)",
        ),
    ] {
        g.bench_function(format!("classify_{name}"), |b| {
            b.iter(|| statement::classify(black_box(sql.as_bytes())))
        });
        g.bench_function(format!("every_parser_{name}"), |b| {
            b.iter(|| every_parser(black_box(sql.as_bytes())))
        });
        // The part of `classify` the sequence functions added (issue 16
        // part 4): what a statement without them pays.
        g.bench_function(format!("sequence_check_{name}"), |b| {
            b.iter(|| statement::sequence::may_have(black_box(sql.as_bytes())))
        });
    }
    // What a statement that passed the check costs before its values are
    // taken: the recognizer (tokenize, placement) and the splice.
    let seq_sql = "INSERT INTO shop.orders (id, qty) VALUES (NEXTVAL(idgate.orders), 1)";
    g.bench_function("sequence_find_substitute", |b| {
        b.iter(|| {
            let found = statement::sequence::find(black_box(seq_sql), Default::default())
                .ok()
                .flatten()
                .map(|f| f.calls)
                .unwrap_or_default();
            statement::sequence::substitute(seq_sql, &found, &[Some(1_000_001)])
        })
    });
    g.finish();
}

/// The substring scans every multiplexed statement gets (pins and
/// `LAST_INSERT_ID()`: `get_lock`, `sql_calc_found_rows`, `warning_count`,
/// `error_count`, `last_insert_id`, `@@identity`), over sysbench's INSERT
/// and an ORM's (snake_case names: many `_`); and the twelve words of
/// `sql::statement::mentions` found together.
fn scans(c: &mut Criterion) {
    use idgate::sql::statement::keyword::contains_ignore_case;
    const NEEDLES: [&[u8]; 6] = [
        b"get_lock",
        b"sql_calc_found_rows",
        b"warning_count",
        b"error_count",
        b"last_insert_id",
        b"@@identity",
    ];
    let sql = b"INSERT INTO sbtest1 (id, k, c, pad) VALUES (0, 5013, '03888320861-70535968431-44334525326-15100236122-38896566265-86619964298-63851452756-92879568339-90608067562-28172172313', '76968066493-53740396790-16007350881-10907307170-74890847508')";
    let orm = b"INSERT INTO `order_items` (`order_id`, `sku_code`, `quantity`, `unit_price`, `created_at`, `updated_at`) VALUES (42, 'SKU-1', 3, 9.99, '2026-11-27 17:00:00', '2026-11-27 17:00:00')";
    let mut g = c.benchmark_group("scans");
    for (name, text) in [("sysbench_insert", &sql[..]), ("orm_insert", &orm[..])] {
        g.bench_function(format!("six_needles_{name}"), |b| {
            b.iter(|| {
                NEEDLES
                    .iter()
                    .filter(|n| contains_ignore_case(black_box(text), n))
                    .count()
            })
        });
        // The multiplexer's twelve words together, as each command now
        // pays for them (`sql::statement::mentions`).
        g.bench_function(format!("mentions_{name}"), |b| {
            b.iter(|| idgate::sql::statement::mentions::Mentions::of(black_box(text)))
        });
    }
    g.finish();
}

/// What a relayed INSERT does to `LAST_INSERT_ID()` (`sql::autoinc`), as
/// a multiplexed session reads it when another session is likely to take
/// its connection next, before its `sql_mode` is known: the text read once
/// for its table and for both readings of `NO_AUTO_VALUE_ON_ZERO`
/// (`insert_once`), beside one reading per question (`insert_per_question`:
/// the table, then each mode; what the session did before).
fn autoinc(c: &mut Criterion) {
    use idgate::sql::autoinc;
    use idgate::sql::SqlModes;
    let sql = "INSERT INTO sbtest1 (id, k, c, pad) VALUES (0, 5013, '03888320861-70535968431-44334525326-15100236122-38896566265-86619964298-63851452756-92879568339-90608067562-28172172313', '76968066493-53740396790-16007350881-10907307170-74890847508')";
    let cols: Vec<String> = ["id", "k", "c", "pad"].map(String::from).to_vec();
    let zero = SqlModes {
        no_auto_value_on_zero: true,
        ..SqlModes::default()
    };
    let mut g = c.benchmark_group("autoinc");
    g.bench_function("insert_once", |b| {
        b.iter(|| {
            let i = autoinc::insert_in_every_mode(black_box(sql)).unwrap();
            black_box(&i.target);
            i.effect_in_every_mode(Some("id"), &cols)
        })
    });
    g.bench_function("insert_per_question", |b| {
        b.iter(|| {
            black_box(autoinc::insert_target_in_every_mode(black_box(sql)).unwrap());
            let plain = autoinc::effect(black_box(sql), SqlModes::default(), Some("id"), &cols);
            (autoinc::effect(black_box(sql), zero, Some("id"), &cols) == plain).then_some(plain)
        })
    });
    g.finish();
}

criterion_group!(benches, bench, classify, scans, autoinc);
criterion_main!(benches);
