//! Writes into rule tables: ids filled, read back and reported.
//!
//! - `inject.rs`: filling ids: planning, allocating and splicing for
//!   COM_QUERY, COM_STMT_PREPARE and COM_STMT_EXECUTE; what the client is
//!   told.
//! - `capture.rs`: ids written as expressions, variables or subqueries
//!   (and UPDATEs of the id column): read back after the statement, before
//!   the client's reply, and observed.
//! - `upsert.rs`: the reply of an INSERT IGNORE / ON DUPLICATE KEY UPDATE
//!   written by `sql::upsert`: the id MariaDB would report, and what
//!   `LAST_INSERT_ID()` needs afterwards; RETURNING turned back into an OK.
//! - `inline.rs`: a prepared execute written as its text, for one that must
//!   be split by row.
//! - `multi.rs`: a query of several statements, run one by one.
//! - `lastid.rs`: the session's `LAST_INSERT_ID()` across shard connections.

pub mod capture;
pub mod inject;
pub mod inline;
pub mod lastid;
pub mod multi;
pub mod readback;
pub mod upsert;
