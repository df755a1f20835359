//! Online resharding (`idgate reshard`): moving a table's rows onto another
//! placement while applications keep writing through idgate.
//!
//! The design, in one paragraph (the README's resharding section says why):
//! the mover copies the table into a shadow table on every target shard
//! (`_idgate_new_<table>`) by primary-key chunks; changes made meanwhile are
//! captured on each source shard by triggers that log the primary keys they
//! touch into `_idgate_log_<table>` in the writing transaction itself, and
//! the mover re-copies those rows (catch-up) until the log is drained.
//! Chunks are verified by checksums. At cutover, every idgate pauses the
//! statements on the table (coordinated through the store, see
//! [`protocol`]); the mover drains the log, swaps the tables by `RENAME` on
//! every shard, publishes the new rules version, and the idgates resume on
//! it. Until the swap every statement sees the old placement (the shadow
//! tables are invisible to applications); after it, the new one.
//!
//! Files: `protocol.rs` (the store keys and documents the mover and the
//! idgates share; pure), `mover.rs` (the phases, the checkpoint),
//! `rule.rs` (the placements before and after, the edited rules; pure),
//! `sql.rs` (the statements; pure), `shard.rs` (a connection to a shard
//! through [`crate::backend`]), `throttle.rs` (rate and load limits),
//! `progress.rs` (the bar and the progress lines).

pub mod mover;
pub mod progress;
pub mod protocol;
pub mod rule;
pub mod shard;
pub mod sql;
pub mod throttle;
