//! The words a statement's text mentions anywhere (as substrings, ASCII
//! case ignored: in strings and comments too), found together.
//!
//! The multiplexer asks a dozen such questions of every statement (does
//! it name `GET_LOCK`, `LAST_INSERT_ID`, `@@warning_count`, ...). Asked one
//! by one, each was a SIMD scan of the text restarted at every byte that
//! could begin its word: about 4,000 instructions per sysbench INSERT
//! (callgrind, 2026-11-28), a fifth of all idgate ran per statement. (An
//! Aho-Corasick DFA over all the words took as many: 16 instructions a
//! byte.) Here the words share their scans: one for `_`, `@` and `;`
//! (the words with `_` are checked around each `_`), one for `!`, and one
//! for each of three letters rare in SQL (`v`, `g`, `p`). A bit
//! set is exactly "the substring occurs", so a caller may use it as the answer or
//! as a filter before a finer reading of the text.

/// A word [`Mentions`] looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Word {
    /// `get_lock` (a named lock held by the connection).
    GetLock,
    /// `sql_calc_found_rows` (`FOUND_ROWS()` reads it later).
    SqlCalcFoundRows,
    /// `value for` (`NEXT VALUE FOR s`, `PREVIOUS VALUE FOR s`).
    ValueFor,
    /// `val(` (`NEXTVAL(`, `LASTVAL(`, `SETVAL(`).
    ValParen,
    /// `warning_count`.
    WarningCount,
    /// `error_count`.
    ErrorCount,
    /// `last_insert_id`.
    LastInsertId,
    /// `@@identity`.
    Identity,
    /// `ignore`.
    Ignore,
    /// `duplicate`.
    Duplicate,
    /// `@` (a user or system variable).
    At,
    /// `;` (maybe several statements).
    Semicolon,
    /// `!` (an executable comment, `/*!` or `/*M!`, has one: a text
    /// without it is run as it is written).
    Bang,
    /// `sql_mode` (a statement that may change the session's modes).
    SqlMode,
    /// `idgate` (a call on an idgate generator names it: `idgate.g`).
    Idgate,
}

impl Word {
    #[cfg(test)]
    const ALL: [Word; 15] = [
        Word::GetLock,
        Word::SqlCalcFoundRows,
        Word::ValueFor,
        Word::ValParen,
        Word::WarningCount,
        Word::ErrorCount,
        Word::LastInsertId,
        Word::Identity,
        Word::Ignore,
        Word::Duplicate,
        Word::At,
        Word::Semicolon,
        Word::Bang,
        Word::SqlMode,
        Word::Idgate,
    ];

    /// The text looked for (lower case).
    pub fn text(self) -> &'static str {
        match self {
            Word::GetLock => "get_lock",
            Word::SqlCalcFoundRows => "sql_calc_found_rows",
            Word::ValueFor => "value for",
            Word::ValParen => "val(",
            Word::WarningCount => "warning_count",
            Word::ErrorCount => "error_count",
            Word::LastInsertId => "last_insert_id",
            Word::Identity => "@@identity",
            Word::Ignore => "ignore",
            Word::Duplicate => "duplicate",
            Word::At => "@",
            Word::Semicolon => ";",
            Word::Bang => "!",
            Word::SqlMode => "sql_mode",
            Word::Idgate => "idgate",
        }
    }
}

/// Which [`Word`]s a text contains.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mentions(u32);

/// The words with `_`, each with the offset of its first `_`.
const UNDERSCORED: [(Word, usize); 6] = [
    (Word::GetLock, 3),
    (Word::SqlMode, 3),
    (Word::SqlCalcFoundRows, 3),
    (Word::WarningCount, 7),
    (Word::ErrorCount, 5),
    (Word::LastInsertId, 4),
];

/// The other letter words by the byte scanned for (rare in SQL text), each
/// with that byte's offset in the word: one scan per byte.
const LETTERED: [(u8, &[(Word, usize)]); 3] = [
    // `val(` by its `v`, not its `(`: a row of VALUES has one `(` each.
    (b'v', &[(Word::ValueFor, 0), (Word::ValParen, 0)]),
    (b'g', &[(Word::Ignore, 1), (Word::Idgate, 2)]),
    (b'p', &[(Word::Duplicate, 2)]),
];

impl Mentions {
    /// The text's mentions: five SIMD scans, whatever the number of words.
    pub fn of(sql: &[u8]) -> Mentions {
        let mut m = Mentions(0);
        // `w` starts at `start` (a position that may be before the text).
        let at = |start: Option<usize>, w: Word| {
            let t = w.text().as_bytes();
            start.is_some_and(|s| {
                sql.get(s..s + t.len())
                    .is_some_and(|x| x.eq_ignore_ascii_case(t))
            })
        };
        for i in memchr::memchr3_iter(b'_', b'@', b';', sql) {
            match sql[i] {
                b'_' => {
                    for (w, k) in UNDERSCORED {
                        if !m.has(w) && at(i.checked_sub(k), w) {
                            m.set(w);
                        }
                    }
                }
                b'@' => {
                    m.set(Word::At);
                    if !m.has(Word::Identity) && at(Some(i), Word::Identity) {
                        m.set(Word::Identity);
                    }
                }
                _ => m.set(Word::Semicolon),
            }
        }
        if memchr::memchr(b'!', sql).is_some() {
            m.set(Word::Bang);
        }
        for (b, words) in LETTERED {
            for i in memchr::memchr2_iter(b, b.to_ascii_uppercase(), sql) {
                for &(w, k) in words {
                    if !m.has(w) && at(i.checked_sub(k), w) {
                        m.set(w);
                    }
                }
                if words.iter().all(|&(w, _)| m.has(w)) {
                    break;
                }
            }
        }
        m
    }

    /// Whether the text contains `w`.
    pub fn has(self, w: Word) -> bool {
        self.0 & (1 << w as u8) != 0
    }

    /// Whether a text whose mentions these are (or a part of it) may
    /// contain `w`: `false` only where it cannot, so `scan` (the caller's
    /// own reading of the part, which decides) runs only where `w` is.
    pub fn may_have(m: Option<Mentions>, w: Word, scan: impl FnOnce() -> bool) -> bool {
        m.is_none_or(|m| m.has(w)) && scan()
    }

    /// Whether `sql` has a `;` (maybe several statements), asked of its
    /// mentions (`m`, of `sql` or a text it is part of) first.
    pub fn semicolon_in(sql: &[u8], m: Option<Mentions>) -> bool {
        Mentions::may_have(m, Word::Semicolon, || memchr::memchr(b';', sql).is_some())
    }

    /// These mentions, and `w`.
    pub fn with(mut self, w: Word) -> Mentions {
        self.set(w);
        self
    }

    fn set(&mut self, w: Word) {
        self.0 |= 1 << w as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::statement::keyword::contains_ignore_case;

    #[test]
    fn words_in_any_case_and_overlapping() {
        let m = Mentions::of(b"SELECT @@IDENTITY, Get_Lock('a', 1); -- Value  For");
        assert!(m.has(Word::Identity) && m.has(Word::At) && m.has(Word::GetLock));
        assert!(m.has(Word::Semicolon));
        assert!(!m.has(Word::ValueFor) && !m.has(Word::LastInsertId));
        assert_eq!(Mentions::of(b""), Mentions::default());
    }

    proptest::proptest! {
        /// A bit is set exactly when a plain search finds the word.
        #[test]
        fn same_as_one_search_per_word(
            sql in "(get_|lock|GET_LOCK|sql_calc_found_rows|value|VALUE| |for|val\\(|NEXTVAL\\(|warning_count|error_count|last_insert_id|@|@@identity|ignore|Duplicate|;|!|/\\*!|x|_|sql_mode|SQL_|mode|idgate|IdGate|id|gate|g){0,12}",
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..48),
        ) {
            for t in [sql.as_bytes(), &bytes[..]] {
                let m = Mentions::of(t);
                for w in Word::ALL {
                    proptest::prop_assert_eq!(m.has(w), contains_ignore_case(t, w.text().as_bytes()), "{:?}", w);
                }
            }
        }
    }
}
