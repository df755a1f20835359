//! DDL target names from tokens, for the MariaDB DDL sqlparser cannot parse
//! (`ALTER TABLE t DISABLE KEYS`, `ALGORITHM=INPLACE`, engine and
//! partitioning options, ...): which tables it runs on is all routing needs.
//!
//! ```text
//! ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] t ... [RENAME [TO|AS] t2] ...
//! CREATE [OR REPLACE] [TEMPORARY] TABLE [IF NOT EXISTS] t ... [LIKE t2 | (LIKE t2)]
//! CREATE [OR REPLACE] [ONLINE|OFFLINE] [UNIQUE|FULLTEXT|SPATIAL] INDEX [IF NOT EXISTS] i ... ON t ...
//! DROP [TEMPORARY] TABLE [IF EXISTS] t, t2 ... / DROP INDEX [IF EXISTS] i ON t
//! TRUNCATE [TABLE] t / RENAME TABLE a TO b, c TO d
//! ```
//! A `CREATE TABLE ... SELECT` is not read here (its query's tables matter).

use super::super::fast::ident;
use super::super::lexer::{Kind, Lexer, Modes, Token};
use super::{KeyBound, TableUse};

struct Toks<'a> {
    sql: &'a str,
    toks: Vec<Token>,
    i: usize,
}

impl Toks<'_> {
    fn is(&self, t: &Token, kw: &str) -> bool {
        t.is_word(self.sql, kw)
    }

    fn eat(&mut self, kw: &str) -> bool {
        let yes = self.toks.get(self.i).is_some_and(|t| self.is(t, kw));
        if yes {
            self.i += 1;
        }
        yes
    }

    fn eat_all(&mut self, kws: &[&str]) -> bool {
        let save = self.i;
        if kws.iter().all(|k| self.eat(k)) {
            return true;
        }
        self.i = save;
        false
    }

    /// `[schema.]name`.
    fn name(&mut self) -> Option<TableUse> {
        let first = ident(self.sql, self.toks.get(self.i)?)?.into_owned();
        self.i += 1;
        let (schema, table) = if self.toks.get(self.i).is_some_and(|t| t.is(b'.')) {
            let t = ident(self.sql, self.toks.get(self.i + 1)?)?.into_owned();
            self.i += 2;
            (Some(first), t)
        } else {
            (None, first)
        };
        Some(TableUse {
            schema,
            table,
            key: KeyBound::Unbound,
            in_subquery: false,
        })
    }

    /// Index of the next top-level word `kw` at or after the cursor.
    fn find(&self, kw: &str) -> Option<usize> {
        let mut depth = 0usize;
        for (i, t) in self.toks.iter().enumerate().skip(self.i) {
            match t.kind {
                Kind::Punct(b'(') => depth += 1,
                Kind::Punct(b')') => depth = depth.saturating_sub(1),
                _ if depth <= 1 && self.is(t, kw) => return Some(i),
                _ => {}
            }
        }
        None
    }
}

/// The tables of a DDL statement, or `None` if it is not one of the forms.
pub(super) fn tables(sql: &str, modes: Modes) -> Option<Vec<TableUse>> {
    let mut lx = Lexer::new(sql, 0, modes);
    let mut toks = Vec::new();
    while let Some(t) = lx.next_token() {
        if t.kind == Kind::Unterminated {
            return None;
        }
        if !t.is(b';') {
            toks.push(t);
        }
    }
    let mut p = Toks { sql, toks, i: 0 };
    let mut out = Vec::new();
    if p.eat("ALTER") {
        p.eat("ONLINE");
        p.eat("IGNORE");
        if !p.eat("TABLE") {
            return None;
        }
        p.eat_all(&["IF", "EXISTS"]);
        out.push(p.name()?);
        while let Some(i) = p.find("RENAME") {
            p.i = i + 1;
            if p.eat("COLUMN") || p.eat("INDEX") || p.eat("KEY") {
                continue;
            }
            if !p.eat("TO") {
                p.eat("AS");
            }
            out.push(p.name()?);
        }
    } else if p.eat("CREATE") {
        p.eat_all(&["OR", "REPLACE"]);
        if p.eat("TEMPORARY") || p.eat("TABLE") {
            if p.toks.get(p.i - 1).is_some_and(|t| p.is(t, "TEMPORARY")) && !p.eat("TABLE") {
                return None;
            }
            p.eat_all(&["IF", "NOT", "EXISTS"]);
            out.push(p.name()?);
            if p.find("SELECT").is_some() {
                return None;
            }
            if let Some(i) = p.find("LIKE") {
                p.i = i + 1;
                out.push(p.name()?);
            }
        } else {
            let _ = p.eat("ONLINE") || p.eat("OFFLINE");
            let _ = p.eat("UNIQUE") || p.eat("FULLTEXT") || p.eat("SPATIAL");
            if !p.eat("INDEX") {
                return None;
            }
            p.i = p.find("ON")? + 1;
            out.push(p.name()?);
        }
    } else if p.eat("DROP") {
        p.eat("TEMPORARY");
        if p.eat("TABLE") {
            p.eat_all(&["IF", "EXISTS"]);
            loop {
                out.push(p.name()?);
                if !p.toks.get(p.i).is_some_and(|t| t.is(b',')) {
                    break;
                }
                p.i += 1;
            }
        } else if p.eat("INDEX") {
            p.i = p.find("ON")? + 1;
            out.push(p.name()?);
        } else {
            return None;
        }
    } else if p.eat("TRUNCATE") {
        p.eat("TABLE");
        out.push(p.name()?);
    } else if p.eat("RENAME") {
        if !p.eat("TABLE") {
            return None;
        }
        loop {
            out.push(p.name()?);
            if !p.eat("TO") {
                return None;
            }
            out.push(p.name()?);
            if !p.toks.get(p.i).is_some_and(|t| t.is(b',')) {
                break;
            }
            p.i += 1;
        }
    } else {
        return None;
    }
    Some(out)
}
