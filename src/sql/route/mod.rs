//! What a statement needs for routing to shards: the tables it names, how
//! each sharded table's shard key is bound, whether an UPDATE changes a shard
//! key, how a scattered SELECT's replies merge (or why they cannot), and the
//! text to send each shard. Pure: no I/O, no placement (the caller maps key
//! values to shards with [`crate::shard::placement`]).
//!
//! [`analyze`] tries a token fast path for the common shapes (see `fast.rs`)
//! and falls back to sqlparser (MySQL dialect, unescaping off) for anything
//! else. Both give the same [`Analysis`]; tests compare them.
//!
//! Files:
//! - `mod.rs`: the public types and [`analyze`].
//! - `error.rs`: [`RouteError`].
//! - `fast.rs`: the fast path, straight from the lexer's tokens.
//! - `parsed.rs`: the fallback, from sqlparser's AST.
//! - `prep.rs`: the text sqlparser is given (executable comments opened,
//!   modes and MariaDB forms it does not know neutralised) and the `?` offsets.
//! - `value.rs`: key literals (escapes resolved as MariaDB does), shared by both paths.
//! - `scatter.rs`: select list, ORDER BY and LIMIT to [`MergeSpec`], shared.
//! - `bound.rs`: which `WHERE` conjuncts bind which table's shard key, shared.
//! - `ddl.rs`: DDL target names from tokens, when sqlparser cannot parse the DDL.

use std::sync::Arc;

use super::lexer::Token;

use crate::shard::merge::MergeSpec;

pub use super::lexer::Modes;
pub use error::RouteError;
pub use scatter::{Limit, LimitArg};

mod bound;
mod ddl;
mod error;
mod fast;
mod parsed;
mod prep;
mod scatter;
mod value;

#[cfg(test)]
mod tests;

pub use crate::shard::placement::KeyValue;

/// One value a shard key is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyArg {
    /// A literal.
    Value(KeyValue),
    /// The 0-based index of the `?` among all placeholders of the statement,
    /// in text order (the session maps it to the executed parameter value).
    Param(usize),
}

/// How a table's shard key is restricted by the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyBound {
    /// Not restricted (or not a sharded table, or restricted in a way the
    /// analysis does not read): every shard of the table.
    Unbound,
    /// Every row the statement reads or writes in this table has its key
    /// equal to one of these (from a top-level AND-ed `key = v`, `v = key`
    /// or `key IN (v, ...)` of the table's own query block).
    Values(Vec<KeyArg>),
}

/// One table named by the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableUse {
    /// The schema written before the table name, unquoted; `None` means the
    /// session's current database.
    pub schema: Option<String>,
    /// The table name, unquoted.
    pub table: String,
    /// The shard key's bound; [`KeyBound::Unbound`] for tables without a
    /// shard key.
    pub key: KeyBound,
    /// It appears inside a subquery, a derived table, a CTE, or the source
    /// query of an INSERT/CREATE TABLE ... SELECT (its rows feed another
    /// query, so scattering the outer statement would be wrong unless
    /// everything is on one shard).
    pub in_subquery: bool,
}

/// What kind of statement it is, as routing cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StmtKind {
    /// SELECT (also `WITH ... SELECT` and a parenthesized SELECT).
    Select,
    /// UPDATE, single- or multi-table.
    Update,
    /// DELETE, single- or multi-table.
    Delete,
    /// CREATE TABLE (also `... LIKE`, `... SELECT`), ALTER TABLE, DROP TABLE,
    /// TRUNCATE, CREATE INDEX, DROP INDEX ... ON, RENAME TABLE: runs on every
    /// shard of its tables.
    Ddl,
    /// Anything else (INSERT, SET, SHOW, CREATE VIEW, ...).
    Other,
}

/// What routing needs to know about one statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// The statement's kind.
    pub kind: StmtKind,
    /// Every table named anywhere in the statement (FROM, JOIN, subqueries,
    /// UPDATE/DELETE targets, DDL targets), one entry per occurrence, in
    /// text order. References to a CTE are not tables.
    pub tables: Vec<TableUse>,
    /// `UPDATE ... SET <shard key of an updated table> = ...`: the caller
    /// refuses it (the row would have to move to another shard).
    pub sets_shard_key: bool,
    /// How to merge the replies if the statement is sent to several shards,
    /// or why that would give a wrong answer. SELECT: GROUP BY, DISTINCT,
    /// HAVING, AVG, COUNT(DISTINCT), GROUP_CONCAT, window functions, UNION,
    /// an ORDER BY that is not a select-list column/alias/position, LIMIT
    /// without a literal, ... are refused. UPDATE/DELETE: refused with a
    /// LIMIT (each shard would apply it); otherwise the default spec (the
    /// caller adds up the affected rows). Other kinds: the default spec.
    /// Joins and subqueries are judged by the caller from [`Analysis::tables`].
    pub scatter: Result<MergeSpec, String>,
    /// SELECT with `LIMIT m, n` / `LIMIT n OFFSET m` (m > 0): the text to send
    /// each shard when scattered, with `LIMIT m+n` spliced into the original
    /// text (everything else byte-exact). `None`: send it unchanged.
    pub shard_sql: Option<String>,
    /// A SELECT's LIMIT clause, as written (literals or a prepared
    /// statement's `?`s). With a `?`, [`Analysis::scatter`]'s limit and
    /// offset are left for the caller to fill at each execute.
    pub limit: Option<Limit>,
}

/// `shard_key(schema, table)`: the shard key column of a sharded table,
/// `None` for other tables (their key is not looked for). `schema` is the
/// one written in the statement, `None` for the current database.
pub type ShardKeyFn<'a> = &'a dyn Fn(Option<&str>, &str) -> Option<Arc<str>>;

/// Which path analyzes (tests and benches compare them).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The fast path, sqlparser when it declines.
    Auto,
    /// The fast path only; a decline is `Ok(None)`.
    FastOnly,
    /// sqlparser only.
    ParserOnly,
}

/// Analyzes ONE statement (a trailing `;` is allowed) for routing.
///
/// # Errors
/// [`RouteError::Syntax`] if it cannot be parsed (an unclosed quote or
/// comment, more than one statement, sqlparser's error for a SELECT, UPDATE,
/// DELETE, DDL or INSERT); [`RouteError::Unsupported`] for a double-quoted
/// identifier containing a quote under `ANSI_QUOTES`. A statement of another
/// kind that sqlparser cannot parse (e.g. `SHOW ...`) is [`StmtKind::Other`]
/// with no tables.
pub fn analyze(sql: &str, modes: Modes, shard_key: ShardKeyFn<'_>) -> Result<Analysis, RouteError> {
    if let Some(a) = fast::analyze(sql, modes, shard_key) {
        return Ok(a);
    }
    parsed::analyze(sql, modes, shard_key)
}

/// [`analyze`] on a chosen path: `Ok(None)` when [`Engine::FastOnly`] declines.
///
/// # Errors
/// As [`analyze`].
#[doc(hidden)]
pub fn analyze_with(
    sql: &str,
    modes: Modes,
    shard_key: ShardKeyFn<'_>,
    engine: Engine,
) -> Result<Option<Analysis>, RouteError> {
    match engine {
        Engine::Auto => analyze(sql, modes, shard_key).map(Some),
        Engine::FastOnly => Ok(fast::analyze(sql, modes, shard_key)),
        Engine::ParserOnly => parsed::analyze(sql, modes, shard_key).map(Some),
    }
}

/// The key value written by exactly the tokens `toks` (an INSERT row's
/// value for a shard key column): an integer, a string, `NULL`, or a `?`
/// whose index `param(token)` gives; `None` for anything else.
pub(crate) fn key_literal(
    sql: &str,
    toks: &[Token],
    modes: Modes,
    param: &dyn Fn(&Token) -> Option<usize>,
) -> Option<KeyArg> {
    value::literal(sql, toks, value::Sign::None, modes, param)
}
