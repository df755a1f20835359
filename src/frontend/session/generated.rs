//! What a multiplexed INSERT into a table idgate does not fill does to
//! the session's `LAST_INSERT_ID()` (`sql::autoinc`), known from the
//! statement and the table's AUTO_INCREMENT column:
//! - MariaDB generates every id: the OK packet's last insert id is the
//!   new value. The session knows it and gives the connection back
//!   without a claim, so the next session to take it reads nothing first.
//! - No id is generated (explicit ids, or no AUTO_INCREMENT column): the
//!   value stays the session's, whatever the connection held before.
//! - Unknown (a placeholder or an expression in the id column, INSERT ...
//!   SELECT naming it, REPLACE, a table not known yet): a connection that
//!   does not hold the session's value is given it before the statement,
//!   as for a statement that reads it, and the value is claimed after it
//!   (`mux.rs`, `backend/lidclaim.rs`): whatever the statement did, the
//!   connection then holds the session's value.
//!
//! The statement is looked at before it runs only when its connection
//! holds another value (for the claim to be right), and after it only
//! when another session is likely to take the connection next (one is
//! waiting for it, or takers of the pool had to read a value in its last
//! [`LOOK_FOR`] give-backs): reading the statement costs about a
//! microsecond, which a session that takes its own connection back, the
//! usual case, would pay for nothing. A query the planner passed on (an
//! INSERT into a table without rules) is read on from where the planner
//! stopped, after its table name (`sql::autoinc::resume`).
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
use crate::sql::autoinc::{self, LastId, Read};
use crate::sql::statement::keyword::first_keyword;
use std::sync::atomic::Ordering;

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

/// What idgate knows of what an INSERT does to `LAST_INSERT_ID()`
/// ([`Session::insert_effect`]).
pub(in crate::frontend) enum Known {
    /// Into a rule table: idgate fills the ids.
    Rule,
    /// From the statement and its table's columns (`None`: unknown).
    Effect(Option<LastId>),
    /// The table's columns are not in the cache.
    Unread { schema: String, table: String },
    /// Not an INSERT idgate reads (or no schema).
    NoTarget,
}

/// Give-backs (of the pool's connections) for which inserting sessions
/// look at their statements after a taker had to read a value another
/// session left on a connection.
///
/// Sized by what each costs: a read is a round trip to the shard
/// (`SELECT LAST_INSERT_ID()`, some 30-50 µs of the machine's CPU and a
/// wait for the taker), a look about a microsecond per INSERT. Takers
/// that read more often than once per this many give-backs keep inserting
/// sessions looking all the time; rarer reads turn it on for a short
/// while. With 1000, a handful of sessions that kept taking each other's
/// connections (128 sysbench clients with `pool_max = 200`: 134 reads in
/// 216,560 give-backs) kept every INSERT looked at most of the time, for
/// about 2,200 instructions each.
pub const LOOK_FOR: u64 = 64;

impl Session {
    /// Before a command: notes an INSERT or REPLACE of a multiplexed
    /// session that does not name `LAST_INSERT_ID` (its text kept; it is
    /// read only when it matters: [`Session::restore_for_insert`],
    /// [`Session::note_generated`]).
    pub(in crate::frontend) fn note_insert(&mut self, payload: &[u8]) {
        let m = &mut self.mux;
        m.insert_pending = false;
        m.insert_classified = false;
        m.lid_effect = None;
        m.insert_rule = false;
        m.insert_read = None;
        if m.want_lid || !self.shared.config.backend.multiplex {
            return;
        }
        let Some(text) = command_text(&mut self.stmts, payload) else {
            return;
        };
        if !matches!(&first_keyword(text), b"INSERT\0\0" | b"REPLACE\0") {
            return;
        }
        self.mux.insert_text.clear();
        self.mux.insert_text.extend_from_slice(text);
        self.mux.insert_pending = true;
    }

    /// What the pending INSERT does to `LAST_INSERT_ID()`, from what is
    /// known now (`None`: unknown). A table not known yet is read in the
    /// background for the next INSERT. Looked at once per statement.
    fn classify_insert(&mut self) -> Option<LastId> {
        if self.mux.insert_classified {
            return self.mux.lid_effect;
        }
        self.mux.insert_classified = true;
        let known = match std::str::from_utf8(&self.mux.insert_text) {
            Ok(sql) => self.insert_effect(sql, self.mux.insert_read.as_ref()),
            Err(_) => Known::NoTarget,
        };
        let effect = match known {
            Known::Effect(e) => e,
            Known::Rule => {
                // A rule table: idgate fills the ids and knows the value.
                self.mux.insert_rule = true;
                None
            }
            Known::Unread { schema, table } => {
                fetch_columns_later(&self.shared, schema, table);
                None
            }
            Known::NoTarget => None,
        };
        self.mux.lid_effect = effect.filter(|e| *e != LastId::Unknown);
        self.mux.lid_effect
    }

    /// What INSERT (or REPLACE) `sql` does to `LAST_INSERT_ID()`, from its
    /// text, the session's `sql_mode` when idgate read it (otherwise what
    /// every mode reads alike) and the cached columns of its table.
    ///
    /// Where the planner read the INSERT up to its table and passed it on
    /// (`read`, with the `sql_mode` known), the reading goes on from there:
    /// the planner found no rule for the table.
    pub(in crate::frontend) fn insert_effect(&self, sql: &str, read: Option<&Read>) -> Known {
        let modes = self.sql_modes;
        // Read once: its table here, then its rows for the effect.
        let (insert, planned) = match (modes, read) {
            (Some(_), Some(r)) => (autoinc::resume(sql, r), true),
            (Some(m), None) => (autoinc::insert(sql, m), false),
            (None, _) => (autoinc::insert_in_every_mode(sql), false),
        };
        let Some(insert) = insert else {
            return Known::NoTarget;
        };
        let target = &insert.target;
        let Some(schema) = target.schema.as_deref().or(self.schema.as_deref()) else {
            return Known::NoTarget;
        };
        if !planned
            && self
                .rules
                .as_ref()
                .is_some_and(|r| r.entry(Some(schema), &target.table).is_some())
        {
            return Known::Rule;
        }
        let Some((column, columns)) = self.shared.columns.auto_increment(schema, &target.table)
        else {
            return Known::Unread {
                schema: schema.to_string(),
                table: target.table.to_string(),
            };
        };
        let column = column.and_then(|i| columns.get(i)).map(String::as_str);
        Known::Effect(match modes {
            Some(m) => Some(insert.effect(column, &columns, m)),
            None => insert.effect_in_every_mode(column, &columns),
        })
    }

    /// Before the pending INSERT runs on `shard`'s connection: when that
    /// connection does not hold the session's value, an INSERT that may
    /// keep the connection's value (an explicit id, or unknown) needs the
    /// session's there first, as a statement that reads it would.
    pub(in crate::frontend) async fn restore_for_insert(
        &mut self,
        shard: usize,
    ) -> Result<(), crate::backend::BackendError> {
        let held = self.mux.held_lid.get(shard).copied().flatten();
        if self.mux.lid_dirty || (held == Some(self.mux.lid) && self.mux.owed.is_none()) {
            return Ok(());
        }
        let effect = self.classify_insert();
        if self.mux.insert_rule || matches!(effect, Some(LastId::Generated | LastId::Kept)) {
            return Ok(());
        }
        self.restore_lid(shard).await
    }

    /// After the pending INSERT, whose ids idgate did not fill: what it did
    /// to the session's value, when another session is likely to take the
    /// connection next. Generated: the value is the OK packet's (noted,
    /// `lid_given`); Kept: unchanged; otherwise the value is claimed (the
    /// connection held the session's value before the INSERT, or was
    /// given it, so it holds the right one after). Returns whether
    /// nothing is to be claimed.
    pub(in crate::frontend) fn note_generated(&mut self) -> bool {
        if !self.mux.insert_pending {
            return false;
        }
        self.mux.insert_pending = false;
        let one = {
            let mut with_id = self.backends.open().filter(|(_, b)| b.insert_id != 0);
            match (with_id.next(), with_id.next()) {
                (Some((shard, b)), None) => Some((shard, b.insert_id)),
                _ => None,
            }
        };
        // Looked at already (its connection held another value), or when
        // another session will take the connection: one waits for it, or
        // takers had to read values lately (otherwise the session takes
        // its connection back, as usual, and nothing needs the value).
        let look = self.mux.insert_classified
            || one.is_some_and(|(shard, _)| {
                self.shared.pools.get(shard).is_some_and(|p| {
                    let st = &p.stats;
                    st.multiplexed.load(Ordering::Relaxed) < st.look_until.load(Ordering::Relaxed)
                        || p.state().waiting > 0
                })
            });
        let effect = if look { self.classify_insert() } else { None };
        if self.mux.insert_rule {
            return false;
        }
        match (effect, one) {
            (Some(LastId::Kept), _) => true,
            (Some(LastId::Generated), Some((shard, id))) => {
                self.lid_given(shard, id);
                true
            }
            _ => false,
        }
    }
}
