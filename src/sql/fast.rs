//! The fast path: builds a [`Shape`] straight from [`Lexer`] tokens for the
//! common INSERT/REPLACE forms, without building an AST. It *declines* (and
//! sqlparser gets the statement) on anything it does not recognise.

use std::borrow::Cow;

use super::lexer::{skim, Kind, Lexer, Modes, Token};
use super::shape::{
    int_of, same_column, AliasColumns, Body, ColumnList, Row, Shape, Value, ValueClass,
};

/// Why the fast path did not produce a shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refuse {
    /// Not a form it knows: let sqlparser try.
    Decline,
    /// A form idgate cannot fill ids for (named for the error message).
    Unsupported(&'static str),
    /// A quote or comment that never ends, or the statement ends mid-row.
    Syntax(&'static str),
}

/// The target of an INSERT/REPLACE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head<'a> {
    /// Explicit schema, unquoted.
    pub schema: Option<Cow<'a, str>>,
    /// Table name, unquoted.
    pub table: Cow<'a, str>,
    /// Just past the table name / PARTITION list.
    pub after_table: usize,
    /// `IGNORE` among the words before the table.
    pub ignore: bool,
}

/// Where the statement ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    /// Offset of the `;` or the text length.
    pub end: usize,
    /// It ended at a `;`.
    pub semicolon: bool,
    /// Inside an executable comment at the end.
    pub in_exec: bool,
    /// An executable comment was seen anywhere in the statement.
    pub exec_seen: bool,
    /// An `ON ...` or `RETURNING` clause follows the rows.
    pub clause: bool,
}

fn word_is(sql: &str, t: &Token, kw: &str) -> bool {
    t.is_word(sql, kw)
}

/// The unquoted name of an identifier token, or `None` if it is not one.
pub fn ident<'a>(sql: &'a str, t: &Token) -> Option<Cow<'a, str>> {
    let text = sql.get(t.start..t.end)?;
    match t.kind {
        Kind::Word => Some(Cow::Borrowed(text)),
        Kind::QuotedIdent => {
            let q = text.get(..1)?;
            let inner = text.get(1..text.len().checked_sub(1)?)?;
            let doubled = if q == "`" { "``" } else { "\"\"" };
            if inner.contains(doubled) {
                Some(Cow::Owned(inner.replace(doubled, q)))
            } else {
                Some(Cow::Borrowed(inner))
            }
        }
        _ => None,
    }
}

/// The next token if it is `Punct(b)` (consumed), else `None` (nothing
/// consumed). Lexes the token once (a peek then a `next_token` lexed it
/// twice).
#[inline]
fn next_if_punct(lx: &mut Lexer<'_>, b: u8) -> Option<Token> {
    let mut ahead = lx.clone();
    let t = ahead.next_token().filter(|t| t.is(b))?;
    *lx = ahead;
    Some(t)
}

/// Parses from just after `INSERT`/`REPLACE` to the end of the table name
/// (and `PARTITION (...)`).
pub fn head<'a>(lx: &mut Lexer<'a>, sql: &'a str) -> Result<Head<'a>, Refuse> {
    let mut t = lx.next_token().ok_or(Refuse::Decline)?;
    let mut ignore = false;
    while ["LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE"]
        .iter()
        .any(|k| word_is(sql, &t, k))
    {
        ignore |= word_is(sql, &t, "IGNORE");
        t = lx.next_token().ok_or(Refuse::Decline)?;
    }
    if word_is(sql, &t, "INTO") {
        t = lx.next_token().ok_or(Refuse::Decline)?;
    }
    let first = ident(sql, &t).ok_or(Refuse::Decline)?;
    let mut after_table = t.end;
    // The token after the name, lexed once for both questions below.
    let mut ahead = lx.clone();
    let mut next = ahead.next_token();
    let (schema, table) = if next.is_some_and(|p| p.is(b'.')) {
        *lx = ahead;
        let t2 = lx.next_token().ok_or(Refuse::Decline)?;
        after_table = t2.end;
        ahead = lx.clone();
        next = ahead.next_token();
        (Some(first), ident(sql, &t2).ok_or(Refuse::Decline)?)
    } else {
        (None, first)
    };
    if next.is_some_and(|p| word_is(sql, &p, "PARTITION")) {
        *lx = ahead;
        if !lx.next_token().is_some_and(|p| p.is(b'(')) {
            return Err(Refuse::Decline);
        }
        loop {
            let p = lx.next_token().ok_or(Refuse::Decline)?;
            match p.kind {
                Kind::Punct(b')') => {
                    after_table = p.end;
                    break;
                }
                Kind::Word | Kind::QuotedIdent | Kind::Punct(b',') => {}
                _ => return Err(Refuse::Decline),
            }
        }
    }
    Ok(Head {
        schema,
        table,
        after_table,
        ignore,
    })
}

/// True if the tokens at the lexer start a query (INSERT ... SELECT forms).
fn starts_query(sql: &str, t: &Token) -> bool {
    t.is(b'(')
        || ["SELECT", "WITH", "TABLE", "VALUES"]
            .iter()
            .any(|k| word_is(sql, t, k))
}

/// Parses an optional `(col, ...)` list. Qualified names (`t.col`) compare by
/// their last part.
pub fn columns(lx: &mut Lexer<'_>, sql: &str, id_col: &str) -> Result<Option<ColumnList>, Refuse> {
    let mut ahead = lx.clone();
    if !ahead.next_token().is_some_and(|p| p.is(b'(')) {
        return Ok(None);
    }
    let first = ahead.next_token();
    if first.is_some_and(|t| starts_query(sql, &t)) {
        return Err(Refuse::Unsupported("INSERT ... SELECT"));
    }
    *lx = ahead;
    let mut count = 0;
    let mut id_index = None;
    let mut t = first.ok_or(Refuse::Decline)?;
    if t.is(b')') {
        return Ok(Some(ColumnList {
            close: t.start,
            count,
            id_index,
        }));
    }
    loop {
        let mut name = ident(sql, &t).ok_or(Refuse::Decline)?;
        t = lx.next_token().ok_or(Refuse::Decline)?;
        while t.is(b'.') {
            let part = lx.next_token().ok_or(Refuse::Decline)?;
            name = ident(sql, &part).ok_or(Refuse::Decline)?;
            t = lx.next_token().ok_or(Refuse::Decline)?;
        }
        if id_index.is_none() && same_column(&name, id_col) {
            id_index = Some(count);
        }
        count += 1;
        match t.kind {
            Kind::Punct(b',') => t = lx.next_token().ok_or(Refuse::Decline)?,
            Kind::Punct(b')') => {
                return Ok(Some(ColumnList {
                    close: t.start,
                    count,
                    id_index,
                }))
            }
            _ => return Err(Refuse::Decline),
        }
    }
}

/// Classifies a value made of exactly one token.
fn classify(sql: &str, t: &Token) -> ValueClass {
    match t.kind {
        Kind::Word if word_is(sql, t, "NULL") => ValueClass::Null,
        Kind::Word if word_is(sql, t, "DEFAULT") => ValueClass::Default,
        Kind::Number => int_of(sql.get(t.start..t.end).unwrap_or("")),
        Kind::Str => int_of(sql.get(t.start + 1..t.end.saturating_sub(1)).unwrap_or("")),
        Kind::Param => ValueClass::Param,
        _ => ValueClass::Other,
    }
}

/// Accumulates one value expression's tokens.
#[derive(Default)]
struct ValueAcc {
    first: Option<Token>,
    last_end: usize,
    tokens: usize,
}

impl ValueAcc {
    fn push(&mut self, t: Token) {
        if self.first.is_none() {
            self.first = Some(t);
        }
        self.last_end = t.end;
        self.tokens += 1;
    }
    fn finish(self, sql: &str) -> Option<Value> {
        let first = self.first?;
        let class = if self.tokens == 1 {
            classify(sql, &first)
        } else {
            ValueClass::Other
        };
        Some(Value {
            start: first.start,
            end: self.last_end,
            class,
        })
    }
}

/// Parses one row after its `(`.
fn row(lx: &mut Lexer<'_>, sql: &str, id_index: Option<usize>) -> Result<Row, Refuse> {
    let mut depth = 0usize;
    let mut index = 0usize;
    let mut acc = ValueAcc::default();
    let mut id = None;
    let mut any = false;
    loop {
        let t = lx
            .next_token()
            .ok_or(Refuse::Syntax("the statement ends inside a row"))?;
        match t.kind {
            Kind::Punct(b'(') | Kind::Punct(b'{') => {
                depth += 1;
                acc.push(t);
            }
            Kind::Punct(b')') if depth == 0 => {
                if any || acc.tokens > 0 {
                    if acc.tokens == 0 {
                        return Err(Refuse::Decline);
                    }
                    let v = std::mem::take(&mut acc);
                    if Some(index) == id_index {
                        id = v.finish(sql);
                    }
                    index += 1;
                }
                return Ok(Row {
                    close: t.start,
                    count: index,
                    id,
                });
            }
            Kind::Punct(b')') | Kind::Punct(b'}') => {
                depth = depth.checked_sub(1).ok_or(Refuse::Decline)?;
                acc.push(t);
            }
            Kind::Punct(b',') if depth == 0 => {
                if acc.tokens == 0 {
                    return Err(Refuse::Decline);
                }
                let v = std::mem::take(&mut acc);
                if Some(index) == id_index {
                    id = v.finish(sql);
                }
                index += 1;
                any = true;
            }
            Kind::Punct(b';') => return Err(Refuse::Syntax("the statement ends inside a row")),
            Kind::Unterminated => return Err(Refuse::Syntax("a quote or comment is not closed")),
            _ => acc.push(t),
        }
    }
}

/// Parses a `SET a = 1, ...` list after `SET`.
fn set_list(lx: &mut Lexer<'_>, sql: &str, id_col: &str) -> Result<Body, Refuse> {
    let mut id = None;
    loop {
        let t = lx.next_token().ok_or(Refuse::Decline)?;
        let mut name = ident(sql, &t).ok_or(Refuse::Decline)?;
        let mut t = lx.next_token().ok_or(Refuse::Decline)?;
        while t.is(b'.') {
            let part = lx.next_token().ok_or(Refuse::Decline)?;
            name = ident(sql, &part).ok_or(Refuse::Decline)?;
            t = lx.next_token().ok_or(Refuse::Decline)?;
        }
        if t.is(b':') {
            t = lx.next_token().ok_or(Refuse::Decline)?;
        }
        if !t.is(b'=') {
            return Err(Refuse::Decline);
        }
        let mut acc = ValueAcc::default();
        let mut depth = 0usize;
        loop {
            let mut ahead = lx.clone();
            let next = ahead.next_token();
            let stop = match next {
                None => true,
                Some(p) => match p.kind {
                    Kind::Punct(b',' | b';') => depth == 0,
                    Kind::Word => {
                        depth == 0
                            && ["ON", "AS", "RETURNING"]
                                .iter()
                                .any(|k| word_is(sql, &p, k))
                    }
                    Kind::Unterminated => {
                        return Err(Refuse::Syntax("a quote or comment is not closed"))
                    }
                    _ => false,
                },
            };
            if stop {
                break;
            }
            let Some(p) = next else { break };
            *lx = ahead;
            match p.kind {
                Kind::Punct(b'(' | b'{') => depth += 1,
                Kind::Punct(b')' | b'}') => depth = depth.checked_sub(1).ok_or(Refuse::Decline)?,
                _ => {}
            }
            acc.push(p);
        }
        if acc.tokens == 0 {
            return Err(Refuse::Decline);
        }
        let end = acc.last_end;
        if id.is_none() && same_column(&name, id_col) {
            id = acc.finish(sql);
        }
        if next_if_punct(lx, b',').is_some() {
            continue;
        }
        return Ok(Body::Set { id, end });
    }
}

/// Parses from after the column list to the end of the statement.
pub fn body(
    lx: &mut Lexer<'_>,
    sql: &str,
    modes: Modes,
    id_index: Option<usize>,
    id_col: &str,
) -> Result<(Body, Option<AliasColumns>, End), Refuse> {
    let t = lx.next_token().ok_or(Refuse::Decline)?;
    let body = if word_is(sql, &t, "VALUES") || word_is(sql, &t, "VALUE") {
        let mut rows = Vec::new();
        loop {
            let mut t = lx.next_token().ok_or(Refuse::Decline)?;
            if word_is(sql, &t, "ROW") {
                t = lx.next_token().ok_or(Refuse::Decline)?;
            }
            if !t.is(b'(') {
                if rows.is_empty() && starts_query(sql, &t) {
                    return Err(Refuse::Unsupported("INSERT ... SELECT"));
                }
                return Err(Refuse::Decline);
            }
            rows.push(row(lx, sql, id_index)?);
            if next_if_punct(lx, b',').is_none() {
                break;
            }
        }
        Body::Values(rows)
    } else if word_is(sql, &t, "SET") {
        set_list(lx, sql, id_col)?
    } else if starts_query(sql, &t) {
        return Err(Refuse::Unsupported("INSERT ... SELECT"));
    } else {
        return Err(Refuse::Decline);
    };

    let mut alias_columns = None;
    let mut next = lx.next_token();
    if next.is_some_and(|p| word_is(sql, &p, "AS")) {
        let alias = lx.next_token().ok_or(Refuse::Decline)?;
        ident(sql, &alias).ok_or(Refuse::Decline)?;
        next = lx.next_token();
        if next.is_some_and(|p| p.is(b'(')) {
            let mut count = 0;
            let mut has_id_name = false;
            loop {
                let n = lx.next_token().ok_or(Refuse::Decline)?;
                let name = ident(sql, &n).ok_or(Refuse::Decline)?;
                has_id_name |= same_column(&name, id_col);
                count += 1;
                let sep = lx.next_token().ok_or(Refuse::Decline)?;
                if sep.is(b')') {
                    alias_columns = Some(AliasColumns {
                        close: sep.start,
                        count,
                        has_id_name,
                    });
                    break;
                }
                if !sep.is(b',') {
                    return Err(Refuse::Decline);
                }
            }
            next = lx.next_token();
        }
    }
    let mut exec_seen = lx.take_exec_seen();
    let end = match next {
        None => End {
            end: sql.len(),
            semicolon: false,
            in_exec: lx.in_exec(),
            exec_seen,
            clause: false,
        },
        Some(p) if p.is(b';') => End {
            end: p.start,
            semicolon: true,
            in_exec: lx.in_exec(),
            exec_seen,
            clause: false,
        },
        Some(p) if word_is(sql, &p, "ON") || word_is(sql, &p, "RETURNING") => {
            let s = skim(sql, p.end, modes, lx.in_exec());
            if s.unterminated {
                return Err(Refuse::Syntax("a quote or comment is not closed"));
            }
            exec_seen |= s.exec_seen;
            End {
                end: s.end,
                semicolon: s.semicolon,
                in_exec: s.in_exec,
                exec_seen,
                clause: true,
            }
        }
        Some(p) if p.kind == Kind::Unterminated => {
            return Err(Refuse::Syntax("a quote or comment is not closed"))
        }
        Some(_) => return Err(Refuse::Decline),
    };
    Ok((body, alias_columns, end))
}

/// Builds the whole shape of the statement whose `INSERT`/`REPLACE` keyword
/// ends at `lx`'s position, for a rule on column `id_col`. `table_columns`
/// is asked for the table's column count and the id column's index when there
/// is no column list.
pub fn shape_after_head(
    lx: &mut Lexer<'_>,
    sql: &str,
    modes: Modes,
    head: &Head<'_>,
    id_col: &str,
    no_list_index: &mut dyn FnMut() -> Result<Option<usize>, super::plan::Stop>,
) -> Result<Result<(Shape, End), Refuse>, super::plan::Stop> {
    let columns = match columns(lx, sql, id_col) {
        Ok(c) => c,
        Err(r) => return Ok(Err(r)),
    };
    let id_index = match &columns {
        Some(c) => c.id_index,
        None => {
            // INSERT ... SELECT needs no column order to be refused.
            let mut ahead = lx.clone();
            if ahead
                .next_token()
                .is_some_and(|t| starts_query(sql, &t) && !word_is(sql, &t, "VALUES"))
            {
                return Ok(Err(Refuse::Unsupported("INSERT ... SELECT")));
            }
            no_list_index()?
        }
    };
    Ok(
        body(lx, sql, modes, id_index, id_col).map(|(body, alias_columns, end)| {
            (
                Shape {
                    columns,
                    after_table: head.after_table,
                    body,
                    alias_columns,
                    ignore: head.ignore,
                    clause: end.clause,
                },
                end,
            )
        }),
    )
}

/// Byte offsets of every `?` placeholder in `sql[start..end]`.
pub fn params(sql: &str, start: usize, end: usize, modes: Modes) -> Vec<usize> {
    let mut lx = Lexer::new(sql, start, modes);
    let mut out = Vec::new();
    while let Some(t) = lx.next_token() {
        if t.start >= end || t.kind == Kind::Unterminated {
            break;
        }
        if t.kind == Kind::Param {
            out.push(t.start);
        }
    }
    out
}
