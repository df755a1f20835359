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

criterion_group!(benches, bench);
criterion_main!(benches);
