//! Speed of the Redis-protocol service's in-process parts: framing one
//! command, parsing it, encoding the reply; a pipeline of 16 (what
//! `redis-benchmark -P 16` sends per read); and the scramble permutation
//! of non-enumerable ids (per id).
//!
//! `cargo bench --bench resp`. Throughput is reported per command.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idgate::resp::command::Command;
use idgate::resp::{frame, reply};

const INCR: &[u8] = b"*2\r\n$4\r\nINCR\r\n$6\r\norders\r\n";

fn resp(c: &mut Criterion) {
    let mut g = c.benchmark_group("resp");
    g.throughput(Throughput::Elements(1));
    let mut args = Vec::with_capacity(frame::MAX_ARGS);
    let mut out = Vec::with_capacity(64);
    g.bench_function("frame+parse+reply INCR", |b| {
        b.iter(|| {
            let buf = black_box(INCR);
            let n = frame::parse(buf, &mut args).unwrap().unwrap();
            let words: Vec<&[u8]> = args.iter().map(|r| &buf[r.clone()]).collect();
            let cmd = Command::parse(&words).unwrap();
            out.clear();
            if let Command::Incr(_) = cmd {
                reply::int(&mut out, black_box(1_234_567_890_123));
            }
            black_box((n, &out));
        })
    });
    let pipeline: Vec<u8> = INCR.repeat(16);
    g.throughput(Throughput::Elements(16));
    g.bench_function("frame 16 pipelined INCRs", |b| {
        b.iter(|| {
            let buf = black_box(&pipeline[..]);
            let mut pos = 0;
            while let Some(n) = frame::parse(&buf[pos..], &mut args).unwrap() {
                pos += n;
                if pos == buf.len() {
                    break;
                }
            }
            black_box(pos);
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode integer reply", |b| {
        b.iter(|| {
            out.clear();
            reply::int(&mut out, black_box(9_007_199_254_740_991));
            black_box(&out);
        })
    });
    g.finish();
    let mut g = c.benchmark_group("scramble");
    g.throughput(Throughput::Elements(1));
    for bits in [63u32, 53] {
        let sc = idgate::idgen::scramble::Scrambler::new(b"a benchmark key of 32 bytes.....", bits);
        let mut x = 1u64;
        g.bench_function(format!("scramble {bits} bits"), |b| {
            b.iter(|| {
                x += 1;
                black_box(sc.scramble(black_box(x)))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, resp);
criterion_main!(benches);
