//! Edits: what to splice where in the original text. A plan is a sorted list
//! of edits; rendering copies the text between them unchanged.

/// What goes before a generated id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix {
    /// Nothing: the id replaces a value, or fills an empty row.
    None,
    /// `, ` (appended to a row).
    Comma,
    /// `` , `col` = `` (appended to a `SET` list).
    Assign,
}

/// Where a generated id's value came from in the statement text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdOrigin {
    /// The column was omitted: the id is added.
    Added,
    /// `NULL`, `DEFAULT` or `0` written in the statement.
    Literal,
    /// The client's `?` number `n` (prepared statements).
    ClientParam(usize),
}

/// How the column name is added to a column list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lead {
    /// `` `id` `` (into an empty list).
    None,
    /// `` , `id` ``.
    Comma,
    /// `` (`id`)`` (a new list after the table name).
    Paren,
}

/// One splice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditKind {
    /// A generated id for `slot` (global slot index).
    Id {
        /// Global slot index (into the concatenated ids).
        slot: usize,
        /// First generated id of its statement: written as `LAST_INSERT_ID(id)`.
        first: bool,
        /// Text before the id.
        prefix: Prefix,
        /// What it replaces.
        origin: IdOrigin,
    },
    /// The id column's name added to a column list.
    Column(Lead),
    /// `0` in place of a `DEFAULT` id under NO_AUTO_VALUE_ON_ZERO (MariaDB
    /// stores 0 there; the rule table's column may have no default).
    Zero,
    /// `(@idgate_v<n> := ` before an id value idgate cannot convert before
    /// sending (an expression, a variable, a subquery): the shard stores the
    /// value exactly as without it (an assignment passes its value and type
    /// on), and idgate reads the variable back to observe it. `n` is the
    /// value's byte offset in the query ([`capture_var`]).
    Capture(usize),
    /// The `)` after a captured value.
    CaptureEnd,
    /// After an UPDATE's last assignment: the assignment that records the
    /// highest id it stores (`sql::update`).
    CaptureHighest,
    /// A no-argument `LAST_INSERT_ID()` / `@@identity` / `@@last_insert_id`.
    LastId {
        /// Add `` AS `original text` `` (a whole select-list item).
        alias: bool,
    },
}

/// Replace `start..end` of the text (empty for an insertion) with `kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// First byte replaced (or insertion point).
    pub start: usize,
    /// Just past the last byte replaced (`== start` for an insertion).
    pub end: usize,
    /// What is written there.
    pub kind: EditKind,
}

/// The session variable that captures the id value at byte offset `at`.
pub fn capture_var(at: usize) -> String {
    format!("@idgate_v{at}")
}

/// Writes the text of a capture edit.
pub(crate) fn push_capture(out: &mut String, kind: &EditKind) {
    match kind {
        EditKind::Capture(at) => {
            out.push('(');
            out.push_str(&capture_var(*at));
            out.push_str(" := ");
        }
        EditKind::CaptureEnd => out.push(')'),
        _ => {}
    }
}
