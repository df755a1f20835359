//! Cheap checks on a whole query, without a parse: does it name a table of
//! a set, and how many statements does it hold.

use super::fast;
use super::lexer::{skim, Kind, Lexer, Modes};

/// Whether any identifier token of `sql` is a table name `pred` accepts
/// (bare names, the last part of `schema.table`). Conservative: a column
/// with a table's name also counts.
pub fn mentions_table(sql: &str, modes: Modes, pred: &dyn Fn(&str) -> bool) -> bool {
    let mut lx = Lexer::new(sql, 0, modes);
    while let Some(t) = lx.next_token() {
        match t.kind {
            Kind::Word | Kind::QuotedIdent
                if fast::ident(sql, &t).is_some_and(|name| pred(&name)) =>
            {
                return true;
            }
            Kind::Unterminated => return false,
            _ => {}
        }
    }
    false
}

/// Every name `sql` may use as a table: each identifier token, with the
/// schema when it is written `schema.table` (unquoted; a column or alias
/// counts too, conservatively).
pub fn named_tables(sql: &str, modes: Modes) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let mut lx = Lexer::new(sql, 0, modes);
    let mut prev: Option<String> = None;
    let mut dot = false;
    while let Some(t) = lx.next_token() {
        match t.kind {
            Kind::Word | Kind::QuotedIdent => {
                let Some(name) = fast::ident(sql, &t) else {
                    prev = None;
                    continue;
                };
                let schema = if dot { prev.take() } else { None };
                out.push((schema, name.to_string()));
                prev = Some(name.to_string());
                dot = false;
            }
            Kind::Punct(b'.') => dot = prev.is_some(),
            Kind::Unterminated => break,
            _ => {
                prev = None;
                dot = false;
            }
        }
    }
    out
}

/// How many statements `sql` holds (a trailing `;` starts none).
pub fn statement_count(sql: &str, modes: Modes) -> usize {
    let mut count = 0;
    let mut pos = 0;
    while pos < sql.len() {
        if sql[pos..].trim_start().is_empty() {
            break;
        }
        let s = skim(sql, pos, modes, false);
        count += 1;
        if !s.semicolon || s.end <= pos {
            break;
        }
        pos = s.end + 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_mentions() {
        let m = Modes::default();
        assert_eq!(statement_count("SELECT 1", m), 1);
        assert_eq!(statement_count("SELECT 1;", m), 1);
        assert_eq!(statement_count("SELECT ';'; SELECT 2", m), 2);
        assert_eq!(statement_count("  ", m), 0);
        let named = named_tables("RENAME TABLE `old db`.x TO shop.orders, y TO `z`", m);
        assert!(named.contains(&(Some("old db".into()), "x".into())));
        assert!(named.contains(&(Some("shop".into()), "orders".into())));
        assert!(named.contains(&(None, "z".into())));
        let p = |n: &str| n == "orders";
        assert!(mentions_table("SELECT * FROM shop.`orders` o", m, &p));
        assert!(!mentions_table("SELECT 'orders' FROM t", m, &p));
    }
}
