//! A session's multiplexing state ([`MuxState`]), held by the session;
//! the rules and hooks that use it are `mux.rs`' (which takes `Session`),
//! so neither file depends on the other in a circle.

use crate::backend::lidclaim::LidOwed;
use crate::backend::pool::{ConnKey, ShardPool};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A session's multiplexing state.
#[derive(Debug, Default)]
pub struct MuxState {
    /// Sticky pins (pin bits) found in the session's statements.
    pub(in crate::frontend) sticky: u32,
    /// Connections replaced so far for the shard connection being taken,
    /// each broken before the statement was sent
    /// (`Session::after_broken_take`).
    pub(in crate::frontend) take_retries: u32,
    /// The last statement (not a diagnostics one) left warnings or an error.
    pub(in crate::frontend) diag_pending: bool,
    /// The session's `LAST_INSERT_ID()` as idgate knows it (valid once the
    /// session gave a connection back: then it was read or set).
    pub(in crate::frontend) lid: u64,
    /// A statement may have changed the session's `LAST_INSERT_ID()` on a
    /// held connection since `lid` was last known (it is read from its
    /// home connection before that is given back).
    pub(in crate::frontend) lid_dirty: bool,
    /// Per shard: the `LAST_INSERT_ID()` of the connection held now, when
    /// known.
    pub(in crate::frontend) held_lid: Vec<Option<u64>>,
    /// The session's value is on a connection it gave back, unread: the
    /// shard, and the session's side of the claim (`lidclaim.rs`).
    pub(in crate::frontend) owed: Option<(usize, LidOwed)>,
    /// The command under way names `LAST_INSERT_ID()` (or `@@identity`):
    /// every connection it uses is given the session's value first.
    pub(in crate::frontend) want_lid: bool,
    /// The command is an execute: its prepared statement's facts, for
    /// `after_command`.
    pub(in crate::frontend) prepared: Option<PreparedFacts>,
    /// What the command's statement text mentions, found before it ran
    /// and used again after it (`mux.rs`' `Facts`): one pass per command.
    pub(in crate::frontend) mentions: Option<crate::sql::statement::mentions::Mentions>,
    /// The command's query text, by its address and length (the payload
    /// is borrowed, unchanged, for the whole command), with what it
    /// mentions, when it has no `!` (then it runs as written):
    /// `Session::mentions_of`. Set by `before_command`, cleared when the
    /// command ends.
    pub(in crate::frontend) text: Option<(usize, usize, crate::sql::statement::mentions::Mentions)>,
    /// The command under way is an INSERT or REPLACE that does not name
    /// `LAST_INSERT_ID` (`generated.rs`): its text, kept for when what
    /// it does to the value matters (reused buffer).
    pub(in crate::frontend) insert_pending: bool,
    pub(in crate::frontend) insert_text: Vec<u8>,
    /// Where the planner's reading of that text stopped, when it passed
    /// the INSERT on unchanged (`sql::autoinc::Read`): read on from there,
    /// not again from the start.
    pub(in crate::frontend) insert_read: Option<crate::sql::autoinc::Read>,
    /// Its text was looked at: `lid_effect` is what was found (`None`:
    /// unknown), `insert_rule` whether it writes a rule table.
    pub(in crate::frontend) insert_classified: bool,
    pub(in crate::frontend) lid_effect: Option<crate::sql::autoinc::LastId>,
    pub(in crate::frontend) insert_rule: bool,
    /// Shards (bits) whose connection got the session's value from idgate
    /// during this command (`Session::set_last_insert_id`).
    pub(in crate::frontend) lid_set: u64,
    /// Per shard: the connection (its id) the session's prepared
    /// statements' ids on that shard belong to.
    pub(in crate::frontend) stmts_on: Vec<Option<u32>>,
    /// The clock read when the command's connections were given back
    /// (the command's end for `SHOW IDGATE SESSIONS`: read once).
    pub(in crate::frontend) ended: Option<std::time::Instant>,
    /// Connections given back after a statement, in all.
    pub(in crate::frontend) given_back: u64,
    /// The session's schema as connections given back carry it
    /// (`Session::schema_shared`), made again when the schema changes.
    pub(in crate::frontend) schema: Option<Arc<str>>,
    /// Per shard: the pool's number of the connection the session gave
    /// back last (0: none), for its next take (`pool::Want::serial`).
    pub(in crate::frontend) given: Vec<u64>,
    /// The session's pool key, once made (`Session::conn_key`).
    pub(in crate::frontend) key: Option<ConnKey>,
    /// The pools where this session's held connections are counted as
    /// pinned, with the reason.
    pub(in crate::frontend) counted: PinCount,
}

/// What a client statement's text tells the multiplexer (found by
/// `mux.rs`' `Facts::with`).
#[derive(Debug, Clone, Copy)]
pub(in crate::frontend) struct Facts {
    /// Sticky pins it sets.
    pub(in crate::frontend) pins: u32,
    /// It releases `LOCK TABLES`.
    pub(in crate::frontend) unlock: bool,
    /// It reads diagnostics (`SHOW WARNINGS`, `GET DIAGNOSTICS`,
    /// `@@warning_count`): they stay the previous statement's.
    pub(in crate::frontend) diagnostics: bool,
    /// It names `LAST_INSERT_ID()`.
    pub(in crate::frontend) mentions_lid: bool,
    /// An INSERT or REPLACE (may set it).
    pub(in crate::frontend) inserts: bool,
    /// A session `SET` in a query of several statements: idgate records
    /// only a query that is one `SET`, so this one cannot be replayed.
    pub(in crate::frontend) several_with_set: bool,
}

/// What a prepared statement's text tells the multiplexer, kept with the
/// statement (`stmt.rs`' `PreparedStmt::mux_facts`) from its first
/// execute.
#[derive(Debug, Clone, Copy)]
pub(in crate::frontend) struct PreparedFacts {
    pub(in crate::frontend) facts: Facts,
    /// It is a `SET` of session state: idgate cannot replay an executed
    /// one (`replay.rs`).
    pub(in crate::frontend) changes_session: bool,
}

/// What a session counts in its pools' `pinned` gauges, taken back when
/// it changes and when the session is dropped (however it ends).
#[derive(Debug, Default)]
pub(in crate::frontend) struct PinCount(pub(in crate::frontend) Vec<(Arc<ShardPool>, usize)>);

impl PinCount {
    pub(in crate::frontend) fn set(&mut self, now: Vec<(Arc<ShardPool>, usize)>) {
        for (p, r) in &now {
            p.stats.pinned[*r].fetch_add(1, Ordering::Relaxed);
        }
        self.clear();
        self.0 = now;
    }

    pub(in crate::frontend) fn clear(&mut self) {
        for (p, r) in self.0.drain(..) {
            p.stats.pinned[r].fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for PinCount {
    fn drop(&mut self) {
        self.clear();
    }
}
