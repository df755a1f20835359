//! The size of a client session's future, which every session holds for
//! its whole life, idle or not (the task's allocation: `server.rs`).
//!
//! An async fn's future holds the largest future it awaits, so one rare
//! path awaited inline (a login to a shard, a scatter, an XA commit) sizes
//! every session's. Those are boxed where they are awaited or inside them;
//! this test catches one that is not. It measures the type, not a run:
//! `size_of` the future `serve` returns.

use super::serve;

/// What `serve`'s future may take. Measured in session 32: 6,232 bytes in
/// a test build, about as much in a release build (9,776 before the rare
/// paths were boxed; 7,704 with only a shard login's left inline): about
/// 900 bytes of room for ordinary growth.
const LIMIT: usize = 7 * 1024;

fn returned_size<A, B, C, F>(_: fn(A, B, C) -> F) -> usize {
    std::mem::size_of::<F>()
}

#[test]
fn a_session_future_stays_small() {
    let n = returned_size(serve);
    eprintln!("serve's future: {n} bytes");
    assert!(
        n <= LIMIT,
        "a client session's future is {n} bytes, over {LIMIT}: an await on the statement path \
         holds a large future inline; box the rare one (Box::pin(...).await)"
    );
}
