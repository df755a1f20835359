//! Speed of the id allocator's fast paths, next to the physical limit (a bare
//! `AtomicU64::fetch_add`) measured in the same run.
//!
//! `cargo bench --bench idgen`. Throughput is reported per id.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idgate::idgen::{Allocator, Generator, MemoryStore, SystemClock};
use idgate::rules::spec::{GeneratorKind, GeneratorRule};

fn rule(name: &str, kind: GeneratorKind) -> GeneratorRule {
    GeneratorRule::new(name, kind)
}

/// An allocator whose background tasks run on a one-worker runtime.
fn setup() -> (tokio::runtime::Runtime, Allocator) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let mut s = rule("seq", GeneratorKind::Sequence);
    s.batch = Some(10_000_000);
    s.max_batch = Some(100_000_000);
    let f = rule("snow", GeneratorKind::Snowflake);
    let a = rt
        .block_on(Allocator::with_store(
            MemoryStore::new(),
            Arc::new(SystemClock::new()),
            &[s, f],
        ))
        .expect("allocator");
    (rt, a)
}

/// Calls the async `next` the way a session does, polling it once: in steady
/// state it completes without awaiting. Falls back to the runtime otherwise
/// (the caller has entered the runtime).
#[inline]
fn next(rt: &tokio::runtime::Runtime, g: &Generator, n: u64, out: &mut Vec<u64>) {
    let mut cx = Context::from_waker(Waker::noop());
    let ready = {
        let fut = pin!(g.next(n, out));
        match fut.poll(&mut cx) {
            Poll::Ready(r) => {
                r.expect("next");
                true
            }
            Poll::Pending => false,
        }
    };
    if !ready {
        SLOW.fetch_add(1, Ordering::Relaxed);
        rt.block_on(g.next(n, out)).expect("next");
    }
}

/// Calls that had to wait (printed at the end: should be ~0).
static SLOW: AtomicU64 = AtomicU64::new(0);

/// Runs `f` `iters` times in total on two threads at once (each with its
/// own output buffer, as two sessions would have).
fn two_threads<F: Fn(&mut Vec<u64>) + Sync>(
    rt: &tokio::runtime::Runtime,
    iters: u64,
    f: F,
) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let _in_runtime = rt.enter();
                let mut out = Vec::with_capacity(16);
                for _ in 0..iters / 2 {
                    out.clear();
                    f(&mut out);
                }
            });
        }
    });
    start.elapsed()
}

fn benches(c: &mut Criterion) {
    let (rt, a) = setup();
    let _in_runtime = rt.enter();
    let seq = a.generator("seq").expect("seq");
    let snow = a.generator("snow").expect("snow");

    let mut g = c.benchmark_group("one_thread");
    g.throughput(Throughput::Elements(1));
    let counter = AtomicU64::new(0);
    g.bench_function("baseline_atomic_fetch_add", |b| {
        b.iter(|| black_box(counter.fetch_add(1, Ordering::AcqRel)))
    });
    let mut out = Vec::with_capacity(128);
    g.bench_function("sequence_try_next_1", |b| {
        b.iter(|| {
            out.clear();
            let served = seq.try_next(1, &mut out).expect("try_next");
            black_box((served, &out));
        })
    });
    g.bench_function("sequence_next_1", |b| {
        b.iter(|| {
            out.clear();
            next(&rt, &seq, 1, &mut out);
            black_box(&out);
        })
    });
    g.bench_function("snowflake_next_1", |b| {
        b.iter(|| {
            out.clear();
            next(&rt, &snow, 1, &mut out);
            black_box(&out);
        })
    });
    // An explicit id no other process can hold (in a range this process
    // reserved / of its own node, below its ceiling): the whole cost of
    // `observe`, no store call.
    out.clear();
    next(&rt, &seq, 1, &mut out);
    next(&rt, &snow, 1, &mut out);
    let (seq_id, snow_id) = (out[0], out[1]);
    g.bench_function("sequence_observe_free", |b| {
        b.iter(|| black_box(seq.observe_local(black_box(seq_id))))
    });
    g.bench_function("snowflake_observe_free", |b| {
        b.iter(|| black_box(snow.observe_local(black_box(snow_id))))
    });
    // The per-INSERT lookup of a generator by name: the allocator's map is
    // swapped whole by a rule reload (an `ArcSwap` load, then the hash
    // lookup); beside it the plain `HashMap` lookup it replaced.
    g.bench_function("generator_lookup", |b| {
        b.iter(|| black_box(a.generator(black_box("seq"))))
    });
    let plain: std::collections::HashMap<String, std::sync::Arc<Generator>> = [
        ("seq".to_string(), seq.clone()),
        ("snow".to_string(), snow.clone()),
    ]
    .into();
    g.bench_function("baseline_hashmap_lookup", |b| {
        b.iter(|| black_box(plain.get(black_box("seq")).cloned()))
    });
    g.finish();

    let mut g = c.benchmark_group("one_thread_100_ids_per_call");
    g.throughput(Throughput::Elements(100));
    g.bench_function("sequence_next_100", |b| {
        b.iter(|| {
            out.clear();
            next(&rt, &seq, 100, &mut out);
            black_box(&out);
        })
    });
    g.bench_function("snowflake_next_100", |b| {
        b.iter(|| {
            out.clear();
            next(&rt, &snow, 100, &mut out);
            black_box(&out);
        })
    });
    g.finish();

    let mut g = c.benchmark_group("two_threads_contending");
    g.throughput(Throughput::Elements(1));
    g.bench_function("baseline_atomic_fetch_add", |b| {
        b.iter_custom(|iters| {
            two_threads(&rt, iters, |_| {
                black_box(counter.fetch_add(1, Ordering::AcqRel));
            })
        })
    });
    g.bench_function("sequence_next_1", |b| {
        b.iter_custom(|iters| {
            two_threads(&rt, iters, |out| {
                next(&rt, &seq, 1, out);
                black_box(out);
            })
        })
    });
    g.bench_function("snowflake_next_1", |b| {
        b.iter_custom(|iters| {
            two_threads(&rt, iters, |out| {
                next(&rt, &snow, 1, out);
                black_box(out);
            })
        })
    });
    g.finish();
    eprintln!(
        "calls that waited for the store: {}; sequence {:?}; snowflake {:?}",
        SLOW.load(Ordering::Relaxed),
        seq.stats(),
        snow.stats()
    );
    rt.block_on(a.shutdown());
}

criterion_group! {
    name = idgen;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(idgen);
