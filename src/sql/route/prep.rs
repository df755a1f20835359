//! The text sqlparser is given, and what the lexer knows that sqlparser
//! does not.
//!
//! One pass of the [`Lexer`](super::super::lexer::Lexer) over the original text finds the `?` offsets
//! (parameter indexes), `||`/`&&` (whose meaning and precedence sqlparser
//! gets wrong for MariaDB), and what must change for sqlparser to read the
//! statement as MariaDB does, without moving anything it keeps:
//! - executable comments (`/*!...*/`, `/*M!...*/`): their markers become
//!   spaces, so their content is code (MariaDB runs it);
//! - `NO_BACKSLASH_ESCAPES`: `\` inside strings becomes `_` (values are read
//!   from the original text, never from sqlparser);
//! - `ANSI_QUOTES`: `"ident"` becomes `` `ident` ``;
//! - MariaDB forms sqlparser rejects: `LOCK IN SHARE MODE` and the modifiers
//!   of `UPDATE LOW_PRIORITY IGNORE` / `DELETE LOW_PRIORITY QUICK IGNORE`
//!   become spaces; the commas of `UPDATE a, b SET` become ` JOIN` (the only
//!   change of length, recorded to map offsets back).

use super::super::lexer::{blank, has_exec_comment, lex_all, Blank, Kind, Modes, Token};
use super::RouteError;

/// Most operators a statement may have for sqlparser: it builds one tree
/// level per operator of a chain (`a AND b AND ...`), and walking or dropping
/// the tree recurses, so a very long chain would overflow the stack.
pub(super) const MAX_OPERATORS: usize = 4000;

/// Words that are binary operators.
const OPERATOR_WORDS: &[&str] = &[
    "AND", "OR", "XOR", "DIV", "MOD", "IS", "LIKE", "REGEXP", "RLIKE", "BETWEEN", "IN",
];

/// What the prepass found.
#[derive(Debug)]
pub(super) struct Prep {
    /// Byte offsets of every `?` of the original text, in order.
    pub params: Vec<usize>,
    /// A `||` or `&&` operator appears.
    pub logic_ops: bool,
    /// The first token (SELECT, UPDATE, ...).
    pub first: Option<Token>,
    /// A word after the first that can start a nested query (SELECT, WITH,
    /// VALUES, TABLE): without one there is nothing to look for.
    pub nested_queries: bool,
    /// The text for sqlparser, when it differs from the original.
    text: Option<String>,
    /// `(offset in the parser text just past an insertion, bytes inserted
    /// up to there)`, ascending.
    inserts: Vec<(usize, usize)>,
}

impl Prep {
    /// The text sqlparser parses.
    pub fn text<'a>(&'a self, sql: &'a str) -> &'a str {
        self.text.as_deref().unwrap_or(sql)
    }

    /// The original offset of parser-text offset `p`.
    pub fn original(&self, p: usize) -> usize {
        let shift = self
            .inserts
            .iter()
            .take_while(|(at, _)| *at <= p)
            .last()
            .map_or(0, |(_, n)| *n);
        p.saturating_sub(shift)
    }
}

fn is_word(sql: &str, t: &Token, kw: &str) -> bool {
    t.kind == Kind::Word
        && sql
            .as_bytes()
            .get(t.start..t.end)
            .is_some_and(|w| w.eq_ignore_ascii_case(kw.as_bytes()))
}

/// Lexes `sql` once and builds the parser text.
///
/// # Errors
/// [`RouteError::Syntax`] for an unclosed quote or comment;
/// [`RouteError::Unsupported`] for a double-quoted identifier containing a
/// quote under `ANSI_QUOTES`.
pub(super) fn prepare(sql: &str, modes: Modes) -> Result<Prep, RouteError> {
    let src = sql.as_bytes();
    // Executable comments' markers blanked as the text is lexed.
    let mut out: Option<Vec<u8>> = has_exec_comment(src).then(|| src.to_vec());
    let mut tokens = Vec::new();
    lex_all(
        sql,
        modes,
        out.as_mut().map(|o| (o, Blank::ExecMarkers)),
        |t| {
            if t.kind == Kind::Unterminated {
                return Err(RouteError::syntax("a quote or comment is not closed"));
            }
            tokens.push(t);
            Ok(())
        },
    )?;
    let mut edit = |f: &mut dyn FnMut(&mut Vec<u8>)| f(out.get_or_insert_with(|| src.to_vec()));

    let operators = tokens
        .iter()
        .filter(|t| match t.kind {
            Kind::Punct(b'(' | b')' | b',' | b'.' | b';') => false,
            Kind::Punct(_) => true,
            Kind::Word => OPERATOR_WORDS.iter().any(|w| is_word(sql, t, w)),
            _ => false,
        })
        .count();
    if operators > MAX_OPERATORS {
        return Err(RouteError::Unsupported {
            what: format!(
                "a statement with more than {MAX_OPERATORS} operators (too deep to parse safely)"
            ),
        });
    }

    let mut params = Vec::new();
    let mut logic_ops = false;
    let mut prev: Option<Token> = None;
    for t in &tokens {
        match t.kind {
            Kind::Param => params.push(t.start),
            Kind::Punct(c @ (b'|' | b'&')) => {
                logic_ops |= prev.is_some_and(|p| p.is(c) && p.end == t.start);
            }
            Kind::Str | Kind::Var
                if modes.no_backslash_escapes
                    && src.get(t.start..t.end).is_some_and(|s| s.contains(&b'\\')) =>
            {
                edit(&mut |o| {
                    if let Some(s) = o.get_mut(t.start..t.end) {
                        s.iter_mut()
                            .filter(|b| **b == b'\\')
                            .for_each(|b| *b = b'_');
                    }
                });
            }
            Kind::QuotedIdent if src.get(t.start) == Some(&b'"') => {
                let inner = src.get(t.start + 1..t.end.saturating_sub(1)).unwrap_or(&[]);
                if inner.contains(&b'"') || inner.contains(&b'`') {
                    return Err(RouteError::Unsupported {
                        what: "a double-quoted identifier containing a quote (ANSI_QUOTES)".into(),
                    });
                }
                edit(&mut |o| {
                    for i in [t.start, t.end.saturating_sub(1)] {
                        if let Some(b) = o.get_mut(i) {
                            *b = b'`';
                        }
                    }
                });
            }
            _ => {}
        }
        prev = Some(*t);
    }

    for w in tokens.windows(4) {
        if let [a, b, c, d] = w {
            if is_word(sql, a, "LOCK")
                && is_word(sql, b, "IN")
                && is_word(sql, c, "SHARE")
                && is_word(sql, d, "MODE")
            {
                edit(&mut |o| blank(o, a.start, d.end));
            }
        }
    }

    let first = tokens.first().copied();
    let nested_queries = tokens.iter().skip(1).any(|t| {
        ["SELECT", "WITH", "VALUES", "TABLE"]
            .iter()
            .any(|k| is_word(sql, t, k))
    });
    // `CREATE TABLE a (LIKE b)`: sqlparser reads a column named LIKE.
    if first.is_some_and(|f| is_word(sql, &f, "CREATE")) {
        let name =
            |t: Option<&Token>| t.is_some_and(|t| matches!(t.kind, Kind::Word | Kind::QuotedIdent));
        for (i, open) in tokens.iter().enumerate() {
            if !open.is(b'(') || !tokens.get(i + 1).is_some_and(|l| is_word(sql, l, "LIKE")) {
                continue;
            }
            let close = if name(tokens.get(i + 2)) && tokens.get(i + 3).is_some_and(|t| t.is(b')'))
            {
                tokens.get(i + 3)
            } else if name(tokens.get(i + 2))
                && tokens.get(i + 3).is_some_and(|t| t.is(b'.'))
                && name(tokens.get(i + 4))
                && tokens.get(i + 5).is_some_and(|t| t.is(b')'))
            {
                tokens.get(i + 5)
            } else {
                None
            };
            if let Some(c) = close {
                let (o, c) = (open.start, c.start);
                edit(&mut |b| {
                    blank(b, o, o + 1);
                    blank(b, c, c + 1);
                });
            }
        }
    }
    let mut commas = Vec::new();
    if let Some(f) = first {
        let update = is_word(sql, &f, "UPDATE");
        let modifiers: &[&str] = if update {
            &["LOW_PRIORITY", "IGNORE"]
        } else if is_word(sql, &f, "DELETE") {
            &["LOW_PRIORITY", "QUICK", "IGNORE"]
        } else {
            &[]
        };
        let mut rest = tokens.iter().skip(1).peekable();
        while let Some(t) = rest.next_if(|t| modifiers.iter().any(|m| is_word(sql, t, m))) {
            edit(&mut |o| blank(o, t.start, t.end));
        }
        if update {
            let mut depth = 0usize;
            for t in rest {
                match t.kind {
                    Kind::Punct(b'(') => depth += 1,
                    Kind::Punct(b')') => depth = depth.saturating_sub(1),
                    Kind::Punct(b',') if depth == 0 => commas.push(t.start),
                    _ if depth == 0 && is_word(sql, t, "SET") => break,
                    _ => {}
                }
            }
        }
    }

    let mut inserts = Vec::new();
    let text = match (out, commas.is_empty()) {
        (None, true) => None,
        (o, _) => {
            let mut bytes = o.unwrap_or_else(|| src.to_vec());
            let mut added = 0;
            for &c in &commas {
                let at = c + added;
                bytes.splice(at..at + 1, *b" JOIN");
                added += 4;
                inserts.push((at + 5, added));
            }
            // Only ASCII bytes were replaced or inserted, at ASCII bytes.
            Some(String::from_utf8(bytes).map_err(|_| RouteError::syntax("invalid text"))?)
        }
    };
    Ok(Prep {
        params,
        logic_ops,
        first,
        nested_queries,
        text,
        inserts,
    })
}
