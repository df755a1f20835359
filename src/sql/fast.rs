//! The fast path: builds a [`Shape`] straight from [`Lexer`] tokens for the
//! common INSERT/REPLACE forms, without building an AST. It *declines* (and
//! sqlparser gets the statement) on anything it does not recognise.

use std::borrow::Cow;

use super::lexer::{self, skim, Kind, Lexer, Modes, Token};
use super::shape::{
    classify_value, same_column, AliasColumns, Body, ColumnList, Row, Shape, Value,
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
    if let Some(list) = scan_columns(lx, sql, id_col) {
        return Ok(Some(list));
    }
    token_columns(lx, sql, id_col)
}

/// [`columns`] by bytes, for the usual list: plain names (an ASCII letter
/// or `_`, then letters, digits and `_`) between commas and whitespace
/// (as the lexer skips it: [`ROW_BYTES`]). `None` (nothing consumed) for anything else (a quoted or
/// qualified name, a comment, `$`, a non-ASCII name, an empty list, a
/// query): the token path reads it. Lexing the list token by token was
/// about 800 instructions of the 4,000 a multiplexed session spends
/// reading an INSERT for its `LAST_INSERT_ID()` effect.
fn scan_columns(lx: &mut Lexer<'_>, sql: &str, id_col: &str) -> Option<ColumnList> {
    if lx.in_exec() {
        return None;
    }
    let src = sql.as_bytes();
    let space = |b: &u8| ROW_BYTES[usize::from(*b)] == RowByte::Space;
    let skip = |mut pos: usize| {
        while src.get(pos).is_some_and(space) {
            pos += 1;
        }
        pos
    };
    let mut pos = skip(lx.pos());
    if src.get(pos) != Some(&b'(') {
        return None;
    }
    pos = skip(pos + 1);
    let (mut count, mut id_index) = (0, None);
    loop {
        let start = pos;
        if !src
            .get(pos)
            .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
        {
            return None;
        }
        while src
            .get(pos)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            pos += 1;
        }
        let word = Token {
            kind: Kind::Word,
            start,
            end: pos,
        };
        if count == 0 && starts_query(sql, &word) {
            return None;
        }
        if id_index.is_none() && same_column(sql.get(start..pos)?, id_col) {
            id_index = Some(count);
        }
        count += 1;
        pos = skip(pos);
        match src.get(pos)? {
            b',' => pos = skip(pos + 1),
            b')' => {
                lx.set_pos(pos + 1, false);
                return Some(ColumnList {
                    close: pos,
                    count,
                    id_index,
                });
            }
            _ => return None,
        }
    }
}

/// [`columns`], token by token.
fn token_columns(
    lx: &mut Lexer<'_>,
    sql: &str,
    id_col: &str,
) -> Result<Option<ColumnList>, Refuse> {
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

/// Accumulates one value expression's tokens.
#[derive(Default)]
struct ValueAcc {
    first: Option<Token>,
    second: Option<Token>,
    last_end: usize,
    tokens: usize,
}

impl ValueAcc {
    fn push(&mut self, t: Token) {
        if self.first.is_none() {
            self.first = Some(t);
        } else if self.second.is_none() {
            self.second = Some(t);
        }
        self.last_end = t.end;
        self.tokens += 1;
    }
    fn finish(self, sql: &str) -> Option<Value> {
        let first = self.first?;
        Some(Value {
            start: first.start,
            end: self.last_end,
            class: classify_value(sql, &first, self.second.as_ref(), self.tokens),
        })
    }
}

/// Parses one row after its `(`: token by token up to the id column's
/// value (`id_index`), which is classified, and the values after it by
/// their bytes ([`scan_rest`]) when that reads them exactly as the tokens
/// would. Only the id value's class is kept of the row's values, so an
/// INSERT's long string literals after it are skipped by `memchr` rather
/// than lexed (sysbench's `(id, k, c, pad)`: two literals of 120 and 60
/// bytes after the id).
fn row(
    lx: &mut Lexer<'_>,
    sql: &str,
    modes: Modes,
    id_index: Option<usize>,
) -> Result<Row, Refuse> {
    token_row(lx, sql, Some(modes), id_index)
}

/// [`row`]; the values after the id column's by tokens too when `scan` is
/// `None` (the reference the scan is tested against).
fn token_row(
    lx: &mut Lexer<'_>,
    sql: &str,
    scan: Option<Modes>,
    id_index: Option<usize>,
) -> Result<Row, Refuse> {
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
                let was_id = Some(index) == id_index;
                if was_id {
                    id = v.finish(sql);
                }
                index += 1;
                any = true;
                if let (true, Some(modes)) = (was_id, scan) {
                    if let Some(rest) = scan_rest(lx, sql, modes, index, true) {
                        return Ok(Row { id, ..rest });
                    }
                }
            }
            Kind::Punct(b';') => return Err(Refuse::Syntax("the statement ends inside a row")),
            Kind::Unterminated => return Err(Refuse::Syntax("a quote or comment is not closed")),
            _ => acc.push(t),
        }
    }
}

/// How [`scan_row`] treats a byte.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RowByte {
    /// Part of a token that cannot change the row's structure (letters,
    /// digits, `.`, `+`, `=`, `?`, other punctuation...).
    Plain,
    /// Whitespace, exactly as the lexer skips it.
    Space,
    /// Looked at by the `match` in [`scan_row`].
    Special,
}

static ROW_BYTES: [RowByte; 256] = {
    let mut t = [RowByte::Plain; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = match i as u8 {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => RowByte::Space,
            b'\'' | b'"' | b'`' | b'(' | b')' | b'{' | b'}' | b',' | b';' | b'-' | b'/' | b'#'
            | b'@' => RowByte::Special,
            _ => RowByte::Plain,
        };
        i += 1;
    }
    t
};

/// [`row`] for rows without the id column (`id_index` is `None`): finds
/// the row's `)` and counts its values from the bytes, without building
/// tokens. Returns `None` and consumes nothing when the row holds anything
/// it does not treat exactly as [`row`] would (a comment or what may start
/// one, a variable, an executable comment around it, an unterminated
/// quote, an empty value, unbalanced brackets, a `;`, the end of the
/// text): [`row`] then reads the row and makes the decision or error.
fn scan_row(lx: &mut Lexer<'_>, sql: &str, modes: Modes) -> Option<Row> {
    scan_rest(lx, sql, modes, 0, false)
}

/// [`scan_row`] from inside a row: `count` values read before `lx`'s
/// position, `any` when the last of them ended at a top-level `,` (as
/// [`token_row`] counts them). Returns the whole row's count, without
/// `id`.
fn scan_rest(
    lx: &mut Lexer<'_>,
    sql: &str,
    modes: Modes,
    mut count: usize,
    mut any: bool,
) -> Option<Row> {
    if lx.in_exec() {
        return None;
    }
    let src = sql.as_bytes();
    let str_backslash = !modes.no_backslash_escapes;
    let dq_backslash = !modes.ansi_quotes && !modes.no_backslash_escapes;
    let mut pos = lx.pos();
    let mut depth = 0usize;
    // The current value has a token (`row`'s `acc.tokens > 0`).
    let mut nonempty = false;
    loop {
        let b = *src.get(pos)?;
        match ROW_BYTES
            .get(usize::from(b))
            .copied()
            .unwrap_or(RowByte::Special)
        {
            RowByte::Plain => {
                nonempty = true;
                pos += 1;
                continue;
            }
            RowByte::Space => {
                pos += 1;
                continue;
            }
            RowByte::Special => {}
        }
        match b {
            b'\'' => pos = lexer::scan_quoted(src, pos + 1, b'\'', str_backslash)?,
            b'"' => pos = lexer::scan_quoted(src, pos + 1, b'"', dq_backslash)?,
            b'`' => pos = lexer::scan_quoted(src, pos + 1, b'`', false)?,
            b'(' | b'{' => {
                depth += 1;
                pos += 1;
            }
            b')' if depth == 0 => {
                if any || nonempty {
                    if !nonempty {
                        return None;
                    }
                    count += 1;
                }
                lx.set_pos(pos + 1, false);
                return Some(Row {
                    close: pos,
                    count,
                    id: None,
                });
            }
            b')' | b'}' => {
                depth = depth.checked_sub(1)?;
                pos += 1;
            }
            b',' if depth == 0 => {
                if !nonempty {
                    return None;
                }
                count += 1;
                any = true;
                nonempty = false;
                pos += 1;
                continue;
            }
            b',' => pos += 1,
            // `--` and `/*` may start comments.
            b'-' if src.get(pos + 1) != Some(&b'-') => pos += 1,
            b'/' if src.get(pos + 1) != Some(&b'*') => pos += 1,
            // `#`, `@`, `;`, `--`, `/*`.
            _ => return None,
        }
        nonempty = true;
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
            let scanned = match id_index {
                None => scan_row(lx, sql, modes),
                Some(_) => None,
            };
            rows.push(match scanned {
                Some(r) => r,
                None => row(lx, sql, modes, id_index)?,
            });
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
    no_list_index: &mut dyn FnMut() -> Result<Option<usize>, super::error::Stop>,
) -> Result<Result<(Shape, End), Refuse>, super::error::Stop> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn piece() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just(" "),
            Just("\t"),
            Just("\n"),
            Just("\x0b"),
            Just("1"),
            Just("-2"),
            Just("1e-5"),
            Just("1e--5"),
            Just("x"),
            Just("NULL"),
            Just("é"),
            Just("?"),
            Just("."),
            Just("+"),
            Just("*"),
            Just("/"),
            Just("/*x*/"),
            Just("/*!1*/"),
            Just("*/"),
            Just("-- c\n"),
            Just("--"),
            Just("#c\n"),
            Just("@v"),
            Just("@'a,b'"),
            Just("@\"a\\\"b\""),
            Just("'a'"),
            Just("'a\\'b'"),
            Just("'it''s'"),
            Just("'(,)'"),
            Just("\"x\""),
            Just("\"a\\\"b\""),
            Just("`c``d`"),
            Just("'"),
            Just("\""),
            Just("`"),
            Just("("),
            Just(")"),
            Just("{"),
            Just("}"),
            Just(","),
            Just(", "),
            Just(";"),
            Just("\\"),
            Just("\0"),
            Just("f(1, 2)"),
        ]
    }

    fn lexer_state(lx: &Lexer<'_>) -> (usize, bool, bool) {
        (lx.pos(), lx.in_exec(), lx.clone().take_exec_seen())
    }

    /// An INSERT whose first row is `pieces` (then `tail`), and its modes.
    fn values_of(pieces: &[&str], tail: &[&str], nbe: bool, ansi: bool) -> (String, Modes) {
        let sql = format!(
            "INSERT INTO t VALUES ({}){}",
            pieces.concat(),
            tail.concat()
        );
        let modes = Modes {
            no_backslash_escapes: nbe,
            ansi_quotes: ansi,
        };
        (sql, modes)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// Every row `scan_row` accepts, `row` reads the same way.
        #[test]
        fn scanned_rows_agree_with_the_token_path(
            pieces in proptest::collection::vec(piece(), 0..8),
            tail in proptest::collection::vec(piece(), 0..3),
            nbe in any::<bool>(),
            ansi in any::<bool>(),
        ) {
            let (sql, modes) = values_of(&pieces, &tail, nbe, ansi);
            let start = Lexer::new(&sql, sql.find('(').map_or(0, |i| i + 1), modes);
            let (mut fast, mut slow) = (start.clone(), start.clone());
            if let Some(r) = scan_row(&mut fast, &sql, modes) {
                prop_assert_eq!(Ok(r), token_row(&mut slow, &sql, None, None));
                prop_assert_eq!(lexer_state(&fast), lexer_state(&slow));
            } else {
                prop_assert_eq!(lexer_state(&fast), lexer_state(&start));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// A row with the id column, its values after the id's skipped by
        /// bytes where they can be, reads as the token path reads it: the
        /// same id value, count, close, error and lexer state.
        #[test]
        fn rows_scanned_past_the_id_agree_with_the_token_path(
            pieces in proptest::collection::vec(piece(), 0..8),
            tail in proptest::collection::vec(piece(), 0..3),
            id_index in 0usize..4,
            nbe in any::<bool>(),
            ansi in any::<bool>(),
        ) {
            let (sql, modes) = values_of(&pieces, &tail, nbe, ansi);
            let start = Lexer::new(&sql, sql.find('(').map_or(0, |i| i + 1), modes);
            let (mut fast, mut slow) = (start.clone(), start.clone());
            let r = row(&mut fast, &sql, modes, Some(id_index));
            prop_assert_eq!(r, token_row(&mut slow, &sql, None, Some(id_index)));
            prop_assert_eq!(lexer_state(&fast), lexer_state(&slow));
        }
    }

    #[test]
    fn rows_with_the_id_first_skip_the_rest_by_bytes() {
        use crate::sql::shape::ValueClass;
        let m = Modes::default();
        let sql = "INSERT INTO t (id, k, c) VALUES (0, 5, 'a, b) c'), (7, f(1, 2), \"x\")";
        let mut lx = Lexer::new(sql, sql.find("(0").map_or(0, |i| i + 1), m);
        let r = row(&mut lx, sql, m, Some(0)).unwrap();
        assert_eq!(r.count, 3);
        assert_eq!(r.id.map(|v| v.class), Some(ValueClass::Int(0)));
        assert_eq!(sql.get(r.close..r.close + 3), Some("), "));
        assert!(lx.next_token().is_some_and(|t| t.is(b',')));
        assert!(lx.next_token().is_some_and(|t| t.is(b'(')));
        let r = row(&mut lx, sql, m, Some(0)).unwrap();
        assert_eq!(r.count, 3);
        assert_eq!(r.id.map(|v| v.class), Some(ValueClass::Int(7)));
        assert_eq!(r.close, sql.len() - 1);
    }

    fn column_name() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just("id"),
            Just("ID"),
            Just("k"),
            Just("_c"),
            Just("pad2"),
            Just("select"),
            Just("values"),
            Just("`id`"),
            Just("t.id"),
            Just("1a"),
            Just("a$"),
            Just("id\u{e9}"),
            Just("'s'"),
            Just("?"),
        ]
    }

    fn column_sep() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just(","),
            Just(", "),
            Just(" , "),
            Just(",\n\t"),
            Just(" "),
            Just(",\u{b}"),
            Just("/**/,"),
            Just(", -- x\n"),
            Just(",,"),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// Every column list `scan_columns` reads, the token path reads
        /// the same way, to the same lexer state; one it declines is left
        /// unread.
        #[test]
        fn scanned_column_lists_agree_with_the_token_path(
            lead in prop_oneof![Just("("), Just(" ( "), Just("\r\n("), Just("(/**/"), Just("(("), Just("")],
            names in proptest::collection::vec((column_name(), column_sep()), 0..5),
            last in column_name(),
            close in prop_oneof![Just(")"), Just(" )"), Just(") VALUES (1)"), Just(""), Just(".x)"), Just("#)")],
            id in prop_oneof![Just("id"), Just("k"), Just("id\u{e9}")],
        ) {
            let list: String = names.iter().map(|(n, s)| format!("{n}{s}")).collect();
            let sql = format!("INSERT INTO t {lead}{list}{last}{close}");
            let start = Lexer::new(&sql, "INSERT INTO t".len(), Modes::default());
            let (mut fast, mut slow) = (start.clone(), start.clone());
            if let Some(r) = scan_columns(&mut fast, &sql, id) {
                prop_assert_eq!(Ok(Some(r)), token_columns(&mut slow, &sql, id));
                prop_assert_eq!(lexer_state(&fast), lexer_state(&slow));
            } else {
                prop_assert_eq!(lexer_state(&fast), lexer_state(&start));
            }
        }
    }

    #[test]
    fn plain_column_lists_are_read_by_bytes() {
        let sql = "INSERT INTO sbtest1 (id, k, c, pad) VALUES (0, 1, 'c', 'p')";
        let at = "INSERT INTO sbtest1".len();
        let mut lx = Lexer::new(sql, at, Modes::default());
        let list = scan_columns(&mut lx, sql, "ID").expect("a plain list");
        assert_eq!((list.count, list.id_index), (4, Some(0)));
        assert_eq!(sql.get(list.close..list.close + 2), Some(") "));
        assert_eq!(lx.pos(), list.close + 1);
        let mut lx = Lexer::new(sql, at, Modes::default());
        let list = scan_columns(&mut lx, sql, "pad").expect("a plain list");
        assert_eq!(list.id_index, Some(3));
        // Quoted and qualified names go the token way.
        for sql in [
            "INSERT INTO t (`id`, k) VALUES (1, 2)",
            "INSERT INTO t (t.id) VALUES (1)",
        ] {
            let mut lx = Lexer::new(sql, "INSERT INTO t".len(), Modes::default());
            assert_eq!(scan_columns(&mut lx, sql, "id"), None);
            assert_eq!(lx.pos(), "INSERT INTO t".len());
            let read = columns(&mut lx, sql, "id");
            assert_eq!(read.map(|l| l.and_then(|l| l.id_index)), Ok(Some(0)));
        }
    }

    #[test]
    fn scanned_rows_cover_the_common_forms() {
        let m = Modes::default();
        for (sql, count) in [
            ("(42, 'sku-1', 3, 'x')", 4),
            ("()", 0),
            ("(f(1, 2), -3.5e-2, NULL, ?, `a`, \"b\")", 6),
            ("( 'a\\'b' ,'it''s', {d '2024-01-01'} )", 3),
        ] {
            let sql = format!("INSERT INTO t VALUES {sql} , (1)");
            let mut lx = Lexer::new(&sql, sql.find('(').map_or(0, |i| i + 1), m);
            let r = scan_row(&mut lx, &sql, m).expect(&sql);
            assert_eq!(r.count, count, "{sql}");
            assert_eq!(sql.get(r.close..r.close + 1), Some(")"));
        }
        for sql in [
            "(1,)",
            "(,1)",
            "(1;",
            "(@a)",
            "(1 -- c\n)",
            "(1 /* c */)",
            "(1 # c\n)",
            "('a)",
            "(1",
            "(1})",
        ] {
            let sql = format!("INSERT INTO t VALUES {sql}");
            let mut lx = Lexer::new(&sql, sql.find('(').map_or(0, |i| i + 1), m);
            assert_eq!(scan_row(&mut lx, &sql, m), None, "{sql}");
        }
    }
}
