//! Sharding: where a table's rows live ([`placement`]) and how the replies of
//! several shards become the one reply the client sees ([`merge`]). Pure: no
//! I/O; the session (`frontend`) decides what to send where.
//!
//! Files:
//! - `placement.rs`: [`placement::Placement`] (`mod`, `hash`, `range`,
//!   broadcast) and [`placement::KeyValue`]: shard key value -> shard index.
//! - `merge.rs`: merging buffered result sets from several shards (ORDER BY
//!   with LIMIT/OFFSET, COUNT/SUM/MIN/MAX without GROUP BY): the
//!   [`merge::MergeSpec`] contract, [`merge::merge`], [`merge::merge_terminators`].
//! - `stream.rs`: the same merge as rows arrive ([`stream::Merger`]): one
//!   row held per shard, the caller reads a shard only when the merge asks.
//! - `reply.rs`: one shard's buffered reply split into column head, rows and
//!   terminator.
//! - `value.rs`: column values decoded by type and compared as MariaDB
//!   orders them (integers, exact decimals, floats, temporals, collations).
//! - `decimal.rs`: exact comparison and addition of DECIMAL text.
//! - `aggregate.rs`: one COUNT/SUM/MIN/MAX column combined over shards.

mod aggregate;
mod decimal;
pub mod merge;
pub mod placement;
pub mod reply;
pub mod stream;
mod value;
