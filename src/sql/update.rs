//! `UPDATE` statements that change a rule table's id column (`SET id = 200`,
//! `SET id = id + 1000`): the new ids are not known before the shard stores
//! them, so idgate appends an assignment that records the highest id the
//! statement left in a session variable and reads it back afterwards
//! (`frontend/capture.rs`), as MariaDB raises an AUTO_INCREMENT counter
//! after such an UPDATE.
//!
//! The assignment, appended after the last one of the `SET` list:
//! `` , `id` = IF((@idgate_hi := GREATEST(COALESCE(@idgate_hi, 0), `id`)) < 0, `id`, `id`) ``.
//! A single-table UPDATE assigns left to right and a later assignment sees
//! the value an earlier one stored, so it reads each row's new id exactly
//! and writes it back unchanged (affected rows and warnings are the
//! statement's own). The variable may hold a higher value of an earlier
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

/// Analyzes the UPDATE in `sql[start..end]` (`start` at the `UPDATE`
/// keyword). `Ok(None)`: it sets no rule table's id column.
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
    let mut tokens: Vec<Token> = Vec::new();
    while let Some(t) = lx.next_token() {
        if t.start >= end || t.kind == Kind::Unterminated {
            break;
        }
        tokens.push(t);
    }
    // UPDATE [LOW_PRIORITY] [IGNORE] refs SET ...
    let mut i = 1;
    while tokens
        .get(i)
        .is_some_and(|t| t.is_word(sql, "LOW_PRIORITY") || t.is_word(sql, "IGNORE"))
    {
        i += 1;
    }
    let mut depth = 0usize;
    let Some(set_at) = tokens.iter().enumerate().skip(i).find_map(|(k, t)| {
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        (depth == 0 && t.is_word(sql, "SET")).then_some(k)
    }) else {
        return Ok(None);
    };
    let refs = tokens.get(i..set_at).unwrap_or(&[]);
    let multi = refs
        .iter()
        .any(|t| t.is(b',') || t.is_word(sql, "JOIN") || t.is_word(sql, "STRAIGHT_JOIN"));
    // The SET list: assignments up to a word that ends it, at depth 0.
    let mut depth = 0usize;
    let mut list_end = tokens.len();
    for (k, t) in tokens.iter().enumerate().skip(set_at + 1) {
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && SET_END.iter().any(|w| t.is_word(sql, w)) {
            list_end = k;
            break;
        }
    }
    let list = tokens.get(set_at + 1..list_end).unwrap_or(&[]);
    let Some(last) = list.last() else {
        return Ok(None);
    };
    // Targets: the name before each depth-0 `=` that starts an assignment.
    let mut targets: Vec<(Option<String>, String)> = Vec::new();
    let mut depth = 0usize;
    let mut expect_target = true;
    let mut k = 0;
    while let Some(t) = list.get(k) {
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && t.is(b',') {
            expect_target = true;
        } else if expect_target && depth == 0 {
            // name [. name [. name]] =
            let mut parts = vec![fast::ident(sql, t).map(|c| c.into_owned())];
            let mut j = k + 1;
            while list.get(j).is_some_and(|d| d.is(b'.')) {
                parts.push(
                    list.get(j + 1)
                        .and_then(|n| fast::ident(sql, n))
                        .map(|c| c.into_owned()),
                );
                j += 2;
            }
            if let Some(Some(col)) = parts.last() {
                let qualifier = parts
                    .len()
                    .checked_sub(2)
                    .and_then(|q| parts.get(q).cloned().flatten());
                targets.push((qualifier, col.clone()));
            }
            expect_target = false;
            k = j;
            continue;
        }
        k += 1;
    }
    if multi {
        // Every rule table named in the references whose id column is
        // assigned (by a qualified or a bare name) refuses the statement.
        for t in refs {
            let Some(name) = fast::ident(sql, t) else {
                continue;
            };
            if !rules.has_table_name(&name) {
                continue;
            }
            let Some(entry) = rules
                .entry(schema, &name)
                .or_else(|| rules.entries().iter().find(|e| e.table() == name))
            else {
                continue;
            };
            if targets.iter().any(|(_, c)| same_column(c, entry.column())) {
                return Err(SqlError::Unsupported {
                    what: "a multi-table UPDATE that sets the id column (idgate cannot read back the ids it stores; update the table alone)".into(),
                    table: name.into_owned(),
                    column: entry.column().to_string(),
                });
            }
        }
        return Ok(None);
    }
    // [schema .] table [[AS] alias]
    let name_of = |t: Option<&Token>| t.and_then(|t| fast::ident(sql, t));
    let (table_schema, table) = match (refs.first(), refs.get(1)) {
        (Some(s), Some(dot)) if dot.is(b'.') => (name_of(Some(s)), name_of(refs.get(2))),
        (first, _) => (None, name_of(first)),
    };
    let Some(table) = table else {
        return Ok(None);
    };
    if !rules.has_table_name(&table) {
        return Ok(None);
    }
    let eff_schema = table_schema.as_deref().or(schema);
    let Some(entry) = rules.entry(eff_schema, &table) else {
        return Ok(None);
    };
    if !targets.iter().any(|(_, c)| same_column(c, entry.column())) {
        return Ok(None);
    }
    let display = match eff_schema {
        Some(s) => format!("{s}.{table}"),
        None => table.into_owned(),
    };
    Ok(Some(IdUpdate {
        entry,
        display,
        append_at: last.end,
    }))
}

/// Writes the appended assignment for the id column `quoted` (backquoted).
pub(crate) fn push_capture(out: &mut String, quoted: &str) {
    out.push_str(", ");
    out.push_str(quoted);
    out.push_str(" = IF((");
    out.push_str(HIGHEST);
    out.push_str(" := GREATEST(COALESCE(");
    out.push_str(HIGHEST);
    out.push_str(", 0), ");
    out.push_str(quoted);
    out.push_str(")) < 0, ");
    out.push_str(quoted);
    out.push_str(", ");
    out.push_str(quoted);
    out.push(')');
}
