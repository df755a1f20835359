//! idgate: a MySQL wire-protocol proxy that fills id columns of INSERTs with
//! globally unique ids and forwards the statements to MariaDB/MySQL shards.
//!
//! # Layout
//!
//! Dependencies point one way: (`server`, `http`) -> `frontend` -> (`sql`, `idgen`,
//! `backend`) -> `shard` -> `protocol`; `resp` -> (`idgen`, `config`); `rules` -> `shard` (a rule builds its
//! table's `shard::placement`); `sql` uses `shard`'s value types (`KeyValue`,
//! `MergeSpec`); `config` and `collation` are leaves.
//!
//! - [`collation`]: how MariaDB compares strings (weights of the
//!   collations idgate reproduces, read from the server into
//!   `collation/data/`), for placing rows by a string key and merging
//!   scattered ORDER BY/MIN/MAX alike. A leaf.
//! - [`config`]: `idgate.toml` (listen addresses, users, backend account, shards,
//!   allocator store, rules directory), validated on load.
//! - [`rules`]: `rules/*.toml`: generators and table column rules.
//! - [`protocol`]: MySQL packet framing, handshake, OK/ERR packets, error codes,
//!   column definitions and result-set rows. Bytes only, no SQL semantics.
//! - [`backend`]: one client connection from idgate to a shard.
//! - [`frontend`]: one client session: authentication, the command loop,
//!   per-session state, relaying replies, filling ids (`inject`, and
//!   `upsert` for the replies of INSERT IGNORE / ON DUPLICATE KEY UPDATE;
//!   `capture`: ids written as expressions and UPDATEs of the id column,
//!   read back and observed),
//!   routing to shards (`route`, `shardkey`: shard keys made canonical
//!   by their column's type and collation, `scatter`, `cursor`: a cursor over several
//!   shards served from merged rows, `txn`, `xa`; `multi`: a query
//!   of several statements run one by one; `inline`: a
//!   prepared execute written as its text, for one that must be split by
//!   row; `xalog`: two-phase
//!   commit decisions in the allocator's store and recovery), breaking lock
//!   cycles across shards (`watch`: the sessions in transactions;
//!   `deadlock`: the detector task), `KILL` (`kill`), diagnostics (`diag`),
//!   idgate's own admin statements (`admin`).
//! - [`sql`]: classify, parse, plan and splice INSERT statements
//!   (`sql::convert`: what MariaDB stores in an integer column for a
//!   literal or bound value; `sql::update`: UPDATEs of the id column;
//!   `sql::upsert`:
//!   how INSERT IGNORE / ON DUPLICATE KEY UPDATE are written so their reply
//!   tells which id to report); what a SELECT/UPDATE/DELETE/DDL needs for
//!   routing (`sql::route`). Pure.
//! - [`idgen`]: the id allocator: sequence and snowflake generators over a
//!   store (etcd, file, memory); scrambled (non-enumerable) sequences
//!   (`idgen::scramble`); a snowflake cluster high-water against clock skew.
//! - [`shard`]: placement of rows on shards and merging of scattered
//!   replies. Pure.
//! - [`resp`]: the Redis-protocol id service (`INCR gen`, `IDGATE.NEXT gen
//!   n`; `server.resp_listen`): framing, replies, commands, its own accept
//!   loop. Takes ids from the same [`idgen::Allocator`] as INSERTs.
//! - [`server`]: the accept loop, connection limit and graceful shutdown.
//! - [`http`]: the admin HTTP listener (`/metrics`, `/healthz`).

pub mod backend;
pub mod collation;
pub mod config;
pub mod frontend;
pub mod http;
pub mod idgen;
pub mod protocol;
pub mod resp;
pub mod rules;
pub mod server;
pub mod shard;
pub mod sql;
