//! Finding uses of the session's last insert id in a statement: no-argument
//! `LAST_INSERT_ID()`, `@@identity`, `@@last_insert_id` (also with
//! `@@session.`/`@@local.`), and statements that change it
//! (`LAST_INSERT_ID(expr)`, `SET last_insert_id = ...`).

use super::edit::{Edit, EditKind};
use super::lexer::{Kind, Lexer, Modes, Token};

/// The uses found in one statement.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LastIdUses {
    /// One `LastId` edit per no-argument use, in text order.
    pub edits: Vec<Edit>,
    /// The statement sets the last insert id itself (`LAST_INSERT_ID(expr)`
    /// or an assignment to the variable): later uses are left to the backend.
    pub changes: bool,
}

fn lower_eq(sql: &str, t: &Token, s: &str) -> bool {
    sql.as_bytes()
        .get(t.start..t.end)
        .is_some_and(|w| w.eq_ignore_ascii_case(s.as_bytes()))
}

fn is_var_name(sql: &str, t: &Token) -> bool {
    if t.kind != Kind::Var {
        return false;
    }
    let Some(text) = sql.get(t.start..t.end) else {
        return false;
    };
    let Some(name) = text.strip_prefix("@@") else {
        return false;
    };
    let lower = name.to_ascii_lowercase();
    let name = lower
        .strip_prefix("session.")
        .or_else(|| lower.strip_prefix("local."))
        .unwrap_or(&lower);
    name == "identity" || name == "last_insert_id"
}

/// Words after which a select-list item ends.
const ITEM_END: &[&str] = &[
    "FROM",
    "INTO",
    "WHERE",
    "LIMIT",
    "UNION",
    "ORDER",
    "GROUP",
    "HAVING",
    "FOR",
    "LOCK",
    "WINDOW",
    "EXCEPT",
    "INTERSECT",
];

/// Scans `sql[start..end]`. `select` says the statement is a SELECT (uses
/// that are a whole select-list item get an alias so the column name stays).
pub fn scan(sql: &str, start: usize, end: usize, modes: Modes, select: bool) -> LastIdUses {
    let mut out = LastIdUses::default();
    let mut lx = Lexer::new(sql, start, modes);
    let mut toks: Vec<Token> = Vec::new();
    while let Some(t) = lx.next_token() {
        if t.start >= end || t.kind == Kind::Unterminated {
            break;
        }
        toks.push(t);
    }
    let mut depth = 0usize;
    let mut i = 0;
    let get = |i: usize| toks.get(i).copied();
    let is_set = toks.first().is_some_and(|t| lower_eq(sql, t, "SET"));
    while let Some(t) = get(i) {
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        let prev = i.checked_sub(1).and_then(get);
        let assigned = |j: usize| {
            get(j).is_some_and(|n| {
                n.is(b'=') || (n.is(b':') && get(j + 1).is_some_and(|m| m.is(b'=')))
            })
        };
        let mut found: Option<(usize, usize)> = None; // (end offset, index of last token)
        if t.kind == Kind::Word
            && lower_eq(sql, &t, "last_insert_id")
            && !prev.is_some_and(|p| p.is(b'.'))
        {
            match (get(i + 1), get(i + 2)) {
                (Some(a), Some(b)) if a.is(b'(') && b.is(b')') => found = Some((b.end, i + 2)),
                (Some(a), _) if a.is(b'(') => out.changes = true,
                _ if is_set && assigned(i + 1) => out.changes = true,
                _ => {}
            }
        } else if t.kind == Kind::Word && is_set && lower_eq(sql, &t, "identity") && assigned(i + 1)
        {
            out.changes = true;
        } else if is_var_name(sql, &t) {
            if assigned(i + 1) {
                out.changes = true;
            } else {
                found = Some((t.end, i));
            }
        }
        if let Some((e, last)) = found {
            let before_ok =
                prev.is_some_and(|p| (p.is(b',') && depth == 0) || lower_eq(sql, &p, "SELECT"));
            let after_ok = match get(last + 1) {
                None => true,
                Some(n) => {
                    n.start >= end
                        || n.is(b';')
                        || (n.is(b',') && depth == 0)
                        || (n.kind == Kind::Word && ITEM_END.iter().any(|k| lower_eq(sql, &n, k)))
                }
            };
            out.edits.push(Edit {
                start: t.start,
                end: e,
                kind: EditKind::LastId {
                    alias: select && depth == 0 && before_ok && after_ok,
                },
            });
            i = last + 1;
            continue;
        }
        i += 1;
    }
    out
}
