//! idgate: a MySQL wire-protocol proxy that fills id columns of INSERTs with
//! globally unique ids and forwards the statements to MariaDB/MySQL shards.
//!
//! # Layout
//!
//! Dependencies point one way: (`server`, `http`) -> `frontend` -> (`sql`, `idgen`,
//! `backend`) -> `shard` -> `protocol`; `resp` -> (`idgen`, `config`, `throttle`); `throttle` -> `idgen`; `rules` -> `shard` (a rule builds its
//! table's `shard::placement`); `sql` uses `shard`'s value types (`KeyValue`,
//! `MergeSpec`); `config` -> `tls`; `tls` and `collation` are leaves.
//!
//! - [`collation`]: how MariaDB compares strings (weights of the
//!   collations idgate reproduces, read from the server into
//!   `collation/data/`), for placing rows by a string key and merging
//!   scattered ORDER BY/MIN/MAX alike. A leaf.
//! - [`config`]: `idgate.toml` (listen addresses, users, backend account, shards,
//!   allocator store, rules directory), validated on load; passwords read
//!   from their source (`password_hash`/`_file`/`_env`).
//! - [`tls`]: rustls (ring) for both sides: the reloadable acceptor for
//!   clients (`[server] tls_cert`/`tls_key`), the connector for shards
//!   (`[backend] tls`/`tls_ca`), PEM checks for `config`. A leaf.
//! - [`rules`]: `rules/*.toml`: generators and table column rules.
//! - [`protocol`]: MySQL packet framing, handshake, OK/ERR packets, error codes,
//!   column definitions and result-set rows. Bytes only, no SQL semantics.
//! - [`backend`]: one client connection from idgate to a shard.
//! - [`frontend`]: client sessions, in folders by concern, imports one way
//!   (handlers -> the session core and leaf modules; no cycle):
//!   - `frontend/session/`: the core: a session's state and command loop,
//!     login, its limits (`limits`: sessions per user, the delay after
//!     repeated failed logins), its shard connections (`backends`: the one
//!     provider handlers get a connection from, where a pool goes; each
//!     logs in with the user's shard account), prepared statements, SET
//!     replay, the session registry and `KILL`;
//!   - `frontend/write/`: ids filled (`inject`), read back (`capture`),
//!     reported for INSERT IGNORE / ON DUPLICATE KEY UPDATE (`upsert`),
//!     split executes (`inline`), multi-statement queries (`multi`),
//!     `LAST_INSERT_ID()` across shards (`lastid`);
//!   - `frontend/route/`: statements on sharded and broadcast tables: shard
//!     keys (`shardkey`), scattered SELECTs (`scatter`), merged as their
//!     rows come in bounded memory (`stream`), merged cursors;
//!   - `frontend/txn/`: transactions across shards, XA, the XA commit log
//!     and recovery, the deadlock detector;
//!   - `frontend/admin/`: idgate's own statements and diagnostics;
//!   - `frontend/{shared,columns,errors,oks}.rs`: process-wide state, the
//!     column cache, refusal errors, combined OK packets.
//! - [`sql`]: `sql::statement`: one classification per statement (its
//!   kind: admin, KILL, diagnostics, BEGIN/COMMIT, savepoint, other; its
//!   first keyword; the keyword helpers, once), which the session's command
//!   loop matches on once; parse, plan and splice INSERT statements
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
//! - [`listener`]: the accept loop both listeners share: connection
//!   limit, accept backoff, graceful shutdown with a drain timeout. A leaf.
//! - [`throttle`]: the delay for logins from an address after repeated
//!   failures, shared by both listeners (uses only `idgen`'s `Clock`).
//! - [`server`]: the MySQL listener on it (XA recovery and the deadlock
//!   detector run alongside).
//! - [`http`]: the admin HTTP listener (`/metrics`, `/healthz`).

pub mod backend;
pub mod collation;
pub mod config;
pub mod frontend;
pub mod http;
pub mod idgen;
pub mod listener;
pub mod protocol;
pub mod resp;
pub mod rules;
pub mod server;
pub mod shard;
pub mod sql;
pub mod throttle;
pub mod tls;
