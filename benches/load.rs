//! Criterion benchmark of what idgate does per row of a `LOAD DATA LOCAL`
//! into a rule table (`sql::load`): cut the row out of the client's bytes
//! as MariaDB would, decide its id, and write it again for its shard with
//! the id supplied. 10,000 rows of the bench-load.sh shape
//! (`\N<TAB>name<TAB>n<TAB>note`, ~60 bytes), throughput in rows.
//!
//! - `cut_emit/tsv`: tab-separated, the id field replaced.
//! - `cut_emit/csv_enclosed`: `,` with `"` enclosures on every field.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idgate::sql::load::cut::{cut_row, Cut, Format};
use idgate::sql::load::emit::{decide, write_row, Id, IdPlace};
use std::hint::black_box;

const ROWS: usize = 10_000;

fn run(file: &[u8], fmt: &Format, out: &mut Vec<u8>) -> usize {
    out.clear();
    let mut at = 0;
    let mut n = 0u64;
    let mut rows = 0;
    while let Cut::Row(r) = cut_row(&file[at..], true, fmt, 4, Some(0)) {
        let gen = match decide(r.wanted.as_ref(), false) {
            Ok(Id::Generate) => {
                n += 1;
                Some(n)
            }
            _ => None,
        };
        write_row(out, &file[at..], &r, fmt, IdPlace::Field, gen);
        at += r.end;
        rows += 1;
    }
    rows
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("cut_emit");
    g.throughput(Throughput::Elements(ROWS as u64));
    let tsv: String = (0..ROWS)
        .map(|i| {
            format!(
                "\\N\tname-{i}\t{}\tnote {i} abcdefghijklmnopqrstuvwxyz\n",
                i % 1000
            )
        })
        .collect();
    let csv: String = (0..ROWS)
        .map(|i| {
            format!(
                "\"\\N\",\"name-{i}\",\"{}\",\"note {i} abcdefghijklmnopqrstuvwxyz\"\n",
                i % 1000
            )
        })
        .collect();
    let tsv_fmt = Format::default();
    let csv_fmt = Format {
        field_term: b",".to_vec(),
        enclosed: Some(b'"'),
        ..Format::default()
    };
    let mut out = Vec::with_capacity(tsv.len() * 2);
    g.bench_function("tsv", |b| {
        b.iter(|| black_box(run(tsv.as_bytes(), &tsv_fmt, &mut out)))
    });
    g.bench_function("csv_enclosed", |b| {
        b.iter(|| black_box(run(csv.as_bytes(), &csv_fmt, &mut out)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
