//! The client side: one task per client connection.
//!
//! Three layers; each uses only its own folder and the layers below it
//! (checked on the source by `tests/layers.rs`):
//!
//! 1. **The core**: a session's state and the primitives every handler
//!    uses. [`session`] (the state, its shard connections, forwarding and
//!    relaying, what it reads of the session from a shard (`facts`), ids
//!    read back after a write (`capture`), `LAST_INSERT_ID()` across shard
//!    connections (`lastid`), prepared statements, SET replay, KILL) and
//!    [`txn`] (every statement forwarded to a shard joins the session's
//!    transaction there, so transactions, XA, the XA log and recovery, the
//!    deadlock watch and detector are part of the core; so are the
//!    BEGIN/COMMIT/SAVEPOINT statements that drive them), with the files
//!    beside them: [`shared`] (state every session shares), [`inforce`] (the
//!    rules in force), [`live`] (reloading them), [`follow`] (following the versions published
//!    through etcd, `[rules] source = "etcd"`), [`columns`] (column cache), [`shardkey`]
//!    (shard keys made canonical by type and collation), [`errors`],
//!    [`oks`] (a write's OK packets from several shards combined),
//!    [`returned`] (a RETURNING result turned back into an OK), [`views`]
//!    (the shards' views read, so writes through a view over a rule table
//!    are refused), and
//!    [`pause`] (the resharding cutover's pause: statements on a paused
//!    table held, the pause epochs followed and acknowledged).
//! 2. **The handlers**, one folder per concern, side by side: none calls
//!    another. [`write`]: INSERTs into rule tables (`inject`: ids filled;
//!    `split`: an INSERT placed by shard key and split per shard; `upsert`:
//!    INSERT IGNORE / ON DUPLICATE KEY UPDATE replies; `captured`: prepared
//!    statements whose ids are read back; `inline`: a prepared execute run
//!    as its text). [`route`]: statements on sharded and broadcast tables
//!    (routing, `scatter`: a SELECT on several shards, `cursor`: a cursor
//!    over several shards, `diag`: SHOW WARNINGS and friends from the shards
//!    that ran the last statement). [`admin`]: idgate's own statements.
//! 3. **The engine** ([`engine`]): a connection's life (login, the command
//!    loop) and the dispatch: one match per command, COM_QUERY by its
//!    `sql::statement` classification, each arm calling one handler; and
//!    `multi`, a query of several statements run through the dispatch one by
//!    one.

pub mod admin;
pub mod columns;
pub mod engine;
pub mod errors;
pub mod follow;
pub mod inforce;
pub mod live;
pub mod oks;
pub mod pause;
pub mod returned;
pub mod route;
pub mod session;
pub mod shardkey;
pub mod shared;
pub mod txn;
pub mod views;
pub mod write;

pub use session::Session;
pub use shared::Shared;
