//! Property tests of the id allocator against the in-memory store and a fake
//! clock: random interleavings of next / observe / set_floor / reserve /
//! crash / restart / clock jumps / store faults / lease revocation across
//! three "processes" sharing one store never produce a duplicate; sequences
//! increase per process; snowflake ids increase per node.
//!
//! Everything runs on one thread on paused tokio time: time moves only when
//! nothing can run, so the allocators' timeouts run out only on a store
//! that hangs, never because the machine is slow, and a case runs the same
//! way every time.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use idgate::idgen::{
    Allocator, AllocatorOptions, FakeClock, Fault, IdgenError, MemoryStore, Store,
};
use idgate::rules::spec::{GeneratorKind, GeneratorRule};
use proptest::prelude::*;

const PROCS: usize = 3;
/// 2026-06-01T00:00:00Z
const T0: u64 = 1_780_272_000_000;

fn rule(name: &str, kind: GeneratorKind) -> GeneratorRule {
    GeneratorRule::new(name, kind)
}

#[derive(Debug, Clone)]
enum Op {
    /// next(n) on the sequence (`snow` false) or the snowflake.
    Next { p: usize, snow: bool, n: u64 },
    /// observe(last issued by p + delta) on the sequence.
    Observe { p: usize, delta: u64 },
    /// set_floor(last issued by p + delta).
    SetFloor { p: usize, snow: bool, delta: u64 },
    /// reserve(count) on the sequence.
    Reserve { p: usize, count: u64 },
    /// Drop the allocator without shutdown.
    Crash { p: usize },
    /// Clean shutdown, then open again.
    Restart { p: usize },
    /// Open a process that is down (after expiring crashed leases).
    Start { p: usize },
    /// Wall clock jump (negative: backwards).
    Jump { ms: i64 },
    /// Time passes.
    Advance { ms: u64 },
    /// Inject a store fault for the next operations (0 clears).
    SetFault { f: u8 },
    /// Revoke the snowflake node lease of process p.
    Revoke { p: usize },
    /// Let background tasks run.
    Yield,
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..PROCS;
    prop_oneof![
        12 => (p.clone(), any::<bool>(), 1u64..40).prop_map(|(p, snow, n)| Op::Next { p, snow, n }),
        3 => (p.clone(), 0u64..60).prop_map(|(p, delta)| Op::Observe { p, delta }),
        2 => (p.clone(), any::<bool>(), 0u64..60).prop_map(|(p, snow, delta)| Op::SetFloor { p, snow, delta }),
        1 => (p.clone(), 1u64..30).prop_map(|(p, count)| Op::Reserve { p, count }),
        1 => p.clone().prop_map(|p| Op::Crash { p }),
        1 => p.clone().prop_map(|p| Op::Restart { p }),
        2 => p.clone().prop_map(|p| Op::Start { p }),
        2 => (-20_000i64..20_000).prop_map(|ms| Op::Jump { ms }),
        3 => (0u64..200).prop_map(|ms| Op::Advance { ms }),
        2 => (0u8..4).prop_map(|f| Op::SetFault { f }),
        1 => p.prop_map(|p| Op::Revoke { p }),
        3 => Just(Op::Yield),
    ]
}

#[derive(Debug, Clone)]
struct Params {
    batch: u64,
    increment: u64,
    start: u64,
}

fn params() -> impl Strategy<Value = Params> {
    (1u64..25, 1u64..4, 1u64..100).prop_map(|(batch, increment, start)| Params {
        batch,
        increment,
        start,
    })
}

struct World {
    store: Arc<MemoryStore>,
    clock: Arc<FakeClock>,
    rules: Vec<GeneratorRule>,
    procs: Vec<Option<Allocator>>,
    /// Every sequence id issued or reserved, to find duplicates.
    seq_ids: HashSet<u64>,
    /// Every snowflake id issued.
    snow_ids: HashSet<u64>,
    /// Last sequence id issued per process incarnation (reset on restart).
    seq_last: Vec<Option<u64>>,
    /// Lower bound (exclusive) for the next sequence id of each process.
    seq_floor: Vec<u64>,
    /// Lower bound (exclusive) for the next snowflake id of each process.
    snow_floor: Vec<u64>,
    /// Last snowflake id per node.
    node_last: HashMap<u64, u64>,
    /// Last snowflake id per process (for floors).
    snow_last: Vec<Option<u64>>,
    p: Params,
    node_shift: u32,
    node_mask: u64,
}

impl World {
    async fn open(&mut self, p: usize) {
        let opts = AllocatorOptions {
            timeout: Duration::from_millis(60),
        };
        let store: Arc<dyn Store> = self.store.clone();
        match Allocator::with_options(store, self.clock.clone(), &self.rules, opts).await {
            Ok(a) => self.procs[p] = Some(a),
            Err(e) => {
                // Acceptable only when the store is faulty or nodes are taken.
                let msg = e.to_string();
                assert!(
                    matches!(
                        e,
                        IdgenError::Store { .. }
                            | IdgenError::Unavailable { .. }
                            | IdgenError::NoNode { .. }
                    ),
                    "unexpected open error: {msg}"
                );
            }
        }
        self.seq_last[p] = None;
        self.snow_last[p] = None;
        self.seq_floor[p] = 0;
        self.snow_floor[p] = 0;
    }

    fn check_seq(&mut self, p: usize, ids: &[u64]) {
        for &id in ids {
            assert!(id >= self.p.start, "id {id} below start");
            assert_eq!(
                (id - self.p.start) % self.p.increment,
                0,
                "id {id} misaligned"
            );
            assert!(self.seq_ids.insert(id), "duplicate sequence id {id}");
            if let Some(last) = self.seq_last[p] {
                assert!(id > last, "process {p}: sequence went from {last} to {id}");
            }
            assert!(
                id > self.seq_floor[p],
                "process {p}: id {id} at or below floor {}",
                self.seq_floor[p]
            );
            self.seq_last[p] = Some(id);
        }
    }

    fn check_snow(&mut self, p: usize, ids: &[u64]) {
        for &id in ids {
            assert!(id < 1 << 63);
            assert!(self.snow_ids.insert(id), "duplicate snowflake id {id:#x}");
            let node = (id >> self.node_shift) & self.node_mask;
            if let Some(&last) = self.node_last.get(&node) {
                assert!(
                    id > last,
                    "node {node}: snowflake went from {last:#x} to {id:#x}"
                );
            }
            assert!(
                id > self.snow_floor[p],
                "process {p}: snowflake {id:#x} at or below floor"
            );
            self.node_last.insert(node, id);
            self.snow_last[p] = Some(id);
        }
    }

    async fn apply(&mut self, op: Op) {
        match op {
            Op::Next { p, snow, n } => {
                let Some(a) = self.procs[p].clone() else {
                    return;
                };
                let name = if snow { "f" } else { "s" };
                let Some(g) = a.generator(name) else {
                    panic!("generator {name}")
                };
                let mut out = Vec::new();
                match g.next(n, &mut out).await {
                    Ok(()) => {
                        assert_eq!(out.len() as u64, n);
                        if snow {
                            self.check_snow(p, &out)
                        } else {
                            self.check_seq(p, &out)
                        }
                    }
                    Err(e) => {
                        assert!(out.is_empty(), "ids appended on error");
                        let msg = e.to_string();
                        assert!(msg.starts_with(&format!("generator {name}: ")), "{msg}");
                    }
                }
            }
            Op::Observe { p, delta } => {
                let Some(a) = self.procs[p].clone() else {
                    return;
                };
                let Some(g) = a.generator("s") else { return };
                let x = self.seq_last[p].unwrap_or(self.p.start) + delta;
                let _ = g.observe(x).await;
                self.seq_floor[p] = self.seq_floor[p].max(x);
            }
            Op::SetFloor { p, snow, delta } => {
                let Some(a) = self.procs[p].clone() else {
                    return;
                };
                let name = if snow { "f" } else { "s" };
                let Some(g) = a.generator(name) else { return };
                let base = if snow {
                    self.snow_last[p].unwrap_or(0)
                } else {
                    self.seq_last[p].unwrap_or(self.p.start)
                };
                let x = base + delta;
                if g.set_floor(x).await.is_ok() {
                    if snow {
                        self.snow_floor[p] = self.snow_floor[p].max(x);
                    } else {
                        self.seq_floor[p] = self.seq_floor[p].max(x);
                    }
                }
            }
            Op::Reserve { p, count } => {
                let Some(a) = self.procs[p].clone() else {
                    return;
                };
                let Some(g) = a.generator("s") else { return };
                if let Ok(r) = g.reserve(count).await {
                    let ids: Vec<u64> = r
                        .clone()
                        .filter(|id| (id - self.p.start) % self.p.increment == 0)
                        .collect();
                    assert_eq!(ids.len() as u64, count, "block {r:?}");
                    for id in ids {
                        assert!(self.seq_ids.insert(id), "reserved id {id} already issued");
                    }
                }
            }
            Op::Crash { p } => {
                self.procs[p] = None;
            }
            Op::Restart { p } => {
                if let Some(a) = self.procs[p].take() {
                    a.shutdown().await;
                    self.open(p).await;
                }
            }
            Op::Start { p } => {
                if self.procs[p].is_none() {
                    // Let crashed processes' tasks notice, then expire their
                    // leases as a TTL would.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    self.store.expire_orphans();
                    self.open(p).await;
                }
            }
            Op::Jump { ms } => self.clock.jump(ms),
            Op::Advance { ms } => self.clock.advance(ms),
            Op::SetFault { f } => self.store.set_fault(match f {
                1 => Fault::Fail,
                2 => Fault::LoseReply,
                3 => Fault::Hang,
                _ => Fault::None,
            }),
            Op::Revoke { p } => {
                if let Some(node) = self.procs[p]
                    .as_ref()
                    .and_then(|a| a.generator("f"))
                    .and_then(|g| g.stats().node_id)
                {
                    self.store.revoke_node("snow/f", node);
                }
            }
            Op::Yield => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
}

fn run(p: Params, ops: Vec<Op>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut s = rule("s", GeneratorKind::Sequence);
        s.batch = Some(p.batch);
        s.min_batch = Some(1);
        s.max_batch = Some(p.batch * 4);
        s.increment = Some(p.increment);
        s.start = Some(p.start);
        let mut f = rule("f", GeneratorKind::Snowflake);
        f.timestamp_bits = Some(40);
        f.node_bits = Some(2);
        f.sequence_bits = Some(3);
        f.lead_ms = Some(50);
        let mut w = World {
            store: MemoryStore::new(),
            clock: Arc::new(FakeClock::new(T0)),
            rules: vec![s, f],
            procs: (0..PROCS).map(|_| None).collect(),
            seq_ids: HashSet::new(),
            snow_ids: HashSet::new(),
            seq_last: vec![None; PROCS],
            seq_floor: vec![0; PROCS],
            snow_floor: vec![0; PROCS],
            node_last: HashMap::new(),
            snow_last: vec![None; PROCS],
            p,
            node_shift: 3,
            node_mask: 3,
        };
        for i in 0..PROCS {
            w.open(i).await;
        }
        for op in ops {
            w.apply(op).await;
        }
        // Recovery: with the store healthy again every live process serves.
        w.store.set_fault(Fault::None);
        for i in 0..PROCS {
            if w.procs[i].is_none() {
                w.store.expire_orphans();
                w.open(i).await;
            }
            w.apply(Op::Next {
                p: i,
                snow: false,
                n: 5,
            })
            .await;
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn never_a_duplicate(p in params(), ops in prop::collection::vec(op(), 1..80)) {
        run(p, ops);
    }
}

/// Exhaustion is a clear error naming the generator, and `max` is honoured.
#[tokio::test(start_paused = true)]
async fn exhaustion_names_the_generator() {
    let mut s = rule("orders", GeneratorKind::Sequence);
    s.batch = Some(7);
    s.max = Some(20);
    let store = MemoryStore::new();
    let a = Allocator::with_store(store, Arc::new(FakeClock::new(T0)), &[s])
        .await
        .unwrap();
    let g = a.generator("orders").unwrap();
    let mut out = Vec::new();
    g.next(20, &mut out).await.unwrap();
    assert_eq!(out, (1..=20).collect::<Vec<_>>());
    let err = g.next(1, &mut out).await.unwrap_err();
    assert_eq!(err.to_string(), "generator orders: exhausted at max 20");
}

/// Store down: serve from the cache, then a clear error (no hang), then
/// recover by itself.
#[tokio::test(start_paused = true)]
async fn outage_serves_cache_then_fails_clearly_then_recovers() {
    let mut s = rule("orders", GeneratorKind::Sequence);
    s.batch = Some(100);
    s.min_batch = Some(100);
    let store = MemoryStore::new();
    let opts = AllocatorOptions {
        timeout: Duration::from_millis(200),
    };
    let a = Allocator::with_options(store.clone(), Arc::new(FakeClock::new(T0)), &[s], opts)
        .await
        .unwrap();
    let g = a.generator("orders").unwrap();
    let mut out = Vec::new();
    g.next(10, &mut out).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.set_fault(Fault::Hang);
    let cached = g.stats().cached_remaining;
    assert!(cached >= 90, "cached {cached}");
    let mut served = 0;
    // Paused time: this measures the allocator's own waits, not the machine.
    let started = tokio::time::Instant::now();
    let err = loop {
        match g.next(1, &mut out).await {
            Ok(()) => served += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(served, cached);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        err.to_string()
            .starts_with("generator orders: store unavailable, no cached ids left"),
        "{err}"
    );
    store.set_fault(Fault::None);
    g.next(1, &mut out).await.unwrap();
    let unique: HashSet<u64> = out.iter().copied().collect();
    assert_eq!(unique.len(), out.len());
    assert!(g.stats().waits >= 1);
}

/// Many ids per call and increments: ids are `start + k * increment`,
/// increasing, and a multi-row request spans segments.
#[tokio::test(start_paused = true)]
async fn increments_and_multirow_across_segments() {
    let mut s = rule("inc", GeneratorKind::Sequence);
    s.batch = Some(10);
    s.min_batch = Some(10);
    s.max_batch = Some(10);
    s.start = Some(5);
    s.increment = Some(3);
    let store = MemoryStore::new();
    let a = Allocator::with_store(store, Arc::new(FakeClock::new(T0)), &[s])
        .await
        .unwrap();
    let g = a.generator("inc").unwrap();
    let mut out = Vec::new();
    g.next(25, &mut out).await.unwrap();
    g.next(1, &mut out).await.unwrap();
    for w in out.windows(2) {
        assert!(w[1] > w[0]);
    }
    assert!(out.iter().all(|id| (id - 5) % 3 == 0));
    assert_eq!(out[0], 5);
}

/// Observing an explicit id above the cache moves the next ids above it and
/// raises the store so a new process starts above it too.
#[tokio::test(start_paused = true)]
async fn observe_raises_the_floor_everywhere() {
    let s = rule("o", GeneratorKind::Sequence);
    let store = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(T0));
    let a = Allocator::with_store(store.clone(), clock.clone(), std::slice::from_ref(&s))
        .await
        .unwrap();
    let g = a.generator("o").unwrap();
    let mut out = Vec::new();
    g.next(1, &mut out).await.unwrap();
    g.observe(1_000_000).await.unwrap();
    g.next(1, &mut out).await.unwrap();
    assert_eq!(out[1], 1_000_001);
    // Background raise of the store's floor.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while store.value("seq/o/hwm").unwrap_or(0) <= 1_000_000 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store's floor was not raised"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let b = Allocator::with_store(store.clone(), clock, &[s])
        .await
        .unwrap();
    let mut other = Vec::new();
    b.generator("o").unwrap().next(1, &mut other).await.unwrap();
    assert!(other[0] > 1_000_000);
    // set_floor never moves down.
    g.set_floor(10).await.unwrap();
    g.next(1, &mut out).await.unwrap();
    assert!(out[2] > out[1]);
}

/// All node ids taken: a clear error; a revoked lease stops issuing until a
/// new one is leased.
#[tokio::test(start_paused = true)]
async fn node_ids_exhausted_and_lease_loss() {
    let mut f = rule("ev", GeneratorKind::Snowflake);
    f.node_bits = Some(1);
    let store = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(T0));
    let rules = [f];
    let a = Allocator::with_store(store.clone(), clock.clone(), &rules)
        .await
        .unwrap();
    let b = Allocator::with_store(store.clone(), clock.clone(), &rules)
        .await
        .unwrap();
    let err = Allocator::with_store(store.clone(), clock.clone(), &rules)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("generator ev: no valid node id lease (all 2 node ids are leased"),
        "{err}"
    );
    let g = a.generator("ev").unwrap();
    let node = g.stats().node_id.unwrap();
    store.revoke_node("snow/ev", node);
    let mut out = Vec::new();
    assert!(
        !g.try_next(1, &mut out).unwrap(),
        "issued after losing its lease"
    );
    // The background task leases the freed node id again.
    g.next(1, &mut out).await.unwrap();
    assert!(g.stats().lease_valid);
    b.shutdown().await;
    assert_eq!(store.leased_nodes("snow/ev").len(), 1);
}

/// Sequence overflow carries into the timestamp instead of waiting: with 2
/// sequence bits, 1000 ids in one millisecond are served at once.
#[tokio::test(start_paused = true)]
async fn snowflake_carry_never_blocks() {
    let mut f = rule("ev", GeneratorKind::Snowflake);
    f.sequence_bits = Some(2);
    let store = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(T0));
    let a = Allocator::with_store(store, clock, &[f]).await.unwrap();
    let g = a.generator("ev").unwrap();
    let mut out = Vec::new();
    for _ in 0..1000 {
        g.next(1, &mut out).await.unwrap();
    }
    for w in out.windows(2) {
        assert!(w[1] > w[0]);
    }
}

/// Restart with the clock set far back never repeats a snowflake id.
#[tokio::test(start_paused = true)]
async fn snowflake_restart_with_clock_backwards() {
    let f = rule("ev", GeneratorKind::Snowflake);
    let store = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(T0));
    let a = Allocator::with_store(store.clone(), clock.clone(), std::slice::from_ref(&f))
        .await
        .unwrap();
    let mut first = Vec::new();
    a.generator("ev")
        .unwrap()
        .next(5000, &mut first)
        .await
        .unwrap();
    a.shutdown().await;
    clock.jump(-3_600_000);
    let b = Allocator::with_store(store, clock, &[f]).await.unwrap();
    let mut second = Vec::new();
    b.generator("ev")
        .unwrap()
        .next(5000, &mut second)
        .await
        .unwrap();
    assert!(second[0] > *first.last().unwrap());
}

/// An explicit id one process sees above its reservations is skipped by the
/// other processes too, even inside the segment they already hold.
#[tokio::test(start_paused = true)]
async fn observed_id_propagates_to_other_processes() {
    let s = rule("o", GeneratorKind::Sequence);
    let store = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(T0));
    let rules = [s];
    let a = Allocator::with_store(store.clone(), clock.clone(), &rules)
        .await
        .unwrap();
    let b = Allocator::with_store(store.clone(), clock, &rules)
        .await
        .unwrap();
    let (ga, gb) = (a.generator("o").unwrap(), b.generator("o").unwrap());
    let mut out = Vec::new();
    ga.next(1, &mut out).await.unwrap();
    gb.next(1, &mut out).await.unwrap();
    assert_eq!(out, [1, 1001]);
    ga.observe(1500).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while gb.stats().next_id <= 1500 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "b never skipped 1500"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    out.clear();
    gb.next(1, &mut out).await.unwrap();
    assert_eq!(out, [1501]);
}

/// Absurd requests are refused without touching the store or the cache.
#[tokio::test(start_paused = true)]
async fn absurd_requests_are_refused() {
    let mut s = rule("o", GeneratorKind::Sequence);
    s.increment = Some(1 << 40);
    let store = MemoryStore::new();
    let a = Allocator::with_store(
        store.clone(),
        Arc::new(FakeClock::new(T0)),
        &[s, rule("f", GeneratorKind::Snowflake)],
    )
    .await
    .unwrap();
    let writes = store.writes();
    let mut out = Vec::new();
    for name in ["o", "f"] {
        let g = a.generator(name).unwrap();
        let err = g.next(u64::MAX, &mut out).await.unwrap_err().to_string();
        assert!(err.starts_with(&format!("generator {name}: ")), "{err}");
        assert!(g.try_next(1 << 33, &mut out).is_err());
    }
    // 2^24 ids of increment 2^40 overflow 64 bits.
    let err = a
        .generator("o")
        .unwrap()
        .next(1 << 24, &mut out)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("do not fit in 64 bits"), "{err}");
    assert!(out.is_empty());
    assert_eq!(store.writes(), writes);
    assert!(a.generator("f").unwrap().reserve(10).await.is_err());
}

/// The future of `next` stays small: the session awaits it inline on every
/// INSERT, and a large future costs a large copy per call.
#[tokio::test(start_paused = true)]
async fn next_future_is_small() {
    let store = MemoryStore::new();
    let a = Allocator::with_store(
        store,
        Arc::new(FakeClock::new(T0)),
        &[rule("o", GeneratorKind::Sequence)],
    )
    .await
    .unwrap();
    let g = a.generator("o").unwrap();
    let mut out = Vec::new();
    let size = std::mem::size_of_val(&g.next(1, &mut out));
    eprintln!("next() future: {size} bytes");
    assert!(size <= 128, "next() future is {size} bytes");
}
