//! [`Shape`]: what the planner needs to know about one INSERT/REPLACE,
//! whichever parser found it (the fast path or sqlparser). Positions are byte
//! offsets into the whole query text.

use super::convert::{self, Converted};
use super::lexer::{Kind, Token};

/// What an id-column value is, as far as id generation cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueClass {
    /// `NULL`: generated.
    Null,
    /// `DEFAULT`: generated.
    Default,
    /// A literal, as MariaDB stores it in an integer column (`33.5` is 34,
    /// `' 40'` is 40, `0x21` is 33: [`super::convert`]): generated if 0
    /// (unless `NO_AUTO_VALUE_ON_ZERO`), else an explicit id to observe.
    Int(u64),
    /// A `?` placeholder (prepared statements).
    Param,
    /// Anything else (expressions, variables, negative numbers, strings the
    /// server may refuse): kept, the server decides what is stored.
    Other,
}

/// One value of the id column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value {
    /// First byte of the value.
    pub start: usize,
    /// Just past its last byte (exact for the values [`classify_value`]
    /// classifies, which are the only ones ever replaced).
    pub end: usize,
    /// What it is.
    pub class: ValueClass,
}

/// One row of `VALUES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Offset of the row's closing `)`.
    pub close: usize,
    /// Number of values in it.
    pub count: usize,
    /// The id column's value, when the column is in the row.
    pub id: Option<Value>,
}

/// The `(col, ...)` list after the table name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnList {
    /// Offset of its closing `)`.
    pub close: usize,
    /// Number of columns.
    pub count: usize,
    /// Position of the id column in it, if listed.
    pub id_index: Option<usize>,
}

/// The column list of a row alias: `... AS new(a, b)` (MySQL 8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasColumns {
    /// Offset of its closing `)`.
    pub close: usize,
    /// Number of names.
    pub count: usize,
    /// One of the names equals the id column's name.
    pub has_id_name: bool,
}

/// What follows the table (and column list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// `VALUES (...), (...)` / `VALUE ...`.
    Values(Vec<Row>),
    /// `SET a = 1, b = 2`.
    Set {
        /// The id column's assigned value, if assigned.
        id: Option<Value>,
        /// Just past the last assignment's value.
        end: usize,
    },
}

/// One INSERT/REPLACE into a rule table, as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// The column list, or `None` when absent.
    pub columns: Option<ColumnList>,
    /// Just past the table name (and its `PARTITION (...)`): where a column
    /// list is added when there is none.
    pub after_table: usize,
    /// `VALUES` rows or `SET` assignments.
    pub body: Body,
    /// A row alias's column list.
    pub alias_columns: Option<AliasColumns>,
    /// `INSERT IGNORE`.
    pub ignore: bool,
    /// An `ON DUPLICATE KEY UPDATE` or `RETURNING` clause follows the rows.
    pub clause: bool,
}

/// Compares column names the way MySQL does (case-insensitively).
pub fn same_column(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b) || (!a.is_ascii() && a.to_lowercase() == b.to_lowercase())
}

/// What a converted literal means for the id column.
pub fn class_of(c: Converted) -> ValueClass {
    match c {
        Converted::Int(v) => ValueClass::Int(v),
        // Negative: kept, never a generated id; unknown: the server converts.
        Converted::Negative(_) | Converted::Unknown => ValueClass::Other,
    }
}

/// The text between a string token's quotes, when it has no escape (a
/// backslash) or doubled quote: the bytes the server reads.
fn plain_content<'a>(sql: &'a str, t: &Token) -> Option<&'a str> {
    let s = sql.get(t.start + 1..t.end.checked_sub(1)?)?;
    (!s.contains(['\\', '\'', '"'])).then_some(s)
}

/// Classifies an id-column value from its first two tokens and its token
/// count, converting literals exactly as MariaDB stores them in an integer
/// column ([`super::convert`]): `NULL`, `DEFAULT`, `?`, numbers, strings,
/// `TRUE`/`FALSE`, `0x..`/`0b..`, a signed number (`-0.4`), and prefixed
/// strings (`X'37'`, `b'101'`, `_latin1'61'`, `N'64'`). Anything else is
/// [`ValueClass::Other`].
pub fn classify_value(
    sql: &str,
    first: &Token,
    second: Option<&Token>,
    count: usize,
) -> ValueClass {
    let text = |t: &Token| sql.get(t.start..t.end).unwrap_or("");
    match (count, second) {
        (1, _) => match first.kind {
            Kind::Word if first.is_word(sql, "NULL") => ValueClass::Null,
            Kind::Word if first.is_word(sql, "DEFAULT") => ValueClass::Default,
            Kind::Word => class_of(convert::word(text(first))),
            Kind::Number => class_of(convert::number(text(first), false)),
            Kind::Str => match plain_content(sql, first) {
                Some(s) => class_of(convert::string(s.as_bytes())),
                None => ValueClass::Other,
            },
            Kind::Param => ValueClass::Param,
            _ => ValueClass::Other,
        },
        (2, Some(n)) => match (first.kind, n.kind) {
            (Kind::Punct(sign @ (b'-' | b'+')), Kind::Number) => {
                class_of(convert::number(text(n), sign == b'-'))
            }
            (Kind::Word, Kind::Str) => {
                let prefix = text(first);
                // `X'..'`, `b'..'`, `N'..'` are one literal only when
                // adjacent; an introducer may stand apart.
                let joined = n.start == first.end || prefix.starts_with('_');
                match (joined, plain_content(sql, n)) {
                    (true, Some(s)) if sql.as_bytes().get(n.start) == Some(&b'\'') => {
                        class_of(convert::prefixed(prefix, s))
                    }
                    _ => ValueClass::Other,
                }
            }
            _ => ValueClass::Other,
        },
        _ => ValueClass::Other,
    }
}
