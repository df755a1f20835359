//! Which column references mean a table's shard key, shared by both paths.
//!
//! A reference `key`, `q.key` or `schema.table.key` names the key of a table
//! of the same query block when: unqualified and the column is the table's
//! key (if another table of the block has a column of that name, MariaDB
//! rejects the statement as ambiguous, so nothing is routed wrongly); or
//! qualified by the table's alias, or by its name (and schema) when it has no
//! alias. Column names compare case-insensitively, qualifiers exactly (a
//! qualifier in another case only leaves the key unbound).

use std::sync::Arc;

use super::super::shape::same_column;
use super::{KeyArg, KeyBound, TableUse};

/// A table of the query block being analyzed, with what binds its key.
#[derive(Debug)]
pub(super) struct BlockTable {
    pub schema: Option<String>,
    pub table: String,
    pub alias: Option<String>,
    /// Where its name starts (to list tables in text order).
    pub pos: usize,
    /// The shard key column, for sharded tables.
    pub key: Option<Arc<str>>,
    /// The binding conjunct with the fewest values so far (each is a
    /// superset of the rows' keys; the first on a tie).
    pub best: Option<Vec<KeyArg>>,
}

impl BlockTable {
    pub fn new(
        schema: Option<String>,
        table: String,
        alias: Option<String>,
        pos: usize,
        shard_key: super::ShardKeyFn<'_>,
    ) -> BlockTable {
        let key = shard_key(schema.as_deref(), &table);
        BlockTable {
            schema,
            table,
            alias,
            pos,
            key,
            best: None,
        }
    }

    /// Whether the qualifier parts (all but the column) name this table.
    fn qualified_by<S: AsRef<str>>(&self, qual: &[S]) -> bool {
        match qual {
            [] => true,
            [q] => match &self.alias {
                Some(a) => a == q.as_ref(),
                None => self.table == q.as_ref(),
            },
            [s, t] => {
                self.alias.is_none()
                    && self.schema.as_deref() == Some(s.as_ref())
                    && self.table == t.as_ref()
            }
            _ => false,
        }
    }

    /// Whether `parts` (qualifiers then the column) is this table's shard key.
    pub fn is_key<S: AsRef<str>>(&self, parts: &[S]) -> bool {
        let (Some(key), Some((col, qual))) = (&self.key, parts.split_last()) else {
            return false;
        };
        same_column(col.as_ref(), key) && self.qualified_by(qual)
    }

    /// The table's use, its key bound by the best binding conjunct.
    pub fn into_use(self, in_subquery: bool) -> TableUse {
        TableUse {
            schema: self.schema,
            table: self.table,
            key: self.best.map_or(KeyBound::Unbound, KeyBound::Values),
            in_subquery,
        }
    }
}

/// Records that the conjunct `parts = values` / `parts IN (values)` holds.
pub(super) fn offer<S: AsRef<str>>(tables: &mut [BlockTable], parts: &[S], values: &[KeyArg]) {
    for t in tables.iter_mut() {
        if t.is_key(parts) && t.best.as_ref().is_none_or(|b| values.len() < b.len()) {
            t.best = Some(values.to_vec());
        }
    }
}

/// Whether `SET parts = ...` assigns the shard key of one of the updated
/// `tables`. A qualifier that names none of them counts for any of them.
pub(super) fn sets_key<S: AsRef<str>>(tables: &[BlockTable], parts: &[S]) -> bool {
    let Some((col, qual)) = parts.split_last() else {
        return false;
    };
    let named: Vec<&BlockTable> = tables.iter().filter(|t| t.qualified_by(qual)).collect();
    let candidates: Vec<&BlockTable> = if named.is_empty() {
        tables.iter().collect()
    } else {
        named
    };
    candidates.iter().any(|t| {
        t.key
            .as_deref()
            .is_some_and(|k| same_column(col.as_ref(), k))
    })
}
