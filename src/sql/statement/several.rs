//! A COM_QUERY of several statements (`CLIENT_MULTI_STATEMENTS`), cut
//! into its statements.

use crate::sql::lexer::{skim, Lexer, Modes};
use std::ops::Range;

/// The statements of `sql` (byte ranges, without their `;`), when there
/// are several; `None` for one statement (the common case costs one
/// `memchr`), when a `;` sits inside an executable comment, or for a
/// compound statement (`CREATE PROCEDURE ... BEGIN ...; ...; END`, `BEGIN
/// NOT ATOMIC`), whose `;`s do not end it.
pub fn split_statements(sql: &str, modes: Modes) -> Option<Vec<Range<usize>>> {
    memchr::memchr(b';', sql.as_bytes())?;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < sql.len() {
        let s = skim(sql, pos, modes, false);
        if s.in_exec {
            return None;
        }
        let mut lx = Lexer::new(sql, pos, modes);
        // A part with no token (blanks, comments) is no statement.
        if let Some(head) = lx.next_token().filter(|t| t.start < s.end) {
            // BEGIN after the first word (a compound statement's body), or
            // BEGIN NOT ATOMIC.
            let begin = head.is_word(sql, "BEGIN");
            let mut second = true;
            while let Some(t) = lx.next_token().filter(|t| t.start < s.end) {
                if t.is_word(sql, "BEGIN") || (begin && second && t.is_word(sql, "NOT")) {
                    return None;
                }
                second = false;
            }
            out.push(pos..s.end);
        }
        if !s.semicolon || s.end < pos {
            break;
        }
        pos = s.end + 1;
    }
    (out.len() > 1).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(sql: &str) -> Option<Vec<&str>> {
        split_statements(sql, Modes::default()).map(|v| v.into_iter().map(|r| &sql[r]).collect())
    }

    #[test]
    fn splits_at_semicolons_outside_quotes_and_comments() {
        assert_eq!(parts("SELECT 1"), None);
        assert_eq!(parts("SELECT 1;"), None);
        assert_eq!(parts("SELECT ';'; -- x;\n"), None);
        assert_eq!(
            parts("SELECT ';' ; /* ; */ SELECT `a;b` FROM t;  "),
            Some(vec!["SELECT ';' ", " /* ; */ SELECT `a;b` FROM t"])
        );
        assert_eq!(
            parts("INSERT INTO t VALUES (1);INSERT INTO t VALUES ('\\';')"),
            Some(vec![
                "INSERT INTO t VALUES (1)",
                "INSERT INTO t VALUES ('\\';')"
            ])
        );
        assert_eq!(
            parts("SELECT 1;;SELECT 2"),
            Some(vec!["SELECT 1", "SELECT 2"])
        );
        assert_eq!(parts("/*! SELECT 1; */ SELECT 2; SELECT 3"), None);
        assert_eq!(
            parts("BEGIN; SELECT 1; COMMIT"),
            Some(vec!["BEGIN", " SELECT 1", " COMMIT"])
        );
        // Compound statements are not split (and so refused).
        assert_eq!(
            parts("CREATE PROCEDURE p() BEGIN SELECT 1; SELECT 2; END; CALL p()"),
            None
        );
        assert_eq!(parts("BEGIN NOT ATOMIC SELECT 1; SELECT 2; END"), None);
        assert_eq!(
            parts("SELECT NOT 1; SELECT 2"),
            Some(vec!["SELECT NOT 1", " SELECT 2"])
        );
    }
}
