//! The column order of rule tables, for `INSERT INTO t VALUES (...)`
//! without a column list.
//!
//! Filled from information_schema on first use and shared by all sessions.
//! Entries expire after [`TTL`], and DDL passing through idgate clears the
//! cache, so a changed table is seen again soon (DDL applied to a shard
//! directly is seen when the entry expires).

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a table's column order is trusted.
pub const TTL: Duration = Duration::from_secs(10);

/// A table's columns in order, and when they were read.
type Entry = (Arc<[String]>, Instant);

/// `(schema, table)` -> columns in order.
#[derive(Debug, Default)]
pub struct ColumnCache {
    map: RwLock<HashMap<(String, String), Entry>>,
}

impl ColumnCache {
    /// The columns of `schema.table`, if known and fresh.
    pub fn get(&self, schema: &str, table: &str) -> Option<Arc<[String]>> {
        let map = self.map.read();
        let (cols, at) = map.get(&(schema.to_string(), table.to_string()))?;
        (at.elapsed() < TTL).then(|| cols.clone())
    }

    /// Records the columns of `schema.table`.
    pub fn put(&self, schema: &str, table: &str, columns: Vec<String>) {
        let mut map = self.map.write();
        if map.len() > 10_000 {
            map.clear();
        }
        map.insert(
            (schema.to_string(), table.to_string()),
            (columns.into(), Instant::now()),
        );
    }

    /// Forgets everything (after DDL).
    pub fn clear(&self) {
        let mut map = self.map.write();
        if !map.is_empty() {
            map.clear();
        }
    }
}
