//! Daily formatted sequences (`format` with a date) with a fake clock and
//! processes on one in-memory store: the counter restarts at 1 every day,
//! ids increase across days, no process issues an id of an older day once
//! one issued in the new day, a day's width runs out as "exhausted", and
//! explicit ids keep their guarantee.

use std::sync::Arc;
use std::time::Duration;

use super::format::days_from_civil;
use super::{Allocator, AllocatorOptions, FakeClock, IdgenError, MemoryStore, Store};
use crate::rules::spec::{GeneratorKind, GeneratorRule};

/// 2026-11-24T23:59:59Z.
fn late_on_the_24th() -> u64 {
    days_from_civil(2026, 11, 24) as u64 * 86_400_000 + 86_399_000
}

fn rule(format: &str, batch: u64) -> GeneratorRule {
    let mut r = GeneratorRule::new("d", GeneratorKind::Sequence);
    r.format = Some(format.into());
    if format.contains("prefix") {
        r.prefix = Some(17);
    }
    r.batch = Some(batch);
    r.min_batch = Some(batch);
    r.max_batch = Some(batch);
    r
}

async fn open(store: &Arc<dyn Store>, clock: &Arc<FakeClock>, r: &GeneratorRule) -> Allocator {
    Allocator::with_options(
        store.clone(),
        clock.clone(),
        std::slice::from_ref(r),
        AllocatorOptions {
            timeout: Duration::from_secs(30),
        },
    )
    .await
    .expect("open")
}

async fn next(a: &Allocator, n: u64) -> Result<Vec<u64>, IdgenError> {
    let mut out = Vec::new();
    a.generator("d").unwrap().next(n, &mut out).await?;
    Ok(out)
}

#[tokio::test]
async fn the_counter_restarts_every_day_and_ids_increase_across_days() {
    let store: Arc<dyn Store> = MemoryStore::new();
    let a_clock = Arc::new(FakeClock::new(late_on_the_24th()));
    let b_clock = Arc::new(FakeClock::new(late_on_the_24th()));
    let r = rule("{prefix:2}{yyyyMMdd}{seq:8}", 100);
    let a = open(&store, &a_clock, &r).await;
    let b = open(&store, &b_clock, &r).await;
    let a24 = next(&a, 3).await.unwrap();
    assert_eq!(
        a24,
        vec![172026112400000001, 172026112400000002, 172026112400000003]
    );
    let b24 = next(&b, 2).await.unwrap();
    assert!(b24.iter().all(|id| id / 100_000_000 == 1720261124));
    // A's clock reaches the 25th first: its counter restarts at 1.
    a_clock.advance(1000);
    let a25 = next(&a, 2).await.unwrap();
    assert_eq!(a25, vec![172026112500000001, 172026112500000002]);
    // B's clock still reads the 24th, but A issued in the 25th: B never
    // issues an id of the 24th again; it follows the cluster to the 25th.
    let b25 = next(&b, 5).await.unwrap();
    assert!(
        b25.iter()
            .all(|id| id / 100_000_000 == 1720261125 && !a25.contains(id)),
        "{b25:?}"
    );
    let mut all: Vec<u64> = a24
        .iter()
        .chain(&b24)
        .chain(&a25)
        .chain(&b25)
        .copied()
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n);
    assert!(a25
        .iter()
        .chain(&b25)
        .all(|x| a24.iter().chain(&b24).all(|y| x > y)));
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_days_width_runs_out_as_exhausted_and_the_next_day_starts_at_1() {
    let store: Arc<dyn Store> = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(late_on_the_24th()));
    let a = open(&store, &clock, &rule("{yyMMdd}{seq:2}", 10)).await;
    let ids = next(&a, 99).await.unwrap();
    assert_eq!(ids.first(), Some(&26112401));
    assert_eq!(ids.last(), Some(&26112499));
    let e = next(&a, 1).await.unwrap_err();
    assert!(
        matches!(&e, IdgenError::Exhausted { generator, max } if generator == "d" && *max == 26112499),
        "{e}"
    );
    assert!(next(&a, 1).await.is_err(), "still exhausted on the 24th");
    clock.advance(1000);
    assert_eq!(next(&a, 2).await.unwrap(), vec![26112501, 26112502]);
    a.shutdown().await;
}

/// Explicit ids: one of today raises the floor (later ids above it); one
/// of a past day changes nothing (the day's floor is above it); one of a
/// day that has not begun is refused (taking it would make today's ids
/// jump into that day); one of another format can never be issued.
#[tokio::test]
async fn explicit_ids_of_daily_generators() {
    let store: Arc<dyn Store> = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(late_on_the_24th() + 1000));
    let a = open(&store, &clock, &rule("{prefix:2}{yyyyMMdd}{seq:8}", 100)).await;
    let g = a.generator("d").unwrap();
    let first = next(&a, 1).await.unwrap()[0];
    assert_eq!(first, 172026112500000001);
    g.observe(172026112500000500).await.unwrap();
    assert!(next(&a, 1).await.unwrap()[0] > 172026112500000500);
    g.observe(172026112400000007).await.unwrap();
    let e = g.observe(172026112600000001).await.unwrap_err().to_string();
    assert!(e.contains("has not begun"), "{e}");
    g.observe(42).await.unwrap();
    assert!(g.next_block(3).await.is_err());
    a.shutdown().await;
}

#[test]
fn a_format_over_bigint_is_refused_at_load_with_file_and_line() {
    let text = "\n[[generator]]\nname = \"big\"\nkind = \"sequence\"\nformat = \"{prefix:3}{yyyyMMdd}{seq:9}\"\nprefix = 999\n";
    let e = crate::rules::RuleSet::from_toml(
        std::path::Path::new("rules/ids.toml"),
        text,
        &["s0"],
        &super::validate,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("rules/ids.toml:3"), "{e}");
    assert!(e.contains("over BIGINT"), "{e}");
}

/// A format without a date is a plain sequence over its ids.
#[tokio::test]
async fn a_prefix_without_a_date_is_a_plain_sequence() {
    let store: Arc<dyn Store> = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(late_on_the_24th()));
    let a = open(&store, &clock, &rule("{prefix:2}{seq:2}", 10)).await;
    let ids = next(&a, 99).await.unwrap();
    assert_eq!((ids[0], ids[98]), (1701, 1799));
    assert!(matches!(
        next(&a, 1).await,
        Err(IdgenError::Exhausted { .. })
    ));
    a.shutdown().await;
}
