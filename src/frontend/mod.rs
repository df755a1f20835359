//! The client side: one task per client connection.
//!
//! - [`shared`]: state shared by all sessions (config, users, what the shards
//!   announce, rules, allocator).
//! - [`columns`]: the column order of rule tables, cached.
//! - [`admin`]: idgate's own statements (SHOW IDGATE GENERATORS, IDGATE SET FLOOR, IDGATE RESERVE).
//! - [`login`]: the handshake and authentication of a client.
//! - [`session`]: the command loop and per-session state.
//! - [`backends`]: the session's shard connections, the one provider
//!   handlers get a connection from and give it back to (where a pool goes).
//! - [`stmt`]: the session's prepared statements and their ids on each shard.
//! - [`replay`]: the session's `SET` statements, replayed on a reopened shard connection.
//! - [`inject`]: filling ids: planning, allocating and splicing for COM_QUERY,
//!   COM_STMT_PREPARE and COM_STMT_EXECUTE; what the client is told.
//! - [`capture`]: ids written as expressions, variables or subqueries:
//!   read back after the statement (before the client's reply) and observed.
//! - [`upsert`]: reading the reply of an INSERT IGNORE / ON DUPLICATE KEY
//!   UPDATE written by `sql::upsert`: the id MariaDB would report, and what
//!   `LAST_INSERT_ID()` needs afterwards; a RETURNING result turned back
//!   into MariaDB's OK packet.
//! - [`route`]: routing statements on sharded and broadcast tables (which
//!   shards, INSERT splitting, DDL on every shard).
//! - [`scatter`]: a SELECT on several shards: streamed concatenation or merge.
//! - [`txn`]: transactions across shards; one write shard per transaction.
//! - [`xa`]: atomic writes to several shards (XA two-phase commit).
//! - [`xalog`]: the commit decisions of two-phase commits, kept in the
//!   allocator's store, and recovery of branches a dead idgate left prepared.
//! - [`diag`]: `SHOW WARNINGS` and friends from the shards that ran the
//!   last statement.
//! - [`kill`]: `KILL` of idgate sessions (never relayed: the id is idgate's).
//! - [`lastid`]: the session's `LAST_INSERT_ID()` across shard connections.
//! - [`watch`]: the sessions in transactions, as the deadlock detector sees
//!   them (shard connections, round trips under way, victim flag).
//! - [`deadlock`]: the distributed deadlock detector: lock cycles across
//!   shards, broken by killing the youngest transaction's waiting statement.

pub mod admin;
pub mod backends;
pub mod capture;
pub mod columns;
pub mod cursor;
pub mod deadlock;
pub mod diag;
pub mod inject;
pub mod inline;
pub mod kill;
pub mod lastid;
pub mod login;
pub mod multi;
pub mod replay;
pub mod route;
pub mod scatter;
pub mod session;
pub mod shardkey;
pub mod shared;
pub mod stmt;
pub mod txn;
pub mod upsert;
pub mod watch;
pub mod xa;
pub mod xalog;

pub use session::Session;
pub use shared::Shared;
