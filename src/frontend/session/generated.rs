//! What a multiplexed INSERT into a table idgate does not fill does to
//! the session's `LAST_INSERT_ID()` (`sql::autoinc`), known from the
//! statement and the table's AUTO_INCREMENT column:
//! - MariaDB generates every id: the OK packet's last insert id is the
//!   new value. The session knows it and gives the connection back
//!   without a claim, so the next session to take it reads nothing first.
//! - No id is generated (explicit ids, or no AUTO_INCREMENT column): the
//!   value stays the session's, whatever the connection held before.
//! - Unknown (a placeholder or an expression in the id column, INSERT ...
//!   SELECT, REPLACE, a table not known yet): the connection is given the
//!   session's value before the statement, as for a statement that reads
//!   it, and claimed after it (`mux.rs`, `backend/lidclaim.rs`); whatever
//!   the statement did, the connection then holds the session's value.
//!
//! Which column is AUTO_INCREMENT comes from the shared column cache
//! (`frontend/columns.rs`: information_schema on shard 0, trusted for its
//! TTL, cleared by DDL through idgate), with the session's `sql_mode`
//! when idgate read it (or, before, what every mode reads alike). Nothing
//! is read for it on the session's connection: an unknown table is read
//! in the background for the next INSERT, and until then the INSERT's
//! effect is unknown.

use crate::frontend::session::facts::fetch_columns_later;
use crate::frontend::session::stmt::Statements;
use crate::frontend::session::Session;
use crate::protocol::consts::cmd;
use crate::sql::autoinc::{self, LastId};
use crate::sql::statement::keyword::first_keyword;

/// The statement text of a COM_QUERY or of a prepared statement's execute.
fn command_text<'a>(stmts: &'a mut Statements, payload: &'a [u8]) -> Option<&'a [u8]> {
    match payload.first() {
        Some(&cmd::QUERY) => payload.get(1..),
        Some(&cmd::STMT_EXECUTE) => {
            let sid = crate::protocol::stmt::stmt_id(payload.get(1..)?).ok()?;
            stmts.get_mut(sid)?.client_prepare.get(1..)
        }
        _ => None,
    }
}

impl Session {
    /// Before a command of a multiplexed session that does not name
    /// `LAST_INSERT_ID`: whether it is an INSERT or REPLACE that may leave
    /// the connection's value as it was (so the session's must be there
    /// first). Notes what is known for [`Session::note_generated`].
    pub(in crate::frontend) fn insert_may_keep_lid(&mut self, payload: &[u8]) -> bool {
        self.mux.lid_effect = None;
        let Some(text) = command_text(&mut self.stmts, payload) else {
            return false;
        };
        if !matches!(&first_keyword(text), b"INSERT\0\0" | b"REPLACE\0") {
            return false;
        }
        let Ok(sql) = std::str::from_utf8(text) else {
            return true;
        };
        let target = match self.sql_modes {
            Some(m) => autoinc::insert_target(sql, m),
            None => autoinc::insert_target_in_every_mode(sql),
        };
        let Some(target) = target else {
            return true;
        };
        let Some(schema) = target.schema.as_deref().or(self.schema.as_deref()) else {
            return true;
        };
        if self
            .rules
            .as_ref()
            .is_some_and(|r| r.entry(Some(schema), &target.table).is_some())
        {
            // A rule table: idgate fills the ids and knows the value.
            return false;
        }
        let Some((column, columns)) = self.shared.columns.auto_increment(schema, &target.table)
        else {
            return true;
        };
        let effect = match self.sql_modes {
            Some(m) => Some(autoinc::effect(sql, m, column.as_deref(), &columns)),
            None => autoinc::effect_in_every_mode(sql, column.as_deref(), &columns),
        };
        self.mux.lid_effect = effect;
        !matches!(effect, Some(LastId::Generated | LastId::Kept))
    }

    /// After an INSERT of a multiplexed session that did not name
    /// `LAST_INSERT_ID` and whose ids idgate did not fill: what it did to
    /// the session's value. Generated: the value is the OK packet's
    /// (noted, `lid_given`). Returns whether the value is known to be
    /// unchanged or noted, so nothing is to be claimed.
    pub(in crate::frontend) fn note_generated(&mut self, payload: &[u8]) -> bool {
        let effect = match self.mux.lid_effect.take() {
            Some(e) => e,
            None => {
                self.learn_table(payload);
                LastId::Unknown
            }
        };
        match effect {
            LastId::Kept => true,
            LastId::Unknown => false,
            LastId::Generated => {
                let one = {
                    let mut with_id = self.backends.open().filter(|(_, b)| b.insert_id != 0);
                    match (with_id.next(), with_id.next()) {
                        (Some((shard, b)), None) => Some((shard, b.insert_id)),
                        _ => None,
                    }
                };
                let Some((shard, id)) = one else {
                    return false;
                };
                self.lid_given(shard, id);
                true
            }
        }
    }

    /// After an INSERT whose effect was not known before it ran: the
    /// table's columns are read in the background (on a connection of
    /// idgate's own: the client may still ask its connection for
    /// `ROW_COUNT()` or the warnings), for the next INSERT into it.
    fn learn_table(&mut self, payload: &[u8]) {
        let modes = self.sql_modes;
        let Some(text) = command_text(&mut self.stmts, payload) else {
            return;
        };
        let Ok(sql) = std::str::from_utf8(text) else {
            return;
        };
        let target = match modes {
            Some(m) => autoinc::insert_target(sql, m),
            None => autoinc::insert_target_in_every_mode(sql),
        };
        let Some(target) = target else {
            return;
        };
        let Some(schema) = target.schema.as_deref().or(self.schema.as_deref()) else {
            return;
        };
        if self
            .shared
            .columns
            .auto_increment(schema, &target.table)
            .is_none()
        {
            fetch_columns_later(&self.shared, schema.to_string(), target.table.into_owned());
        }
    }
}
