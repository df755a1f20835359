//! Sharding: where a table's rows live ([`placement`]) and how the replies of
//! several shards become the one reply the client sees ([`merge`]). Pure: no
//! I/O; the session (`frontend`) decides what to send where.
//!
//! Files:
//! - `placement.rs`: [`placement::Placement`] (`mod`, `hash`, `range`,
//!   broadcast) and [`placement::KeyValue`]: shard key value -> shard index.
//! - `merge.rs`: merging buffered result sets from several shards (ORDER BY
//!   with LIMIT/OFFSET, COUNT/SUM/MIN/MAX without GROUP BY).

pub mod merge;
pub mod placement;
