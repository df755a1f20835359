//! Criterion benchmarks of the routing analysis (`sql::route::analyze`), each
//! beside the sqlparser path on the same text and a bare sqlparser parse (the
//! baseline: the analysis beyond parsing is the difference).
//!
//! Targets (issue #5): <= 1 us for the routing decision beyond parsing; a
//! keyed point select well under 1 us in total on the fast path.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use idgate::sql::route::{analyze, analyze_with, Analysis, Engine, Modes};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::{Parser, ParserOptions};

fn shard_key(_schema: Option<&str>, table: &str) -> Option<Arc<str>> {
    static ID: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from("id"));
    (table == "sbtest1").then(|| ID.clone())
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

fn run(sql: &str, engine: Engine) -> Option<Analysis> {
    analyze_with(sql, Modes::default(), &shard_key, engine)
        .ok()
        .flatten()
}

fn bench(c: &mut Criterion) {
    let cases = [
        ("point_select", "SELECT c FROM sbtest1 WHERE id=5"),
        ("keyed_update", "UPDATE sbtest1 SET k=k+1 WHERE id=5"),
        (
            "scatter_order_limit",
            "SELECT id, c FROM sbtest1 WHERE k > 5 ORDER BY c DESC LIMIT 20, 10",
        ),
        (
            "join_fallback",
            "SELECT a.c, b.pad FROM sbtest1 a JOIN sbtest2 b ON a.k = b.id WHERE a.id IN (1, 2, 3) ORDER BY 1 LIMIT 10",
        ),
    ];
    let mut g = c.benchmark_group("route");
    for (name, sql) in cases {
        assert_eq!(sqlparser_parse(sql), 1, "{sql}");
        assert!(run(sql, Engine::ParserOnly).is_some(), "{sql}");
        assert_eq!(
            analyze(sql, Modes::default(), &shard_key).ok(),
            run(sql, Engine::ParserOnly),
            "{sql}"
        );
        g.bench_function(format!("{name}/analyze"), |b| {
            b.iter(|| analyze(black_box(sql), Modes::default(), &shard_key))
        });
        g.bench_function(format!("{name}/sqlparser_path"), |b| {
            b.iter(|| run(black_box(sql), Engine::ParserOnly))
        });
        g.bench_function(format!("{name}/sqlparser_parse_only"), |b| {
            b.iter(|| sqlparser_parse(black_box(sql)))
        });
    }
    g.finish();
}

/// The whole routing decision the session makes for a keyed point select on
/// a sharded table, from public pieces: the cheap "names a sharded table?"
/// check, the analysis, the rule lookup and `shard_of` for the bound key.
fn decision(c: &mut Criterion) {
    use idgate::rules::RuleSet;
    use idgate::sql::route::{KeyArg, KeyBound};
    let rules = RuleSet::from_toml(
        std::path::Path::new("bench.toml"),
        "[[generator]]\nname = \"g\"\nkind = \"sequence\"\n\n\
         [[table]]\nname = \"sbtest.sbtest1\"\ncolumn = \"id\"\ngenerator = \"g\"\n\
         shard_key = \"id\"\nsharding = \"mod\"\n",
        &["s0", "s1"],
        &|_| Ok(()),
    )
    .expect("bench rules");
    let key_of = |s: Option<&str>, t: &str| {
        let e = rules.entry(s.or(Some("sbtest")), t)?;
        e.placement()?;
        e.shard_key().map(|_| e.column_arc().clone())
    };
    let decide = |sql: &str| -> Option<usize> {
        let m = Modes::default();
        if !idgate::sql::mentions_table(sql, m, &|n| rules.has_sharded_table_name(n)) {
            return None;
        }
        let a = analyze(sql, m, &key_of).ok()?;
        let t = a.tables.first()?;
        let p = rules
            .entry(t.schema.as_deref().or(Some("sbtest")), &t.table)?
            .placement()?;
        match &t.key {
            KeyBound::Values(v) => match v.first()? {
                KeyArg::Value(k) => p.shard_of(k).ok(),
                KeyArg::Param(_) => None,
            },
            KeyBound::Unbound => None,
        }
    };
    let sql = "SELECT c FROM sbtest1 WHERE id=5";
    assert_eq!(decide(sql), Some(1));
    c.bench_function("route/point_select/decision", |b| {
        b.iter(|| decide(black_box(sql)))
    });
    let other = "SELECT c FROM other_table WHERE id=5";
    assert_eq!(decide(other), None);
    c.bench_function("route/unsharded_select/decision", |b| {
        b.iter(|| decide(black_box(other)))
    });
}

criterion_group!(benches, bench, decision);
criterion_main!(benches);
