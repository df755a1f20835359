//! A `LOAD DATA` statement read from its tokens: the target table, LOCAL,
//! the FIELDS/LINES options, `IGNORE n LINES`, the column list and the
//! columns its `SET` assigns; and the text each shard gets
//! ([`LoadStmt::shard_sql`]), the original with `IGNORE n LINES` left out
//! (idgate skips those lines itself) and the id column added to the column
//! list when the file has no field for it.

use super::cut::Format;
use crate::sql::fast::ident;
use crate::sql::lexer::{unescape, Kind, Lexer, Modes, Token};
use std::ops::Range;

/// The table a `LOAD DATA` / `LOAD XML` writes into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Into {
    /// Its schema, when written.
    pub schema: Option<String>,
    /// Its name, unquoted.
    pub table: String,
    /// `LOAD XML` (idgate does not read XML files).
    pub xml: bool,
}

/// One entry of the column list: a column, or a user variable (`@v`)
/// whose value only a `SET` clause uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Column(String),
    Var,
}

/// A `LOAD DATA` statement, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadStmt {
    /// `LOCAL`: the client sends the file.
    pub local: bool,
    /// The file name (what the client is asked for).
    pub file: Vec<u8>,
    /// How the file is cut into rows and fields.
    pub format: Format,
    /// `IGNORE n LINES|ROWS`.
    pub ignore_lines: u64,
    /// The column list; `None`: every column of the table, in order.
    pub targets: Option<Vec<Target>>,
    /// Columns a `SET` clause assigns.
    pub set_columns: Vec<String>,
    /// `CHARACTER SET name`, lower-cased.
    pub charset: Option<String>,
    /// The `IGNORE n LINES` clause, left out of the shards' text.
    ignore_clause: Option<Range<usize>>,
    /// Just after the column list's `(`.
    list_open: Option<usize>,
    /// The column list is `()`.
    list_empty: bool,
}

/// Reads `sql` as a `LOAD DATA|XML ... INTO TABLE t ...` statement: `None`
/// when it is not one (or names no table); else its table and the rest,
/// or why the rest could not be read.
pub fn parse(sql: &str, modes: Modes) -> Option<(Into, Result<LoadStmt, String>)> {
    let mut p = P {
        sql,
        lx: Lexer::new(sql, 0, modes),
        modes,
        peeked: None,
    };
    if !p.word("LOAD") {
        return None;
    }
    let xml = if p.word("XML") {
        true
    } else if p.word("DATA") {
        false
    } else {
        return None;
    };
    let _ = p.word("LOW_PRIORITY") || p.word("CONCURRENT");
    let local = p.word("LOCAL");
    if !p.word("INFILE") {
        return None;
    }
    let file = p.next()?;
    if file.kind != Kind::Str {
        return None;
    }
    let _ = p.word("REPLACE") || p.word("IGNORE");
    if !(p.word("INTO") && p.word("TABLE")) {
        return None;
    }
    let first = p.next()?;
    let first = ident(sql, &first)?.into_owned();
    let (schema, table) = if p.punct(b'.') {
        let t = p.next()?;
        (Some(first), ident(sql, &t)?.into_owned())
    } else {
        (None, first)
    };
    let into = Into { schema, table, xml };
    let file = unescape(
        &sql.as_bytes()[file.start..file.end],
        modes.no_backslash_escapes,
    );
    let rest = p.rest(local, file);
    Some((into, rest))
}

struct P<'a> {
    sql: &'a str,
    lx: Lexer<'a>,
    modes: Modes,
    peeked: Option<Option<Token>>,
}

impl<'a> P<'a> {
    fn peek(&mut self) -> Option<Token> {
        if self.peeked.is_none() {
            let t = self
                .lx
                .next_token()
                .filter(|t| !t.is(b';') && t.kind != Kind::Unterminated);
            self.peeked = Some(t);
        }
        self.peeked.flatten()
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.peek();
        self.peeked = None;
        t
    }

    /// Takes the next token if it is the keyword `kw`.
    fn word(&mut self, kw: &str) -> bool {
        match self.peek() {
            Some(t) if t.is_word(self.sql, kw) => {
                self.peeked = None;
                true
            }
            _ => false,
        }
    }

    fn punct(&mut self, b: u8) -> bool {
        match self.peek() {
            Some(t) if t.is(b) => {
                self.peeked = None;
                true
            }
            _ => false,
        }
    }

    /// A string literal's bytes.
    fn string(&mut self, what: &str) -> Result<Vec<u8>, String> {
        match self.next() {
            Some(t) if t.kind == Kind::Str => Ok(unescape(
                &self.sql.as_bytes()[t.start..t.end],
                self.modes.no_backslash_escapes,
            )),
            _ => Err(format!("{what} must be followed by a string literal")),
        }
    }

    /// A one-byte (or empty) ENCLOSED BY / ESCAPED BY string.
    fn char(&mut self, what: &str) -> Result<Option<u8>, String> {
        match self.string(what)?[..] {
            [] => Ok(None),
            [c] => Ok(Some(c)),
            _ => Err(format!("{what} takes a single character")),
        }
    }

    fn by(&mut self, what: &str) -> Result<(), String> {
        match self.word("BY") {
            true => Ok(()),
            false => Err(format!("{what} must be followed by BY")),
        }
    }

    fn rest(&mut self, local: bool, file: Vec<u8>) -> Result<LoadStmt, String> {
        let mut s = LoadStmt {
            local,
            file,
            format: Format::default(),
            ignore_lines: 0,
            targets: None,
            set_columns: Vec::new(),
            charset: None,
            ignore_clause: None,
            list_open: None,
            list_empty: false,
        };
        if self.word("PARTITION") {
            if !self.punct(b'(') {
                return Err("PARTITION must be followed by a list".into());
            }
            loop {
                match self.next() {
                    Some(t) if t.is(b')') => break,
                    Some(_) => {}
                    None => return Err("the PARTITION list does not end".into()),
                }
            }
        }
        if self.word("CHARACTER") {
            if !self.word("SET") {
                return Err("CHARACTER must be followed by SET".into());
            }
            s.charset = Some(self.charset_name()?);
        } else if self.word("CHARSET") {
            s.charset = Some(self.charset_name()?);
        }
        if self.word("FIELDS") || self.word("COLUMNS") {
            let mut any = false;
            loop {
                if self.word("TERMINATED") {
                    self.by("TERMINATED")?;
                    s.format.field_term = self.string("FIELDS TERMINATED BY")?;
                } else if self.word("OPTIONALLY") {
                    if !self.word("ENCLOSED") {
                        return Err("OPTIONALLY must be followed by ENCLOSED BY".into());
                    }
                    self.by("ENCLOSED")?;
                    s.format.enclosed = self.char("ENCLOSED BY")?;
                } else if self.word("ENCLOSED") {
                    self.by("ENCLOSED")?;
                    s.format.enclosed = self.char("ENCLOSED BY")?;
                } else if self.word("ESCAPED") {
                    self.by("ESCAPED")?;
                    s.format.escaped = self.char("ESCAPED BY")?;
                } else {
                    break;
                }
                any = true;
            }
            if !any {
                return Err("FIELDS must be followed by TERMINATED, ENCLOSED or ESCAPED BY".into());
            }
        }
        if self.word("LINES") {
            let mut any = false;
            loop {
                if self.word("STARTING") {
                    self.by("STARTING")?;
                    s.format.line_start = self.string("LINES STARTING BY")?;
                } else if self.word("TERMINATED") {
                    self.by("TERMINATED")?;
                    s.format.line_term = self.string("LINES TERMINATED BY")?;
                } else {
                    break;
                }
                any = true;
            }
            if !any {
                return Err("LINES must be followed by STARTING or TERMINATED BY".into());
            }
        }
        if let Some(t) = self.peek().filter(|t| t.is_word(self.sql, "IGNORE")) {
            self.next();
            let n = match self.next() {
                Some(n) if n.kind == Kind::Number => self.sql[n.start..n.end]
                    .parse::<u64>()
                    .map_err(|_| "IGNORE takes a whole number of lines".to_string())?,
                _ => return Err("IGNORE must be followed by a number of LINES".into()),
            };
            let end = match self.next() {
                Some(w) if w.is_word(self.sql, "LINES") || w.is_word(self.sql, "ROWS") => w.end,
                _ => return Err("IGNORE n must be followed by LINES or ROWS".into()),
            };
            s.ignore_lines = n;
            s.ignore_clause = Some(t.start..end);
        }
        if let Some(open) = self.peek().filter(|t| t.is(b'(')) {
            self.next();
            s.list_open = Some(open.end);
            let mut targets = Vec::new();
            if self.punct(b')') {
                s.list_empty = true;
            } else {
                loop {
                    let t = self.next().ok_or("the column list does not end")?;
                    if t.kind == Kind::Var {
                        targets.push(Target::Var);
                    } else {
                        let mut name = ident(self.sql, &t)
                            .ok_or("the column list names something that is not a column")?
                            .into_owned();
                        // `t.col` or `db.t.col`: the last part is the column.
                        while self.punct(b'.') {
                            let n = self.next().ok_or("the column list does not end")?;
                            name = ident(self.sql, &n)
                                .ok_or("the column list names something that is not a column")?
                                .into_owned();
                        }
                        targets.push(Target::Column(name));
                    }
                    if self.punct(b')') {
                        break;
                    }
                    if !self.punct(b',') {
                        return Err("the column list must be separated by commas".into());
                    }
                }
            }
            s.targets = Some(targets);
        }
        if self.word("SET") {
            loop {
                let t = self.next().ok_or("SET must assign a column")?;
                let mut name = ident(self.sql, &t)
                    .ok_or("SET must assign a column")?
                    .into_owned();
                while self.punct(b'.') {
                    let n = self.next().ok_or("SET must assign a column")?;
                    name = ident(self.sql, &n)
                        .ok_or("SET must assign a column")?
                        .into_owned();
                }
                s.set_columns.push(name);
                // `=` or `:=`, then the expression up to a comma outside parentheses.
                let mut depth = 0usize;
                let mut more = false;
                while let Some(t) = self.next() {
                    if t.is(b'(') {
                        depth += 1;
                    } else if t.is(b')') {
                        depth = depth.saturating_sub(1);
                    } else if t.is(b',') && depth == 0 {
                        more = true;
                        break;
                    }
                }
                if !more {
                    break;
                }
            }
        }
        if let Some(t) = self.next() {
            return Err(format!(
                "unexpected text at byte {}: {}",
                t.start,
                self.sql.get(t.start..t.end).unwrap_or("")
            ));
        }
        Ok(s)
    }

    fn charset_name(&mut self) -> Result<String, String> {
        match self.next() {
            Some(t) if t.kind == Kind::Str => Ok(String::from_utf8_lossy(&unescape(
                &self.sql.as_bytes()[t.start..t.end],
                self.modes.no_backslash_escapes,
            ))
            .to_ascii_lowercase()),
            Some(t) => ident(self.sql, &t)
                .map(|n| n.to_ascii_lowercase())
                .ok_or_else(|| "CHARACTER SET must name a character set".to_string()),
            None => Err("CHARACTER SET must name a character set".into()),
        }
    }
}

impl LoadStmt {
    /// The statement each shard runs: `sql` (this statement's text) without
    /// its `IGNORE n LINES`, and with `column` (quoted) first in the column
    /// list when `prepend` (the shard's rows then start with the id field).
    /// `None` when `prepend` is asked of a statement without a column list.
    pub fn shard_sql(&self, sql: &str, prepend: Option<&str>) -> Option<String> {
        let mut cuts: Vec<(usize, usize, String)> = Vec::new();
        if let Some(r) = &self.ignore_clause {
            cuts.push((r.start, r.end, String::new()));
        }
        if let Some(col) = prepend {
            let at = self.list_open?;
            let text = if self.list_empty {
                col.to_string()
            } else {
                format!("{col}, ")
            };
            cuts.push((at, at, text));
        }
        cuts.sort_by_key(|c| c.0);
        let mut out = String::with_capacity(sql.len() + 16);
        let mut at = 0;
        for (start, end, text) in cuts {
            out.push_str(sql.get(at..start)?);
            out.push_str(&text);
            at = end;
        }
        out.push_str(sql.get(at..)?);
        Some(out)
    }
}
