//! The fallback: builds a [`Shape`] from sqlparser's AST (MySQL dialect,
//! unescaping off), for statements the fast path declines.
//!
//! Only exact source positions are used: identifier spans, the parentheses of
//! each row, single-token literal values, and sqlparser's own token stream.
//! Spans count characters (line, column); [`LineIndex`] maps them to bytes.

use sqlparser::ast::{
    Expr, Ident, ObjectName, ObjectNamePart, SetExpr, Statement, TableObject, Value as SqlValue,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::{Parser, ParserOptions};
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

use super::convert;
use super::lexer::Modes;
use super::shape::{
    class_of, same_column, AliasColumns, Body, ColumnList, Row, Shape, Value, ValueClass,
};

/// Maps sqlparser (line, column) locations of a text to byte offsets.
pub struct LineIndex<'a> {
    text: &'a str,
    base: usize,
    /// Byte offset where each line starts, and whether the line is ASCII.
    lines: Vec<(usize, bool)>,
}

impl<'a> LineIndex<'a> {
    /// Index of `text`, which starts at byte `base` of the whole query.
    pub fn new(text: &'a str, base: usize) -> LineIndex<'a> {
        let mut lines = Vec::new();
        let mut start = 0;
        for line in text.split_inclusive('\n') {
            lines.push((start, line.is_ascii()));
            start += line.len();
        }
        if lines.is_empty() {
            lines.push((0, true));
        }
        LineIndex { text, base, lines }
    }

    /// Byte offset (in the whole query) of a location; `None` for empty spans
    /// or locations outside the text.
    pub fn byte(&self, loc: Location) -> Option<usize> {
        let line = usize::try_from(loc.line).ok()?.checked_sub(1)?;
        let col = usize::try_from(loc.column).ok()?.checked_sub(1)?;
        let &(start, ascii) = self.lines.get(line)?;
        let off = if ascii {
            col
        } else {
            let rest = self.text.get(start..)?;
            rest.char_indices()
                .nth(col)
                .map(|(i, _)| i)
                .unwrap_or(rest.len())
        };
        let b = start.checked_add(off)?;
        (b <= self.text.len()).then_some(self.base + b)
    }
}

/// A statement parsed by sqlparser.
pub struct Parsed<'a> {
    /// The INSERT/REPLACE.
    pub insert: Box<sqlparser::ast::Insert>,
    tokens: Vec<TokenWithSpan>,
    index: LineIndex<'a>,
}

/// Why the fallback could not give a shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fail {
    /// sqlparser could not parse it, or it is not one INSERT/REPLACE.
    Syntax(String),
    /// An INSERT form idgate cannot fill (INSERT ... SELECT...).
    Unsupported(&'static str),
}

/// Parses `sql[start..end]` as one INSERT/REPLACE.
pub fn parse(sql: &str, start: usize, end: usize, modes: Modes) -> Result<Parsed<'_>, Fail> {
    let text = sql
        .get(start..end)
        .ok_or_else(|| Fail::Syntax("bad statement bounds".into()))?;
    if modes.no_backslash_escapes && text.contains('\\') {
        return Err(Fail::Syntax(
            "backslashes under NO_BACKSLASH_ESCAPES".into(),
        ));
    }
    if modes.ansi_quotes && text.contains('"') {
        return Err(Fail::Syntax("double quotes under ANSI_QUOTES".into()));
    }
    let dialect = MySqlDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .with_unescape(false)
        .tokenize_with_location()
        .map_err(|e| Fail::Syntax(e.to_string()))?;
    let mut stmts = Parser::new(&dialect)
        .with_options(ParserOptions::new().with_unescape(false))
        .with_tokens_with_locations(tokens.clone())
        .parse_statements()
        .map_err(|e| Fail::Syntax(e.to_string()))?;
    if stmts.len() != 1 {
        return Err(Fail::Syntax("not exactly one statement".into()));
    }
    match stmts.pop() {
        Some(Statement::Insert(insert)) => Ok(Parsed {
            insert: Box::new(insert),
            tokens,
            index: LineIndex::new(text, start),
        }),
        _ => Err(Fail::Syntax("not an INSERT or REPLACE".into())),
    }
}

/// The parts of a name, `None` if one is not an identifier.
pub(crate) fn idents(name: &ObjectName) -> Option<Vec<&Ident>> {
    name.0
        .iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) => Some(i),
            ObjectNamePart::Function(_) => None,
        })
        .collect()
}

/// The unquoted name of an identifier (sqlparser keeps doubled quotes when
/// unescaping is off).
pub(crate) fn unquote(i: &Ident) -> String {
    match i.quote_style {
        Some('`') => i.value.replace("``", "`"),
        Some('"') => i.value.replace("\"\"", "\""),
        _ => i.value.clone(),
    }
}

impl<'a> Parsed<'a> {
    /// (schema, table) named by the statement.
    pub fn table(&self) -> Result<(Option<String>, String), Fail> {
        let TableObject::TableName(name) = &self.insert.table else {
            return Err(Fail::Syntax("table function".into()));
        };
        match idents(name).as_deref() {
            Some([t]) => Ok((None, unquote(t))),
            Some([s, t]) => Ok((Some(unquote(s)), unquote(t))),
            _ => Err(Fail::Syntax("table name".into())),
        }
    }

    /// True if the statement has no column list (not even an empty `()`).
    pub fn has_no_column_list(&self) -> bool {
        if !self.insert.columns.is_empty() {
            return false;
        }
        let TableObject::TableName(name) = &self.insert.table else {
            return true;
        };
        match idents(name).and_then(|v| v.last().copied()) {
            Some(t) => self.empty_column_list(t.span.end).is_none(),
            None => true,
        }
    }

    fn byte(&self, loc: Location) -> Option<usize> {
        self.index.byte(loc)
    }

    /// Byte offset of the first `)` token after location `after`.
    fn close_paren_after(&self, after: Location) -> Option<usize> {
        let t = self
            .tokens
            .iter()
            .find(|t| t.span.start >= after && t.token == Token::RParen)?;
        self.byte(t.span.start)
    }

    fn value(&self, e: &Expr) -> Value {
        let (class, span) = match e {
            Expr::Value(v) => (
                match &v.value {
                    SqlValue::Null => ValueClass::Null,
                    SqlValue::Number(s, _) => class_of(convert::number(s, false)),
                    SqlValue::SingleQuotedString(s) | SqlValue::DoubleQuotedString(s) => {
                        class_of(convert::string(s.as_bytes()))
                    }
                    // `0x21` is a number, `X'21'` the string of its bytes.
                    SqlValue::HexStringLiteral(s) => {
                        let at = self
                            .byte(v.span.start)
                            .and_then(|b| self.index.text.get(b.checked_sub(self.index.base)?..));
                        match at {
                            Some(t) if t.starts_with("0x") => class_of(convert::radix(s, 16)),
                            _ => class_of(convert::hex_string(s)),
                        }
                    }
                    SqlValue::Placeholder(p) if p == "?" => ValueClass::Param,
                    _ => ValueClass::Other,
                },
                Some(v.span),
            ),
            Expr::Identifier(i)
                if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("DEFAULT") =>
            {
                (ValueClass::Default, Some(i.span))
            }
            _ => (ValueClass::Other, None),
        };
        let pos = span.and_then(|s| Some((self.byte(s.start)?, self.byte(s.end)?)));
        match pos {
            Some((start, end)) if start < end => Value { start, end, class },
            // Never replaced: only its class matters.
            _ => Value {
                start: 0,
                end: 0,
                class: match class {
                    // A 0 would be replaced by a generated id.
                    ValueClass::Int(n) if n > 0 => ValueClass::Int(n),
                    _ => ValueClass::Other,
                },
            },
        }
    }

    /// An empty `()` right after the table name (sqlparser does not keep it).
    fn empty_column_list(&self, after: Location) -> Option<ColumnList> {
        let mut it = self
            .tokens
            .iter()
            .filter(|t| t.span.start >= after && !matches!(t.token, Token::Whitespace(_)));
        match (it.next(), it.next()) {
            (Some(a), Some(b)) if a.token == Token::LParen && b.token == Token::RParen => {
                Some(ColumnList {
                    close: self.byte(b.span.start)?,
                    count: 0,
                    id_index: None,
                })
            }
            _ => None,
        }
    }

    /// Just past the last token of the last `SET` assignment: scans sqlparser's
    /// tokens from the assignment's column to the next clause.
    fn set_end(&self, from: Location) -> Option<usize> {
        let mut depth = 0usize;
        let mut last = None;
        for t in self.tokens.iter().filter(|t| t.span.start >= from) {
            match &t.token {
                Token::Whitespace(_) => continue,
                Token::LParen => depth += 1,
                Token::RParen => depth = depth.checked_sub(1)?,
                Token::Comma | Token::SemiColon if depth == 0 => break,
                Token::Word(w)
                    if depth == 0
                        && w.quote_style.is_none()
                        && ["ON", "AS", "RETURNING"]
                            .iter()
                            .any(|k| w.value.eq_ignore_ascii_case(k)) =>
                {
                    break
                }
                _ => {}
            }
            last = Some(t.span.end);
        }
        self.byte(last?)
    }

    /// Builds the shape for a rule on `id_col`. `no_list_index` gives the id
    /// column's index among the table's columns when there is no column list.
    pub fn shape(&self, id_col: &str, no_list_index: Option<usize>) -> Result<Shape, Fail> {
        let ins = &self.insert;
        let bad = |what: &str| Fail::Syntax(format!("unsupported {what}"));
        if ins.partitioned.is_some()
            || ins.table_alias.is_some()
            || ins.or.is_some()
            || !ins.after_columns.is_empty()
        {
            return Err(bad("INSERT clause"));
        }
        let TableObject::TableName(name) = &ins.table else {
            return Err(bad("table"));
        };
        let last_table = idents(name)
            .and_then(|v| v.last().copied())
            .ok_or_else(|| bad("table"))?;
        let after_table = self
            .byte(last_table.span.end)
            .ok_or_else(|| bad("table position"))?;

        let columns = if ins.columns.is_empty() {
            // sqlparser drops an empty `()` column list: look for it.
            self.empty_column_list(last_table.span.end)
        } else {
            let mut id_index = None;
            let mut last = None;
            for (i, c) in ins.columns.iter().enumerate() {
                let ident = idents(c)
                    .and_then(|v| v.last().copied())
                    .ok_or_else(|| bad("column"))?;
                if id_index.is_none() && same_column(&unquote(ident), id_col) {
                    id_index = Some(i);
                }
                last = Some(ident.span.start);
            }
            let close = last
                .and_then(|l| self.close_paren_after(l))
                .ok_or_else(|| bad("column list"))?;
            Some(ColumnList {
                close,
                count: ins.columns.len(),
                id_index,
            })
        };
        let id_index = match &columns {
            Some(c) => c.id_index,
            None => no_list_index,
        };

        let body = match &ins.source {
            Some(q) => {
                let values = match &*q.body {
                    SetExpr::Values(v) => v,
                    _ => return Err(Fail::Unsupported("INSERT ... SELECT")),
                };
                if q.with.is_some() || q.order_by.is_some() || q.limit_clause.is_some() {
                    return Err(Fail::Unsupported("INSERT ... SELECT"));
                }
                let mut rows = Vec::with_capacity(values.rows.len());
                for r in &values.rows {
                    let close = self
                        .byte(r.closing_token.0.span.start)
                        .ok_or_else(|| bad("row"))?;
                    let id = id_index
                        .and_then(|i| r.content.get(i))
                        .map(|e| self.value(e));
                    rows.push(Row {
                        close,
                        count: r.content.len(),
                        id,
                    });
                }
                Body::Values(rows)
            }
            None if !ins.assignments.is_empty() => {
                let mut id = None;
                let mut last_from = None;
                for a in &ins.assignments {
                    let sqlparser::ast::AssignmentTarget::ColumnName(c) = &a.target else {
                        return Err(bad("SET target"));
                    };
                    let ident = idents(c)
                        .and_then(|v| v.last().copied())
                        .ok_or_else(|| bad("SET target"))?;
                    if id.is_none() && same_column(&unquote(ident), id_col) {
                        id = Some(self.value(&a.value));
                    }
                    last_from = Some(ident.span.start);
                }
                let end = last_from
                    .and_then(|l| self.set_end(l))
                    .ok_or_else(|| bad("SET list"))?;
                Body::Set { id, end }
            }
            None => return Err(bad("INSERT without VALUES or SET")),
        };

        let alias_columns = match &ins.insert_alias {
            Some(a) => match &a.col_aliases {
                Some(cols) if !cols.is_empty() => {
                    let last = cols
                        .last()
                        .map(|c| c.span.start)
                        .ok_or_else(|| bad("alias"))?;
                    Some(AliasColumns {
                        close: self.close_paren_after(last).ok_or_else(|| bad("alias"))?,
                        count: cols.len(),
                        has_id_name: cols.iter().any(|c| same_column(&unquote(c), id_col)),
                    })
                }
                _ => None,
            },
            None => None,
        };
        Ok(Shape {
            columns,
            after_table,
            body,
            alias_columns,
            ignore: ins.ignore,
            clause: ins.on.is_some() || ins.returning.is_some(),
        })
    }

    /// Byte offsets of every `?` placeholder, from sqlparser's tokens.
    pub fn params(&self) -> Vec<usize> {
        self.tokens
            .iter()
            .filter(|t| matches!(&t.token, Token::Placeholder(p) if p == "?"))
            .filter_map(|t| self.byte(t.span.start))
            .collect()
    }
}
