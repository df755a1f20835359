//! `Generator::next_block` (Redis `INCRBY`): consecutive ids, never
//! issued to anyone else, and a caller mixing blocks and single ids sees
//! them increase.

use std::sync::Arc;

use super::params::DEFAULT_EPOCH_MS;
use super::{Allocator, FakeClock, MemoryStore, Store};
use crate::rules::spec::{GeneratorKind, GeneratorRule};

async fn open(batch: u64) -> (Arc<FakeClock>, Allocator) {
    let store: Arc<dyn Store> = MemoryStore::new();
    let clock = Arc::new(FakeClock::new(DEFAULT_EPOCH_MS + 86_400_000));
    let mut r = GeneratorRule::new("o", GeneratorKind::Sequence);
    r.batch = Some(batch);
    let a = Allocator::with_store(store, clock.clone(), &[r])
        .await
        .expect("open");
    (clock, a)
}

#[tokio::test]
async fn blocks_and_single_ids_increase_and_never_repeat() {
    let (clock, a) = open(100).await;
    let g = a.generator("o").unwrap();
    let mut all = Vec::new();
    let mut out = Vec::new();
    for round in 0..200u64 {
        let n = [1, 100, 7, 250, 3][round as usize % 5];
        let first = g.next_block(n).await.unwrap();
        let block: Vec<u64> = (first..first + n).collect();
        out.clear();
        for _ in 0..40 {
            g.next(1, &mut out).await.unwrap();
        }
        all.extend(block);
        all.extend(&out);
        clock.advance(3);
        tokio::task::yield_now().await;
    }
    for w in all.windows(2) {
        assert!(w[0] < w[1], "{} then {}", w[0], w[1]);
    }
    a.shutdown().await;
}
