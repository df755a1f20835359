//! The columns of rule tables: their order, for `INSERT INTO t VALUES
//! (...)` without a column list, and their types and collations, for
//! placing rows by a string shard key (`shardkey.rs`); and of other
//! tables a multiplexed session inserts into: which column is
//! AUTO_INCREMENT (`session/mux.rs`).
//!
//! Filled from information_schema on first use and shared by all sessions.
//! Entries expire after [`TTL`], and DDL passing through idgate clears the
//! cache, so a changed table is seen again soon (DDL applied to a shard
//! directly is seen when the entry expires).

use parking_lot::RwLock;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tables by name, hashed with foldhash: the names are those of tables
/// information_schema listed (at most 10,000 kept), looked up at every
/// INSERT a multiplexed session reads for its `LAST_INSERT_ID()` effect,
/// where SipHash's two lookups cost about 400 instructions.
type HashMap<K, V> = foldhash::HashMap<K, V>;

/// How long a table's column order is trusted.
pub const TTL: Duration = Duration::from_secs(10);

/// The type of one column, from information_schema.COLUMNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnType {
    /// `DATA_TYPE`, lower case (`bigint`, `varchar`, `varbinary`...).
    pub data_type: String,
    /// `COLLATION_NAME` (`None` for numbers, dates and binary strings).
    pub collation: Option<String>,
    /// `EXTRA` has `auto_increment`.
    pub auto_increment: bool,
}

/// A table's columns in order, their types (same order; empty when only
/// the names were read), and when they were read.
type Entry = (Arc<[String]>, Arc<[ColumnType]>, Instant);

/// `(schema, table)` -> columns in order.
#[derive(Debug, Default)]
pub struct ColumnCache {
    /// schema -> table -> entry (looked up without building a key).
    map: RwLock<HashMap<String, HashMap<String, Entry>>>,
    /// Tables being read in the background (`session/facts.rs`).
    fetching: parking_lot::Mutex<HashSet<(String, String)>>,
}

impl ColumnCache {
    /// Marks `schema.table` as being read; false when it already is (or
    /// too many are).
    pub fn begin_fetch(&self, schema: &str, table: &str) -> bool {
        let mut f = self.fetching.lock();
        f.len() < 64 && f.insert((schema.to_string(), table.to_string()))
    }

    /// The read of `schema.table` ended (done or failed).
    pub fn end_fetch(&self, schema: &str, table: &str) {
        self.fetching
            .lock()
            .remove(&(schema.to_string(), table.to_string()));
    }

    /// The columns of `schema.table`, if known and fresh.
    pub fn get(&self, schema: &str, table: &str) -> Option<Arc<[String]>> {
        let map = self.map.read();
        let (cols, _, at) = map.get(schema)?.get(table)?;
        (at.elapsed() < TTL).then(|| cols.clone())
    }

    /// The type of column `column` (compared case-insensitively) of
    /// `schema.table`, if known and fresh: `Some(None)` when the table is
    /// known and has no such column.
    pub fn column_type(
        &self,
        schema: &str,
        table: &str,
        column: &str,
    ) -> Option<Option<ColumnType>> {
        let map = self.map.read();
        let (cols, types, at) = map.get(schema)?.get(table)?;
        if at.elapsed() >= TTL || types.len() != cols.len() {
            return None;
        }
        Some(
            cols.iter()
                .position(|c| c.eq_ignore_ascii_case(column))
                .and_then(|i| types.get(i).cloned()),
        )
    }

    /// The position of the AUTO_INCREMENT column of `schema.table`
    /// (`None`: it has none) and its columns in order, if known and fresh.
    pub fn auto_increment(
        &self,
        schema: &str,
        table: &str,
    ) -> Option<(Option<usize>, Arc<[String]>)> {
        let map = self.map.read();
        let (cols, types, at) = map.get(schema)?.get(table)?;
        if at.elapsed() >= TTL || types.len() != cols.len() {
            return None;
        }
        let auto = types.iter().position(|t| t.auto_increment);
        Some((auto, cols.clone()))
    }

    /// Records the columns of `schema.table` and their types (`types` in
    /// the same order as `columns`).
    pub fn put(&self, schema: &str, table: &str, columns: Vec<String>, types: Vec<ColumnType>) {
        let mut map = self.map.write();
        if map.values().map(HashMap::len).sum::<usize>() > 10_000 {
            map.clear();
        }
        map.entry(schema.to_string()).or_default().insert(
            table.to_string(),
            (columns.into(), types.into(), Instant::now()),
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
