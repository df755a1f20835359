//! The client side: one task per client connection.
//!
//! Folders by concern; imports point one way (no cycle): the handlers in
//! `write`, `route`, `txn` and `admin` use the session core (`session`:
//! the session's state, its shard connections, the command loop) and the
//! leaf modules (`errors`, `oks`, the type-only files such as
//! `txn::watchlist`, `session::registry`, `write::readback`); `shared` and
//! `columns` are process-wide state below all of them. The core names no
//! handler's types. Handlers still call each other's methods on
//! `Session` (`impl Session` blocks in several files).
//!
//! - [`shared`]: state shared by all sessions (config, users, what the
//!   shards announce, rules, allocator).
//! - [`live`]: the rules in force (a version and an atomic pointer), and
//!   reloading them while idgate runs.
//! - [`follow`]: following the versions published through etcd
//!   (`[rules] source = "etcd"`).
//! - [`columns`]: the column order and types of rule tables, cached.
//! - [`errors`]: the MySQL errors handlers answer refused statements with.
//! - [`oks`]: the OK packets of a write on several shards, combined.
//! - [`session`]: one client session: per-session state and I/O (`mod.rs`),
//!   the command dispatch (`engine`: one match per command, COM_QUERY by its
//!   `sql::statement` classification),
//!   `login` (handshake and authentication), `backends` (the session's
//!   shard connections: the one provider handlers get a connection from),
//!   `stmt` (prepared statements, their ids on each shard, a merged
//!   cursor's rows), `replay` (`SET` statements replayed on a reopened
//!   shard connection), `registry` (every session, for `KILL`), `kill`
//!   (`KILL` of idgate sessions, never relayed).
//! - [`write`]: writes into rule tables: `inject` (filling ids), `capture`
//!   (ids read back and observed; `readback`: what a statement left to
//!   read), `upsert` (INSERT IGNORE / ON DUPLICATE KEY
//!   UPDATE replies), `inline`, `multi` (several statements in one query),
//!   `lastid` (`LAST_INSERT_ID()` across shard connections).
//! - [`route`]: statements on sharded and broadcast tables (which shards,
//!   INSERT splitting, DDL on every shard): `shardkey` (shard keys made
//!   canonical by type and collation), `target` (where a prepared INSERT
//!   goes), `scatter` (a SELECT on several
//!   shards: concatenated or merged), `cursor` (a cursor over several
//!   shards).
//! - [`txn`]: transactions across shards: `xa` (atomic writes to several
//!   shards), `xalog` (two-phase commit decisions in the allocator's
//!   store), `recovery` (finishing dead servers' branches), `watchlist`
//!   (the sessions in transactions as the deadlock detector sees them),
//!   `watch` (what a session does about it), `deadlock` (the detector).
//! - [`admin`]: idgate's own statements, and `diag` (`SHOW WARNINGS` and
//!   friends from the shards that ran the last statement).

pub mod admin;
pub mod columns;
pub mod errors;
pub mod follow;
pub mod live;
pub mod oks;
pub mod route;
pub mod session;
pub mod shared;
pub mod txn;
pub mod write;

pub use session::Session;
pub use shared::Shared;
