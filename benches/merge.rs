//! Criterion benchmark of the merge of a scattered `ORDER BY` over a string
//! column: two shards' replies of 500 rows each (`id INT, note VARCHAR` in
//! utf8mb4_general_ci, words with case and accent variants), sorted by each
//! shard, merged whole and with `LIMIT 10`, by the buffered merge and by
//! the streaming merge scattered SELECTs run now. Reported per merged row.
//!
//! Run: `cargo bench --bench merge -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idgate::protocol::column::ColumnDef;
use idgate::protocol::reply::eof_packet;
use idgate::protocol::row::put_text_row;
use idgate::protocol::wire::put_lenenc;
use idgate::shard::merge::{merge, ColumnRef, MergeSpec, OrderKey, Protocol};
use idgate::shard::stream::merge_replies;

const ROWS: usize = 500;
const WORDS: &[&str] = &[
    "apple", "Apple", "éclair", "eclair", "Banana", "cherry", "Ölberg", "olive", "Zebra",
    "zucchini", "Äpfel", "mango",
];

/// One shard's reply: rows `(id, note)` sorted by note as general_ci does
/// for these words (case and accents folded), then id.
fn reply(shard: usize) -> Vec<Vec<u8>> {
    let fold = |s: &str| {
        s.to_lowercase()
            .replace(['é', 'É'], "e")
            .replace(['Ö', 'ö'], "o")
            .replace(['Ä', 'ä'], "a")
    };
    let mut rows: Vec<(usize, String)> = (0..ROWS)
        .map(|i| {
            let id = i * 2 + shard;
            (id, format!("{} {:03}", WORDS[id % WORDS.len()], id % 97))
        })
        .collect();
    rows.sort_by(|a, b| fold(&a.1).cmp(&fold(&b.1)).then(a.0.cmp(&b.0)));
    let mut out = Vec::new();
    let mut count = Vec::new();
    put_lenenc(&mut count, 2);
    out.push(count);
    for (name, ty, charset) in [("id", 0x03u8, 63u16), ("note", 0xfd, 45)] {
        let mut d = Vec::new();
        ColumnDef {
            name: name.as_bytes(),
            org_name: name.as_bytes(),
            charset,
            length: 64,
            column_type: ty,
            flags: 0,
            decimals: 0,
        }
        .encode(&mut d);
        out.push(d);
    }
    out.push(eof_packet(0, 2));
    for (id, note) in &rows {
        let mut r = Vec::new();
        let id = id.to_string();
        put_text_row(&mut r, &[Some(id.as_bytes()), Some(note.as_bytes())]);
        out.push(r);
    }
    out.push(eof_packet(0, 2));
    out
}

fn bench(c: &mut Criterion) {
    let replies = vec![reply(0), reply(1)];
    let mut g = c.benchmark_group("merge ORDER BY note, id (2 x 500 rows, utf8mb4_general_ci)");
    for limit in [None, Some(10u64)] {
        #[allow(unused_mut)]
        let mut spec = MergeSpec {
            order_by: vec![
                OrderKey {
                    column: ColumnRef::Position(1),
                    desc: false,
                },
                OrderKey {
                    column: ColumnRef::Position(0),
                    desc: false,
                },
            ],
            limit,
            ..MergeSpec::default()
        };
        // COLLATIONS (removed to run this bench against idgate before them)
        spec.collations = vec![None, idgate::collation::by_name("utf8mb4_general_ci")];
        let rows = limit.unwrap_or(2 * ROWS as u64);
        g.throughput(Throughput::Elements(rows));
        let name = match limit {
            Some(l) => format!("LIMIT {l}"),
            None => "all rows".to_string(),
        };
        g.bench_function(&name, |b| {
            b.iter(|| {
                let out = merge(black_box(&replies), &spec, Protocol::Text, false).unwrap();
                black_box(out)
            })
        });
        // The streaming merge the session runs (issue 22), fed the same
        // replies row by row as it asks (each row copied, as a row read
        // from a socket is a new buffer): must give the same packets.
        assert_eq!(
            merge_replies(&replies, &spec, Protocol::Text, false).unwrap(),
            merge(&replies, &spec, Protocol::Text, false).unwrap()
        );
        g.bench_function(format!("{name}, streamed"), |b| {
            b.iter(|| {
                let out = merge_replies(black_box(&replies), &spec, Protocol::Text, false).unwrap();
                black_box(out)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
