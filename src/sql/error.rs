//! [`SqlError`]: why a statement on a rule table is refused. Each maps to the
//! MySQL error code and SQLSTATE the client receives, and names the table
//! (and column) involved.

/// MySQL `ER_NOT_SUPPORTED_YET`.
pub const ER_NOT_SUPPORTED_YET: u16 = 1235;
/// MySQL `ER_PARSE_ERROR`.
pub const ER_PARSE_ERROR: u16 = 1064;
/// MySQL `ER_WRONG_VALUE_COUNT_ON_ROW`.
pub const ER_WRONG_VALUE_COUNT_ON_ROW: u16 = 1136;
/// MySQL `ER_BAD_FIELD_ERROR`.
pub const ER_BAD_FIELD_ERROR: u16 = 1054;
/// MySQL `ER_NO_DB_ERROR`.
pub const ER_NO_DB_ERROR: u16 = 1046;
/// MySQL `ER_WRONG_ARGUMENTS` (used for a bad execute-time call).
pub const ER_WRONG_ARGUMENTS: u16 = 1210;

/// A statement idgate refuses instead of forwarding it without its id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqlError {
    /// A form idgate cannot fill ids for (INSERT ... SELECT, LOAD DATA,
    /// executable comments, SQL-level PREPARE, stored programs...).
    #[error("idgate: {what} on table {table} is not supported: it could not fill column {column} (table has an idgate id rule)")]
    Unsupported {
        /// What was attempted, e.g. "INSERT ... SELECT".
        what: String,
        /// The rule table, as `schema.table` or `table`.
        table: String,
        /// The column idgate fills.
        column: String,
    },
    /// A write of ids through an updatable view over a rule table
    /// ([`crate::rules::views`]).
    #[error("idgate: {what} through view {view} is not supported: it reaches rule table {table}, whose column {column} idgate fills, without idgate; write to {table} itself (or make the view read-only: ALGORITHM = TEMPTABLE)")]
    ThroughView {
        /// What was attempted, e.g. "an INSERT".
        what: String,
        /// The view, `schema.view`.
        view: String,
        /// The rule table underneath.
        table: String,
        /// Its id column.
        column: String,
    },
    /// `PREPARE ... FROM` / `EXECUTE IMMEDIATE` whose statement idgate
    /// cannot read before it runs (while rules are configured it could
    /// write a rule table without its ids).
    #[error("idgate: {what} is not supported {why}; {remedy}")]
    DynamicSource {
        /// `SQL-level PREPARE` or `EXECUTE IMMEDIATE`.
        what: String,
        /// Why its text cannot be read.
        why: String,
        /// What to send instead.
        remedy: String,
    },
    /// The statement on a rule table could not be parsed.
    #[error("idgate: cannot parse the statement on table {table} ({reason}); it was not forwarded because column {column} could not be filled")]
    Syntax {
        /// The rule table.
        table: String,
        /// The column idgate fills.
        column: String,
        /// What the parser said.
        reason: String,
    },
    /// A row has a different number of values than the column list.
    #[error("Column count doesn't match value count at row {row} (table {table})")]
    ColumnCount {
        /// The rule table.
        table: String,
        /// 1-based row number.
        row: usize,
    },
    /// The rule's column is not a column of the table (from its column list
    /// in information_schema).
    #[error("idgate: unknown column '{column}' in table {table}: the id rule names a column the table does not have")]
    UnknownColumn {
        /// The rule table.
        table: String,
        /// The rule's column.
        column: String,
    },
    /// A row of an INSERT into a table sharded by another column than the
    /// id gives that column no value idgate can place the row by.
    #[error("idgate: row {row} of the INSERT into sharded table {table} {reason}; its shard key column {column} decides the shard it goes to (write a literal, or bind a parameter)")]
    ShardKey {
        /// The rule table.
        table: String,
        /// The shard key column.
        column: String,
        /// 1-based row number.
        row: usize,
        /// What the row gives the column.
        reason: &'static str,
    },
    /// `INSERT INTO t VALUES ...` with no current database and no schema.
    #[error("No database selected (INSERT into {table})")]
    NoDatabase {
        /// The table named by the statement.
        table: String,
    },
    /// A prepared-statement execute helper was called with the wrong number
    /// of ids.
    #[error("idgate: {needed} ids needed for table {table}, {given} given")]
    IdCount {
        /// The rule table.
        table: String,
        /// Ids the execute needs.
        needed: usize,
        /// Ids given.
        given: usize,
    },
}

impl SqlError {
    /// The MySQL error code sent to the client.
    pub fn code(&self) -> u16 {
        match self {
            SqlError::Unsupported { .. }
            | SqlError::ThroughView { .. }
            | SqlError::DynamicSource { .. }
            | SqlError::ShardKey { .. } => ER_NOT_SUPPORTED_YET,
            SqlError::Syntax { .. } => ER_PARSE_ERROR,
            SqlError::ColumnCount { .. } => ER_WRONG_VALUE_COUNT_ON_ROW,
            SqlError::UnknownColumn { .. } => ER_BAD_FIELD_ERROR,
            SqlError::NoDatabase { .. } => ER_NO_DB_ERROR,
            SqlError::IdCount { .. } => ER_WRONG_ARGUMENTS,
        }
    }

    /// The SQLSTATE sent with [`SqlError::code`].
    pub fn sqlstate(&self) -> &'static str {
        match self {
            SqlError::Unsupported { .. }
            | SqlError::ThroughView { .. }
            | SqlError::DynamicSource { .. }
            | SqlError::Syntax { .. }
            | SqlError::ShardKey { .. } => "42000",
            SqlError::ColumnCount { .. } => "21S01",
            SqlError::UnknownColumn { .. } => "42S22",
            SqlError::NoDatabase { .. } => "3D000",
            SqlError::IdCount { .. } => "HY000",
        }
    }
}

/// Why planning stopped early.
#[doc(hidden)]
pub enum Stop {
    /// [`super::Plan::NeedColumns`].
    Need {
        /// Schema.
        schema: String,
        /// Table.
        table: String,
    },
    /// Refused.
    Err(SqlError),
}

impl From<SqlError> for Stop {
    fn from(e: SqlError) -> Stop {
        Stop::Err(e)
    }
}
