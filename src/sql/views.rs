//! Writes through a guarded view ([`crate::rules::views`]): refused, as
//! the same write to the rule table would need idgate. An INSERT, REPLACE
//! or LOAD DATA into such a view (its row would get an id idgate never
//! issued, or keep one it never saw), and an UPDATE that sets a view
//! column showing the id (idgate could not read back what it stored).
//! Reads, DELETEs and UPDATEs of other columns pass.

use super::error::SqlError;
use super::fast;
use super::lexer::{Kind, Lexer, Modes, Token};
use super::shape::same_column;
use crate::rules::views::GuardedView;
use crate::rules::RuleSet;

/// `what` into `schema.name` (the statement's schema, else the
/// session's): refused when it is a guarded view.
#[inline]
pub(crate) fn check_insert(
    rules: &RuleSet,
    schema: Option<&str>,
    name: &str,
    what: &str,
) -> Result<(), SqlError> {
    if rules.views().is_empty() {
        return Ok(());
    }
    match rules.views().get(schema, name) {
        Some(g) => Err(refusal(what, g)),
        None => Ok(()),
    }
}

/// The UPDATE in `sql[start..end]` (`start` at its keyword): refused when
/// it sets a column of a guarded view it names that shows the id.
pub(crate) fn check_update(
    sql: &str,
    start: usize,
    end: usize,
    modes: Modes,
    rules: &RuleSet,
    schema: Option<&str>,
) -> Result<(), SqlError> {
    let views = rules.views();
    if views.is_empty() {
        return Ok(());
    }
    let mut lx = Lexer::new(sql, start, modes);
    let mut next = move || {
        lx.next_token()
            .filter(|t| t.start < end && t.kind != Kind::Unterminated)
    };
    let _ = next(); // UPDATE

    // The table references, up to `SET`: the guarded views named.
    let mut named: Vec<&GuardedView> = Vec::new();
    let (mut prev, mut prev2): (Option<Token>, Option<Token>) = (None, None);
    let first = next();
    let reached_set = super::update::tables_until_set(sql, first, &mut next, |tok| {
        if let Some(name) = fast::ident(sql, &tok).filter(|n| views.has_name(n)) {
            let qualifier = match (prev2, prev) {
                (Some(s), Some(d)) if d.is(b'.') => fast::ident(sql, &s),
                _ => None,
            };
            if let Some(g) = views.get(qualifier.as_deref().or(schema), &name) {
                named.push(g);
            }
        }
        (prev2, prev) = (prev, Some(tok));
    });
    if !reached_set {
        return Ok(());
    }
    if named.iter().all(|g| g.id_columns.is_empty()) {
        return Ok(());
    }
    // The SET list.
    super::update::each_target(sql, next, |col| {
        let hit = col.and_then(|col| {
            named
                .iter()
                .find(|g| g.id_columns.iter().any(|c| same_column(c, &col)))
        });
        match hit {
            Some(g) => Err(refusal("an UPDATE of the id column", g)),
            None => Ok(()),
        }
    })?;
    Ok(())
}

fn refusal(what: &str, g: &GuardedView) -> SqlError {
    SqlError::ThroughView {
        what: what.to_string(),
        view: g.view.clone(),
        table: g.table.clone(),
        column: g.column.clone(),
    }
}
