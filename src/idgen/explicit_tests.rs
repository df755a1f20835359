//! Explicit ids across processes (several allocators on one in-memory
//! store, a fake clock): once `observe(x)` returned `Ok`, no process issues
//! `x`; the common cases touch no store; a process that cannot acknowledge
//! makes the explicit id fail instead of risking a duplicate.
//!
//! Deterministic: background work is driven by hand where the outcome
//! depends on it; timeouts only bound waits that must not hang. The
//! in-memory tests run on paused tokio time (time moves only when nothing
//! can run), so a timeout never runs out because the machine is slow.

use std::sync::Arc;
use std::time::Duration;

use super::params::DEFAULT_EPOCH_MS;
use super::{Allocator, AllocatorOptions, FakeClock, FileStore, IdgenError, MemoryStore, Store};
use crate::rules::spec::{GeneratorKind, GeneratorRule};

/// 100 days after the default epoch.
const T0: u64 = DEFAULT_EPOCH_MS + 100 * 86_400_000;

fn seq() -> GeneratorRule {
    let mut r = GeneratorRule::new("o", GeneratorKind::Sequence);
    r.batch = Some(1000);
    r.min_batch = Some(1000);
    r.max_batch = Some(1000);
    r
}

fn snow() -> GeneratorRule {
    GeneratorRule::new("f", GeneratorKind::Snowflake)
}

async fn open(store: &Arc<MemoryStore>, clock: &Arc<FakeClock>, timeout: Duration) -> Allocator {
    let store: Arc<dyn Store> = store.clone();
    Allocator::with_options(
        store,
        clock.clone(),
        &[seq(), snow()],
        AllocatorOptions { timeout },
    )
    .await
    .expect("open")
}

async fn next(a: &Allocator, name: &str, n: u64) -> Vec<u64> {
    let mut out = Vec::new();
    a.generator(name)
        .unwrap()
        .next(n, &mut out)
        .await
        .expect("next");
    out
}

async fn observe(a: &Allocator, name: &str, id: u64) -> Result<(), IdgenError> {
    a.generator(name).unwrap().observe(id).await
}

/// Two processes on one store and a fake clock.
async fn two(timeout: Duration) -> (Arc<MemoryStore>, Arc<FakeClock>, Allocator, Allocator) {
    let store = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(T0));
    let a = open(&store, &clock, timeout).await;
    let b = open(&store, &clock, timeout).await;
    (store, clock, a, b)
}

/// The case: an explicit id inside the segment another process
/// holds. After `observe` returns, that process never issues it (nor
/// anything below it: the floor).
#[tokio::test(start_paused = true)]
async fn an_id_in_another_process_cache_is_never_issued_after_observe() {
    let (store, _clock, a, b) = two(Duration::from_secs(10)).await;
    assert_eq!(next(&a, "o", 1).await, [1]);
    assert_eq!(next(&b, "o", 1).await, [1001]);
    observe(&a, "o", 1500).await.expect("confirmed");
    // b acknowledged before observe returned: its record is above 1500.
    assert!(
        store
            .member_records("seq/o")
            .iter()
            .all(|&(_, low)| low > 1500),
        "{:?}",
        store.member_records("seq/o")
    );
    let ids = next(&b, "o", 600).await;
    assert!(ids.iter().all(|&id| id > 1500), "{ids:?}");
    a.shutdown().await;
    b.shutdown().await;
}

/// The common cases cost no store call: an id in a range this process
/// reserved, an id below what every process may still issue (after one
/// read), ids above the high-water mark (one reservation, then local).
#[tokio::test(start_paused = true)]
async fn common_cases_touch_no_store() {
    let (store, _clock, a, b) = two(Duration::from_secs(10)).await;
    assert_eq!(next(&a, "o", 1).await, [1]);
    // b uses up its first segment [1001, 2001) and one id of the next.
    let ids = next(&b, "o", 1001).await;
    assert_eq!((ids[0], ids[1000]), (1001, 2001));
    let ga = a.generator("o").unwrap();
    // b's background round: the next segment is reserved, and b writes its
    // low (2002) into its member record. Nothing else writes afterwards
    // (a waiting segment, a fake clock that does not move).
    b.generator("o").unwrap().background_round().await.unwrap();
    let writes = store.writes();
    // In a's own segment.
    assert!(ga.observe_local(5));
    assert!(ga.observe_local(900));
    // Issued by b already, below b's low and the high-water mark: one
    // consistent read (no write), then free.
    observe(&a, "o", 1500).await.unwrap();
    assert_eq!(store.writes(), writes, "a read only");
    assert!(ga.observe_local(1999));
    // Above every reservation: one reservation above it...
    observe(&a, "o", 10_000).await.unwrap();
    assert_eq!(store.writes(), writes + 1);
    // ...then the next explicit ids above it are a's own.
    for id in 10_001..10_100 {
        assert!(ga.observe_local(id), "{id}");
    }
    assert_eq!(store.writes(), writes + 1);
    assert_eq!(next(&a, "o", 1).await, [10_100]);
    // b never issues them: its later segments start above.
    let ids = next(&b, "o", 2000).await;
    assert!(
        ids.iter().all(|&id| !(10_000..11_000).contains(&id)),
        "{ids:?}"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// A process that holds a member record but does not acknowledge (cut off
/// from the store, lease not yet expired): the explicit id fails within the
/// timeout, naming the generator and the id; once its record expires, the
/// id is confirmed, and the process holding the id never issues it.
// The 200 ms timeout runs out only when nothing else can progress (paused
// time), so a loaded machine cannot make the acknowledging process late.
#[tokio::test(start_paused = true)]
async fn a_process_that_does_not_acknowledge_fails_the_explicit_id() {
    let store = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(T0));
    let a = open(&store, &clock, Duration::from_millis(200)).await;
    let c = open(&store, &clock, Duration::from_secs(10)).await;
    assert_eq!(next(&a, "o", 1).await, [1]);
    assert_eq!(next(&c, "o", 1).await, [1001]);
    // A silent member (never follows the floor).
    let silent = store.join("seq/o").await.unwrap().expect("member");
    let err = observe(&a, "o", 1500).await.expect_err("not confirmed");
    assert!(
        matches!(err, IdgenError::Unconfirmed { id: 1500, .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.starts_with("generator o: explicit id 1500 "), "{msg}");
    // Its lease runs out in the store.
    assert!(store.expire_member("seq/o", silent.handle));
    observe(&a, "o", 1500).await.expect("confirmed");
    let ids = next(&c, "o", 900).await;
    assert!(ids.iter().all(|&id| id > 1500), "{ids:?}");
    a.shutdown().await;
    c.shutdown().await;
}

/// A process whose member record is lost (lease expired while it was cut
/// off) drops its cache at once: an explicit id confirmed without it is
/// never issued by it, and it serves again from a fresh reservation.
#[tokio::test(start_paused = true)]
async fn losing_the_member_record_drops_the_cache() {
    let (store, _clock, a, b) = two(Duration::from_secs(10)).await;
    assert_eq!(next(&a, "o", 1).await, [1]);
    assert_eq!(next(&b, "o", 1).await, [1001]);
    let records = store.member_records("seq/o");
    assert_eq!(records.len(), 2);
    // b joined second: the higher handle.
    let b_handle = records[1].0;
    assert!(store.expire_member("seq/o", b_handle));
    assert_eq!(b.generator("o").unwrap().stats().cached_remaining, 0);
    // Only a is a member now: confirmed without b.
    observe(&a, "o", 1500).await.expect("confirmed");
    // b joins again and reserves above everything.
    let ids = next(&b, "o", 10).await;
    assert!(ids[0] >= 2001, "{ids:?}");
    assert_eq!(store.member_records("seq/o").len(), 2);
    a.shutdown().await;
    b.shutdown().await;
}

/// `IDGATE SET FLOOR`: every other process has skipped the floor when
/// `set_floor` returns.
#[tokio::test(start_paused = true)]
async fn set_floor_waits_for_every_process() {
    let (_store, _clock, a, b) = two(Duration::from_secs(10)).await;
    next(&a, "o", 1).await;
    next(&b, "o", 1).await;
    a.generator("o").unwrap().set_floor(1700).await.unwrap();
    assert_eq!(next(&b, "o", 1).await, [1701]);
    a.shutdown().await;
    b.shutdown().await;
}

/// Snowflake: an explicit id of this process's node puts every later id
/// above it; one of another node (the id that node is about to issue) is
/// acknowledged by its holder before `observe` returns, and the holder
/// never issues it; an old id of another node is free after one read.
#[tokio::test(start_paused = true)]
async fn snowflake_explicit_ids_own_and_other_nodes() {
    let (store, clock, a, b) = two(Duration::from_secs(10)).await;
    let (ga, gb) = (a.generator("f").unwrap(), b.generator("f").unwrap());
    let a0 = next(&a, "f", 1).await[0];
    let b0 = next(&b, "f", 1).await[0];
    let node = |id: u64| (id >> 12) & 1023;
    assert_ne!(node(a0), node(b0));
    // Own node, a little ahead: local.
    let own = a0 + (5 << 22);
    assert!(ga.observe_local(own));
    let ids = next(&a, "f", 100).await;
    assert!(ids.iter().all(|&id| id > own));
    // Another node's next ids: b acknowledges (its background round).
    let theirs = b0 + (2 << 22) + 3;
    assert!(!ga.observe_local(theirs));
    observe(&a, "f", theirs).await.expect("confirmed");
    let ids = next(&b, "f", 100).await;
    assert!(ids.iter().all(|&id| id > theirs), "{:#x} {ids:x?}", theirs);
    // An id of b's node far in the past: one read of b's ceiling, no write.
    clock.advance(60_000);
    next(&b, "f", 1).await; // b extends its ceiling with the clock
    gb.background_round().await.unwrap();
    let writes = store.writes();
    let old = b0 - (10 << 22);
    observe(&a, "f", old).await.expect("confirmed");
    assert!(ga.observe_local(old - (1 << 22)));
    assert_eq!(store.writes(), writes);
    a.shutdown().await;
    b.shutdown().await;
}

/// A process cut off from the store that holds the node of an explicit
/// id: the id fails within the timeout; a node nobody holds is confirmed
/// by publishing its floor, which the next holder applies.
#[tokio::test(start_paused = true)]
async fn snowflake_unheld_node_takes_the_floor_with_it() {
    let store = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(T0));
    let a = open(&store, &clock, Duration::from_secs(10)).await;
    let a0 = next(&a, "f", 1).await[0];
    // Node 1 nobody holds: an id of it, ahead of the clock.
    let x = ((a0 >> 22) + 50) << 22 | (1 << 12) | 7;
    observe(&a, "f", x).await.expect("confirmed");
    let b = open(&store, &clock, Duration::from_secs(10)).await;
    let ids = next(&b, "f", 10).await;
    assert_eq!((ids[0] >> 12) & 1023, 1, "b holds node 1");
    assert!(ids.iter().all(|&id| id > x), "{x:#x} {ids:x?}");
    // A silent holder of node 2.
    let silent = store.acquire_node("snow/f", 3).await.unwrap();
    assert_eq!(silent.node, 2);
    let short = open(&store, &clock, Duration::from_millis(200)).await;
    let y = ((a0 >> 22) + 50) << 22 | (2 << 12) | 7;
    let err = observe(&short, "f", y).await.expect_err("not confirmed");
    assert!(matches!(err, IdgenError::Unconfirmed { .. }), "{err}");
    a.shutdown().await;
    b.shutdown().await;
    short.shutdown().await;
}

/// The state file (one process): an explicit id above the high-water mark
/// is durable before `observe` returns: a restart issues above it.
// Real time (a state file is written by blocking threads, which paused time
// does not wait for): every bound is far above any fsync a loaded CI
// machine takes (3 s ones once ran out there).
#[tokio::test]
async fn file_store_explicit_id_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    let clock = Arc::new(FakeClock::new(T0));
    let open_file = || async {
        // The previous store's lock goes with its last reference (its
        // background tasks end on their own): retried, bounded.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let store = loop {
            match FileStore::open(&path, Duration::from_secs(120)) {
                Ok(s) => break s,
                Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let store: Arc<dyn Store> = Arc::new(store);
        let options = AllocatorOptions {
            timeout: Duration::from_secs(120),
        };
        Allocator::with_options(store, clock.clone(), &[seq()], options)
            .await
            .expect("open")
    };
    let a = open_file().await;
    assert_eq!(next(&a, "o", 1).await, [1]);
    observe(&a, "o", 50_000).await.unwrap();
    // A crash: no shutdown.
    drop(a);
    let b = open_file().await;
    assert!(next(&b, "o", 1).await[0] > 50_000);
    b.shutdown().await;
}

/// Whatever a client writes, `observe` does not panic: ids beyond the
/// layout, at the top of u64, with every node bit set (also layouts without
/// node or sequence bits). Such ids exhaust the generator (nothing at or
/// below them is issued any more), as an explicit id at `max` exhausts an
/// AUTO_INCREMENT column.
#[tokio::test(start_paused = true)]
async fn absurd_explicit_ids_do_not_panic() {
    let mut no_node = GeneratorRule::new("n0", GeneratorKind::Snowflake);
    no_node.node_bits = Some(0);
    no_node.timestamp_bits = Some(41);
    no_node.sequence_bits = Some(22);
    let mut no_seq = GeneratorRule::new("s0", GeneratorKind::Snowflake);
    no_seq.sequence_bits = Some(0);
    for id in [u64::MAX, i64::MAX as u64, 1 << 63, (1 << 63) - 1, 1, 2] {
        let store = MemoryStore::new();
        let clock = Arc::new(FakeClock::new(T0));
        let mut rules = vec![seq(), snow(), no_seq.clone()];
        if super::validate(&no_node).is_ok() {
            rules.push(no_node.clone());
        }
        let store_dyn: Arc<dyn Store> = store.clone();
        let a = Allocator::with_options(
            store_dyn,
            clock.clone(),
            &rules,
            AllocatorOptions {
                timeout: Duration::from_millis(200),
            },
        )
        .await
        .expect("open");
        for name in a.names() {
            let g = a.generator(&name).unwrap();
            let mut out = Vec::new();
            let _ = g.next(1, &mut out).await;
            let _ = g.observe(id).await;
            out.clear();
            if g.next(1, &mut out).await.is_ok() {
                assert!(out[0] > id, "{name}: {} after {id}", out[0]);
            }
        }
        a.shutdown().await;
    }
}
