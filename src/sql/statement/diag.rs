//! Diagnostics statements (`SHOW WARNINGS`, `SHOW COUNT(*) ERRORS`,
//! `SELECT @@warning_count`, `GET DIAGNOSTICS`), recognised;
//! `frontend::diag` sends them to the shards that ran the last statement.

use super::keyword::{first_keyword, keyword_start};

/// A diagnostics statement, as idgate routes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Diag {
    /// `SHOW WARNINGS|ERRORS [LIMIT [offset,] n]`: rows, concatenated.
    List {
        /// `WARNINGS` or `ERRORS`.
        what: &'static str,
        limit: Option<(u64, u64)>,
    },
    /// A count: summed over the shards.
    Count,
    /// Anything else about diagnostics: the first shard.
    Other,
}

/// Whether `sql` is a diagnostics statement.
pub fn classify(sql: &[u8]) -> Option<Diag> {
    // Cheap first: this runs before every routed statement.
    match &first_keyword(sql) {
        b"SHOW\0\0\0\0" | b"GET\0\0\0\0\0" => {}
        // Only `SELECT @@[session.]warning_count` / `error_count`.
        b"SELECT\0\0" if sql.len() < 64 && memchr::memchr(b'@', sql).is_some() => {}
        _ => return None,
    }
    let sql = &*super::keyword::code(sql);
    let text = std::str::from_utf8(&sql[keyword_start(sql)..]).ok()?;
    let text = text.trim().trim_end_matches(';').trim_end();
    let words: Vec<String> = text
        .split(|c: char| c.is_ascii_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_uppercase())
        .collect();
    let w: Vec<&str> = words.iter().map(|s| s.as_str()).collect();
    match w.as_slice() {
        ["SHOW", what @ ("WARNINGS" | "ERRORS"), rest @ ..] => {
            let what = if *what == "WARNINGS" {
                "WARNINGS"
            } else {
                "ERRORS"
            };
            let limit = match rest {
                [] => None,
                ["LIMIT", n] => Some((0, n.parse().ok()?)),
                ["LIMIT", o, n] => Some((o.parse().ok()?, n.parse().ok()?)),
                _ => return Some(Diag::Other),
            };
            Some(Diag::List { what, limit })
        }
        ["SHOW", "COUNT(*)", "WARNINGS" | "ERRORS"] => Some(Diag::Count),
        ["SELECT", var] if is_count_var(var) => Some(Diag::Count),
        ["GET", "DIAGNOSTICS" | "CURRENT" | "STACKED", ..] => Some(Diag::Other),
        _ => None,
    }
}

fn is_count_var(v: &str) -> bool {
    let v = v.strip_prefix("@@").unwrap_or("");
    let v = v.strip_prefix("SESSION.").unwrap_or(v);
    v == "WARNING_COUNT" || v == "ERROR_COUNT"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnostics_statements() {
        let list = |limit| Diag::List {
            what: "WARNINGS",
            limit,
        };
        assert_eq!(classify(b"SHOW WARNINGS"), Some(list(None)));
        assert_eq!(classify(b"show warnings;"), Some(list(None)));
        assert_eq!(classify(b"SHOW WARNINGS /* app */"), Some(list(None)));
        assert_eq!(classify(b"SHOW WARNINGS LIMIT 5"), Some(list(Some((0, 5)))));
        assert_eq!(
            classify(b"SHOW WARNINGS LIMIT 2, 5"),
            Some(list(Some((2, 5))))
        );
        assert_eq!(
            classify(b"SHOW ERRORS"),
            Some(Diag::List {
                what: "ERRORS",
                limit: None
            })
        );
        assert_eq!(classify(b"SHOW COUNT(*) WARNINGS"), Some(Diag::Count));
        assert_eq!(classify(b"SELECT @@warning_count"), Some(Diag::Count));
        assert_eq!(classify(b"select @@session.error_count"), Some(Diag::Count));
        assert_eq!(classify(b"GET DIAGNOSTICS @n = NUMBER"), Some(Diag::Other));
        assert_eq!(classify(b"SHOW WARNINGS LIMIT x"), None);
        assert_eq!(classify(b"SELECT @@warning_count, 1"), None);
        assert_eq!(classify(b"SHOW TABLES"), None);
        assert_eq!(classify(b"SELECT 1"), None);
    }
}
