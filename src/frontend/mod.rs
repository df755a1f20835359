//! The client side: one task per client connection.
//!
//! Folders by concern; dependencies point one way: `session` (the core: the
//! session's state, its shard connections, the command loop) is used by the
//! handlers in `write`, `route`, `txn` and `admin`; `shared` and `columns`
//! are process-wide state below all of them.
//!
//! - [`shared`]: state shared by all sessions (config, users, what the
//!   shards announce, rules, allocator).
//! - [`columns`]: the column order and types of rule tables, cached.
//! - [`session`]: one client session: the command loop, per-session state,
//!   `login` (handshake and authentication), `backends` (the session's
//!   shard connections: the one provider handlers get a connection from),
//!   `stmt` (prepared statements and their ids on each shard), `replay`
//!   (`SET` statements replayed on a reopened shard connection), `kill`
//!   (`KILL` of idgate sessions, never relayed).
//! - [`write`]: writes into rule tables: `inject` (filling ids), `capture`
//!   (ids read back and observed), `upsert` (INSERT IGNORE / ON DUPLICATE KEY
//!   UPDATE replies), `inline`, `multi` (several statements in one query),
//!   `lastid` (`LAST_INSERT_ID()` across shard connections).
//! - [`route`]: statements on sharded and broadcast tables (which shards,
//!   INSERT splitting, DDL on every shard): `shardkey` (shard keys made
//!   canonical by type and collation), `scatter` (a SELECT on several
//!   shards: concatenated or merged), `cursor` (a cursor over several
//!   shards).
//! - [`txn`]: transactions across shards: `xa` (atomic writes to several
//!   shards), `xalog` (two-phase commit decisions in the allocator's store,
//!   recovery), `watch` (the sessions in transactions as the deadlock
//!   detector sees them), `deadlock` (the detector).
//! - [`admin`]: idgate's own statements, and `diag` (`SHOW WARNINGS` and
//!   friends from the shards that ran the last statement).

pub mod admin;
pub mod columns;
pub mod route;
pub mod session;
pub mod shared;
pub mod txn;
pub mod write;

pub use session::Session;
pub use shared::Shared;
