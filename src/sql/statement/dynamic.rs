//! Dynamic SQL: `PREPARE s FROM source` and `EXECUTE IMMEDIATE source
//! [USING ...]`, where `source` is a string literal, a user variable or an
//! expression. idgate sees the statement only in a literal; for the other
//! two, `frontend::write::dynamic` reads the text the shard would prepare
//! (`SELECT @v`, or `SELECT <expression>` when the expression cannot change
//! anything) and checks it as it checks a literal.
//!
//! A variable or expression is read before the query runs, so its value is
//! the one the statement sees only when it is the query's first statement:
//! an earlier statement of the same query (`SET @q = '...'; PREPARE s FROM
//! @q`) could change it, and the planner refuses that form.

use std::ops::Range;

use crate::sql::lexer::{Kind, Lexer, Modes, Token};

/// How the statement's text is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A string literal (with an optional `_charset` or `N` introducer):
    /// the planner checks its text itself.
    Literal(Token),
    /// One user variable (`@v`, `@'v'`, `` @`v` ``).
    Variable,
    /// Anything else. `pure`: built only from literals, variables and
    /// string functions without side effects ([`PURE_FUNCTIONS`]), so
    /// evaluating it once more to read it changes nothing.
    Expression {
        /// Safe to evaluate a second time.
        pure: bool,
    },
}

/// A `PREPARE ... FROM` or `EXECUTE IMMEDIATE` statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dynamic {
    /// `PREPARE` (else `EXECUTE IMMEDIATE`).
    pub prepare: bool,
    /// `PREPARE s FROM` / `EXECUTE IMMEDIATE`: the same statement with a
    /// literal for its source goes `{head} '<text>'`.
    pub head: Range<usize>,
    /// The source, up to a `USING`, `;` or the end.
    pub source: Range<usize>,
    /// What the source is.
    pub kind: Source,
}

impl Dynamic {
    /// What the statement is, for messages.
    pub fn what(&self) -> &'static str {
        if self.prepare {
            "SQL-level PREPARE"
        } else {
            "EXECUTE IMMEDIATE"
        }
    }
}

/// String functions that read their arguments and nothing else: an
/// expression of these, literals and variables is evaluated by idgate a
/// second time to read the text it gives. Anything else (a subquery, a
/// stored function, `RAND()`, an assignment) is not.
pub const PURE_FUNCTIONS: &[&str] = &[
    "CONCAT",
    "CONCAT_WS",
    "REPLACE",
    "UPPER",
    "LOWER",
    "UCASE",
    "LCASE",
    "TRIM",
    "LTRIM",
    "RTRIM",
    "SUBSTRING",
    "SUBSTR",
    "MID",
    "LEFT",
    "RIGHT",
    "LPAD",
    "RPAD",
    "REPEAT",
    "SPACE",
    "REVERSE",
    "QUOTE",
    "IFNULL",
    "COALESCE",
    "NULLIF",
    "IF",
    "HEX",
    "UNHEX",
];

/// Reads the statement at `start..end` (`start`: its first token;
/// `in_exec`: inside an executable comment there) when it is `PREPARE name
/// FROM source` or `EXECUTE IMMEDIATE source [USING ...]`; `None` for any
/// other statement.
pub fn parse(sql: &str, start: usize, end: usize, modes: Modes, in_exec: bool) -> Option<Dynamic> {
    let mut lx = Lexer::new(sql, start, modes);
    lx.set_pos(start, in_exec);
    let first = lx.next_token().filter(|t| t.end <= end)?;
    let prepare = if first.is_word(sql, "PREPARE") {
        let name = lx.next_token()?;
        if !matches!(name.kind, Kind::Word | Kind::QuotedIdent)
            || !lx.next_token()?.is_word(sql, "FROM")
        {
            return None;
        }
        true
    } else if first.is_word(sql, "EXECUTE") {
        if !lx.next_token()?.is_word(sql, "IMMEDIATE") {
            return None;
        }
        false
    } else {
        return None;
    };
    let head = first.start..lx.pos();
    let mut tokens: Vec<Token> = Vec::new();
    let mut depth = 0usize;
    while let Some(t) = lx.next_token() {
        if t.start >= end {
            break;
        }
        match t.kind {
            Kind::Punct(b';') if depth == 0 => break,
            Kind::Word if depth == 0 && t.is_word(sql, "USING") => break,
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        tokens.push(t);
    }
    let (first_src, last_src) = (tokens.first()?, tokens.last()?);
    let source = first_src.start..last_src.end;
    let kind = match tokens.as_slice() {
        [t] if t.kind == Kind::Str => Source::Literal(*t),
        [i, t] if t.kind == Kind::Str && is_introducer(sql, i) => Source::Literal(*t),
        [t] if t.kind == Kind::Var
            && !sql.get(t.start..t.end).is_some_and(|v| v.starts_with("@@")) =>
        {
            Source::Variable
        }
        _ => Source::Expression {
            pure: pure(sql, &tokens),
        },
    };
    Some(Dynamic {
        prepare,
        head,
        source,
        kind,
    })
}

/// `_utf8mb4` or `N` right before a string literal.
fn is_introducer(sql: &str, t: &Token) -> bool {
    t.kind == Kind::Word
        && sql
            .get(t.start..t.end)
            .is_some_and(|w| w.starts_with('_') || w.eq_ignore_ascii_case("N"))
}

/// Only literals, variables (not assigned), `NULL`, parentheses, commas
/// and [`PURE_FUNCTIONS`] called with parentheses.
fn pure(sql: &str, tokens: &[Token]) -> bool {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        let ok = match t.kind {
            Kind::Str | Kind::Number | Kind::Var => true,
            Kind::Punct(b'(') => {
                depth += 1;
                true
            }
            Kind::Punct(b')') => match depth.checked_sub(1) {
                Some(d) => {
                    depth = d;
                    true
                }
                None => false,
            },
            Kind::Punct(b',') => depth > 0,
            Kind::Word => {
                let next_is_paren = tokens.get(i + 1).is_some_and(|n| n.is(b'('));
                let called = next_is_paren && PURE_FUNCTIONS.iter().any(|f| t.is_word(sql, f));
                let literal_word = t.is_word(sql, "NULL")
                    || (is_introducer(sql, t)
                        && tokens.get(i + 1).is_some_and(|n| n.kind == Kind::Str));
                called || literal_word
            }
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    depth == 0
}

/// `text` as a string literal MariaDB reads back as `text` (quotes
/// doubled; backslashes doubled unless `NO_BACKSLASH_ESCAPES`).
pub fn literal(text: &str, no_backslash_escapes: bool) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' if !no_backslash_escapes => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at0(sql: &str) -> Option<(String, String, Source)> {
        parse(
            sql,
            sql.len() - sql.trim_start().len(),
            sql.len(),
            Modes::default(),
            false,
        )
        .map(|d| {
            (
                sql[d.head.clone()].to_string(),
                sql[d.source.clone()].to_string(),
                d.kind,
            )
        })
    }

    #[test]
    fn sources_that_are_a_variable() {
        let v = |s: &str| {
            at0(s)
                .filter(|d| d.2 == Source::Variable)
                .map(|d| (d.0, d.1))
        };
        assert_eq!(
            v("PREPARE s FROM @q"),
            Some(("PREPARE s FROM".into(), "@q".into()))
        );
        assert_eq!(
            v("  execute immediate @`q` USING 1, 2;"),
            Some(("execute immediate".into(), "@`q`".into()))
        );
        assert_eq!(
            v("PREPARE s FROM @q; EXECUTE s"),
            Some(("PREPARE s FROM".into(), "@q".into()))
        );
        assert_eq!(v("PREPARE s FROM @@sql_mode"), None);
        assert_eq!(at0("EXECUTE s USING @a"), None);
        assert_eq!(at0("SELECT @q"), None);
        assert_eq!(at0("PREPARE s"), None);
        assert_eq!(at0("PREPARE s FROM"), None);
    }

    #[test]
    fn literal_sources() {
        let lit = |s: &str| matches!(at0(s), Some((_, _, Source::Literal(_))));
        assert!(lit("PREPARE s FROM 'SELECT 1'"));
        assert!(lit("PREPARE s FROM _utf8mb4'SELECT 1'"));
        assert!(lit("EXECUTE IMMEDIATE 'SELECT ?' USING 1"));
        // Adjacent literals are concatenated by MariaDB: an expression.
        assert!(!lit("PREPARE s FROM 'INSERT INTO t ' 'VALUES (1)'"));
    }

    #[test]
    fn expressions_and_whether_they_can_be_evaluated_again() {
        let pure = |s: &str| match at0(s) {
            Some((_, _, Source::Expression { pure })) => Some(pure),
            _ => None,
        };
        assert_eq!(pure("EXECUTE IMMEDIATE CONCAT(@a, @b)"), Some(true));
        assert_eq!(
            pure("PREPARE s FROM CONCAT('INSERT INTO t VALUES (', 5, ')')"),
            Some(true)
        );
        assert_eq!(
            pure("PREPARE s FROM 'INSERT INTO t ' 'VALUES (1)'"),
            Some(true)
        );
        assert_eq!(
            pure("EXECUTE IMMEDIATE CONCAT_WS(' ', UPPER(@a), IFNULL(@b, NULL)) USING 1"),
            Some(true)
        );
        assert_eq!(
            pure("PREPARE s FROM (SELECT q FROM t LIMIT 1)"),
            Some(false)
        );
        assert_eq!(pure("PREPARE s FROM CONCAT(f(), 'x')"), Some(false));
        assert_eq!(pure("PREPARE s FROM CONCAT(@a := 'x', 'y')"), Some(false));
        assert_eq!(pure("PREPARE s FROM CONCAT(RAND(), 'x')"), Some(false));
        assert_eq!(pure("PREPARE s FROM CONCAT('a', 'b'"), Some(false));
        assert_eq!(pure("PREPARE s FROM @a 'x'"), Some(true));
        assert_eq!(pure("PREPARE s FROM CONCAT"), Some(false));
        assert_eq!(pure("PREPARE s FROM @@sql_mode"), Some(true));
    }

    #[test]
    fn in_an_executable_comment_and_after_a_statement() {
        let sql = "/*!50000 PREPARE s FROM @q */";
        let d = parse(sql, 9, sql.len(), Modes::default(), true).unwrap();
        assert_eq!(&sql[d.source], "@q");
        let sql = "SET @q = 'x'; PREPARE s FROM @q";
        let d = parse(sql, 14, sql.len(), Modes::default(), false).unwrap();
        assert_eq!(d.kind, Source::Variable);
    }

    proptest::proptest! {
        /// Any text, from any offset, in and out of an executable comment:
        /// no panic, and the ranges found are inside the text.
        #[test]
        fn parse_takes_anything(
            sql in "(PREPARE|EXECUTE|IMMEDIATE|FROM|USING|CONCAT|s|@q|@@x|'a'|_utf8'b'|N|\\(|\\)|,|;| |/\\*!|\\*/|--|\n|\"|`|:=|1){0,24}",
            at in 0usize..64,
            in_exec: bool,
        ) {
            let start = at.min(sql.len());
            if sql.is_char_boundary(start) {
                if let Some(d) = parse(&sql, start, sql.len(), Modes::default(), in_exec) {
                    proptest::prop_assert!(d.head.end <= d.source.start && d.source.end <= sql.len());
                }
            }
        }
    }

    #[test]
    fn literals_read_back_as_the_text() {
        assert_eq!(literal("it's \\ x", false), "'it''s \\\\ x'");
        assert_eq!(literal("it's \\ x", true), "'it''s \\ x'");
    }
}
