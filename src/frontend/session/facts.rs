//! What idgate reads of a session from its default shard when it needs it:
//! the `sql_mode` flags, a session variable, the current schema, and the
//! columns of a table (into the shared cache). Every handler that plans or
//! places a statement uses these, so they live in the core.

use crate::frontend::columns::ColumnType;
use crate::frontend::session::{CmdError, Session};
use crate::frontend::shared::Shared;
use crate::protocol::codes::ErrorCode;
use crate::sql::SqlModes;
use std::sync::Arc;

/// Table doesn't exist (an INSERT without column list into a missing table).
const ER_NO_SUCH_TABLE: ErrorCode = ErrorCode {
    code: 1146,
    state: "42S02",
};

/// Escapes a string for a single-quoted SQL literal.
fn quote_string(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\'', "''")
}

impl Session {
    /// The session's `sql_mode` flags, read from the default shard when not
    /// known (a new shard connection, or after a statement that set it).
    /// A pooled connection remembers what was read on it while its state
    /// stays the same (`BackendConn::sql_modes`): a new session on it
    /// reads nothing, which saves a round trip per login.
    pub(in crate::frontend) async fn sql_modes(&mut self) -> Result<SqlModes, CmdError> {
        if let Some(m) = self.sql_modes {
            return Ok(m);
        }
        let tag = self.state_tag();
        let known = self.backend(0).await.map_err(CmdError::Backend)?.sql_modes;
        let m = match known {
            Some((t, m)) if t == tag && tag != u64::MAX => m,
            _ => {
                let m = SqlModes::parse(&self.first_value("SELECT @@SESSION.sql_mode").await?);
                if let Some(b) = self.backends.get_mut(0) {
                    b.sql_modes = Some((tag, m));
                }
                m
            }
        };
        self.sql_modes = Some(m);
        Ok(m)
    }
    /// The first value of the first row `sql` returns on the default
    /// shard (a session variable); empty for NULL or no row.
    /// Boxed inside: asked once and then known (`engine/size_tests.rs`).
    pub(in crate::frontend) async fn first_value(&mut self, sql: &str) -> Result<String, CmdError> {
        Box::pin(async move {
            let b = self.backend(0).await.map_err(CmdError::Backend)?;
            let rows = b.query_rows(sql).await.map_err(CmdError::Backend)?;
            Ok(rows
                .first()
                .and_then(|r| r.first().cloned().flatten())
                .unwrap_or_default())
        })
        .await
    }
    /// `MAX(column)` of `schema.table` on `shard` (`column` quoted);
    /// `None` when the table is empty, holds no number there, or does not
    /// exist on that shard.
    pub(in crate::frontend) async fn highest_id(
        &mut self,
        shard: usize,
        schema: &str,
        table: &str,
        column: &str,
    ) -> Result<Option<u64>, crate::backend::BackendError> {
        let q = format!(
            "SELECT MAX({column}) FROM `{}`.`{}`",
            schema.replace('`', "``"),
            table.replace('`', "``")
        );
        match self.own_query(shard, &q).await {
            Ok(rows) => Ok(rows
                .first()
                .and_then(|r| r.first().cloned().flatten())
                .and_then(|m| m.parse::<u64>().ok())),
            Err(crate::backend::BackendError::Server { err, .. }) if err.code == 1146 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads the columns of `schema.table` (order, types, collations) into
    /// the shared cache.
    pub(in crate::frontend) async fn fetch_columns(
        &mut self,
        schema: &str,
        table: &str,
    ) -> Result<(), CmdError> {
        self.fetch_columns_via(schema, table, false).await
    }

    /// [`Session::fetch_columns`]; `side`: on a connection of its own (the
    /// session's are busy, e.g. reading a scattered SELECT's rows).
    pub(in crate::frontend) async fn fetch_columns_via(
        &mut self,
        schema: &str,
        table: &str,
        side: bool,
    ) -> Result<(), CmdError> {
        // Boxed: a cache miss, rare (`engine/size_tests.rs`).
        Box::pin(self.fetch_columns_now(schema, table, side)).await
    }

    async fn fetch_columns_now(
        &mut self,
        schema: &str,
        table: &str,
        side: bool,
    ) -> Result<(), CmdError> {
        let q = columns_query(schema, table);
        // The `[backend]` account's view: the cache is every session's, and
        // a user's own shard account may see fewer columns.
        let rows = if side {
            let mut c = self
                .shared
                .side_connection(0)
                .await
                .map_err(CmdError::Backend)?;
            let rows = c.query_rows(&q).await;
            let _ = c.send(&[crate::protocol::consts::cmd::QUIT]).await;
            rows
        } else {
            self.own_query(0, &q).await
        }
        .map_err(CmdError::Backend)?;
        if !put_columns(&self.shared, schema, table, rows) {
            return Err(CmdError::Refused(
                ER_NO_SUCH_TABLE,
                format!("Table '{schema}.{table}' doesn't exist"),
            ));
        }
        Ok(())
    }

    /// Reads the session's current schema back from the default shard (after
    /// a query that may have run `USE` among other statements).
    pub(in crate::frontend) async fn refresh_schema(&mut self) -> Result<(), CmdError> {
        let b = self.backend(0).await.map_err(CmdError::Backend)?;
        let rows = b
            .query_rows("SELECT DATABASE()")
            .await
            .map_err(CmdError::Backend)?;
        self.schema = rows.first().and_then(|r| r.first().cloned().flatten());
        Ok(())
    }
}

/// The information_schema query for a table's columns, in order.
fn columns_query(schema: &str, table: &str) -> String {
    format!(
        "SELECT COLUMN_NAME, LOWER(DATA_TYPE), COLLATION_NAME, LOCATE('auto_increment', EXTRA) > 0 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{}' AND TABLE_NAME = '{}' ORDER BY ORDINAL_POSITION",
        quote_string(schema),
        quote_string(table)
    )
}

/// Puts the rows of [`columns_query`] into the shared cache; false when
/// there were none (no such table).
fn put_columns(shared: &Shared, schema: &str, table: &str, rows: Vec<Vec<Option<String>>>) -> bool {
    let mut cols = Vec::with_capacity(rows.len());
    let mut types = Vec::with_capacity(rows.len());
    for r in rows {
        let mut r = r.into_iter();
        let Some(Some(name)) = r.next() else { continue };
        cols.push(name);
        types.push(ColumnType {
            data_type: r.next().flatten().unwrap_or_default(),
            collation: r.next().flatten(),
            auto_increment: r.next().flatten().as_deref() == Some("1"),
        });
    }
    if cols.is_empty() {
        return false;
    }
    shared.columns.put(schema, table, cols, types);
    true
}

/// Reads the columns of `schema.table` into the shared cache in the
/// background, on a connection of idgate's own (a session must not run
/// statements of idgate's on its connection after the client's: the
/// client may still ask for `ROW_COUNT()` or the warnings). One read per
/// table at a time; a failure leaves the table unknown.
pub(in crate::frontend) fn fetch_columns_later(
    shared: &Arc<Shared>,
    schema: String,
    table: String,
) {
    if !shared.columns.begin_fetch(&schema, &table) {
        return;
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        let q = columns_query(&schema, &table);
        if let Ok(mut c) = shared.side_connection(0).await {
            if let Ok(rows) = c.query_rows(&q).await {
                put_columns(&shared, &schema, &table, rows);
            }
            let _ = c.send(&[crate::protocol::consts::cmd::QUIT]).await;
        }
        shared.columns.end_fetch(&schema, &table);
    });
}
