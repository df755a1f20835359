//! `UPDATE` statements that change a rule table's id column (`SET id = 200`,
//! `SET id = id + 1000`): the new ids are not known before the shard stores
//! them, so idgate appends an assignment that records the highest id the
//! statement left in a session variable and reads it back afterwards
//! (`frontend/capture.rs`), as MariaDB raises an AUTO_INCREMENT counter
//! after such an UPDATE.
//!
//! The assignment, appended after the last one of the `SET` list:
//! `` , `id` = IF((@idgate_hi := GREATEST(COALESCE(CAST(@idgate_hi AS DECIMAL(20,0)), 0), `id`)) < 0, `id`, `id`) ``.
//! A single-table UPDATE assigns left to right and a later assignment sees
//! the value an earlier one stored, so it reads each row's new id exactly
//! and writes it back unchanged (affected rows and warnings are the
//! statement's own). The variable is read as DECIMAL(20,0), exact for
//! every 64-bit id (after a reset to NULL it would otherwise compare as a
//! DOUBLE and round ids above 2^53). The variable may hold a higher value of an earlier
//! statement: that one was observed already, so reading it again is
//! harmless. A multi-table UPDATE has no such order: one that sets a rule
//! table's id column is refused.

use super::error::SqlError;
use super::fast;
use super::lexer::{Kind, Lexer, Modes, Token};
use super::shape::same_column;
use crate::rules::{RuleSet, TableEntry};

/// The session variable that holds the highest id an UPDATE stored.
pub const HIGHEST: &str = "@idgate_hi";

/// An UPDATE that sets a rule table's id column.
#[derive(Debug)]
pub(crate) struct IdUpdate<'r> {
    /// The table's rule.
    pub entry: &'r TableEntry,
    /// `schema.table` (or `table`), for messages.
    pub display: String,
    /// Just past the last assignment: where the capture is appended.
    pub append_at: usize,
}

/// Words that end a `SET` list.
const SET_END: &[&str] = &["WHERE", "ORDER", "LIMIT", "RETURNING"];

/// Whether the UPDATE starting at `sql[start]` names a rule table before
/// its `SET` (where its tables are): a cheap pre-check that lexes only the
/// table references, so an UPDATE of other tables costs a few tokens.
pub(crate) fn names_rule_table(sql: &str, start: usize, modes: Modes, rules: &RuleSet) -> bool {
    let mut lx = Lexer::new(sql, start, modes);
    let mut depth = 0usize;
    let _ = lx.next_token(); // UPDATE
    while let Some(t) = lx.next_token() {
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            Kind::Punct(b';') | Kind::Unterminated => return false,
            _ => {}
        }
        if depth == 0 && t.is_word(sql, "SET") {
            return false;
        }
        if fast::ident(sql, &t).is_some_and(|n| rules.has_table_name(&n)) {
            return true;
        }
    }
    false
}

/// Analyzes the UPDATE in `sql[start..end]` (`start` at the `UPDATE`
/// keyword). `Ok(None)`: it sets no rule table's id column. Streams the
/// tokens once, without allocating.
///
/// # Errors
/// [`SqlError::Unsupported`] for a multi-table UPDATE that sets a rule
/// table's id column.
pub(crate) fn analyze<'r>(
    sql: &str,
    start: usize,
    end: usize,
    modes: Modes,
    rules: &'r RuleSet,
    schema: Option<&str>,
) -> Result<Option<IdUpdate<'r>>, SqlError> {
    let mut lx = Lexer::new(sql, start, modes);
    let mut next = move || {
        lx.next_token()
            .filter(|t| t.start < end && t.kind != Kind::Unterminated)
    };
    let _ = next(); // UPDATE

    // The table references, up to `SET`: the first three name tokens (for
    // `[schema .] table`), whether there are several tables, and the rule
    // tables named (a few).
    let mut head: [Option<Token>; 3] = [None; 3];
    let mut n = 0usize;
    let mut multi = false;
    let mut named: [Option<&'r TableEntry>; 4] = [None; 4];
    let mut t = next();
    while t.is_some_and(|t| t.is_word(sql, "LOW_PRIORITY") || t.is_word(sql, "IGNORE")) {
        t = next();
    }
    let reached_set = tables_until_set(sql, t, &mut next, |tok| {
        multi |= tok.is(b',') || tok.is_word(sql, "JOIN") || tok.is_word(sql, "STRAIGHT_JOIN");
        if let Some(slot) = head.get_mut(n) {
            *slot = Some(tok);
        }
        n += 1;
        if let Some(name) = fast::ident(sql, &tok).filter(|n| rules.has_table_name(n)) {
            let entry = rules
                .entry(schema, &name)
                .or_else(|| rules.entries().iter().find(|e| e.table() == name));
            if let (Some(e), Some(free)) = (entry, named.iter_mut().find(|x| x.is_none())) {
                *free = Some(e);
            }
        }
    });
    if !reached_set {
        return Ok(None);
    }
    if named.iter().all(Option::is_none) {
        return Ok(None);
    }
    // The table of a single-table UPDATE: `[schema .] table [[AS] alias]`.
    let single = if multi {
        None
    } else {
        let name = |t: Option<Token>| t.and_then(|t| fast::ident(sql, &t));
        let (s, table) = match head {
            [Some(s), Some(dot), t] if dot.is(b'.') => (name(Some(s)), name(t)),
            [t, ..] => (None, name(t)),
        };
        let eff = s.or(schema.map(std::borrow::Cow::Borrowed));
        match table {
            Some(table) => rules.entry(eff.as_deref(), &table).map(|e| (e, eff, table)),
            None => None,
        }
    };
    // The SET list.
    let mut assigns_id = false;
    let last_end = each_target(sql, &mut next, |col| {
        let hits = |e: &TableEntry| col.as_deref().is_some_and(|c| same_column(c, e.column()));
        match &single {
            Some((e, _, _)) => assigns_id |= hits(e),
            None if multi => {
                if let Some(e) = named.iter().flatten().find(|e| hits(e)) {
                    return Err(SqlError::Unsupported {
                        what: "a multi-table UPDATE that sets the id column (idgate cannot read back the ids it stores; update the table alone)".into(),
                        table: e.table().to_string(),
                        column: e.column().to_string(),
                    });
                }
            }
            None => {}
        }
        Ok(())
    })?;
    match (single, assigns_id, last_end) {
        (Some((entry, eff, table)), true, Some(append_at)) => Ok(Some(IdUpdate {
            entry,
            display: match eff {
                Some(s) => format!("{s}.{table}"),
                None => table.into_owned(),
            },
            append_at,
        })),
        _ => Ok(None),
    }
}

/// Reads an UPDATE's table references from `first`, then `next`, up to
/// its depth-0 `SET`, giving `each` every token before it. `false` when
/// the statement ends first.
pub(crate) fn tables_until_set(
    sql: &str,
    first: Option<Token>,
    mut next: impl FnMut() -> Option<Token>,
    mut each: impl FnMut(Token),
) -> bool {
    let mut depth = 0usize;
    let mut t = first;
    while let Some(tok) = t {
        match tok.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && tok.is_word(sql, "SET") {
            return true;
        }
        each(tok);
        t = next();
    }
    false
}

/// Reads a `SET` list from `next` (just past `SET`): `on_target` gets the
/// column named before each depth-0 `=` that starts an assignment
/// (`None` when that is not a name), up to a word that ends the list.
/// Returns where the list's last token ends.
pub(crate) fn each_target<'s>(
    sql: &'s str,
    mut next: impl FnMut() -> Option<Token>,
    mut on_target: impl FnMut(Option<std::borrow::Cow<'s, str>>) -> Result<(), SqlError>,
) -> Result<Option<usize>, SqlError> {
    let mut depth = 0usize;
    let mut expect_target = true;
    let mut target: Option<Token> = None;
    let mut last_end = None;
    while let Some(tok) = next() {
        match tok.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 {
            if SET_END.iter().any(|w| tok.is_word(sql, w)) {
                break;
            }
            if tok.is(b',') {
                expect_target = true;
                target = None;
            } else if expect_target && tok.is(b'=') {
                expect_target = false;
                on_target(target.and_then(|t| fast::ident(sql, &t)))?;
            } else if expect_target && !tok.is(b'.') {
                target = Some(tok);
            }
        }
        last_end = Some(tok.end);
    }
    Ok(last_end)
}

/// Writes the appended assignment for the id column `quoted` (backquoted).
pub(crate) fn push_capture(out: &mut String, quoted: &str) {
    out.push_str(", ");
    out.push_str(quoted);
    out.push_str(" = IF((");
    out.push_str(HIGHEST);
    // The variable is read through DECIMAL(20,0): reset to NULL (a string
    // NULL) it would make GREATEST compare as DOUBLE, which rounds ids
    // above 2^53 (the value read back would not be the id stored).
    out.push_str(" := GREATEST(COALESCE(CAST(");
    out.push_str(HIGHEST);
    out.push_str(" AS DECIMAL(20,0)), 0), ");
    out.push_str(quoted);
    out.push_str(")) < 0, ");
    out.push_str(quoted);
    out.push_str(", ");
    out.push_str(quoted);
    out.push(')');
}
