//! Transaction statements: `BEGIN` / `START TRANSACTION`, `COMMIT` /
//! `ROLLBACK`, and savepoints. Pure: the session runs them across shards
//! (`frontend::txn`).

use super::keyword::{code, first_keyword, keyword_start, second_word};

/// A statement's role in transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnStmt {
    /// `BEGIN [WORK]`, `START TRANSACTION ...`.
    Begin,
    /// `COMMIT ...`, `ROLLBACK [WORK]` (not `ROLLBACK TO SAVEPOINT`).
    End,
    /// Anything else.
    Other,
}

/// What a savepoint statement does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavepointOp {
    /// `SAVEPOINT name`.
    Set,
    /// `ROLLBACK [WORK] TO [SAVEPOINT] name`.
    RollbackTo,
    /// `RELEASE SAVEPOINT name`.
    Release,
}

/// A savepoint statement and its savepoint's name (unquoted; names compare
/// case-insensitively, as MariaDB compares them).
pub fn savepoint_stmt(sql: &[u8]) -> Option<(SavepointOp, String)> {
    let first = first_keyword(sql);
    if !matches!(&first, b"SAVEPOIN" | b"ROLLBACK" | b"RELEASE\0") {
        return None;
    }
    let sql = &*code(sql);
    let text = std::str::from_utf8(sql.get(keyword_start(sql)..)?).ok()?;
    let text = text.trim_end().trim_end_matches(';').trim_end();
    let words: Vec<&str> = text.split_ascii_whitespace().collect();
    let up = |i: usize| words.get(i).map(|w| w.to_ascii_uppercase());
    let (op, name) = match up(0)?.as_str() {
        "SAVEPOINT" if words.len() == 2 => (SavepointOp::Set, words[1]),
        "RELEASE" if words.len() == 3 && up(1)? == "SAVEPOINT" => (SavepointOp::Release, words[2]),
        "ROLLBACK" => {
            let mut i = 1;
            if up(i).as_deref() == Some("WORK") {
                i += 1;
            }
            if up(i).as_deref() != Some("TO") {
                return None;
            }
            i += 1;
            if up(i).as_deref() == Some("SAVEPOINT") {
                i += 1;
            }
            if words.len() != i + 1 {
                return None;
            }
            (SavepointOp::RollbackTo, words[i])
        }
        _ => return None,
    };
    let name = match name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) {
        Some(quoted) => quoted.replace("``", "`"),
        None if name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$') =>
        {
            name.to_string()
        }
        None => return None,
    };
    (!name.is_empty()).then_some((op, name))
}

/// Classifies a COM_QUERY text.
pub fn classify(sql: &[u8]) -> TxnStmt {
    let first = first_keyword(sql);
    if !matches!(
        &first,
        b"BEGIN\0\0\0" | b"START\0\0\0" | b"COMMIT\0\0" | b"ROLLBACK"
    ) {
        return TxnStmt::Other;
    }
    let sql = &*code(sql);
    let second = || second_word(sql).to_ascii_uppercase();
    match &first {
        b"BEGIN\0\0\0" => match second().as_str() {
            "" | "WORK" => TxnStmt::Begin,
            _ => TxnStmt::Other, // BEGIN NOT ATOMIC: a compound statement
        },
        b"START\0\0\0" if second() == "TRANSACTION" => TxnStmt::Begin,
        b"COMMIT\0\0" => TxnStmt::End,
        b"ROLLBACK" => match second().as_str() {
            "TO" => TxnStmt::Other,
            "WORK" => {
                let rest = String::from_utf8_lossy(&sql[keyword_start(sql)..]).to_ascii_uppercase();
                if rest.split_ascii_whitespace().nth(2) == Some("TO") {
                    TxnStmt::Other
                } else {
                    TxnStmt::End
                }
            }
            _ => TxnStmt::End,
        },
        _ => TxnStmt::Other,
    }
}

/// `BEGIN [WORK]` or `START TRANSACTION` without options: the transaction
/// can run as XA (which takes no options).
pub fn plain_begin(sql: &[u8]) -> bool {
    let sql = &*code(sql);
    let text = String::from_utf8_lossy(&sql[keyword_start(sql)..]).to_ascii_uppercase();
    let words: Vec<&str> = text
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .collect();
    matches!(
        words.as_slice(),
        ["BEGIN"] | ["BEGIN", "WORK"] | ["START", "TRANSACTION"]
    )
}

#[cfg(test)]
mod tests {
    use super::{classify, savepoint_stmt, SavepointOp, TxnStmt};

    #[test]
    fn reads_savepoint_statements() {
        let sp = |s: &str| savepoint_stmt(s.as_bytes());
        assert_eq!(sp("SAVEPOINT a"), Some((SavepointOp::Set, "a".into())));
        assert_eq!(
            sp("  savepoint `x``y`;"),
            Some((SavepointOp::Set, "x`y".into()))
        );
        assert_eq!(
            sp("/* c */ ROLLBACK TO SAVEPOINT s1"),
            Some((SavepointOp::RollbackTo, "s1".into()))
        );
        assert_eq!(
            sp("rollback work to b"),
            Some((SavepointOp::RollbackTo, "b".into()))
        );
        assert_eq!(
            sp("RELEASE SAVEPOINT c"),
            Some((SavepointOp::Release, "c".into()))
        );
        for other in [
            "ROLLBACK",
            "ROLLBACK WORK",
            "RELEASE",
            "SAVEPOINT",
            "SAVEPOINT a b",
            "SAVEPOINTS a",
            "SAVEPOINT 'a'",
        ] {
            assert_eq!(sp(other), None, "{other}");
        }
    }

    #[test]
    fn comments_are_not_words() {
        // As SQL commenters tag every statement.
        assert_eq!(classify(b"BEGIN /* app='x' */"), TxnStmt::Begin);
        assert_eq!(classify(b"/* a */ START TRANSACTION -- b"), TxnStmt::Begin);
        assert_eq!(classify(b"ROLLBACK /* TO x */"), TxnStmt::End);
        assert!(super::plain_begin(b"BEGIN # tagged"));
        assert_eq!(
            savepoint_stmt(b"SAVEPOINT `s1` /* app='x' */"),
            Some((SavepointOp::Set, "s1".into()))
        );
        assert_eq!(
            savepoint_stmt(b"ROLLBACK TO SAVEPOINT s1 -- x"),
            Some((SavepointOp::RollbackTo, "s1".into()))
        );
        assert_eq!(savepoint_stmt(b"SAVEPOINT s1 /* c */ s2"), None);
    }

    #[test]
    fn classifies_transaction_statements() {
        for (sql, want) in [
            ("BEGIN", TxnStmt::Begin),
            ("begin work", TxnStmt::Begin),
            ("START TRANSACTION READ ONLY", TxnStmt::Begin),
            ("BEGIN NOT ATOMIC SELECT 1; END", TxnStmt::Other),
            ("COMMIT", TxnStmt::End),
            ("commit work and no chain", TxnStmt::End),
            ("ROLLBACK", TxnStmt::End),
            ("ROLLBACK TO SAVEPOINT a", TxnStmt::Other),
            ("ROLLBACK WORK TO a", TxnStmt::Other),
            ("/* x */ rollback work", TxnStmt::End),
            ("SELECT 1", TxnStmt::Other),
        ] {
            assert_eq!(classify(sql.as_bytes()), want, "{sql}");
        }
    }
}
