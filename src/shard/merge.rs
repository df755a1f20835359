//! Merging result sets from several shards into the one the client sees.
//!
//! The types here are the contract between the SQL analysis
//! (`sql::route`, which finds what a scattered SELECT needs) and the merge
//! itself (being written).

/// A select-list column, as ORDER BY names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnRef {
    /// 0-based position in the result set's columns (`ORDER BY 2` is `Position(1)`).
    Position(usize),
    /// A column name or alias, matched (case-insensitively) against the
    /// result set's column names (the alias, then the original name).
    Name(String),
}

/// One ORDER BY key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderKey {
    /// Which result column.
    pub column: ColumnRef,
    /// `DESC`.
    pub desc: bool,
}

/// How one select-list column combines across shards when the query has
/// aggregates and no GROUP BY (each shard returns one row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    /// `COUNT(...)`: summed.
    Count,
    /// `SUM(...)`: summed (exactly, for integers and decimals); NULLs skipped.
    Sum,
    /// `MIN(...)`.
    Min,
    /// `MAX(...)`.
    Max,
    /// Not an aggregate (a constant): the first shard's value.
    First,
}

/// What a scattered SELECT needs from the merge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MergeSpec {
    /// ORDER BY keys, outermost first (empty: rows in shard order).
    pub order_by: Vec<OrderKey>,
    /// LIMIT, applied after the merge.
    pub limit: Option<u64>,
    /// OFFSET, applied after the merge (shards are sent `LIMIT offset+limit`
    /// with no offset).
    pub offset: u64,
    /// `Some`: aggregates without GROUP BY, one entry per select-list column;
    /// every shard returns one row and the client gets one row.
    pub aggregates: Option<Vec<Agg>>,
}

impl MergeSpec {
    /// Rows can be relayed shard after shard as they come: no ordering,
    /// limit or aggregate to apply.
    pub fn is_concat(&self) -> bool {
        self.order_by.is_empty()
            && self.limit.is_none()
            && self.offset == 0
            && self.aggregates.is_none()
    }
}
