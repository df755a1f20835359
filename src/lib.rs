//! idgate: a MySQL wire-protocol proxy that fills id columns of INSERTs with
//! globally unique ids and forwards the statements to MariaDB/MySQL shards.
//!
//! # Layout
//!
//! Dependencies point one way: (`server`, `http`) -> `frontend` -> (`sql`, `idgen`,
//! `backend`) -> `shard` -> `protocol`; `resp` -> (`idgen`, `config`, `throttle`); `throttle` -> `idgen`; `rules` -> `shard` (a rule builds its
//! table's `shard::placement`); `sql` uses `shard`'s value types (`KeyValue`,
//! `MergeSpec`); `config` -> (`tls`, `protocol::sha2` for password
//! hashes and the RSA key); `tls` and `collation` are leaves.
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
//! - [`rules`]: `rules/*.toml`: generators and table column rules; the
//!   shards' views over rule tables (`rules::views`), guarded against
//!   writes of ids.
//! - [`publish`]: rules published through etcd (`idgate rules push`):
//!   versions with a compare-and-swap, history, the local cache file.
//!   `publish` -> (`rules`, `idgen`); `frontend` follows the versions.
//! - [`reshard`]: online resharding (`idgate reshard`): the mover, and the
//!   store protocol (`reshard::protocol`) by which every idgate pauses a
//!   table's statements for the cutover. `reshard` -> (`publish`, `rules`,
//!   `idgen`, `backend`, `sql::insel`'s literals, `shard::placement`);
//!   `frontend` uses only `reshard::protocol`.
//! - [`protocol`]: MySQL packet framing, handshake, OK/ERR packets, error codes,
//!   column definitions and result-set rows. Bytes only, no SQL semantics.
//! - [`backend`]: one client connection from idgate to a shard, and the
//!   shared pool of them per shard (`backend::pool`: cap, waiting line,
//!   idle expiry; it knows connections, not sessions; `backend::lidclaim`:
//!   a session's `LAST_INSERT_ID()` left unread on a pooled connection).
//! - [`frontend`]: client sessions, in three layers, each using only
//!   itself and the layers below (checked by `tests/layers.rs`):
//!   - the core: `frontend/session/` (a session's state, its shard
//!     connections (`backends`: the one provider handlers get a connection
//!     from; each logs in with the user's shard account; `pooled`: taken
//!     from and given back to the shard's pool, reset; `mux`: what pins
//!     a session to its connections, and with `[backend] multiplex` the
//!     connections given back after each statement, the session's state
//!     restored on the next; `lidread`: a connection's `LAST_INSERT_ID()`
//!     read when a claim on it must be settled; `generated`: what an
//!     INSERT idgate does not fill does to `LAST_INSERT_ID()`, from the
//!     table's AUTO_INCREMENT column, `sql::autoinc`),
//!     forwarding, login and its limits, password checks by plugin
//!     (`auth`: mysql_native_password, caching_sha2_password's fast path,
//!     cache and RSA), what it reads of the session from a
//!     shard, ids read back, `LAST_INSERT_ID()`, prepared statements, SET
//!     replay, KILL) and `frontend/txn/` (transactions across shards, XA,
//!     the XA log and recovery, the deadlock detector), with
//!     `frontend/{shared,live,columns,shardkey,errors,oks,returned,views}.rs`
//!     (`views`: the shards' views read at start, on view DDL and reloads),
//!     and `frontend/pause/` (resharding's cutover pause: statements on a
//!     paused table held, the pause epochs followed and acknowledged);
//!   - the handlers, side by side, none calling another:
//!     `frontend/write/` (INSERTs into rule tables: ids filled, split per
//!     shard, upserts; `LOAD DATA LOCAL` streamed to the shards: `load`;
//!     INSERT ... SELECT read through shard cursors: `insel`), `frontend/route/` (statements on sharded and
//!     broadcast tables: routing, scatter (merged as rows come, in bounded
//!     memory: `stream`), cursors, diagnostics),
//!     `frontend/admin/` (idgate's own statements, and the sequence
//!     functions on its generators: `sequence`: `NEXTVAL(idgate.g)`,
//!     `LASTVAL`, `SETVAL` = `floor`'s SET FLOOR);
//!   - `frontend/engine/`: the command loop and the dispatch (one match on
//!     the statement's classification), and multi-statement queries.
//! - [`sql`]: `sql::statement`: one classification per statement (its
//!   kind: admin, KILL, diagnostics, BEGIN/COMMIT, savepoint, other; its
//!   first keyword; the keyword helpers, once; the words it mentions
//!   anywhere, found together, `sql::statement::mentions`; whether it may call a
//!   sequence function on idgate's generators, `sql::statement::sequence`;
//!   a multi-statement query cut into statements), which the session's command
//!   loop matches on once; parse, plan and splice INSERT statements
//!   (`sql::convert`: what MariaDB stores in an integer column for a
//!   literal or bound value; `sql::insel`: INSERT ... SELECT's parts and
//!   its source values as typed literals; `sql::update`: UPDATEs of the id column; `sql::viewdef`, `sql::views`: view definitions read, writes of ids through views refused;
//!   `sql::upsert`:
//!   how INSERT IGNORE / ON DUPLICATE KEY UPDATE are written so their reply
//!   tells which id to report); what a SELECT/UPDATE/DELETE/DDL needs for
//!   routing (`sql::route`); `LOAD DATA` into a rule table (`sql::load`:
//!   the statement, the file cut into rows exactly as MariaDB cuts it, each
//!   row re-emitted for its shard's own LOAD with its id). Pure.
//! - [`idgen`]: the id allocator: sequence and snowflake generators over a
//!   store (etcd, file, memory); scrambled (non-enumerable) sequences
//!   (`idgen::scramble`); a snowflake cluster high-water against clock skew.
//! - [`shard`]: placement of rows on shards and merging of scattered
//!   replies. Pure.
//! - [`resp`]: the Redis-protocol id service (`INCR gen`, `IDGATE.NEXT gen
//!   n`; `server.resp_listen`): framing, replies, commands, its own accept
//!   loop. Takes ids from the same [`idgen::Allocator`] as INSERTs.
//! - [`listener`]: the accept loop both listeners share: connection
//!   limit, accept backoff, graceful shutdown with a drain timeout; the
//!   listening socket (an accept queue as long as the connection limit,
//!   TCP_NODELAY for the sockets it accepts); one accept loop on the
//!   shared runtime, or one on each session thread, which serves what it
//!   accepts itself. `listener` -> `workers`.
//! - [`workers`]: the session threads (`server.session_threads`): one
//!   current-thread runtime per thread, each with its own epoll, each
//!   accepting MySQL sessions and keeping them unless it is too far ahead
//!   of the least loaded thread. `workers` ->
//!   `protocol::stream` (it marks each thread's event loop, which pooled
//!   shard connections are moved to).
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
pub mod publish;
pub mod reshard;
pub mod resp;
pub mod rules;
pub mod server;
pub mod shard;
pub mod sql;
pub mod throttle;
pub mod tls;
pub mod workers;
