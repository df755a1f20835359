//! Criterion: what the resharding cutover's pause (`frontend/pause`) costs
//! a statement, beside what every statement pays already (its
//! classification, `sql::statement::classify`, the baseline):
//!
//! - `inactive`: no pause active, the whole cost added to every statement:
//!   one relaxed atomic load (`PauseGate::active`);
//! - `active_other_table`: a pause active on `shop.orders`, a statement on
//!   another table: one tokenizer pass over its text looking for the
//!   paused table's name (`sql::mentions_table`), paid only during a
//!   cutover's pause.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use idgate::frontend::pause::PauseGate;
use idgate::sql::route::Modes;

fn bench(c: &mut Criterion) {
    let gate = PauseGate::default();
    let statements = [
        ("point_select", "SELECT c FROM sbtest1 WHERE id=5"),
        (
            "insert",
            "INSERT INTO sbtest1 (k, c, pad) VALUES (5012, '68487932199-96439406143-93774651418-41631865787-96406072701-20604855487-25459966574-28203206787-41238978918-19503783441', '22195207048-70116052123-74140395089-76317954521-98694025897')",
        ),
    ];
    c.bench_function("pause/inactive", |b| b.iter(|| black_box(&gate).active()));
    for (name, sql) in statements {
        c.bench_function(&format!("pause/baseline_classify/{name}"), |b| {
            b.iter(|| idgate::sql::statement::classify(black_box(sql.as_bytes())))
        });
        c.bench_function(&format!("pause/active_other_table/{name}"), |b| {
            b.iter(|| {
                idgate::sql::mentions_table(black_box(sql), Modes::default(), &|t| {
                    t.eq_ignore_ascii_case("orders")
                })
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
