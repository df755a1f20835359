//! The head of a statement: its first keyword (after white space and
//! comments) and the cheap scans idgate makes of every statement's text.
//! Every classifier of [`super`] starts here; nothing else in idgate reads
//! keywords on its own.

use crate::sql::lexer;
use std::borrow::Cow;

/// Case-insensitive substring search (`needle` in lower case), SIMD-scanning
/// for its first byte. (Scanning for a rarer byte of the needle was tried:
/// `cargo bench --bench sql -- scans` had it 2x faster on sysbench's INSERT,
/// which has no `_`, and 7-15% slower on an ORM's, which has many.)
pub fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    let Some(&first) = needle.first() else {
        return true;
    };
    memchr::memchr2_iter(first, first.to_ascii_uppercase(), hay).any(|i| {
        hay.get(i..i + needle.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(needle))
    })
}

/// The statement as MariaDB runs it, for the classifiers of what a
/// statement does to its session (multiplexing's pins, the `SET`s kept
/// for replay): executable comments' markers blanked, so mysqldump's
/// `/*!40101 SET NAMES utf8mb4 */` is the `SET` it is
/// ([`crate::sql::lexer::executed_text`]). Borrowed, after one scan for
/// `/*`, when there is no executable comment. Strings are read in the
/// default `sql_mode` (under `NO_BACKSLASH_ESCAPES`, a `\` ending a string
/// can make it read further); text that is not UTF-8 is read lossily (only
/// its words matter here).
pub fn executed(sql: &[u8]) -> Cow<'_, [u8]> {
    if !lexer::has_exec_comment(sql) {
        return Cow::Borrowed(sql);
    }
    let text = String::from_utf8_lossy(sql);
    match lexer::executed_text(&text, lexer::Modes::default()) {
        Some(v) => Cow::Owned(v),
        None => Cow::Borrowed(sql),
    }
}

/// Where the first word of a statement starts, after whitespace and comments.
pub fn keyword_start(sql: &[u8]) -> usize {
    let mut i = 0;
    loop {
        while i < sql.len() && sql[i].is_ascii_whitespace() {
            i += 1;
        }
        // An executable comment (`/*!`, `/*M!`) is code: the statement
        // starts there.
        if sql[i..].starts_with(b"/*") && !is_exec_opener(&sql[i..]) {
            match sql[i + 2..].windows(2).position(|w| w == b"*/") {
                Some(p) => i += p + 4,
                None => return sql.len(),
            }
        } else if sql[i..].starts_with(b"#") || sql[i..].starts_with(b"-- ") {
            match sql[i..].iter().position(|&b| b == b'\n') {
                Some(p) => i += p + 1,
                None => return sql.len(),
            }
        } else {
            return i;
        }
    }
}

/// Whether `s` starts with an executable comment's opener (`/*!`, `/*M!`).
pub fn is_exec_opener(s: &[u8]) -> bool {
    s.starts_with(b"/*!") || s.starts_with(b"/*M!")
}

/// The first keyword of a statement, upper-cased, skipping whitespace and comments.
pub fn first_keyword(sql: &[u8]) -> [u8; 8] {
    // Most statements start with their keyword: no comment to skip.
    let i = match sql.first() {
        Some(b) if b.is_ascii_alphabetic() => 0,
        _ => keyword_start(sql),
    };
    let word = sql.get(i..).unwrap_or_default();
    let mut out = [0u8; 8];
    for (o, &b) in out.iter_mut().zip(word) {
        if !b.is_ascii_alphabetic() {
            break;
        }
        *o = b.to_ascii_uppercase();
    }
    out
}

/// The parts of a query between its semicolons, empty ones included (a
/// `;` in a string or comment cuts too: callers read each part for its
/// first word, and more parts only means more to look at). Found with
/// memchr: a byte-by-byte `split` took 250 ns on sysbench's 238-byte
/// INSERT and 5.3 us on a 4.4 KB one (20 and 68 ns this way; measured
/// side by side, 2026-11-28).
pub fn semicolon_parts(sql: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut from = 0;
    memchr::memchr_iter(b';', sql)
        .chain(std::iter::once(sql.len()))
        .map(move |end| {
            let part = sql.get(from..end).unwrap_or_default();
            from = end + 1;
            part
        })
}

/// Whether a query may start with dynamic SQL (`PREPARE`, `EXECUTE`,
/// also in an executable comment or under `SET STATEMENT ... FOR`): the
/// front end then reads its source (`sql::statement::dynamic`). A few
/// bytes of the first word for any other statement.
pub fn may_be_dynamic(sql: &[u8]) -> bool {
    match &first_keyword(sql) {
        b"PREPARE\0" | b"EXECUTE\0" => true,
        b"SET\0\0\0\0\0" => second_word(sql).eq_ignore_ascii_case("statement"),
        [0, ..] => sql.get(keyword_start(sql)..).is_some_and(is_exec_opener),
        _ => false,
    }
}

/// Whether a multi-statement query may contain a `USE` (then the session
/// reads its schema back from the shard afterwards). Conservative: the word
/// `use` anywhere, in a query with a `;`.
pub fn may_change_schema(sql: &[u8]) -> bool {
    memchr::memchr(b';', sql).is_some()
        && sql.windows(4).enumerate().any(|(i, w)| {
            w[..3].eq_ignore_ascii_case(b"use")
                && (w[3].is_ascii_whitespace() || w[3] == b'`')
                && (i == 0 || !(sql[i - 1].is_ascii_alphanumeric() || sql[i - 1] == b'_'))
        })
}

/// Whether `sql` mentions `sql_mode` (then the session's modes are read again).
pub fn mentions_sql_mode(sql: &[u8]) -> bool {
    // Scanned for its `q`, rare in SQL text (`s` is everywhere).
    memchr::memchr2_iter(b'q', b'Q', sql).any(|i| {
        i >= 1
            && sql
                .get(i - 1..i + 7)
                .is_some_and(|w| w.eq_ignore_ascii_case(b"sql_mode"))
    })
}

/// Whether `sql` may change the session's `character_set_client` (`SET
/// NAMES`, `SET CHARACTER SET`, `SET character_set_client`, `SET CHARSET`).
pub fn mentions_charset(sql: &[u8]) -> bool {
    contains_ignore_case(sql, b"names")
        || contains_ignore_case(sql, b"charset")
        || contains_ignore_case(sql, b"character")
}

/// The word after the first one (letters only), or "".
pub fn second_word(sql: &[u8]) -> String {
    let text = String::from_utf8_lossy(&sql[keyword_start(sql)..]);
    let mut words = text
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty());
    words.next();
    words.next().unwrap_or("").to_string()
}

/// The statement's code: comments blanked, executable comments' markers
/// too ([`crate::sql::lexer::code_text`]), for the readers that take a
/// statement word by word (`BEGIN /* app */` is `BEGIN`, `SAVEPOINT s
/// -- x` sets `s`). Borrowed when there is no comment; text that is not
/// UTF-8 is read lossily.
pub fn code(sql: &[u8]) -> Cow<'_, [u8]> {
    let text = String::from_utf8_lossy(sql);
    match lexer::code_text(&text, lexer::Modes::default()) {
        Some(v) => Cow::Owned(v),
        None => match text {
            Cow::Borrowed(_) => Cow::Borrowed(sql),
            Cow::Owned(t) => Cow::Owned(t.into_bytes()),
        },
    }
}

/// A `SET` that changes the session for the statements after it, also
/// one in an executable comment (`/*!40101 SET NAMES utf8 */`); not
/// MariaDB's `SET STATEMENT ... FOR stmt`, which is for `stmt` only.
pub fn session_set(sql: &[u8]) -> bool {
    let set = |s: &[u8]| {
        &first_keyword(s)[..4] == b"SET\0" && !second_word(s).eq_ignore_ascii_case("statement")
    };
    if sql
        .get(keyword_start(sql)..)
        .is_some_and(|s| s.starts_with(b"/*"))
    {
        set(&executed(sql))
    } else {
        set(sql)
    }
}

/// The statement a MariaDB `SET STATEMENT var = value [, ...] FOR stmt`
/// runs (`stmt`); `None` for any other statement. Text that is not UTF-8
/// is read lossily (only its words matter to the callers).
pub fn set_statement_body(sql: &[u8]) -> Option<Cow<'_, [u8]>> {
    if &first_keyword(sql)[..4] != b"SET\0" || !second_word(sql).eq_ignore_ascii_case("statement") {
        return None;
    }
    let text = String::from_utf8_lossy(sql);
    let at = set_statement_for(&text, keyword_start(sql), lexer::Modes::default())?;
    Some(match text {
        Cow::Borrowed(_) => Cow::Borrowed(&sql[at..]),
        Cow::Owned(t) => Cow::Owned(t.as_bytes()[at..].to_vec()),
    })
}

/// Where the statement of a `SET STATEMENT ... FOR stmt` starts: just
/// past the first `FOR` outside parentheses at or after byte `from`.
pub fn set_statement_for(sql: &str, from: usize, modes: lexer::Modes) -> Option<usize> {
    let mut lx = lexer::Lexer::new(sql, from, modes);
    let mut depth = 0usize;
    loop {
        let t = lx.next_token()?;
        match t.kind {
            lexer::Kind::Punct(b'(') => depth += 1,
            lexer::Kind::Punct(b')') => depth = depth.saturating_sub(1),
            lexer::Kind::Word if depth == 0 && t.is_word(sql, "FOR") => return Some(t.end),
            _ => {}
        }
    }
}

/// Whether a statement starting with this keyword may write rows.
pub fn may_write(first: &[u8; 8]) -> bool {
    matches!(
        first,
        b"INSERT\0\0"
            | b"REPLACE\0"
            | b"UPDATE\0\0"
            | b"DELETE\0\0"
            | b"LOAD\0\0\0\0"
            | b"CALL\0\0\0\0"
    )
}

/// The schema a `USE db` statement switches to (comments around it and an
/// executable comment holding it allowed, as MariaDB reads them); `None`
/// for anything else.
pub fn use_statement(sql: &[u8]) -> Option<String> {
    // The first word is looked at before the whole text is checked for
    // UTF-8 (this runs for every statement).
    let start = sql
        .iter()
        .position(|&b| !(b.is_ascii_whitespace() || b == 0x0b))?;
    let head = &sql[start..];
    if !(head.get(..3)?.eq_ignore_ascii_case(b"use") || head.starts_with(b"/*")) {
        return None;
    }
    std::str::from_utf8(sql).ok()?;
    // Blanking replaces ASCII bytes with spaces: still UTF-8.
    let text = executed(sql);
    let text = std::str::from_utf8(&text).ok()?;
    let mut lx = lexer::Lexer::new(text, 0, lexer::Modes::default());
    if !lx.next_token()?.is_word(text, "USE") {
        return None;
    }
    let db = lx.next_token()?;
    let name = text.get(db.start..db.end)?;
    let name = match db.kind {
        lexer::Kind::Word => name.to_string(),
        lexer::Kind::QuotedIdent if name.starts_with('`') => name
            .get(1..name.len().saturating_sub(1))?
            .replace("``", "`"),
        _ => return None,
    };
    match lx.next_token() {
        None => Some(name),
        Some(t) if t.is(b';') && lx.next_token().is_none() => Some(name),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The readers of what a statement runs never panic, on SQL-ish
        /// text and on any bytes, and blanking keeps a UTF-8 text's length.
        #[test]
        fn readers_take_anything(
            sql in "(/\\*!|/\\*M!|/\\*|\\*/|--|#|\n|'|`|\"|;|@|\\(|\\)| |SET|STATEMENT|FOR|USE|BEGIN|NOT|x|1|100100|40101|:){0,24}",
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            for t in [sql.as_bytes(), &bytes[..]] {
                let e = executed(t);
                let c = code(t);
                if std::str::from_utf8(t).is_ok() {
                    proptest::prop_assert_eq!(e.len(), t.len());
                    proptest::prop_assert_eq!(c.len(), t.len());
                }
                let _ = (session_set(t), set_statement_body(t), use_statement(t), may_be_dynamic(t));
                // The parts and their semicolons are the whole text.
                let parts: Vec<&[u8]> = semicolon_parts(t).collect();
                proptest::prop_assert_eq!(parts.iter().map(|p| p.len() + 1).sum::<usize>(), t.len() + 1);
                let _ = (first_keyword(&e), second_word(&c), keyword_start(t));
            }
        }
    }

    proptest::proptest! {
        /// The scan anchored on `q` finds `sql_mode` wherever a plain
        /// search does.
        #[test]
        fn sql_mode_scan_is_a_plain_search(t in "(sql_mode|SQL_Mode|sq|l_mode|q|Q|s| ){0,10}") {
            proptest::prop_assert_eq!(
                mentions_sql_mode(t.as_bytes()),
                contains_ignore_case(t.as_bytes(), b"sql_mode")
            );
        }
    }

    #[test]
    fn parts_between_semicolons() {
        let parts = |s: &str| -> Vec<String> {
            semicolon_parts(s.as_bytes())
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect()
        };
        assert_eq!(parts("SELECT 1"), ["SELECT 1"]);
        assert_eq!(parts(";a;; b;"), ["", "a", "", " b", ""]);
        assert_eq!(parts(""), [""]);
    }

    #[test]
    fn contains_ignore_case_at_either_end_and_inside() {
        for needle in [&b"get_lock"[..], b"@@identity", b"val(", b"warnings", b"_x"] {
            let upper = needle.to_ascii_uppercase();
            for (pre, post) in [("", ""), ("a", ""), ("", "b"), ("xy_(@ ", " _@(z")] {
                for n in [needle, &upper[..]] {
                    let hay = [pre.as_bytes(), n, post.as_bytes()].concat();
                    assert!(contains_ignore_case(&hay, needle), "{hay:?}");
                    // One byte short, at either end: not found.
                    assert!(!contains_ignore_case(
                        &hay[..pre.len() + n.len() - 1],
                        needle
                    ));
                    assert!(!contains_ignore_case(&hay[pre.len() + 1..], needle));
                }
            }
        }
        assert!(!contains_ignore_case(b"_lock", b"get_lock"));
        assert!(contains_ignore_case(b"x", b""));
    }

    #[test]
    fn first_keywords() {
        assert_eq!(&first_keyword(b"  /* x */ alter table t")[..5], b"ALTER");
        assert_eq!(&first_keyword(b"-- c\nDROP TABLE t")[..4], b"DROP");
        assert_eq!(first_keyword(b"/* unterminated"), [0; 8]);
        assert_eq!(&first_keyword(b"/*!40101 SET x */")[..1], b"\0");
        assert!(mentions_sql_mode(b"/*!40101 SET SQL_MODE='' */"));
        assert!(may_change_schema(
            b"SELECT 1; use `db`; INSERT INTO t VALUES (1)"
        ));
        assert!(!may_change_schema(b"USE db"));
        assert!(!may_change_schema(b"SELECT user FROM users; SELECT 1"));
    }

    #[test]
    fn use_statements() {
        assert_eq!(use_statement(b"USE shop").as_deref(), Some("shop"));
        assert_eq!(use_statement(b"  use `my db`;").as_deref(), Some("my db"));
        assert_eq!(use_statement(b"user_table"), None);
        assert_eq!(use_statement(b"SELECT 1"), None);
        assert_eq!(use_statement(b"\x0b\tUSE s").as_deref(), Some("s"));
        assert_eq!(use_statement(b"us"), None);
        // Comments around it, an executable one holding it.
        assert_eq!(
            use_statement(b"USE shop /* app=x */").as_deref(),
            Some("shop")
        );
        assert_eq!(
            use_statement(b"/* c */ USE `a``b` -- x").as_deref(),
            Some("a`b")
        );
        assert_eq!(
            use_statement(b"/*!40101 USE shop */").as_deref(),
            Some("shop")
        );
        assert_eq!(use_statement(b"/* USE shop */ SELECT 1"), None);
        assert_eq!(use_statement(b"USE shop; SELECT 1"), None);
        assert_eq!(use_statement(b"USE"), None);
    }
}
