//! Shard key literals: the tokens of one value to a [`KeyArg`], with string
//! escapes resolved exactly as MariaDB does. Both paths read values through
//! here, from the original text, so they cannot disagree on a value.

use super::super::lexer::{unescape, Kind, Lexer, Modes, Token};
use super::{KeyArg, KeyValue};

/// A sign written before a number (sqlparser keeps it outside the value's
/// span).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sign {
    None,
    Minus,
    Plus,
}

fn word_is(sql: &str, t: &Token, kw: &str) -> bool {
    t.is_word(sql, kw)
}

/// The key value written by exactly the tokens `toks`, or `None` if they are
/// not one literal the analysis reads (the bound is then `Unbound`):
/// an integer (`42`, `-5`, `+7`), a string (`'a'`, `"a"` without
/// ANSI_QUOTES, `_utf8mb4'a'`, `N'a'`), `NULL`, or `?` (whose index
/// `param(token)` gives).
pub(super) fn literal(
    sql: &str,
    toks: &[Token],
    sign: Sign,
    modes: Modes,
    param: &dyn Fn(&Token) -> Option<usize>,
) -> Option<KeyArg> {
    let (sign, toks) = match toks {
        [s, rest @ ..] if sign == Sign::None && (s.is(b'-') || s.is(b'+')) => {
            (if s.is(b'-') { Sign::Minus } else { Sign::Plus }, rest)
        }
        _ => (sign, toks),
    };
    match (sign, toks) {
        (_, [n]) if n.kind == Kind::Number => {
            let digits = sql.get(n.start..n.end)?;
            if !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let v: i128 = digits.parse().ok()?;
            let v = if sign == Sign::Minus {
                v.checked_neg()?
            } else {
                v
            };
            Some(KeyArg::Value(KeyValue::Int(v)))
        }
        (Sign::None, [s]) if s.kind == Kind::Str => Some(KeyArg::Value(KeyValue::Str(unescape(
            sql.as_bytes().get(s.start..s.end)?,
            modes.no_backslash_escapes,
        )))),
        (Sign::None, [w, s]) if w.kind == Kind::Word && s.kind == Kind::Str => {
            let word = sql.get(w.start..w.end)?;
            let bytes = unescape(
                sql.as_bytes().get(s.start..s.end)?,
                modes.no_backslash_escapes,
            );
            let national = word.eq_ignore_ascii_case("N")
                && w.end == s.start
                && sql.as_bytes().get(s.start) == Some(&b'\'');
            let ok = national
                || match word.strip_prefix('_').map(|c| c.to_ascii_lowercase()) {
                    Some(cs) => match cs.as_str() {
                        "binary" | "utf8" | "utf8mb3" | "utf8mb4" => true,
                        // ASCII-compatible: the same bytes for ASCII text only.
                        "latin1" | "ascii" => bytes.is_ascii(),
                        _ => false,
                    },
                    None => false,
                };
            ok.then_some(KeyArg::Value(KeyValue::Str(bytes)))
        }
        (Sign::None, [w]) if word_is(sql, w, "NULL") => Some(KeyArg::Value(KeyValue::Null)),
        (Sign::None, [p]) if p.kind == Kind::Param => param(p).map(KeyArg::Param),
        _ => None,
    }
}

/// All tokens of `sql[start..end]` (none if a quote or comment is unclosed
/// or a token runs past `end`).
pub(super) fn tokens_in(sql: &str, start: usize, end: usize, modes: Modes) -> Vec<Token> {
    let mut lx = Lexer::new(sql, start, modes);
    let mut out = Vec::new();
    while let Some(t) = lx.next_token() {
        if t.start >= end {
            break;
        }
        if t.end > end || t.kind == Kind::Unterminated {
            return Vec::new();
        }
        out.push(t);
    }
    out
}

/// The first token at or after `pos`.
pub(super) fn token_at(sql: &str, pos: usize, modes: Modes) -> Option<Token> {
    Lexer::new(sql, pos, modes).next_token()
}
