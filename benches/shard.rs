//! Criterion benchmarks of placement: `Placement::shard_of` for each
//! sharding kind, with placements built by the rule loader as the server
//! builds them.
//!
//! Target (issue #5): a routing decision costs <= 1 us per statement.
//! Run: `cargo bench --bench shard -- --warm-up-time 1 --measurement-time 3`.

use std::fmt::Write;
use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use idgate::collation::Charset;
use idgate::frontend::shardkey::{canonical, KeyType, Purpose};
use idgate::rules::RuleSet;
use idgate::shard::placement::{KeyValue, Placement};

const SHARDS: &[&str] = &["s0", "s1", "s2", "s3"];

/// Keys cycled through, so every call places a different value.
const KEYS: usize = 1024;

fn rules() -> String {
    let mut text = String::from(
        r#"[[generator]]
name = "g"
kind = "snowflake"

[[table]]
name = "shop.by_mod"
column = "id"
generator = "g"
shard_key = "id"
sharding = "mod"

[[table]]
name = "shop.by_hash"
column = "id"
generator = "g"
shard_key = "id"
sharding = "hash"

[[table]]
name = "shop.by_range"
column = "id"
generator = "g"
shard_key = "id"
sharding = "range"
ranges = [ { to = 1000000, shard = "s0" }, { from = 1000000, to = 5000000, shard = "s1" }, { from = 5000000, shard = "s2" } ]

[[table]]
name = "shop.by_range64"
column = "id"
generator = "g"
shard_key = "id"
sharding = "range"
ranges = [ { to = 1000000, shard = "s0" }"#,
    );
    for i in 1..63 {
        let _ = write!(
            text,
            ", {{ from = {}, to = {}, shard = \"s{}\" }}",
            i * 1_000_000,
            (i + 1) * 1_000_000,
            i % 4
        );
    }
    text.push_str(", { from = 63000000, shard = \"s3\" } ]\n");
    text
}

fn placement<'a>(set: &'a RuleSet, table: &str) -> &'a Placement {
    set.entry(Some("shop"), table)
        .and_then(|e| e.placement())
        .expect("bench rules place every table")
}

fn bench(c: &mut Criterion) {
    let set = RuleSet::from_toml(Path::new("bench.toml"), &rules(), SHARDS, &|_| Ok(()))
        .expect("bench rules are valid");
    // Integer keys spread over the 64 ranges, and snowflake-sized ones.
    let ints: Vec<KeyValue> = (0..KEYS as i128)
        .map(|i| KeyValue::Int((i * 61_234_567) % 64_000_000))
        .collect();
    let ints_large: Vec<KeyValue> = (0..KEYS as i128)
        .map(|i| KeyValue::Int(7_260_000_000_000_000_000 + i * 4_194_305))
        .collect();
    // 20-byte string keys.
    let strs: Vec<KeyValue> = (0..KEYS)
        .map(|i| KeyValue::Str(format!("user-{i:015}").into_bytes()))
        .collect();
    assert!(strs
        .iter()
        .all(|k| matches!(k, KeyValue::Str(b) if b.len() == 20)));

    let mut g = c.benchmark_group("shard_of");
    let mut run = |name: &str, p: &Placement, keys: &[KeyValue]| {
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                black_box(p.shard_of(black_box(&keys[i])))
            })
        });
    };
    run("mod, integer key", placement(&set, "by_mod"), &ints_large);
    run(
        "hash, integer key (19 digits)",
        placement(&set, "by_hash"),
        &ints_large,
    );
    run(
        "hash, 20-byte string key",
        placement(&set, "by_hash"),
        &strs,
    );
    run(
        "range (3 ranges), integer key",
        placement(&set, "by_range"),
        &ints,
    );
    run(
        "range (64 ranges), integer key",
        placement(&set, "by_range64"),
        &ints,
    );
    g.finish();

    // String keys of a hash table placed by their column's collation: the
    // collation key, then the hash (what an INSERT or keyed SELECT pays).
    let by_hash = placement(&set, "by_hash");
    let mixed: Vec<KeyValue> = (0..KEYS)
        .map(|i| KeyValue::Str(format!("User-{i:010}@Exämple").into_bytes()))
        .collect();
    let mut g = c.benchmark_group("collation key + shard_of, hash");
    for (name, keys) in [
        ("20-byte ASCII key", &strs),
        ("20-byte mixed-case key with ä", &mixed),
    ] {
        for coll in ["utf8mb4_general_ci", "utf8mb4_unicode_ci", "utf8mb4_bin"] {
            let ty = KeyType::Text(idgate::collation::by_name(coll).expect("known"));
            let mut i = 0;
            g.bench_function(format!("{name}, {coll}"), |b| {
                b.iter(|| {
                    i = (i + 1) % KEYS;
                    let k = canonical(
                        black_box(&keys[i]),
                        by_hash,
                        Some(ty),
                        Charset::Utf8mb4,
                        Purpose::Lookup,
                    );
                    black_box(k.ok().flatten().map(|k| by_hash.shard_of(&k)))
                })
            });
        }
    }
    g.finish();

    // A whole routing decision: the rule lookup by (schema, table) and then
    // the placement of the key.
    let mut i = 0;
    c.bench_function("rule lookup + shard_of (hash, integer key)", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            let p = set
                .entry(Some(black_box("shop")), black_box("by_hash"))
                .and_then(|e| e.placement());
            black_box(p.map(|p| p.shard_of(&ints_large[i])))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
