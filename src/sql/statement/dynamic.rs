//! Dynamic SQL whose text is a user variable: `PREPARE s FROM @v` and
//! `EXECUTE IMMEDIATE @v [USING ...]`. idgate cannot see the statement in
//! the text; `frontend::write::dynamic` reads the variable and checks the
//! statement as it checks one written as a string literal.

use crate::sql::lexer::{Kind, Lexer, Modes};

/// A statement whose source is a user variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FromVariable {
    /// The same statement with a string literal for the source goes
    /// `{head} '<text>'`: `PREPARE s FROM` or `EXECUTE IMMEDIATE`.
    pub head: String,
    /// The variable, as written (`@v`, `@'v'`, `` @`v` ``).
    pub variable: String,
}

/// `PREPARE s FROM @v` or `EXECUTE IMMEDIATE @v [USING ...]`; `None` for
/// anything else (a literal source is checked by the planner itself).
pub fn from_variable(sql: &str, modes: Modes) -> Option<FromVariable> {
    let mut lx = Lexer::new(sql, 0, modes);
    let first = lx.next_token()?;
    let (head, var) = if first.is_word(sql, "PREPARE") {
        let name = lx.next_token()?;
        if !matches!(name.kind, Kind::Word | Kind::QuotedIdent) {
            return None;
        }
        if !lx.next_token()?.is_word(sql, "FROM") {
            return None;
        }
        (sql.get(first.start..lx.pos())?, lx.next_token()?)
    } else if first.is_word(sql, "EXECUTE") {
        if !lx.next_token()?.is_word(sql, "IMMEDIATE") {
            return None;
        }
        (sql.get(first.start..lx.pos())?, lx.next_token()?)
    } else {
        return None;
    };
    let variable = sql.get(var.start..var.end)?;
    if var.kind != Kind::Var || variable.starts_with("@@") {
        return None;
    }
    // The variable must be the whole source.
    match lx.next_token() {
        None => {}
        Some(t) if t.is(b';') || t.is_word(sql, "USING") => {}
        Some(_) => return None,
    }
    Some(FromVariable {
        head: head.to_string(),
        variable: variable.to_string(),
    })
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

    #[test]
    fn sources_that_are_a_variable() {
        let m = Modes::default();
        let f = |s: &str| from_variable(s, m).map(|v| (v.head, v.variable));
        assert_eq!(
            f("PREPARE s FROM @q"),
            Some(("PREPARE s FROM".into(), "@q".into()))
        );
        assert_eq!(
            f("  execute immediate @`q` USING 1, 2;"),
            Some(("execute immediate".into(), "@`q`".into()))
        );
        assert_eq!(f("PREPARE s FROM 'SELECT 1'"), None);
        assert_eq!(f("PREPARE s FROM @@sql_mode"), None);
        assert_eq!(f("EXECUTE IMMEDIATE CONCAT(@a, @b)"), None);
        assert_eq!(f("EXECUTE s USING @a"), None);
        assert_eq!(f("SELECT @q"), None);
    }

    #[test]
    fn literals_read_back_as_the_text() {
        assert_eq!(literal("it's \\ x", false), "'it''s \\\\ x'");
        assert_eq!(literal("it's \\ x", true), "'it''s \\ x'");
    }
}
