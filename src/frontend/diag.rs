//! Diagnostics statements on a sharded setup: `SHOW WARNINGS` and friends
//! go to the shards that ran the session's last statement.
//!
//! Each shard connection keeps the diagnostics (warnings, notes, errors) of
//! the last statement it ran. When statements are routed, the last
//! statement may have run on another shard than the default one, or on
//! several (a multi-row INSERT split per shard, a scattered SELECT, an
//! UPDATE without its shard key). So the session remembers which shards ran
//! its last statement, and:
//!
//! - `SHOW WARNINGS` / `SHOW ERRORS` `[LIMIT [offset,] n]` return the rows of
//!   those shards, concatenated in shard order, the limit applied after;
//! - `SHOW COUNT(*) WARNINGS|ERRORS` and `SELECT @@[session.]warning_count`
//!   / `@@error_count` return the sum;
//! - `GET DIAGNOSTICS` goes to the first of them.
//!
//! idgate's own statements around a client statement (`XA END/PREPARE/
//! COMMIT`, `SAVEPOINT`, `DO LAST_INSERT_ID(...)`) use no table, so MariaDB
//! keeps the statement's diagnostics through them.

use super::session::{CmdError, Session};
use crate::protocol::consts::cmd;
use crate::shard::merge::{Agg, MergeSpec, Protocol};

/// A diagnostics statement, as idgate routes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Diag {
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
pub(super) fn classify(sql: &[u8]) -> Option<Diag> {
    // Cheap first: this runs before every routed statement.
    match &super::inject::first_keyword(sql) {
        b"SHOW\0\0\0\0" | b"GET\0\0\0\0\0" => {}
        b"SELECT\0\0" if sql.len() < 64 => {}
        _ => return None,
    }
    let text = std::str::from_utf8(&sql[super::inject::keyword_start(sql)..]).ok()?;
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

impl Session {
    /// Answers a diagnostics statement from the shards that ran the last
    /// statement.
    pub(super) async fn diagnostics(&mut self, payload: &[u8], d: Diag) -> Result<(), CmdError> {
        let mut shards = self.diag_shards.clone();
        if shards.is_empty() {
            shards.push(0);
        }
        self.serving_diag = true;
        let result = match (&shards[..], d) {
            ([], _) => Ok(()),
            ([one], _) | ([one, ..], Diag::Other) => self
                .forward(*one, payload, crate::protocol::response::Expect::Results)
                .await
                .map(|_| ()),
            (_, Diag::List { what, limit }) => {
                let (text, spec) = match limit {
                    None => (payload.to_vec(), MergeSpec::default()),
                    Some((offset, n)) => (
                        format!("\x03SHOW {what} LIMIT {}", offset.saturating_add(n)).into_bytes(),
                        MergeSpec {
                            limit: Some(n),
                            offset,
                            ..MergeSpec::default()
                        },
                    ),
                };
                let parts = shards.iter().map(|&s| (s, text.clone())).collect();
                self.scatter(parts, &spec, Protocol::Text).await
            }
            (_, Diag::Count) => {
                let spec = MergeSpec {
                    aggregates: Some(vec![Agg::Count]),
                    ..MergeSpec::default()
                };
                let parts = shards.iter().map(|&s| (s, payload.to_vec())).collect();
                self.scatter(parts, &spec, Protocol::Text).await
            }
        };
        self.serving_diag = false;
        result
    }

    /// Records that the client statement being run goes to `shards` (their
    /// diagnostics are the session's now), unless it is a diagnostics
    /// statement itself.
    pub(super) fn note_diag(&mut self, shards: &[usize]) {
        if !self.serving_diag && !shards.is_empty() {
            self.diag_shards.clear();
            self.diag_shards.extend_from_slice(shards);
        }
    }
}

/// Whether a command payload is a statement (it resets diagnostics).
pub(super) fn is_statement(payload: &[u8]) -> bool {
    matches!(
        payload.first(),
        Some(&cmd::QUERY) | Some(&cmd::STMT_EXECUTE) | Some(&cmd::STMT_PREPARE)
    )
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
