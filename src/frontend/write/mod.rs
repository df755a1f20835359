//! Writes into rule tables: ids filled and reported (a handler folder:
//! it uses the core, never `route/` or `admin/`).
//!
//! - `inject.rs`: filling ids: planning, allocating and splicing for
//!   COM_QUERY, COM_STMT_PREPARE and COM_STMT_EXECUTE; what the client is
//!   told.
//! - `split.rs`: an INSERT into a sharded or broadcast rule table: rows
//!   placed by shard key, split per shard, run atomically, the replies
//!   combined; where a prepared INSERT's execute goes (`target.rs`).
//! - `captured.rs`: prepared statements whose ids are read back (the core's
//!   `session::capture` does the reading).
//! - `upsert.rs`: the reply of an INSERT IGNORE / ON DUPLICATE KEY UPDATE
//!   written by `sql::upsert`: the id MariaDB would report, and what
//!   `LAST_INSERT_ID()` needs afterwards.
//! - `insel.rs`: INSERT ... SELECT into a rule table: the source read
//!   through shard cursors (merged when scattered), ids given in row order,
//!   rows written in batches per shard, all in one XA transaction.
//! - `load.rs`: `LOAD DATA LOCAL INFILE` into a rule table: the client's
//!   file cut into rows, ids given, each shard's rows streamed to its own
//!   LOAD (XA across shards).
//! - `inline.rs`: a prepared execute written as its text, for one that must
//!   be split by row.
//! - `dynamic.rs`: `PREPARE s FROM @v` / `EXECUTE IMMEDIATE @v`: the text
//!   in the variable checked as a literal source is.
//! - `adopted.rs`: rows a DDL statement brings under a rule table's name
//!   (`CREATE TABLE ... SELECT`, `RENAME TABLE`): their highest id observed.

pub mod adopted;
pub mod captured;
pub mod dynamic;
pub mod inject;
pub mod inline;
pub mod insel;
pub mod load;
pub mod split;
pub mod target;
pub mod upsert;
