//! [`Shape`]: what the planner needs to know about one INSERT/REPLACE,
//! whichever parser found it (the fast path or sqlparser). Positions are byte
//! offsets into the whole query text.

/// What an id-column value is, as far as id generation cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueClass {
    /// `NULL`: generated.
    Null,
    /// `DEFAULT`: generated.
    Default,
    /// An integer literal, or a quoted string of only ASCII digits (MySQL
    /// converts it): generated if 0 (unless `NO_AUTO_VALUE_ON_ZERO`), else an
    /// explicit id to observe.
    Int(u64),
    /// A `?` placeholder (prepared statements).
    Param,
    /// Anything else (expressions, other literals): kept, not observed.
    Other,
}

/// One value of the id column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value {
    /// First byte of the value.
    pub start: usize,
    /// Just past its last byte (exact only for single-token values, which are
    /// the only ones ever replaced).
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

/// Classifies a single-token number or string content as an integer.
pub fn int_of(digits: &str) -> ValueClass {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return ValueClass::Other;
    }
    match digits.parse::<u64>() {
        Ok(v) => ValueClass::Int(v),
        Err(_) => ValueClass::Other,
    }
}
