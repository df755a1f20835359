//! [`plan_query`]: classify every statement of a query (cheaply), plan the
//! INSERT/REPLACEs into rule tables, and find last-insert-id uses.

use memchr::memmem::Finder;
use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, LazyLock};

use super::autoinc;
use super::edit::{Edit, EditKind};
use super::error::SqlError;
use super::fast::{self, Refuse};
use super::insert::{self, Mode, Names, Planned};
use super::lastid;
use super::lexer::{skim, unescape, Kind, Lexer, Modes, Token};
use super::parsed::{self, Fail};
use super::route::KeyArg;
use super::rows::{self, KeyColumn, RowSpan};
use super::shape::{same_column, Body, Shape};
use super::statement::dynamic;
use super::statement::keyword::set_statement_for;
use super::statement::mentions::{Mentions, Word};
use super::update;
use super::upsert::{self, Report, Upsert, Upserts};
use super::views;
use crate::rules::{RuleSet, TableEntry};

/// `(schema, table)` -> the table's columns in order (the session's cache).
pub type ColumnsFn<'a> = &'a dyn Fn(&str, &str) -> Option<Arc<[String]>>;

/// What the planner needs from the session.
#[derive(Clone, Copy)]
pub struct PlanCtx<'a> {
    /// The session's current database (`USE db`), if any.
    pub schema: Option<&'a str>,
    /// `sql_mode` has `NO_AUTO_VALUE_ON_ZERO`: an explicit 0 is kept.
    pub no_auto_value_on_zero: bool,
    /// `sql_mode` has `NO_BACKSLASH_ESCAPES`: `\` does not escape in strings.
    pub no_backslash_escapes: bool,
    /// `sql_mode` has `ANSI_QUOTES`: `"..."` is an identifier.
    pub ansi_quotes: bool,
    /// `(schema, table)` -> the table's columns in order, from the session's
    /// cache (filled from information_schema after [`Plan::NeedColumns`]).
    pub columns: ColumnsFn<'a>,
    /// What the query being planned (or a query it is part of) mentions,
    /// when the caller found it already: the planner's own scans for `;`
    /// and `LAST_INSERT_ID` then run only where the word is.
    pub mentions: Option<Mentions>,
}

impl PlanCtx<'_> {
    pub(crate) fn modes(&self) -> Modes {
        Modes {
            no_backslash_escapes: self.no_backslash_escapes,
            ansi_quotes: self.ansi_quotes,
        }
    }
}

/// What to do with a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// No rule table written, no last-insert-id use: forward the bytes unchanged.
    Passthrough,
    /// Ask the allocator for [`QueryRewrite::demands`], then
    /// [`QueryRewrite::render`].
    Rewrite(QueryRewrite),
    /// An INSERT without column list into a rule table: fetch the table's
    /// column order into the session's cache and plan again.
    NeedColumns {
        /// The table's schema.
        schema: String,
        /// The table.
        table: String,
    },
}

impl Plan {
    /// The table whose column order the planner asked for
    /// ([`Plan::NeedColumns`]), as the front end's planning loop takes it.
    pub fn columns_needed(&self) -> Option<(String, String)> {
        match self {
            Plan::NeedColumns { schema, table } => Some((schema.clone(), table.clone())),
            _ => None,
        }
    }
}

/// Ids needed from one generator, for consecutive slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdDemand {
    /// The generator's name (`[[generator]] name`).
    pub generator: Arc<str>,
    /// How many ids.
    pub count: usize,
}

/// The rule a statement hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleHit {
    /// `schema.table` (or `table` when no schema is known), for messages.
    pub table: String,
    /// The column idgate fills.
    pub column: Arc<str>,
    /// The column in backquotes (spliced into SQL).
    pub quoted_column: Arc<str>,
    /// The generator that fills it (explicit ids are observed on it).
    pub generator: Arc<str>,
    /// Index of the table's rule in [`RuleSet::entries`] when the table is
    /// sharded or broadcast (its rows are routed), else `None`.
    pub routed: Option<usize>,
}

/// One statement of the query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StmtInfo {
    /// Its bytes in the query (without the `;`).
    pub range: Range<usize>,
    /// The rule table it inserts into, if any.
    pub rule: Option<RuleHit>,
    /// Index of its first slot in the concatenated ids.
    pub first_slot: usize,
    /// How many ids it gets (one per generated row).
    pub generated: usize,
    /// Explicit integer ids written in it, in row order (observe them on
    /// `rule.generator` so the generator's floor rises above them).
    pub explicit: Vec<u64>,
    /// Id values stored as written and captured in session variables
    /// (`sql::edit::capture_var` of each byte offset), read back after the
    /// statement to observe them: expressions, variables, subqueries.
    pub captures: Vec<usize>,
    /// The last row's id is one of [`StmtInfo::captures`]: its offset.
    pub last_captured: Option<usize>,
    /// An UPDATE that sets this rule table's id column: the highest id it
    /// stores is captured ([`update::HIGHEST`]) and read back.
    pub update_id: Option<Box<RuleHit>>,
    /// It sets the last insert id itself (`LAST_INSERT_ID(expr)`,
    /// `SET @@last_insert_id = ...`): the session cannot know the new value.
    pub changes_last_insert_id: bool,
    /// For an INSERT into a routed table (text protocol): its rows, in
    /// order; empty otherwise (or when a row could not be located).
    pub rows: Vec<RowSpan>,
    /// For an INSERT into a table sharded by another column than the id:
    /// each row's value of that column, in row order (`?`s numbered as the
    /// client numbers them); empty otherwise.
    pub shard_keys: Vec<KeyArg>,
    /// An INSERT IGNORE / ON DUPLICATE KEY UPDATE / RETURNING into a rule
    /// table: where its clauses are (see [`crate::sql::upsert`]).
    pub upsert: Option<Box<Upsert>>,
    /// The statement reads or sets `LAST_INSERT_ID` / `@@identity` itself.
    pub uses_last_insert_id: bool,
    pub(crate) edits: Vec<Edit>,
}

impl StmtInfo {
    /// The last explicit id written (what MariaDB reports for a statement with
    /// only explicit ids into an AUTO_INCREMENT column).
    pub fn last_explicit(&self) -> Option<u64> {
        self.explicit.last().copied()
    }

    /// How its generated ids are written and reported, given what the
    /// shards support; `alone`: it is the only statement of its query (a
    /// tracked statement changes the backend's `LAST_INSERT_ID` until idgate
    /// restores it after the reply, which a later statement would see).
    pub fn report(&self, upserts: Upserts, alone: bool) -> Report {
        if self.rule.is_none() || self.generated == 0 {
            return Report::Wrap;
        }
        let conditional = self.upsert.as_deref().filter(|u| u.conditional());
        match conditional {
            _ if self.uses_last_insert_id => Report::Plain,
            None => Report::Wrap,
            Some(u) if !upserts.track || !alone || u.returning || u.alias => Report::Plain,
            Some(u) if u.odku_end.is_none() && u.rows > 1 && upserts.returning => Report::Returning,
            Some(_) => Report::Track,
        }
    }

    fn plain(range: Range<usize>) -> StmtInfo {
        StmtInfo {
            range,
            rule: None,
            first_slot: 0,
            generated: 0,
            explicit: Vec::new(),
            captures: Vec::new(),
            last_captured: None,
            update_id: None,
            changes_last_insert_id: false,
            rows: Vec::new(),
            shard_keys: Vec::new(),
            upsert: None,
            uses_last_insert_id: false,
            edits: Vec::new(),
        }
    }
}

/// A planned rewrite of a query: the original text and the splices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryRewrite {
    pub(crate) sql: Box<str>,
    pub(crate) statements: Vec<StmtInfo>,
    pub(crate) demands: Vec<IdDemand>,
    pub(crate) total: usize,
}

impl QueryRewrite {
    /// Ids to allocate, in slot order (one entry per statement that needs ids).
    pub fn demands(&self) -> &[IdDemand] {
        &self.demands
    }
    /// One entry per statement, in order.
    pub fn statements(&self) -> &[StmtInfo] {
        &self.statements
    }
    /// Total ids needed (the sum of the demands).
    pub fn total_ids(&self) -> usize {
        self.total
    }
    /// The original query text.
    pub fn sql(&self) -> &str {
        &self.sql
    }
}

/// Which parser plans rule-table INSERTs (tests compare them).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Fast path, sqlparser when it declines.
    Auto,
    /// Fast path only; a decline is an error whose message contains "fast path declined".
    FastOnly,
    /// sqlparser only.
    SqlParserOnly,
}

pub use super::error::Stop;

/// Plans a COM_QUERY text.
///
/// # Errors
/// [`SqlError`] when a statement writes a rule table in a way idgate cannot
/// fill (INSERT ... SELECT, LOAD DATA, unparsable, wrong value count...).
pub fn plan_query(sql: &str, rules: &RuleSet, ctx: &PlanCtx<'_>) -> Result<Plan, SqlError> {
    plan_query_with(sql, rules, ctx, Engine::Auto)
}

/// [`plan_query`], and for an INSERT passed on unchanged (no rule table),
/// where its reading stopped, for [`autoinc::resume`]: a multiplexed
/// session reads the same INSERT again for its `LAST_INSERT_ID()` effect
/// (`frontend/session/generated.rs`), from there.
///
/// # Errors
/// As [`plan_query`].
pub fn plan_query_reading(
    sql: &str,
    rules: &RuleSet,
    ctx: &PlanCtx<'_>,
) -> Result<(Plan, Option<autoinc::Read>), SqlError> {
    let mut read = None;
    let plan = plan(sql, rules, ctx, Engine::Auto, Some(&mut read))?;
    Ok((plan, read))
}

/// Whether [`plan_query`] passes `sql` through whatever the session's
/// `sql_mode`: one statement that names neither `LAST_INSERT_ID` nor
/// `@@identity`, starting with a word that makes it neither an INSERT nor
/// an UPDATE nor anything planned further (`SELECT`, `SET`, `SHOW`,
/// `BEGIN`, ...). Only quoting depends on the mode, and the first token
/// is found before any quote could matter, so a session need not know its
/// `sql_mode` (a round trip to the shard) to forward such a statement.
pub fn passes_in_every_mode(sql: &str) -> bool {
    passes_in_every_mode_with(sql, None)
}

/// [`passes_in_every_mode`], with what the text (or a text it is part of)
/// mentions when already found.
pub fn passes_in_every_mode_with(sql: &str, m: Option<Mentions>) -> bool {
    if Mentions::semicolon_in(sql.as_bytes(), m) {
        return false;
    }
    let mut lx = Lexer::new(sql, 0, Modes::default());
    let Some(t) = lx.next_token() else {
        return !last_id_hint(sql.as_bytes(), m);
    };
    // The first word first: an INSERT is planned whatever it names, so
    // its text is scanned for the hint once, by the planner.
    let passes = match first_kind(sql, &t, &lx) {
        First::Plain { .. } => !kw(sql, &t, "UPDATE"),
        First::Other => true,
        _ => false,
    };
    passes && !last_id_hint(sql.as_bytes(), m)
}

/// [`plan_query`] with a chosen parser (for differential tests).
#[doc(hidden)]
pub fn plan_query_with(
    sql: &str,
    rules: &RuleSet,
    ctx: &PlanCtx<'_>,
    engine: Engine,
) -> Result<Plan, SqlError> {
    plan(sql, rules, ctx, engine, None)
}

/// [`plan_query_with`], noting in `read` (when asked) where the reading
/// of an INSERT passed on unchanged stopped.
fn plan(
    sql: &str,
    rules: &RuleSet,
    ctx: &PlanCtx<'_>,
    engine: Engine,
    read: Option<&mut Option<autoinc::Read>>,
) -> Result<Plan, SqlError> {
    let modes = ctx.modes();
    let hint = last_id_hint(sql.as_bytes(), ctx.mentions);
    // The common case: one ordinary statement. An INSERT into a rule table
    // found here is planned from the head read here.
    let mut found = None;
    if !Mentions::semicolon_in(sql.as_bytes(), ctx.mentions) {
        let mut lx = Lexer::new(sql, 0, modes);
        match lx.next_token() {
            None => return Ok(Plan::Passthrough),
            Some(t) => match first_kind(sql, &t, &lx) {
                // An UPDATE may set a rule table's id column (`update.rs`):
                // planned only when it does.
                First::Plain { .. } if !hint && kw(sql, &t, "UPDATE") => {
                    if !update::names_rule_table(sql, t.start, modes, rules) {
                        views::check_update(sql, t.start, sql.len(), modes, rules, ctx.schema)?;
                        return Ok(Plan::Passthrough);
                    }
                    if !in_exec_anywhere(sql)
                        && update::analyze(sql, t.start, sql.len(), modes, rules, ctx.schema)?
                            .is_none()
                    {
                        return Ok(Plan::Passthrough);
                    }
                }
                First::Plain { .. } | First::Other if !hint => return Ok(Plan::Passthrough),
                First::Insert
                    if !hint
                        // An executable comment has a `!`.
                        && !Mentions::may_have(ctx.mentions, Word::Bang, || in_exec_anywhere(sql)) =>
                {
                    // Look the table up before anything else.
                    if let Ok(head) = fast::head(&mut lx, sql) {
                        let schema = head.schema.as_deref().or(ctx.schema);
                        match rules.entry(schema, &head.table) {
                            None => {
                                views::check_insert(rules, schema, &head.table, "an INSERT")?;
                                if let (Some(read), Some(verb)) = (read, sql.get(t.start..t.end)) {
                                    *read = autoinc::Read::of(sql, verb, &head, &lx, modes);
                                }
                                return Ok(Plan::Passthrough);
                            }
                            Some(entry) => found = Some((t.start, entry, head, lx)),
                        }
                    }
                }
                _ => {}
            },
        }
    }
    let mut p = QueryPlanner {
        sql,
        rules,
        ctx,
        modes,
        engine,
        hint,
        mode: Mode::Text,
        slot_base: 0,
        params: Vec::new(),
        last_planned: None,
        use_schema: None,
        sql_mode_changed: false,
    };
    // Most queries are one statement; four `StmtInfo`s would be a "large"
    // allocation for glibc, which consolidates its free lists first (10% of
    // planning a one-row INSERT, measured).
    let mut statements = Vec::with_capacity(1);
    let mut pos = 0;
    let mut in_exec = false;
    loop {
        // What `statement(0, false)` would do for the INSERT found above.
        let planned = match found.take() {
            Some((start, entry, head, lx)) => {
                let (schema, table) = (head.schema.clone(), head.table.clone());
                p.rule_statement(start, false, entry, schema, table, Some((head, lx)))
                    .map(Some)
            }
            None => p.statement(pos, in_exec),
        };
        let out = match planned {
            Ok(Some(o)) => o,
            Ok(None) => break,
            Err(Stop::Need { schema, table }) => return Ok(Plan::NeedColumns { schema, table }),
            Err(Stop::Err(e)) => return Err(e),
        };
        statements.push(out.info);
        if !out.semicolon {
            break;
        }
        pos = out.end + 1;
        in_exec = out.in_exec;
    }
    let interesting = statements
        .iter()
        .any(|s| s.rule.is_some() || !s.edits.is_empty() || s.changes_last_insert_id);
    if !interesting {
        return Ok(Plan::Passthrough);
    }
    let mut demands: Vec<IdDemand> = Vec::new();
    for s in &statements {
        if let (Some(r), true) = (&s.rule, s.generated > 0) {
            demands.push(IdDemand {
                generator: r.generator.clone(),
                count: s.generated,
            });
        }
    }
    Ok(Plan::Rewrite(QueryRewrite {
        sql: sql.into(),
        statements,
        demands,
        total: p.slot_base,
    }))
}

/// True if the text may contain an executable comment (`/*!`, `/*M!`), whose
/// content is code the quick path must not skip.
fn in_exec_anywhere(sql: &str) -> bool {
    // `/*` anywhere (memchr costs less than a substring search here).
    let b = sql.as_bytes();
    let comment = memchr::memchr_iter(b'/', b).any(|i| b.get(i + 1) == Some(&b'*'));
    comment && {
        find(&EXEC_COMMENT, sql.as_bytes()).is_some()
            || find(&MARIADB_EXEC_COMMENT, sql.as_bytes()).is_some()
    }
}

// Substring searchers, built once: building one costs more than a search
// of a short statement.
static EXEC_COMMENT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"/*!"));
static MARIADB_EXEC_COMMENT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"/*M!"));

fn find(f: &Finder<'_>, hay: &[u8]) -> Option<usize> {
    f.find(hay)
}

/// Cheap, conservative: does the text mention `last_insert_id` or
/// `@@...identity`? Asked of its mentions first (`m`, when known): each
/// half needs a word there (`last_insert_id`, `@`).
fn last_id_hint(b: &[u8], m: Option<Mentions>) -> bool {
    Mentions::may_have(m, Word::LastInsertId, || names_last_insert_id(b))
        || Mentions::may_have(m, Word::At, || names_identity_variable(b))
}

/// `last_insert_id` in any case.
fn names_last_insert_id(b: &[u8]) -> bool {
    for i in memchr::memchr_iter(b'_', b) {
        let before = i.checked_sub(4).and_then(|s| b.get(s..i));
        let after = b.get(i + 1..i + 10);
        if before.is_some_and(|w| w.eq_ignore_ascii_case(b"last"))
            && after.is_some_and(|w| w.eq_ignore_ascii_case(b"insert_id"))
        {
            return true;
        }
    }
    false
}

/// A system variable `@@...identity` or `@@...last_insert_id`.
fn names_identity_variable(b: &[u8]) -> bool {
    // Each `@@`, as a non-overlapping substring search finds them (`@@@x`
    // is `@@` then `@x`), with memchr, which costs less on short text.
    let mut from = 0;
    for i in memchr::memchr_iter(b'@', b) {
        if i < from || b.get(i + 1) != Some(&b'@') {
            continue;
        }
        from = i + 2;
        let rest = b.get(i + 2..).unwrap_or(&[]);
        let name_len = rest
            .iter()
            .take_while(|&&c| super::lexer::is_ident_byte(c) || c == b'.')
            .count();
        let name = rest.get(..name_len).unwrap_or(&[]);
        let ends = |n: &[u8]| {
            name.len() >= n.len()
                && name
                    .get(name.len() - n.len()..)
                    .is_some_and(|t| t.eq_ignore_ascii_case(n))
        };
        if ends(b"identity") || ends(b"last_insert_id") {
            return true;
        }
    }
    false
}

/// The slot of the last row's id, if it has one (an id edit inside the last
/// row, or anywhere in an `INSERT ... SET`).
fn last_row_slot(body: &Body, edits: &[Edit]) -> Option<usize> {
    let after = match body {
        Body::Values(rows) => match rows.len() {
            0 => return None,
            1 => 0,
            n => rows.get(n - 2).map_or(0, |r| r.close + 1),
        },
        Body::Set { .. } => 0,
    };
    edits.iter().rev().find_map(|e| match e.kind {
        super::edit::EditKind::Id { slot, .. } if e.start >= after => Some(slot),
        _ => None,
    })
}

/// Whether rows of `entry`'s table are routed (sharded or broadcast).
fn routed(entry: &TableEntry) -> bool {
    entry.placement().is_some()
}

/// `schema.table`, or `table` when no schema is known (for messages).
fn display_table(schema: Option<&str>, table: &str) -> String {
    match schema {
        Some(s) => {
            // Not `format!`: this runs for every planned INSERT.
            let mut out = String::with_capacity(s.len() + 1 + table.len());
            out.push_str(s);
            out.push('.');
            out.push_str(table);
            out
        }
        None => table.to_string(),
    }
}

/// How a statement starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum First {
    /// INSERT or REPLACE.
    Insert,
    /// CREATE or ALTER (maybe a stored program: `ALTER EVENT e DO ...`
    /// gives an event a new body).
    Create,
    /// A compound statement or label: the rest of the query is one unit.
    Compound,
    /// PREPARE ... FROM / EXECUTE IMMEDIATE.
    Prepare,
    /// LOAD DATA / LOAD XML.
    Load,
    /// MariaDB's `SET STATEMENT var = value [, ...] FOR stmt`.
    SetStatement,
    /// A statement where last-insert-id uses are replaced; `select` for SELECT.
    Plain { select: bool },
    /// Anything else: forwarded as is.
    Other,
}

fn kw(sql: &str, t: &Token, k: &str) -> bool {
    t.kind == Kind::Word
        && sql
            .as_bytes()
            .get(t.start..t.end)
            .is_some_and(|w| w.eq_ignore_ascii_case(k.as_bytes()))
}

fn first_kind(sql: &str, t: &Token, lx: &Lexer<'_>) -> First {
    match t.kind {
        Kind::Punct(b'(') => return First::Plain { select: false },
        Kind::Word => {}
        _ => return First::Other,
    }
    let any = |ks: &[&str]| ks.iter().any(|k| kw(sql, t, k));
    if any(&["INSERT", "REPLACE"]) {
        First::Insert
    } else if any(&["SELECT"]) {
        First::Plain { select: true }
    } else if any(&["SET"])
        && lx
            .clone()
            .next_token()
            .is_some_and(|n| kw(sql, &n, "STATEMENT"))
    {
        First::SetStatement
    } else if any(&[
        "SET", "UPDATE", "DELETE", "DO", "CALL", "VALUES", "WITH", "TABLE",
    ]) {
        First::Plain { select: false }
    } else if any(&["CREATE", "ALTER"]) {
        First::Create
    } else if any(&["IF", "CASE", "WHILE", "LOOP", "REPEAT", "FOR"]) {
        First::Compound
    } else if any(&["BEGIN"]) {
        match lx.clone().next_token() {
            Some(n) if kw(sql, &n, "NOT") => First::Compound,
            _ => First::Other,
        }
    } else if any(&["PREPARE"]) {
        First::Prepare
    } else if any(&["EXECUTE"]) {
        match lx.clone().next_token() {
            Some(n) if kw(sql, &n, "IMMEDIATE") => First::Prepare,
            _ => First::Other,
        }
    } else if any(&["LOAD"]) {
        First::Load
    } else {
        // `label: BEGIN ...`
        let mut ahead = lx.clone();
        match (ahead.next_token(), ahead.next_token()) {
            (Some(c), n) if c.is(b':') && !n.is_some_and(|n| n.is(b'=') && n.start == c.end) => {
                First::Compound
            }
            _ => First::Other,
        }
    }
}

/// One planned statement.
pub(crate) struct Outcome {
    pub info: StmtInfo,
    pub end: usize,
    pub semicolon: bool,
    pub in_exec: bool,
}

pub(crate) struct QueryPlanner<'q> {
    pub sql: &'q str,
    pub rules: &'q RuleSet,
    pub ctx: &'q PlanCtx<'q>,
    pub modes: Modes,
    pub engine: Engine,
    pub hint: bool,
    pub mode: Mode,
    /// Slots planned so far.
    pub slot_base: usize,
    /// Prepared mode: byte offsets of the client's `?` in the statement.
    pub params: Vec<usize>,
    /// Prepared mode: the slots and rows of the last rule-table statement.
    pub last_planned: Option<Planned>,
    /// The schema named by a `USE` earlier in this query (it applies to the
    /// statements after it, before the session learns of it).
    pub use_schema: Option<&'q str>,
    /// A statement earlier in this query changes `sql_mode`: later
    /// rule-table INSERTs cannot be planned with the session's modes.
    pub sql_mode_changed: bool,
}

/// A rule-table statement's plan plus where it ended.
pub(crate) struct RulePlan {
    pub planned: Planned,
    /// The statement's rows or assignments, as parsed.
    pub body: Body,
    /// `INSERT IGNORE`.
    pub ignore: bool,
    /// An `ON DUPLICATE KEY UPDATE` or `RETURNING` clause follows the rows.
    pub clause: bool,
    pub hit: RuleHit,
    /// For a table sharded by another column than the id: each row's value
    /// of that column (literal or `?`), in row order; else empty.
    pub shard_keys: Vec<KeyArg>,
    /// The rows, located while reading `shard_keys` (their ids not set yet).
    pub located: Option<Vec<RowSpan>>,
    pub end: usize,
    pub semicolon: bool,
    pub in_exec: bool,
}

impl<'q> QueryPlanner<'q> {
    /// The schema unqualified table names refer to at this point of the query.
    fn schema(&self) -> Option<&'q str> {
        self.use_schema.or(self.ctx.schema)
    }

    /// Notes what a statement that is neither an INSERT nor a compound
    /// changes for the statements after it: `USE db`, and `sql_mode`.
    fn note_session_change(&mut self, first: &Token, start: usize, end: usize) {
        let sql = self.sql;
        if kw(sql, first, "USE") {
            let mut lx = Lexer::new(sql, first.end, self.modes);
            if let Some(t) = lx.next_token().filter(|t| t.end <= end) {
                let name = match t.kind {
                    Kind::Word => sql.get(t.start..t.end),
                    Kind::QuotedIdent => sql.get(t.start + 1..t.end.saturating_sub(1)),
                    _ => None,
                };
                if let Some(n) = name {
                    self.use_schema = Some(n);
                }
            }
        } else if sql
            .as_bytes()
            .get(start..end)
            .is_some_and(|b| b.windows(8).any(|w| w.eq_ignore_ascii_case(b"sql_mode")))
        {
            self.sql_mode_changed = true;
        }
    }

    /// Plans the statement starting at `pos`; `None` if only comments remain.
    pub(crate) fn statement(&mut self, pos: usize, in_exec: bool) -> Result<Option<Outcome>, Stop> {
        let sql = self.sql;
        let mut lx = Lexer::new(sql, pos, self.modes);
        lx.set_pos(pos, in_exec);
        let Some(first) = lx.next_token() else {
            return Ok(None);
        };
        let start = first.start;
        if first.is(b';') {
            return Ok(Some(Outcome {
                info: StmtInfo::plain(start..start),
                end: start,
                semicolon: true,
                in_exec: lx.in_exec(),
            }));
        }
        match first_kind(sql, &first, &lx) {
            First::Insert => self.insert(start, in_exec, lx).map(Some),
            First::SetStatement => {
                let s = skim(sql, start, self.modes, in_exec);
                if let Some(body) = set_statement_for(sql, lx.pos(), self.modes) {
                    self.check_set_statement(body, s.end.max(body))?;
                }
                Ok(Some(Outcome {
                    info: StmtInfo::plain(start..s.end),
                    end: s.end,
                    semicolon: s.semicolon,
                    in_exec: s.in_exec,
                }))
            }
            First::Create if self.is_stored_program(&lx) => self.opaque(start, lx).map(Some),
            First::Compound => self.opaque(start, lx).map(Some),
            kind => {
                let s = skim(sql, start, self.modes, in_exec);
                self.note_session_change(&first, start, s.end);
                let mut info = StmtInfo::plain(start..s.end);
                if kw(sql, &first, "UPDATE") {
                    views::check_update(sql, start, s.end, self.modes, self.rules, self.schema())?;
                    if let Some(u) =
                        update::analyze(sql, start, s.end, self.modes, self.rules, self.schema())?
                    {
                        info.update_id = Some(Box::new(RuleHit {
                            table: u.display,
                            column: u.entry.column_arc().clone(),
                            quoted_column: u.entry.quoted_column().clone(),
                            generator: u.entry.generator().clone(),
                            routed: None,
                        }));
                        info.edits.push(Edit {
                            start: u.append_at,
                            end: u.append_at,
                            kind: EditKind::CaptureHighest,
                        });
                    }
                }
                match kind {
                    First::Plain { select } if self.hint => {
                        let uses = lastid::scan(sql, start, s.end, self.modes, select);
                        info.edits.extend(uses.edits);
                        info.edits.sort_by_key(|e| e.start);
                        info.changes_last_insert_id = uses.changes;
                    }
                    First::Prepare => self.check_prepare(start, s.end, in_exec, false)?,
                    First::Load => self.check_load(start, s.end, in_exec)?,
                    _ => {}
                }
                Ok(Some(Outcome {
                    info,
                    end: s.end,
                    semicolon: s.semicolon,
                    in_exec: s.in_exec,
                }))
            }
        }
    }

    /// `SET STATEMENT ... FOR stmt`, `stmt` at `body..end`: forwarded as
    /// it is, so a `stmt` that would need idgate (an INSERT into a rule
    /// table, an UPDATE of its id column, LOAD DATA into it) is refused
    /// rather than run without its ids.
    fn check_set_statement(&self, body: usize, end: usize) -> Result<(), Stop> {
        let ctx = PlanCtx {
            schema: self.schema(),
            ..*self.ctx
        };
        let text = self.sql.get(body..end).unwrap_or("");
        match plan_query_with(text, self.rules, &ctx, self.engine) {
            Ok(Plan::NeedColumns { schema, table }) => Err(Stop::Need { schema, table }),
            Err(e) => Err(Stop::Err(e)),
            Ok(Plan::Rewrite(rw)) => {
                let hit = rw
                    .statements()
                    .iter()
                    .find_map(|st| st.rule.as_ref().or(st.update_id.as_deref()));
                match hit {
                    Some(r) => Err(Stop::Err(SqlError::Unsupported {
                        what: "a statement under SET STATEMENT ... FOR (set the variables with SET SESSION around it)".into(),
                        table: r.table.clone(),
                        column: r.column.to_string(),
                    })),
                    None => Ok(()),
                }
            }
            Ok(_) => Ok(()),
        }
    }

    /// An INSERT/REPLACE; `lx` is just past the keyword.
    fn insert(&mut self, start: usize, in_exec: bool, lx: Lexer<'q>) -> Result<Outcome, Stop> {
        let sql = self.sql;
        let mut head_lx = lx.clone();
        let head_result = fast::head(&mut head_lx, sql);
        // Where to look for the statement's end if it is not a rule table: a
        // failed head may have consumed a `;`, so restart from the keyword.
        let (skim_from, skim_in_exec) = if head_result.is_ok() {
            (head_lx.pos().max(start), head_lx.in_exec())
        } else {
            (start, in_exec)
        };
        let found = match head_result {
            Ok(head) => {
                let schema = head.schema.as_deref().or(self.schema());
                let entry = self.rules.entry(schema, &head.table);
                if entry.is_none() {
                    views::check_insert(self.rules, schema, &head.table, "an INSERT")?;
                }
                entry.map(|e| {
                    (
                        e,
                        head.schema.clone(),
                        head.table.clone(),
                        Some((head, head_lx.clone())),
                    )
                })
            }
            Err(_) => {
                // The fast path cannot even find the table: ask sqlparser.
                let s = skim(sql, start, self.modes, in_exec);
                match parsed::parse(sql, start, s.end, self.modes).and_then(|p| p.table()) {
                    Ok((schema, table)) => {
                        let eff = schema.as_deref().or(self.schema());
                        let entry = self.rules.entry(eff, &table);
                        if entry.is_none() {
                            views::check_insert(self.rules, eff, &table, "an INSERT")?;
                        }
                        entry.map(|e| {
                            (
                                e,
                                schema.clone().map(Cow::Owned),
                                Cow::Owned(table.clone()),
                                None,
                            )
                        })
                    }
                    Err(_) => {
                        if let Some(e) = self.mentions_rule_table(start, s.end) {
                            return Err(SqlError::Syntax {
                                table: e.rule().name.clone(),
                                column: e.column().to_string(),
                                reason: "an INSERT that mentions it could not be parsed".into(),
                            }
                            .into());
                        }
                        None
                    }
                }
            }
        };
        let Some((entry, schema, table, head)) = found else {
            // Not a rule table: forward, replacing last-insert-id uses.
            let s = skim(sql, skim_from, self.modes, skim_in_exec);
            let mut info = StmtInfo::plain(start..s.end);
            if self.hint {
                let uses = lastid::scan(sql, start, s.end, self.modes, false);
                info.edits = uses.edits;
                info.changes_last_insert_id = uses.changes;
            }
            return Ok(Outcome {
                info,
                end: s.end,
                semicolon: s.semicolon,
                in_exec: s.in_exec,
            });
        };
        self.rule_statement(start, in_exec, entry, schema, table, head)
    }

    /// An INSERT/REPLACE into the rule table `entry` (named `schema.table`
    /// in the statement), with its head as the fast path read it.
    fn rule_statement(
        &mut self,
        start: usize,
        in_exec: bool,
        entry: &'q TableEntry,
        schema: Option<Cow<'q, str>>,
        table: Cow<'q, str>,
        head: Option<(fast::Head<'q>, Lexer<'q>)>,
    ) -> Result<Outcome, Stop> {
        let sql = self.sql;
        if self.sql_mode_changed {
            let eff = schema.as_deref().or(self.schema());
            return Err(SqlError::Unsupported {
                what: "an INSERT after a change of sql_mode in the same query (send the SET in its own query first)".into(),
                table: display_table(eff, &table),
                column: entry.column().to_string(),
            }
            .into());
        }
        let rp = self.rule_insert(start, in_exec, entry, schema.as_deref(), &table, head)?;
        // On a table sharded by another column, rows of one statement go to
        // several shards with no unique key across them: a generated id
        // could equal an id written as an expression of the same statement
        // (known only once stored) and both be stored. Refused.
        if entry.separate_shard_key().is_some()
            && !rp.planned.captures.is_empty()
            && rp.planned.slot_count > 0
        {
            return Err(SqlError::Unsupported {
                what: "an INSERT into a table sharded by another column that mixes generated ids with ids written as expressions (send them as separate statements)".into(),
                table: rp.hit.table.clone(),
                column: entry.column().to_string(),
            }
            .into());
        }
        let Planned {
            edits,
            slots,
            explicit,
            rows,
            slot_count,
            captures,
            last_captured,
        } = rp.planned;
        let mut info = StmtInfo::plain(start..rp.end);
        info.shard_keys = rp.shard_keys;
        if rp.hit.routed.is_some() && self.mode == Mode::Text {
            info.rows = match rp.located {
                Some(mut located) => {
                    rows::set_keys(&mut located, &rp.body, &edits);
                    located
                }
                None => rows::spans(sql, start..rp.end, self.modes, &rp.body, &edits)
                    .unwrap_or_default(),
            };
        }
        if rp.ignore || rp.clause {
            info.upsert = Some(Box::new(upsert::analyze(
                sql,
                start..rp.end,
                self.modes,
                &rp.body,
                rp.ignore,
                last_row_slot(&rp.body, &edits),
            )));
        }
        // `ON DUPLICATE KEY UPDATE id = <value>` (other than `VALUES(id)`)
        // changes a row's id: captured and read back like an id written as
        // an expression (`frontend/capture.rs`).
        let mut edits = edits;
        let mut captures = captures;
        if let Some((from, to)) = info
            .upsert
            .as_deref()
            .and_then(|u| Some((u.odku_start?, u.odku_end?)))
        {
            for r in upsert::id_assignments(sql, from, to, self.modes, &rp.hit.column) {
                captures.push(r.start);
                edits.push(Edit {
                    start: r.start,
                    end: r.start,
                    kind: EditKind::Capture(r.start),
                });
                edits.push(Edit {
                    start: r.end,
                    end: r.end,
                    kind: EditKind::CaptureEnd,
                });
            }
            edits.sort_by_key(|e| e.start);
        }
        if self.mode == Mode::Prepare {
            info.uses_last_insert_id = sql
                .as_bytes()
                .get(start..rp.end)
                .is_some_and(|b| last_id_hint(b, self.ctx.mentions));
        }
        info.first_slot = self.slot_base;
        info.generated = slot_count;
        info.explicit = explicit;
        info.edits = edits;
        info.last_captured = last_captured;
        if self.mode == Mode::Prepare {
            self.last_planned = Some(Planned {
                edits: Vec::new(),
                slots,
                explicit: Vec::new(),
                rows,
                slot_count,
                captures: captures.clone(),
                last_captured,
            });
        }
        info.captures = captures;
        if self.hint && self.mode == Mode::Text {
            let uses = lastid::scan(sql, start, rp.end, self.modes, false);
            info.uses_last_insert_id = uses.changes || !uses.edits.is_empty();
            if !uses.edits.is_empty() {
                info.edits.extend(uses.edits);
                info.edits.sort_by_key(|e| e.start);
            }
            info.changes_last_insert_id = uses.changes;
        }
        info.rule = Some(rp.hit);
        self.slot_base += info.generated;
        Ok(Outcome {
            info,
            end: rp.end,
            semicolon: rp.semicolon,
            in_exec: rp.in_exec,
        })
    }

    /// Plans an INSERT/REPLACE into the rule table `entry`.
    pub(crate) fn rule_insert(
        &mut self,
        start: usize,
        in_exec: bool,
        entry: &TableEntry,
        schema: Option<&str>,
        table: &str,
        head: Option<(fast::Head<'q>, Lexer<'q>)>,
    ) -> Result<RulePlan, Stop> {
        let sql = self.sql;
        let eff_schema = schema.or(self.schema());
        let display = display_table(eff_schema, table);
        let column = entry.column();
        let unsupported = |what: &str| {
            Stop::Err(SqlError::Unsupported {
                what: what.to_string(),
                table: display.clone(),
                column: column.to_string(),
            })
        };
        let syntax = |reason: &str| {
            Stop::Err(SqlError::Syntax {
                table: display.clone(),
                column: column.to_string(),
                reason: reason.to_string(),
            })
        };
        let ctx = self.ctx;
        let mut table_count = None;
        let mut resolve = || -> Result<Option<usize>, Stop> {
            let schema = eff_schema.ok_or_else(|| {
                Stop::Err(SqlError::NoDatabase {
                    table: table.to_string(),
                })
            })?;
            let cols = (ctx.columns)(schema, table).ok_or_else(|| Stop::Need {
                schema: schema.to_string(),
                table: table.to_string(),
            })?;
            let idx = cols
                .iter()
                .position(|c| same_column(c, column))
                .ok_or_else(|| {
                    Stop::Err(SqlError::UnknownColumn {
                        table: format!("{schema}.{table}"),
                        column: column.to_string(),
                    })
                })?;
            table_count = Some(cols.len());
            Ok(Some(idx))
        };

        let mut result = None;
        if let (Some((head, lx)), true) = (&head, self.engine != Engine::SqlParserOnly) {
            let mut lx = lx.clone();
            match fast::shape_after_head(&mut lx, sql, self.modes, head, column, &mut resolve)? {
                Ok((shape, end)) => {
                    if end.exec_seen || in_exec {
                        return Err(unsupported(
                            "an INSERT with executable comments (/*! ... */)",
                        ));
                    }
                    result = Some((shape, end.end, end.semicolon, end.in_exec));
                }
                Err(Refuse::Unsupported(what)) => return Err(unsupported(what)),
                Err(Refuse::Syntax(reason)) => return Err(syntax(reason)),
                Err(Refuse::Decline) if self.engine == Engine::FastOnly => {
                    return Err(unsupported("this INSERT form (fast path declined)"))
                }
                Err(Refuse::Decline) => {}
            }
        }
        let (shape, end, semicolon, end_in_exec) = match result {
            Some(r) => r,
            None => {
                let s = skim(sql, start, self.modes, in_exec);
                if s.exec_seen || in_exec {
                    return Err(unsupported(
                        "an INSERT with executable comments (/*! ... */)",
                    ));
                }
                if s.unterminated {
                    return Err(syntax("a quote or comment is not closed"));
                }
                let p = parsed::parse(sql, start, s.end, self.modes).map_err(|f| match f {
                    Fail::Syntax(r) => syntax(&r),
                    Fail::Unsupported(w) => unsupported(w),
                })?;
                let idx = if p.has_no_column_list() {
                    resolve()?
                } else {
                    None
                };
                let shape = p.shape(column, idx).map_err(|f| match f {
                    Fail::Syntax(r) => syntax(&r),
                    Fail::Unsupported(w) => unsupported(w),
                })?;
                if self.mode == Mode::Prepare {
                    self.params = p.params();
                }
                (shape, s.end, s.semicolon, s.in_exec)
            }
        };
        if self.mode == Mode::Prepare && self.params.is_empty() {
            self.params = fast::params(sql, start, end, self.modes);
        }
        let names = Names {
            table: &display,
            column,
        };
        let planned = insert::plan(
            &shape,
            &names,
            table_count,
            self.ctx.no_auto_value_on_zero,
            self.slot_base,
            self.mode,
            &self.params,
        )?;
        let routed = routed(entry).then(|| {
            self.rules
                .entries()
                .iter()
                .position(|e| std::ptr::eq(e, entry))
        });
        let (shard_keys, located) = match entry.separate_shard_key() {
            Some(key) => {
                let (keys, spans) = self.shard_keys(
                    start..end,
                    &shape,
                    eff_schema,
                    table,
                    &display,
                    (key, column),
                )?;
                (keys, Some(spans))
            }
            None => (Vec::new(), None),
        };
        Ok(RulePlan {
            planned,
            shard_keys,
            located,
            body: shape.body,
            ignore: shape.ignore,
            clause: shape.clause,
            hit: RuleHit {
                table: display,
                column: entry.column_arc().clone(),
                quoted_column: entry.quoted_column().clone(),
                generator: entry.generator().clone(),
                routed: routed.flatten(),
            },
            end,
            semicolon,
            in_exec: end_in_exec,
        })
    }

    /// Each row's value of the shard key column `key` (not the id column)
    /// of an INSERT into `table` shaped `shape`, spanning `range`.
    fn shard_keys(
        &self,
        range: Range<usize>,
        shape: &Shape,
        schema: Option<&str>,
        table: &str,
        display: &str,
        (key, id_column): (&str, &str),
    ) -> Result<(Vec<KeyArg>, Vec<RowSpan>), Stop> {
        let sql = self.sql;
        let refuse = |row: usize, reason: &'static str| {
            Stop::Err(SqlError::ShardKey {
                table: display.to_string(),
                column: key.to_string(),
                row,
                reason,
            })
        };
        let column = match (&shape.body, &shape.columns) {
            (Body::Set { .. }, _) => KeyColumn::Named(key),
            (Body::Values(_), Some(_)) => {
                let mut lx = Lexer::new(sql, shape.after_table, self.modes);
                match fast::columns(&mut lx, sql, key) {
                    Ok(Some(list)) => match list.id_index {
                        Some(i) => KeyColumn::Position(i),
                        None => {
                            return Err(refuse(1, "leaves it out of its column list"));
                        }
                    },
                    _ => return Err(refuse(1, "has a column list idgate cannot read")),
                }
            }
            (Body::Values(_), None) => {
                let schema = schema.ok_or_else(|| {
                    Stop::Err(SqlError::NoDatabase {
                        table: table.to_string(),
                    })
                })?;
                let cols = (self.ctx.columns)(schema, table).ok_or_else(|| Stop::Need {
                    schema: schema.to_string(),
                    table: table.to_string(),
                })?;
                match cols.iter().position(|c| same_column(c, key)) {
                    Some(i) => KeyColumn::Position(i),
                    None => {
                        return Err(Stop::Err(SqlError::UnknownColumn {
                            table: format!("{schema}.{table}"),
                            column: key.to_string(),
                        }))
                    }
                }
            }
        };
        let end = range.end;
        let spans = rows::locate(sql, range, self.modes, &shape.body)
            .ok_or_else(|| refuse(1, "has rows idgate cannot locate"))?;
        let keys = rows::key_args(sql, self.modes, &spans, &shape.body, column)
            .map_err(|(row, reason)| refuse(row, reason))?;
        // ON DUPLICATE KEY UPDATE may keep the shard key (`VALUES(key)`:
        // the row's new value, which maps to the shard the row went to),
        // not change it: the row would have to move to another shard.
        let body_end = match &shape.body {
            Body::Values(rows) => rows.last().map_or(end, |r| r.close + 1),
            Body::Set { end, .. } => *end,
        };
        if shape.clause {
            if let Some(v) = rows::assigned(sql, self.modes, body_end..end, "UPDATE", key) {
                let keeps = match v.as_slice() {
                    [f, open, col, close] => {
                        f.is_word(sql, "VALUES")
                            && open.is(b'(')
                            && close.is(b')')
                            && fast::ident(sql, col).is_some_and(|c| same_column(&c, key))
                    }
                    _ => false,
                };
                if !keeps {
                    return Err(Stop::Err(SqlError::Unsupported {
                        what: format!("ON DUPLICATE KEY UPDATE of shard key column `{key}` (the row would have to move to another shard; only {key} = VALUES({key}) is allowed)"),
                        table: display.to_string(),
                        column: id_column.to_string(),
                    }));
                }
            }
        }
        Ok((keys, spans))
    }

    /// `CREATE [OR REPLACE] [DEFINER = user] [AGGREGATE] {PROCEDURE | FUNCTION | TRIGGER | EVENT | PACKAGE}`.
    fn is_stored_program(&self, lx: &Lexer<'q>) -> bool {
        let sql = self.sql;
        let mut lx = lx.clone();
        for _ in 0..16 {
            let Some(t) = lx.next_token() else {
                return false;
            };
            if ["PROCEDURE", "FUNCTION", "TRIGGER", "EVENT", "PACKAGE"]
                .iter()
                .any(|k| kw(sql, &t, k))
            {
                return true;
            }
            let skip = ["OR", "REPLACE", "AGGREGATE", "DEFINER", "CURRENT_USER"]
                .iter()
                .any(|k| kw(sql, &t, k))
                || matches!(
                    t.kind,
                    Kind::Str | Kind::QuotedIdent | Kind::Var | Kind::Punct(b'=' | b'(' | b')')
                )
                || (t.kind == Kind::Word
                    && lx.clone().next_token().is_some_and(|n| n.kind == Kind::Var));
            if !skip {
                return false;
            }
        }
        false
    }

    /// A stored program or compound statement: the rest of the query is one
    /// statement. INSERTs into rule tables inside it are refused (a literal id
    /// would be frozen into the program), and so are UPDATEs of a rule
    /// table's id column (idgate could not read the ids they store back).
    ///
    /// A trigger on a rule table whose body assigns the id column (`SET
    /// NEW.id = ...`) is refused too: the row would keep an id idgate
    /// neither issued nor saw. Dynamic SQL in the body (`PREPARE ...
    /// FROM`, `EXECUTE IMMEDIATE`) is checked when its source is a string
    /// literal and refused otherwise ([`QueryPlanner::check_prepare`]).
    fn opaque(&mut self, start: usize, lx: Lexer<'q>) -> Result<Outcome, Stop> {
        let sql = self.sql;
        let trigger = self.trigger_on_rule_table(&lx);
        let mut lx = lx;
        // In a `SET` statement (opened at parenthesis depth `set_depth`:
        // `CHARACTER SET` inside a `CAST(...)` opens one too), where an
        // assignment's target comes next.
        let (mut in_set, mut target, mut depth, mut set_depth) = (false, false, 0usize, 0usize);
        while let Some(t) = lx.next_token() {
            if t.kind == Kind::Unterminated {
                break;
            }
            let at_target = std::mem::take(&mut target);
            match t.kind {
                Kind::Punct(b'(') => depth += 1,
                Kind::Punct(b')') => depth = depth.saturating_sub(1),
                Kind::Punct(b';') => in_set = false,
                Kind::Punct(b',') if in_set && depth == set_depth => target = true,
                Kind::Word if kw(sql, &t, "SET") => {
                    (in_set, target, set_depth) = (true, true, depth)
                }
                _ => {}
            }
            if let (true, Some(e)) = (at_target, trigger) {
                let mut ahead = lx.clone();
                let assigns_id = kw(sql, &t, "NEW")
                    && ahead.next_token().is_some_and(|d| d.is(b'.'))
                    && ahead
                        .next_token()
                        .and_then(|c| fast::ident(sql, &c))
                        .is_some_and(|c| c.eq_ignore_ascii_case(e.column()));
                if assigns_id {
                    return Err(SqlError::Unsupported {
                        what: format!("a trigger that assigns NEW.{}", e.column()),
                        table: e.rule().name.clone(),
                        column: e.column().to_string(),
                    }
                    .into());
                }
            }
            if kw(sql, &t, "UPDATE") {
                let end = skim(sql, t.start, self.modes, lx.in_exec()).end;
                views::check_update(sql, t.start, end, self.modes, self.rules, self.schema())?;
                if let Some(u) =
                    update::analyze(sql, t.start, end, self.modes, self.rules, self.schema())?
                {
                    return Err(SqlError::Unsupported {
                        what: "an UPDATE of the id column inside a stored program or compound statement"
                            .into(),
                        table: u.display,
                        column: u.entry.column().to_string(),
                    }
                    .into());
                }
            }
            // Dynamic SQL in the body: a literal is checked as the
            // statement it holds; anything else cannot be read.
            if kw(sql, &t, "PREPARE") || kw(sql, &t, "EXECUTE") {
                let end = skim(sql, t.start, self.modes, lx.in_exec()).end;
                self.check_prepare(t.start, end, lx.in_exec(), true)?;
            }
            if kw(sql, &t, "INSERT") || kw(sql, &t, "REPLACE") {
                let mut h = lx.clone();
                if let Ok(head) = fast::head(&mut h, sql) {
                    let schema = head.schema.as_deref().or(self.schema());
                    let entry = self.rules.entry(schema, &head.table);
                    if entry.is_none() {
                        views::check_insert(
                            self.rules,
                            schema,
                            &head.table,
                            "an INSERT inside a stored program or compound statement",
                        )?;
                    }
                    if let Some(e) = entry {
                        return Err(SqlError::Unsupported {
                            what: "an INSERT inside a stored program or compound statement".into(),
                            table: e.rule().name.clone(),
                            column: e.column().to_string(),
                        }
                        .into());
                    }
                }
            }
        }
        Ok(Outcome {
            info: StmtInfo::plain(start..sql.len()),
            end: sql.len(),
            semicolon: false,
            in_exec: false,
        })
    }

    /// For `CREATE ... TRIGGER name {BEFORE | AFTER} {INSERT | UPDATE} ON
    /// table`: the rule of that table, if it has one.
    fn trigger_on_rule_table(&self, lx: &Lexer<'q>) -> Option<&'q TableEntry> {
        let sql = self.sql;
        let mut lx = lx.clone();
        let mut t = lx.next_token()?;
        for _ in 0..16 {
            if kw(sql, &t, "TRIGGER") {
                break;
            }
            t = lx.next_token()?;
        }
        if !kw(sql, &t, "TRIGGER") {
            return None;
        }
        // `IF NOT EXISTS` and the trigger's name, perhaps qualified, up to
        // BEFORE or AFTER.
        let timing = |t: &Token| kw(sql, t, "BEFORE") || kw(sql, t, "AFTER");
        let mut t = lx.next_token()?;
        for _ in 0..8 {
            if timing(&t) {
                break;
            }
            t = lx.next_token()?;
        }
        if !timing(&t) {
            return None;
        }
        let event = lx.next_token()?;
        if !(kw(sql, &event, "INSERT") || kw(sql, &event, "UPDATE")) {
            return None;
        }
        if !kw(sql, &lx.next_token()?, "ON") {
            return None;
        }
        let first = fast::ident(sql, &lx.next_token()?)?;
        let mut ahead = lx.clone();
        let (schema, table) = match ahead.next_token() {
            Some(d) if d.is(b'.') => (Some(first), fast::ident(sql, &ahead.next_token()?)?),
            _ => (None, first),
        };
        self.rules
            .entry(schema.as_deref().or(self.schema()), &table)
    }

    /// Any token of `sql[start..end]` that names a rule table.
    fn mentions_rule_table(&self, start: usize, end: usize) -> Option<&'q TableEntry> {
        let sql = self.sql;
        let mut lx = Lexer::new(sql, start, self.modes);
        while let Some(t) = lx.next_token() {
            if t.start >= end || t.kind == Kind::Unterminated {
                break;
            }
            if let Some(name) = fast::ident(sql, &t) {
                if self.rules.has_table_name(&name) {
                    return self.rules.entries().iter().find(|e| e.table() == name);
                }
            }
        }
        None
    }

    /// `PREPARE s FROM '...'` / `EXECUTE IMMEDIATE '...'` of a statement that
    /// writes a rule table: refused. A source that is a variable or an
    /// expression is read by the front end before the query runs
    /// (`sql::statement::dynamic`), which is right only for the query's
    /// first statement: after another one it is refused.
    ///
    /// `in_body`: inside a stored program or compound statement, where
    /// only a string literal can be read (a variable or an expression has
    /// its value when the program runs): any other source is refused.
    fn check_prepare(
        &self,
        start: usize,
        end: usize,
        in_exec: bool,
        in_body: bool,
    ) -> Result<(), Stop> {
        let sql = self.sql;
        let Some(d) = dynamic::parse(sql, start, end, self.modes, in_exec) else {
            return Ok(());
        };
        let t = match d.kind {
            dynamic::Source::Literal(t) => t,
            _ if in_body => {
                return Err(Stop::Err(SqlError::DynamicSource {
                    what: d.what().into(),
                    why: "inside a stored program or compound statement (its text is known only when the program runs, where idgate cannot read it)".into(),
                    remedy: "prepare from a string literal there, or build the statement in the application and send it through idgate".into(),
                }))
            }
            _ if Lexer::new(sql, 0, self.modes).next_token().map(|f| f.start) == Some(start) => {
                return Ok(());
            }
            _ => {
                return Err(Stop::Err(SqlError::DynamicSource {
                    what: d.what().into(),
                    why: "after another statement of the same query (idgate reads its text before the query runs, and an earlier statement could change it)".into(),
                    remedy: "send it as a query of its own".into(),
                }))
            }
        };
        let inner = String::from_utf8_lossy(&unescape(
            sql.as_bytes().get(t.start..t.end).unwrap_or(b""),
            self.modes.no_backslash_escapes,
        ))
        .into_owned();
        let what = format!(
            "{} of an INSERT (or of an UPDATE of the id column)",
            d.what()
        );
        let refuse = |table: String, column: String| {
            Stop::Err(SqlError::Unsupported {
                what: what.clone(),
                table,
                column,
            })
        };
        let mut inner_planner = QueryPlanner {
            sql: &inner,
            rules: self.rules,
            ctx: self.ctx,
            modes: self.modes,
            engine: self.engine,
            hint: false,
            mode: Mode::Text,
            slot_base: 0,
            params: Vec::new(),
            last_planned: None,
            use_schema: None,
            sql_mode_changed: false,
        };
        // Only the first statement: PREPARE takes one.
        match inner_planner.statement(0, false) {
            Ok(Some(o)) => match o.info.rule.or(o.info.update_id.map(|b| *b)) {
                Some(hit) => Err(refuse(hit.table, hit.column.to_string())),
                None => Ok(()),
            },
            Ok(None) => Ok(()),
            Err(Stop::Need { schema, table }) => {
                let column = self
                    .rules
                    .entry(Some(&schema), &table)
                    .map(|e| e.column().to_string())
                    .unwrap_or_default();
                Err(refuse(format!("{schema}.{table}"), column))
            }
            Err(Stop::Err(e)) => {
                let (table, column) = match &e {
                    SqlError::Unsupported { table, column, .. }
                    | SqlError::Syntax { table, column, .. } => (table.clone(), column.clone()),
                    _ => return Err(Stop::Err(e)),
                };
                Err(refuse(table, column))
            }
        }
    }

    /// `LOAD DATA ... INTO TABLE t` into a rule table: refused.
    fn check_load(&self, start: usize, end: usize, in_exec: bool) -> Result<(), Stop> {
        let sql = self.sql;
        let mut lx = Lexer::new(sql, start, self.modes);
        lx.set_pos(start, in_exec);
        let mut prev_into = false;
        while let Some(t) = lx.next_token() {
            if t.start >= end || t.kind == Kind::Unterminated {
                break;
            }
            if prev_into && kw(sql, &t, "TABLE") {
                let Some(a) = lx.next_token() else { break };
                let Some(first) = fast::ident(sql, &a) else {
                    break;
                };
                let mut ahead = lx.clone();
                let (schema, table) = match (ahead.next_token(), ahead.next_token()) {
                    (Some(d), Some(b)) if d.is(b'.') => match fast::ident(sql, &b) {
                        Some(t) => (Some(first), t),
                        None => break,
                    },
                    _ => (None, first),
                };
                let eff = schema.as_deref().or(self.schema());
                let entry = self.rules.entry(eff, &table);
                if entry.is_none() {
                    views::check_insert(self.rules, eff, &table, "LOAD DATA")?;
                }
                if let Some(e) = entry {
                    return Err(SqlError::Unsupported {
                        what: "LOAD DATA".into(),
                        table: display_table(eff, &table),
                        column: e.column().to_string(),
                    }
                    .into());
                }
                break;
            }
            prev_into = kw(sql, &t, "INTO");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `last_id_hint`'s `@@` part and `in_exec_anywhere`'s `/*` test as
    /// they were, with substring searches: the references for the memchr
    /// versions.
    fn reference_at_at_hint(b: &[u8]) -> bool {
        Finder::new(b"@@").find_iter(b).any(|i| {
            let rest = b.get(i + 2..).unwrap_or(&[]);
            let n = rest
                .iter()
                .take_while(|&&c| super::super::lexer::is_ident_byte(c) || c == b'.')
                .count();
            let name = rest.get(..n).unwrap_or(&[]).to_ascii_lowercase();
            name.ends_with(b"identity") || name.ends_with(b"last_insert_id")
        })
    }

    fn piece() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just("@"),
            Just("@@"),
            Just("identity"),
            Just("IDENTITY"),
            Just("last_insert_id"),
            Just("session."),
            Just("."),
            Just("x"),
            Just(" "),
            Just("/"),
            Just("*"),
            Just("/*"),
            Just("/*!"),
            Just("/*M!"),
            Just("M!"),
            Just("!"),
            Just("é"),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn quick_scans_agree_with_substring_searches(
            pieces in proptest::collection::vec(piece(), 0..10),
        ) {
            let text = pieces.concat();
            let b = text.as_bytes();
            // No `_` outside the names above: the `_` part is unchanged.
            let underscore = text.contains("last_insert_id");
            prop_assert_eq!(last_id_hint(b, None), underscore || reference_at_at_hint(b));
            // Asked of the text's mentions first: the same answer.
            prop_assert_eq!(last_id_hint(b, Some(Mentions::of(b))), last_id_hint(b, None));
            let reference = Finder::new(b"/*").find(b).is_some()
                && (Finder::new(b"/*!").find(b).is_some() || Finder::new(b"/*M!").find(b).is_some());
            prop_assert_eq!(in_exec_anywhere(&text), reference);
        }
    }

    #[test]
    fn three_ats_are_a_pair_then_a_user_variable() {
        assert!(!last_id_hint(b"select @@@identity", None));
        assert!(last_id_hint(b"select @@@@identity", None));
        assert!(last_id_hint(b"select @@session.IDENTITY", None));
    }
}
