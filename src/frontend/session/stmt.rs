//! The session's prepared statements.
//!
//! Clients see ids that idgate hands out; each statement remembers its id on
//! every shard connection it was prepared on, so it can be prepared again on a
//! reopened connection, and the parameter types last bound, which an execute
//! may omit but a freshly prepared statement needs.

use crate::protocol::stmt::ParamType;
use crate::sql::PrepareRewrite;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::Arc;

/// Where a prepared UPDATE of an id column is read back.
#[derive(Debug)]
pub struct Highest {
    /// The generator of the table's id column.
    pub generator: Arc<str>,
    /// The shards of the table.
    pub shards: Vec<usize>,
}

/// One prepared statement of a session.
#[derive(Debug, Clone)]
pub struct PreparedStmt {
    /// The COM_STMT_PREPARE payload sent to shards (command byte included).
    pub prepare: Vec<u8>,
    /// Parameters the shard's statement has.
    pub params: u16,
    /// The statement's id on each shard connection (`None`: not prepared there).
    pub backend_ids: Vec<Option<u32>>,
    /// Whether the shard statement has been sent parameter types yet.
    pub types_sent: Vec<bool>,
    /// Types from the last execute that carried them (the client's
    /// parameters: with a `plan`, fewer than the shard statement has).
    pub types: Option<Vec<ParamType>>,
    /// For an INSERT into a rule table: how each execute fills the ids.
    pub plan: Option<Arc<PrepareRewrite>>,
    /// For a SELECT/UPDATE/DELETE on a sharded or broadcast table: what
    /// routing needs (the shards are chosen at each execute, from the
    /// values bound to the shard key).
    pub route: Option<Arc<crate::sql::route::Analysis>>,
    /// For a prepared BEGIN/COMMIT/ROLLBACK on a sharded setup: the same
    /// statement as a COM_QUERY payload, which each execute runs as the
    /// session's transaction control (see `txn.rs`).
    pub txn: Option<Vec<u8>>,
    /// The shard the last execute ran on (where a cursor it opened lives:
    /// COM_STMT_FETCH goes there).
    pub exec_shard: usize,
    /// COM_STMT_SEND_LONG_DATA payloads (as the client sent them) of a
    /// statement whose shard is chosen at execute (`route`, or a `plan` for
    /// a routed table): held until the execute picks the shard(s), sent
    /// there before it, then dropped.
    pub long_data: Vec<Vec<u8>>,
    /// Bytes in `long_data`; once the session holds more than
    /// `server.max_packet` over all its statements, the rest is dropped and
    /// the execute is refused.
    pub long_data_bytes: usize,
    /// Per client parameter: long data was sent for it since the last
    /// execute (the execute then carries no value for it).
    pub long_params: Vec<bool>,
    /// The client's statement, for an INSERT into a sharded or broadcast
    /// table: an execute whose rows go to several shards, or a tracked
    /// upsert into every copy, runs as its text (`inline.rs`).
    pub client_sql: Option<Arc<str>>,
    /// For an UPDATE that sets a rule table's id column: whose generator
    /// observes the highest id each execute stored, read back from which
    /// shards (`capture.rs`).
    pub highest: Option<Arc<Highest>>,
    /// A SELECT on a sharded table whose LIMIT has a `?` or an offset: the
    /// shards prepared it with `LIMIT ?, ?`, which idgate binds at each
    /// execute (the client's numbers on one shard; `0, offset + count` on
    /// each when scattered, the merge applying them).
    pub limit: Option<LimitRewrite>,
    /// The open cursor of an execute that ran on several shards, fetched
    /// from idgate (`cursor.rs`).
    pub merged: Option<Box<MergedCursor>>,
    /// The client's COM_STMT_PREPARE payload (planned again after a rule
    /// reload: `Session::replan`).
    pub client_prepare: Vec<u8>,
    /// Its calls on idgate's generators (`NEXTVAL(idgate.g)`, ...): each
    /// execute takes fresh values (`admin/sequence.rs`).
    pub sequence: Option<Arc<crate::frontend::session::seqstate::SeqStmt>>,
    /// The generation of the rules it was planned with (see the session's).
    pub rules_version: u64,
    /// What its text tells the multiplexer, once an execute read it
    /// (`mux.rs`).
    pub(in crate::frontend) mux_facts: Option<crate::frontend::session::muxstate::PreparedFacts>,
}

/// Where a prepared SELECT's LIMIT became `?, ?` on the shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitRewrite {
    /// The client's LIMIT clause.
    pub limit: crate::sql::route::Limit,
    /// The index of the first of the two `?` (the client's `?`s before the
    /// LIMIT keep their index).
    pub at: usize,
    /// The client's `?`s inside the LIMIT clause (0 to 2), which the pair
    /// replaces.
    pub taken: usize,
}

impl LimitRewrite {
    /// The shard's parameter index of the client's parameter `n` (`None`:
    /// a LIMIT number).
    pub fn shard_index(&self, n: usize) -> Option<usize> {
        if n < self.at {
            Some(n)
        } else if n < self.at + self.taken {
            None
        } else {
            Some(n - self.taken + 2)
        }
    }
}

impl PreparedStmt {
    /// Forgets the long data of the last execute (or a COM_STMT_RESET).
    pub fn clear_long_data(&mut self) {
        self.long_data.clear();
        self.long_data_bytes = 0;
        self.long_params.clear();
    }

    /// Its shard is chosen at each execute.
    pub fn routed(&self) -> bool {
        self.route.is_some() || self.plan.as_ref().is_some_and(|p| p.rule.routed.is_some())
    }
}

/// All prepared statements of a session, by the id the client knows.
#[derive(Debug, Default)]
pub struct Statements {
    map: HashMap<u32, PreparedStmt>,
    next_id: u32,
}

impl Statements {
    /// Registers a statement and returns the id to give the client.
    pub fn insert(&mut self, stmt: PreparedStmt) -> u32 {
        self.next_id = self.next_id.wrapping_add(1).max(1);
        while self.map.contains_key(&self.next_id) {
            self.next_id = self.next_id.wrapping_add(1).max(1);
        }
        self.map.insert(self.next_id, stmt);
        self.next_id
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut PreparedStmt> {
        self.map.get_mut(&id)
    }

    /// Long data held for all statements (see [`PreparedStmt::long_data`]).
    pub fn long_data_held(&self) -> usize {
        self.map
            .values()
            .fold(0usize, |n, s| n.saturating_add(s.long_data_bytes))
    }

    pub fn remove(&mut self, id: u32) -> Option<PreparedStmt> {
        self.map.remove(&id)
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Forgets every statement's id on `shard` (its connection was closed).
    pub fn forget_shard(&mut self, shard: usize) {
        for s in self.map.values_mut() {
            if let Some(id) = s.backend_ids.get_mut(shard) {
                *id = None;
            }
            if let Some(t) = s.types_sent.get_mut(shard) {
                *t = false;
            }
        }
    }

    /// The statements' ids on `shard`'s connection.
    pub fn ids_on(&self, shard: usize) -> Vec<u32> {
        self.map
            .values()
            .filter_map(|s| s.backend_ids.get(shard).copied().flatten())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The shard parameter index of the client's parameter `n` of a statement
/// that fills ids (for COM_STMT_SEND_LONG_DATA).
pub fn backend_param_index(stmt: &PreparedStmt, n: usize) -> Option<usize> {
    if let Some(l) = &stmt.limit {
        return l.shard_index(n);
    }
    let Some(plan) = &stmt.plan else {
        return Some(n);
    };
    plan.params.iter().position(|p| match *p {
        crate::sql::ParamSource::Client(i) => i == n,
        crate::sql::ParamSource::ClientUnlessAuto { param, .. } => param == n,
        _ => false,
    })
}

/// A cursor idgate serves (`route/cursor.rs`): its rows come through the
/// session's streaming merge (`Session::cursor_stream`) or, once the
/// session ran another command meanwhile, from `rows`.
#[derive(Debug, Clone, Default)]
pub struct MergedCursor {
    /// Rows read from the shards and not fetched yet (binary protocol row
    /// packets).
    pub(in crate::frontend) rows: VecDeque<Vec<u8>>,
    /// The ERR packet the next fetch gets: reading the rest failed (the
    /// cap, a shard's error).
    pub(in crate::frontend) failed: Option<Vec<u8>>,
    /// The merged reply's terminator (the template of each fetch's).
    pub(in crate::frontend) terminator: Vec<u8>,
    /// Its status without the flags a cursor sets.
    pub(in crate::frontend) status: u16,
    pub(in crate::frontend) deprecate_eof: bool,
}
