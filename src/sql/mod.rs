//! SQL: cheap classification, planning and splicing of ids into statement
//! text. Pure: no I/O.
//!
//! Flow: [`plan_query`] classifies each statement of a query (first keyword,
//! target table looked up in the [`RuleSet`] before any full parse), plans the
//! INSERT/REPLACEs into rule tables (which rows get ids, which explicit ids to
//! observe) and finds uses of the last insert id; the caller allocates the
//! [`QueryRewrite::demands`] and calls [`QueryRewrite::render`], which
//! splices ids into the **original** text (an AST is never re-printed:
//! comments, hints, escapes, introducers and spacing stay byte-exact).
//! Generated ids are decimal literals, except the first of each statement,
//! written `LAST_INSERT_ID(<id>)` so the backend's OK packet and
//! `LAST_INSERT_ID()` report it exactly as with AUTO_INCREMENT; INSERT
//! IGNORE and ON DUPLICATE KEY UPDATE are written as [`upsert`] describes
//! ([`QueryRewrite::render_with`], [`StmtInfo::report`]).
//!
//! Files:
//! - `lexer.rs`: MySQL-aware tokenizer and statement-end skim (byte offsets).
//! - `plan.rs`: [`plan_query`], [`PlanCtx`], [`Plan`], [`QueryRewrite`],
//!   [`StmtInfo`]; statement classification, compound statements, PREPARE
//!   and LOAD DATA guards.
//! - `fast.rs`: the fast path: INSERT shapes straight from tokens.
//! - `parsed.rs`: the fallback: shapes from sqlparser's AST and spans.
//! - `shape.rs`: `Shape`, what both parsers produce.
//! - `convert.rs`: what MariaDB stores in an integer column for a literal or
//!   a bound value (explicit ids are observed and routed as that).
//! - `insert.rs`: planning one INSERT from its shape (slots, explicit ids, edits).
//! - `insel.rs`: INSERT ... SELECT into a rule table: the statement's
//!   parts, and source values written back as typed literals.
//! - `lastid.rs`: `LAST_INSERT_ID()` / `@@identity` uses.
//! - `autoinc.rs`: whether an INSERT into a table idgate does not fill
//!   leaves every AUTO_INCREMENT value to MariaDB (then its OK packet's
//!   id is the connection's `LAST_INSERT_ID()`).
//! - `edit.rs`: splices; `render.rs`: applying them.
//! - `prepare.rs`: [`plan_prepare`], [`PrepareRewrite`], execute-time helpers.
//! - `upsert.rs`: INSERT IGNORE / ON DUPLICATE KEY UPDATE written so that the
//!   reply tells idgate which id MariaDB would report ([`Report`]).
//! - `update.rs`: UPDATEs that set a rule table's id column (the highest
//!   id stored is captured and read back).
//! - `mention.rs`: cheap whole-query checks (names a table of a set? how many
//!   statements?).
//! - `rows.rs`: rows of an INSERT into a sharded table (text and shard key).
//! - `load/`: `LOAD DATA LOCAL INFILE` into a rule table: the statement,
//!   the file cut into rows as MariaDB cuts it, rows written again for
//!   each shard's own LOAD with their ids.
//! - `route/`: [`route::analyze`], what a SELECT/UPDATE/DELETE/DDL needs for
//!   routing (tables, shard key bounds, scatter merge spec, the text for
//!   shards); a token fast path and a sqlparser fallback, like INSERT's.
//! - `viewdef.rs`: a view's definition as `information_schema.VIEWS`
//!   shows it: the tables it reads, its plain columns (for
//!   [`crate::rules::views`]); `views.rs`: writes through a view over a
//!   rule table, refused.
//! - `error.rs`: [`SqlError`] with MySQL codes.

pub mod autoinc;
pub mod convert;
pub(crate) mod digits;
pub(crate) mod edit;
pub mod error;
pub(crate) mod fast;
pub mod insel;
pub(crate) mod insert;
pub(crate) mod lastid;
pub(crate) mod lexer;
pub mod load;
pub(crate) mod mention;
pub mod modes;
pub(crate) mod parsed;
pub mod plan;
pub mod prepare;
pub(crate) mod render;
pub mod route;
pub mod rows;
pub(crate) mod shape;
pub mod statement;
pub mod update;
pub mod upsert;
pub mod viewdef;
pub(crate) mod views;

pub use error::SqlError;
pub use insert::SlotKind;
pub use mention::{mentions_table, named_tables, statement_count};
pub use modes::SqlModes;
pub use plan::{plan_query, ColumnsFn, IdDemand, Plan, PlanCtx, QueryRewrite, RuleHit, StmtInfo};
#[doc(hidden)]
pub use plan::{plan_query_with, Engine};
pub use prepare::{
    plan_prepare, plan_prepare_with, BackendParam, BoundId, Execution, ParamSource, PreparePlan,
    PrepareRewrite,
};
pub use rows::{RowKey, RowSpan};
pub use upsert::{LastRow, Report, Upsert, Upserts};

#[cfg(test)]
mod tests;
