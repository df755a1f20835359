//! The session's `LAST_INSERT_ID()` across shard connections.
//!
//! MariaDB keeps `LAST_INSERT_ID()` per connection, and a session's rows may
//! go to several shards. idgate remembers which shard connection holds the
//! session's current value (its "home": where the last statement that could
//! change it ran) and which others hold the same value. Before a statement
//! that reads it goes to a shard that does not, the value is copied there
//! (`SELECT LAST_INSERT_ID()` on the home shard, `DO LAST_INSERT_ID(v)` on
//! the target), so `LAST_INSERT_ID()` tells the truth wherever it runs.

use crate::frontend::session::generated::Known;
use crate::frontend::session::{CmdError, Session};
use crate::sql::autoinc::LastId;
use crate::sql::statement::keyword::{contains_ignore_case, first_keyword};

/// Shard bits in the "holds the current value" mask; shards beyond it are
/// always synchronised before a read.
const MASK_BITS: usize = 64;

fn bit(shard: usize) -> u64 {
    if shard < MASK_BITS {
        1 << shard
    } else {
        0
    }
}

/// Whether a statement reads or sets the last insert id by name.
fn mentions(sql: &[u8]) -> bool {
    contains_ignore_case(sql, b"last_insert_id") || contains_ignore_case(sql, b"@@identity")
}

impl Session {
    /// `shard` now holds the session's last insert id, and no other does.
    pub(in crate::frontend) fn last_id_home(&mut self, shard: usize) {
        self.lid_home = shard;
        self.lid_synced = bit(shard);
    }

    /// After `sql` ran on `shard`: if it may have changed the last insert
    /// id (an INSERT/REPLACE, or `LAST_INSERT_ID(expr)`), `shard` is home.
    pub(in crate::frontend) fn note_last_id_change(&mut self, shard: usize, sql: &[u8]) {
        if self.lid_home == shard && self.lid_synced == bit(shard) {
            return; // nothing it could change
        }
        // An INSERT in an executable comment (`/*! INSERT ... */`) is one.
        let first = first_keyword(&crate::sql::statement::keyword::executed(sql));
        if matches!(&first, b"INSERT\0\0" | b"REPLACE\0") || mentions(sql) {
            self.last_id_home(shard);
        }
    }

    /// After `sql`, which generated no id, ran on `shard`: `shard` is home
    /// only if `sql` sets the last insert id by name (`LAST_INSERT_ID(expr)`).
    pub(in crate::frontend) fn note_last_id_set(&mut self, shard: usize, sql: &[u8]) {
        if mentions(sql) {
            self.last_id_home(shard);
        }
    }

    /// Under routing, before INSERT `sql` into a table without rules runs
    /// on `shard`: whether it keeps the session's last insert id (explicit
    /// ids only, or no AUTO_INCREMENT column: `sql::autoinc`), so that
    /// `shard` does not become home ([`Session::note_last_id_set`]). A
    /// table whose columns are not cached is read first, on a connection
    /// of idgate's own (the session's may hold the client's
    /// `FOUND_ROWS()`). Nothing is looked at when `shard` is home and the
    /// only connection with the value: keeping or changing it is the same.
    pub(in crate::frontend) async fn insert_keeps_last_id(
        &mut self,
        shard: usize,
        sql: &[u8],
    ) -> bool {
        if self.lid_home == shard && self.lid_synced == bit(shard) {
            return false;
        }
        if !matches!(&first_keyword(sql), b"INSERT\0\0" | b"REPLACE\0") {
            return false;
        }
        let Ok(text) = std::str::from_utf8(sql) else {
            return false;
        };
        let known = match self.insert_effect(text, None) {
            Known::Unread { schema, table } => {
                if self.fetch_columns_via(&schema, &table, true).await.is_err() {
                    return false;
                }
                self.insert_effect(text, None)
            }
            known => known,
        };
        matches!(known, Known::Effect(Some(LastId::Kept)))
    }

    /// Before `sql` goes to `shard`: if it reads the last insert id and that
    /// connection does not hold the session's value, copies it there.
    pub(in crate::frontend) async fn sync_last_id(
        &mut self,
        shard: usize,
        sql: &[u8],
    ) -> Result<(), CmdError> {
        if self.lid_synced & bit(shard) != 0 || shard == self.lid_home || !mentions(sql) {
            return Ok(());
        }
        let home = self.lid_home;
        let Some(b) = self.backends.get_mut(home) else {
            // The home connection is gone, and its value with it.
            return Ok(());
        };
        let value = crate::frontend::session::lidread::query_lid(b)
            .await
            .map_err(CmdError::Backend)?;
        self.set_last_insert_id(shard, value).await?;
        self.lid_synced |= bit(shard);
        Ok(())
    }

    /// Gives the shard's session `id` as its last insert id, so
    /// `LAST_INSERT_ID()` returns it (`DO` keeps the statement's warnings).
    /// Detached: its reply is read before the next command to the shard.
    pub(in crate::frontend) async fn set_last_insert_id(
        &mut self,
        shard: usize,
        id: u64,
    ) -> Result<(), CmdError> {
        let b = self.backend(shard).await.map_err(CmdError::Backend)?;
        let q = format!("\x03DO LAST_INSERT_ID({id})");
        b.send_detached(q.as_bytes())
            .await
            .map_err(CmdError::Backend)?;
        self.lid_given(shard, id);
        Ok(())
    }
}
