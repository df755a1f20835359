//! One client session: everything the session owns, its command loop and
//! the I/O primitives every handler uses (`forward`, `backend`, replies).
//! What each command does is dispatched in `engine.rs`.
//!
//! A session holds at most one connection per shard (`backends.rs`), opened
//! the first time a command needs that shard (with the user's shard
//! account, `backend_user` or `[backend]`'s, and the client's schema,
//! character set and capabilities) and kept for the session. Replies are relayed byte for byte.

pub mod auth;
pub mod backends;
pub mod capture;
mod facts;
pub mod generated;
pub mod kill;
pub mod lastid;
pub mod lidread;
pub mod limits;
pub mod login;
pub mod mux;
pub mod muxstate;
pub mod pooled;
pub mod readback;
pub mod registry;
pub mod replay;
pub mod seqstate;
pub mod sha2state;
pub mod stmt;

use crate::backend::relay::{relay_reply, Action, Hook, RelayError};
use crate::backend::{BackendConn, BackendError};
use crate::frontend::session::backends::Backends;
use crate::frontend::session::login::Login;
use crate::frontend::session::replay::SessionState;
use crate::frontend::session::stmt::Statements;
use crate::frontend::shared::Shared;
use crate::protocol::codes::{self, ErrorCode};
use crate::protocol::consts::{cmd, status};
use crate::protocol::packet::PacketConn;
use crate::protocol::reply::{self, OkPacket};
use crate::protocol::response::{Expect, Kind, Tracker};
use crate::protocol::stmt as wire_stmt;
use crate::protocol::wire::Cursor;
use crate::sql::SqlModes;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, warn};

/// A shard connection unused for this long is checked for a close by the
/// shard (wait_timeout, restart) before the next command is sent on it.
const IDLE_CHECK_AFTER: Duration = Duration::from_secs(1);

/// Why a command could not be completed.
#[derive(Debug, thiserror::Error)]
pub(in crate::frontend) enum CmdError {
    /// The client is gone: end the session quietly.
    #[error("client connection lost: {0}")]
    ClientGone(std::io::Error),
    /// A shard failed; the client is told, the shard connection is dropped.
    #[error(transparent)]
    Backend(BackendError),
    /// The client has been told everything; the session must end.
    #[error("{0}")]
    End(String),
    /// A statement on a rule table that idgate refuses (the client is told).
    #[error(transparent)]
    Sql(crate::sql::SqlError),
    /// Another error of idgate's own for this command (the client is told).
    #[error("{1}")]
    Refused(ErrorCode, String),
    /// A ready ERR packet for the client (a shard's error, reworded).
    #[error("error reply")]
    Reply(Vec<u8>),
}

impl From<RelayError> for CmdError {
    fn from(e: RelayError) -> Self {
        match e {
            RelayError::Backend(b) => CmdError::Backend(b),
            RelayError::Client(io) => CmdError::ClientGone(io),
        }
    }
}

/// What to do after a command.
pub(in crate::frontend) enum Next {
    Continue,
    Quit,
}

/// A logged-in client session.
pub struct Session {
    pub(in crate::frontend) shared: Arc<Shared>,
    pub(in crate::frontend) client: PacketConn,
    pub(in crate::frontend) id: u32,
    pub(in crate::frontend) login: Login,
    /// Current schema (from the handshake, COM_INIT_DB, `USE`).
    pub(in crate::frontend) schema: Option<String>,
    /// The session's shard connections: the one provider handlers get a
    /// connection from (`backends.rs`); opened on first use by
    /// [`Session::backend`].
    pub(in crate::frontend) backends: Backends,
    pub(in crate::frontend) stmts: Statements,
    /// The command being handled (reused between commands).
    pub(in crate::frontend) buf: Vec<u8>,
    /// When the command under way began (the session's start before its
    /// first): the clock read once per command for what needs no finer
    /// time (a shard connection's idle check, a pooled connection's ping).
    pub(in crate::frontend) began: std::time::Instant,
    /// Sequence id of the next packet idgate sends the client for the
    /// current command (advanced as a reply is relayed, so an error after a
    /// partial reply still comes in order).
    pub(in crate::frontend) next_seq: u8,
    /// `sql_mode` flags on the default shard connection (`None`: read them
    /// before the next statement is planned).
    pub(in crate::frontend) sql_modes: Option<SqlModes>,
    /// `character_set_client`, when known (`shardkey.rs`); forgotten like
    /// `sql_modes`, and after a statement that mentions a character set.
    pub(in crate::frontend) client_cs: Option<crate::collation::Charset>,
    /// `SET` statements to replay on a reopened shard connection.
    pub(in crate::frontend) state: SessionState,
    /// The client's `BEGIN` of the open explicit transaction (started again
    /// on each shard the transaction reaches).
    pub(in crate::frontend) txn_begin: Option<Vec<u8>>,
    /// The shard the open transaction has written to.
    pub(in crate::frontend) txn_write: Option<usize>,
    /// The xid of the open explicit transaction when it runs as XA on every
    /// shard it reaches (see `txn.rs`).
    pub(in crate::frontend) txn_xa: Option<String>,
    /// Savepoints of the open transaction, oldest first (`txn.rs`): every
    /// shard the transaction reaches gets them, so `ROLLBACK TO SAVEPOINT`
    /// undoes its work on all shards.
    pub(in crate::frontend) txn_savepoints: Vec<String>,
    /// Per shard: its connection has every savepoint of `txn_savepoints`.
    pub(in crate::frontend) savepoints_on: Vec<bool>,
    /// The shard connection holding the session's `LAST_INSERT_ID()`.
    pub(in crate::frontend) lid_home: usize,
    /// Shards whose connection holds the same value (bit per shard).
    pub(in crate::frontend) lid_synced: u64,
    /// XA transactions run by this session (numbers its xids).
    pub(in crate::frontend) xa_seq: u64,
    /// The shards that ran the last statement: their diagnostics are the
    /// session's (see `diag.rs`).
    pub(in crate::frontend) diag_shards: Vec<usize>,
    /// A diagnostics statement is being answered (it does not move them).
    pub(in crate::frontend) serving_diag: bool,
    /// This session in the server's registry, for `KILL` (see `kill.rs`).
    pub(in crate::frontend) registered: crate::frontend::session::registry::Registered,
    /// The session's entry for the deadlock detector (made the first time
    /// the session registers, kept for its life; see `watch.rs`).
    pub(in crate::frontend) watched: Option<Arc<crate::frontend::txn::watchlist::Watched>>,
    /// The session is in the detector's registry now.
    pub(in crate::frontend) watching: bool,
    /// A round trip of the current command was killed by the deadlock
    /// detector: the session is a victim (handled at the end of the command).
    pub(in crate::frontend) killed: bool,
    /// The rules this session's statements run on: the server's, taken at
    /// the start of a command when a reload moved them and the session is
    /// not in a transaction (`live.rs`). `None`: idgate only relays.
    pub(in crate::frontend) rules: Option<Arc<crate::rules::RuleSet>>,
    /// `rules`' generation ([`crate::frontend::inforce::LiveRules::generation`]:
    /// moved by a new version and by new views).
    pub(in crate::frontend) rules_version: u64,
    /// What `LASTVAL(idgate.g)` answers: the last id `NEXTVAL` gave this
    /// session, per generator (`admin/sequence.rs`).
    pub(in crate::frontend) last_values: seqstate::LastValues,
    /// The schema `SHOW IDGATE SESSIONS` shows (`registered`'s copy).
    pub(in crate::frontend) schema_shown: Option<String>,
    /// The session's place under its user's `max_connections`, given back
    /// when the session is dropped (however it ends).
    pub(in crate::frontend) user_slot: limits::UserSlot,
    /// A merged cursor whose rows are still being read from the shards
    /// (`route/cursor.rs`): their connections are busy until it is settled.
    /// Its state is the route handler's (a `LiveCursor`), so the core keeps
    /// it opaque: the core does not depend on a handler's types.
    pub(in crate::frontend) cursor_stream: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// What pins the session to its shard connections, and what idgate
    /// restores on a connection it takes (`mux.rs`).
    pub(in crate::frontend) mux: muxstate::MuxState,
}

/// A slot under `user`'s `max_connections`, if one is free.
pub(in crate::frontend) fn acquire_slot(shared: &Shared, user: &str) -> Option<limits::UserSlot> {
    let (i, u) = shared.user(user.as_bytes())?;
    shared.user_slots.acquire(i, u.max_connections).ok()
}

/// MariaDB's message for error 1203, and the limit.
pub(in crate::frontend) fn too_many_user_connections(
    shared: &Shared,
    user: &str,
) -> (String, usize) {
    let max = shared
        .user(user.as_bytes())
        .and_then(|(_, u)| u.max_connections)
        .unwrap_or(0);
    (
        format!(
            "User '{user}' has exceeded the 'max_user_connections' resource (current value: {max})"
        ),
        max,
    )
}

impl Drop for Session {
    /// Out of the deadlock detector's registry, also when the session's task
    /// is cut (drain timeout) or panics.
    fn drop(&mut self) {
        self.watch_deregister();
    }
}

impl Session {
    /// Reports a shard failure to the client and drops that shard connection.
    /// Inside a transaction the session ends too: its transaction is gone.
    pub(in crate::frontend) async fn shard_failed(
        &mut self,
        e: BackendError,
    ) -> Result<Next, CmdError> {
        let (shard, was_in_trans) = match &e {
            BackendError::Connect { shard, .. }
            | BackendError::Timeout { shard, .. }
            | BackendError::Server { shard, .. }
            | BackendError::Plugin { shard, .. }
            | BackendError::Tls { shard, .. }
            | BackendError::Protocol { shard, .. }
            | BackendError::StateLost { shard, .. }
            | BackendError::PoolFull { shard, .. }
            | BackendError::Lost { shard, .. } => {
                let i = self.shard_index(shard);
                let in_trans = i
                    .and_then(|i| self.backends.get(i))
                    .is_some_and(|b| b.status & status::IN_TRANS != 0);
                (i, in_trans)
            }
        };
        let broken = !matches!(
            e,
            BackendError::Server { .. } | BackendError::PoolFull { .. }
        );
        if broken {
            if let Some(i) = shard {
                self.backends.release(i);
                self.stmts.forget_shard(i);
            }
            warn!(conn = self.id, "{e}");
        }
        self.send_backend_error(self.next_seq, &e)
            .await
            .map_err(CmdError::ClientGone)?;
        if broken && (was_in_trans || matches!(e, BackendError::StateLost { .. })) {
            return Err(CmdError::Backend(e));
        }
        Ok(Next::Continue)
    }

    fn shard_index(&self, name: &str) -> Option<usize> {
        self.shared
            .config
            .shards
            .iter()
            .position(|s| s.name == name)
    }

    /// Server status to report in idgate's own replies: the default shard's
    /// last status, or plain autocommit.
    pub(in crate::frontend) fn status(&self) -> u16 {
        self.backends
            .get(0)
            .map(|b| b.status & (status::IN_TRANS | status::AUTOCOMMIT))
            .unwrap_or(status::AUTOCOMMIT)
    }

    pub(in crate::frontend) fn in_transaction(&self) -> bool {
        self.backends
            .open()
            .any(|(_, b)| b.status & status::IN_TRANS != 0)
    }

    /// The session's connection to `shard`, opened if needed (and reopened if
    /// the shard closed it while idle, outside a transaction). For a new
    /// command only: a reply (or a LOAD's file) already under way on a
    /// connection idle for a while would look like a closed connection and
    /// be replaced; such a connection is taken with `backends.get_mut`.
    pub(in crate::frontend) async fn backend(
        &mut self,
        shard: usize,
    ) -> Result<&mut BackendConn, BackendError> {
        let idle = self.backends.touch(shard, IDLE_CHECK_AFTER, self.began);
        let stale = match self.backends.get_mut(shard) {
            Some(b) => {
                // The replies to idgate's detached commands are not a closed
                // connection: read them first (a connection that broke
                // meanwhile is an error, as during a statement).
                if b.detached() > 0 {
                    b.drain().await?;
                }
                idle && closed_by_peer(b)
            }
            None => true,
        };
        if stale {
            if self.backends.release(shard).is_some() {
                debug!(
                    conn = self.id,
                    shard, "shard connection was closed while idle; reopening"
                );
                self.stmts.forget_shard(shard);
            }
            // From the shard's pool (`pooled.rs`): reused, or opened with
            // the user's own shard account (the shard's GRANTs apply).
            let backends::Checked {
                mut conn,
                lease,
                tag,
                lid,
                owner,
                stmts,
            } = self.checkout(shard).await?;
            if let Some(n) = self.shared.shard_connects.get(shard) {
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if shard == 0 && !self.has_multiplexed() {
                // A multiplexed session's connections all get its state:
                // what it read of it stays true.
                self.sql_modes = None;
                self.client_cs = None;
            }
            let want = self.state_tag();
            let reset = tag != 0 && tag != want;
            // A connection that broke before the statement was sent is
            // replaced (boxed: rare, `engine/size_tests.rs`), unless it
            // held this session's own `LAST_INSERT_ID()`: that value went
            // with it, and the statement must not go on as if it had not.
            let own = !reset && self.own_claim(shard, &conn);
            let ready = if tag == want && want != u64::MAX && (own || conn.lid_claim.is_none()) {
                // Nothing to read, reset or replay: the common case (an
                // inserting session takes back the connection it left its
                // value on).
                let lid = if own {
                    self.adopt_own_claim(shard, &mut conn);
                    None
                } else {
                    lid
                };
                self.took(shard, &mut conn, lid, owner, &stmts, false).await
            } else {
                // Boxed: rare (`engine/size_tests.rs`).
                Box::pin(self.ready_taken(shard, &mut conn, tag, lid, owner, &stmts, reset)).await
            };
            if let Err(e) = ready {
                if own || !e.broke() {
                    return Err(e);
                }
                drop(lease);
                return Box::pin(self.after_broken_take(shard, conn, e)).await;
            }
            let s = &self.shared.config.shards[shard];
            debug!(conn = self.id, shard = %s.name, backend_conn = conn.connection_id, "shard connection opened");
            self.registered
                .control
                .set_thread(shard, Some(conn.connection_id));
            self.backends.put(shard, conn, Some(lease));
            if self.shared.routing && !self.shared.pending_xa.lock().is_empty() {
                Box::pin(self.commit_pending_xa(shard)).await;
            }
        }
        if self.mux.want_lid {
            self.restore_lid(shard).await?;
        } else if self.mux.insert_pending {
            self.restore_for_insert(shard).await?;
        }
        self.held(shard)
    }

    /// The connection the session holds to `shard` ([`Session::backend`]
    /// made sure of it).
    pub(in crate::frontend) fn held(
        &mut self,
        shard: usize,
    ) -> Result<&mut BackendConn, BackendError> {
        self.backends
            .get_mut(shard)
            .ok_or_else(|| BackendError::Lost {
                shard: String::new(),
                source: std::io::Error::other("no connection"),
            })
    }

    /// Runs a query of idgate's own on `shard` with the `[backend]` account:
    /// on the session's connection when the session uses that account,
    /// otherwise on a connection of idgate's own, so what the user's
    /// shard account may not see does not change what idgate learns.
    pub(in crate::frontend) async fn own_query(
        &mut self,
        shard: usize,
        q: &str,
    ) -> Result<Vec<Vec<Option<String>>>, BackendError> {
        let own_account = self
            .shared
            .user(self.login.user.as_bytes())
            .is_some_and(|(_, u)| u.shard_account.is_some());
        if !own_account {
            return self.backend(shard).await?.query_rows(q).await;
        }
        let mut c = self.shared.side_connection(shard).await?;
        let rows = c.query_rows(q).await;
        let _ = c.send(&[cmd::QUIT]).await;
        rows
    }

    /// Sends `payload` to `shard` as it is and relays the reply. Returns the
    /// index of the last result whose OK packet was seen, if any, and whether
    /// the reply was an error.
    pub(in crate::frontend) async fn forward(
        &mut self,
        shard: usize,
        payload: &[u8],
        expect: Expect,
    ) -> Result<Outcome, CmdError> {
        self.forward_with(shard, payload, expect, &mut |_, _| Action::Keep)
            .await
    }

    pub(in crate::frontend) async fn forward_with(
        &mut self,
        shard: usize,
        payload: &[u8],
        expect: Expect,
        hook: Hook<'_>,
    ) -> Result<Outcome, CmdError> {
        self.backend(shard).await.map_err(CmdError::Backend)?;
        if self.txn_xa.is_some()
            || (shard != 0 && self.txn_begin.is_some())
            || !self.txn_savepoints.is_empty()
        {
            self.enlist(shard).await?;
        }
        if is_statement(payload) {
            self.note_diag(&[shard]);
        }
        let Some(conn) = self.backends.get(shard).map(|b| b.connection_id) else {
            return Ok(Outcome::default());
        };
        self.round_begin(shard, conn).await;
        let watched = self.watched_now();
        let Some(b) = self.backends.get_mut(shard) else {
            return Ok(Outcome::default());
        };
        let sent = match b.send(payload).await {
            Ok(s) => s,
            Err(e) => {
                self.round_end(shard).await;
                return Err(CmdError::Backend(e));
            }
        };
        let mut tracker = Tracker::new(expect, b.deprecate_eof(), b.status);
        let mut outcome = Outcome::default();
        let mut observe = |kind: Kind, p: &[u8]| {
            match kind {
                Kind::Ok { .. } => outcome.oks += 1,
                Kind::Err => {
                    outcome.error = true;
                    let code = p.get(1..3).map(|c| u16::from_le_bytes([c[0], c[1]]));
                    outcome.connection_ended =
                        code.is_some_and(|c| CONNECTION_ENDING_ERRORS.contains(&c));
                    outcome.rolled_back = code == Some(codes::ER_LOCK_DEADLOCK.code);
                    if let (Some(c), Some(w)) = (code, &watched) {
                        if w.killed_here(shard, c) {
                            // Killed by the deadlock detector: the client
                            // gets 1213 once the transaction is rolled back.
                            outcome.killed = code;
                            return Action::Drop;
                        }
                    }
                }
                _ => {}
            }
            hook(kind, p)
        };
        let was_in_trans = b.status & status::IN_TRANS != 0;
        let relayed = relay_reply(
            b,
            &mut self.client,
            &mut tracker,
            sent.wrapping_add(1),
            &mut self.next_seq,
            &mut observe,
        )
        .await;
        let claimed = self.round_end(shard).await;
        match relayed {
            Err(RelayError::Backend(e)) if claimed => {
                // The shard connection broke under the detector's KILL.
                self.note_killed(shard, None);
                return Err(CmdError::Backend(e));
            }
            r => r?,
        }
        if let Some(code) = outcome.killed {
            // Its ERR packet was not relayed: the answer is the deadlock.
            self.mark_killed(shard, Some(code));
            return Err(CmdError::Refused(
                codes::ER_LOCK_DEADLOCK,
                crate::frontend::txn::watchlist::DEADLOCK_MESSAGE.into(),
            ));
        }
        if outcome.rolled_back && self.txn_xa.is_some() {
            // MariaDB rolls the whole transaction back on a deadlock; the
            // XA branches are only marked rollback-only: finish them, so the
            // session is out of the transaction as with a plain one.
            let _ = self.finish_xa(false, false).await;
        }
        if outcome.connection_ended {
            // The shard closes this connection after that error: open a new
            // one next time. A transaction that was open is gone with it.
            self.backends.release(shard);
            self.stmts.forget_shard(shard);
            if was_in_trans {
                return Err(CmdError::End(format!(
                    "shard {} ended the connection inside a transaction",
                    self.shared.config.shards[shard].name
                )));
            }
        }
        Ok(outcome)
    }

    /// The shard statement id for client statement `id` on `shard`, preparing
    /// it there first if that connection does not have it.
    pub(in crate::frontend) async fn backend_stmt(
        &mut self,
        id: u32,
        shard: usize,
    ) -> Result<Option<u32>, CmdError> {
        if self.stmts.get_mut(id).is_none() {
            return Ok(None);
        }
        // Make sure the shard connection is alive first: reopening it forgets
        // every statement id it had, and the caller is about to use the id.
        self.backend(shard).await.map_err(CmdError::Backend)?;
        let Some(s) = self.stmts.get_mut(id) else {
            return Ok(None);
        };
        if let Some(bid) = s.backend_ids[shard] {
            return Ok(Some(bid));
        }
        let prepare = s.prepare.clone();
        let Some(b) = self.backends.get_mut(shard) else {
            return Ok(None);
        };
        let packets = b
            .run(&prepare, Expect::Prepare)
            .await
            .map_err(CmdError::Backend)?;
        let first = packets.first().filter(|p| p.first() == Some(&0));
        let bid = first.and_then(|p| Cursor::new(p.get(1..)?).u32().ok());
        // The same text everywhere: every shard's statement has as many
        // parameters (learned again after a reload planned it anew).
        let params = first.and_then(|p| Cursor::new(p.get(7..)?).u16().ok());
        if let (Some(s), Some(bid)) = (self.stmts.get_mut(id), bid) {
            s.backend_ids[shard] = Some(bid);
            s.types_sent[shard] = false;
            if let Some(n) = params {
                s.params = n;
            }
        }
        Ok(bid)
    }

    /// The COM_STMT_EXECUTE to send `shard` for the client's `payload`:
    /// the shard's statement id (preparing it there first if needed), and
    /// the parameter types when that statement has not seen them yet.
    /// `None`: the client has been told what was wrong.
    pub(in crate::frontend) async fn execute_payload(
        &mut self,
        id: u32,
        shard: usize,
        payload: &[u8],
    ) -> Result<Option<Vec<u8>>, CmdError> {
        let Some(bid) = self.backend_stmt(id, shard).await? else {
            self.unknown_stmt(id, "mysqld_stmt_execute").await?;
            return Ok(None);
        };
        let Some(s) = self.stmts.get_mut(id) else {
            self.unknown_stmt(id, "mysqld_stmt_execute").await?;
            return Ok(None);
        };
        let params = s.params as usize;
        let mut out;
        let body = &payload[1..];
        let sent_types = match wire_stmt::bound_types(body, params) {
            Ok(t) => t,
            Err(_) => return self.malformed("COM_STMT_EXECUTE").await.map(|_| None),
        };
        if let Some(t) = sent_types {
            s.types = Some(t);
            s.types_sent[shard] = true;
        }
        if params > 0 && !s.types_sent[shard] {
            // A statement prepared again on a new connection has not seen the
            // types the client bound earlier: send them along.
            let long = s.long_params.clone();
            let Ok(e) = wire_stmt::decode_execute_long(body, params, s.types.as_deref(), &long)
            else {
                return self.malformed("COM_STMT_EXECUTE").await.map(|_| None);
            };
            let types = s.types.clone().unwrap_or_default();
            let merged: Vec<_> = types
                .iter()
                .copied()
                .zip(e.values.iter().copied())
                .collect();
            out = vec![cmd::STMT_EXECUTE];
            wire_stmt::encode_execute_long(bid, e.flags, e.iterations, &merged, &long, &mut out);
            s.types_sent[shard] = true;
        } else {
            out = payload.to_vec();
            out[1..5].copy_from_slice(&bid.to_le_bytes());
        }
        if s.routed() {
            self.send_long_data(id, shard, bid).await?;
        }
        Ok(Some(out))
    }

    /// The client's COM_STMT_SEND_LONG_DATA `payload` for shard statement
    /// `bid`: its parameter number as the shard's statement counts it (idgate
    /// may have added parameters before it). `None`: malformed, or not a
    /// parameter the shard statement has (dropped, as MariaDB drops it).
    pub(in crate::frontend) fn long_data_packet(
        &mut self,
        id: u32,
        bid: u32,
        payload: &[u8],
    ) -> Option<Vec<u8>> {
        if payload.len() < 7 {
            return None;
        }
        let n = u16::from_le_bytes([payload[5], payload[6]]) as usize;
        let m = self
            .stmts
            .get_mut(id)
            .and_then(|s| crate::frontend::session::stmt::backend_param_index(s, n))?;
        let mut out = payload.to_vec();
        out[1..5].copy_from_slice(&bid.to_le_bytes());
        out[5..7].copy_from_slice(&u16::try_from(m).ok()?.to_le_bytes());
        Some(out)
    }

    /// Before an execute of a routed statement on `shard` (shard statement
    /// `bid`): the long data the client sent for it.
    pub(in crate::frontend) async fn send_long_data(
        &mut self,
        id: u32,
        shard: usize,
        bid: u32,
    ) -> Result<(), CmdError> {
        let held = match self.stmts.get_mut(id) {
            Some(s) if !s.long_data.is_empty() => s.long_data.clone(),
            _ => return Ok(()),
        };
        for p in held {
            let Some(out) = self.long_data_packet(id, bid, &p) else {
                continue;
            };
            let b = self.backend(shard).await.map_err(CmdError::Backend)?;
            b.send(&out).await.map_err(CmdError::Backend)?;
        }
        Ok(())
    }

    /// Forgets the session's per-connection state (COM_RESET_CONNECTION,
    /// COM_CHANGE_USER): prepared statements, recorded SETs, the
    /// transaction, where the last insert id is.
    pub(in crate::frontend) fn forget_session_state(&mut self) {
        self.watch_deregister();
        self.stmts.clear();
        self.state.clear();
        self.txn_begin = None;
        self.txn_write = None;
        self.txn_xa = None;
        self.forget_savepoints();
        self.lid_home = 0;
        self.lid_synced = u64::MAX;
        self.last_values.clear();
        // The server's defaults apply again (read when next needed).
        self.sql_modes = None;
        self.client_cs = None;
        self.forget_mux_state();
    }

    pub(in crate::frontend) async fn unknown_stmt(
        &mut self,
        id: u32,
        name: &str,
    ) -> Result<(), CmdError> {
        let msg = format!("Unknown prepared statement handler ({id}) given to {name}");
        self.send_error(self.next_seq, &codes::ER_UNKNOWN_STMT_HANDLER, &msg)
            .await
            .map_err(CmdError::ClientGone)
    }

    pub(in crate::frontend) async fn malformed(&mut self, what: &str) -> Result<(), CmdError> {
        let msg = format!("Malformed communication packet ({what})");
        self.send_error(self.next_seq, &codes::ER_MALFORMED_PACKET, &msg)
            .await
            .map_err(CmdError::ClientGone)
    }

    pub(in crate::frontend) async fn send_ok(&mut self, seq: u8, st: u16) -> Result<(), CmdError> {
        let ok = reply::ok_packet(
            &OkPacket {
                affected_rows: 0,
                last_insert_id: 0,
                status: st,
                warnings: 0,
            },
            b"",
        );
        let last = self
            .client
            .write_packet(seq, &ok)
            .await
            .map_err(CmdError::ClientGone)?;
        // A query of several statements goes on after it (`multi.rs`).
        self.next_seq = last.wrapping_add(1);
        Ok(())
    }

    pub(in crate::frontend) async fn send_error(
        &mut self,
        seq: u8,
        code: &ErrorCode,
        message: &str,
    ) -> std::io::Result<()> {
        self.client
            .write_packet(seq, &reply::err_packet(code, message))
            .await
            .map(|_| ())
    }

    /// Tells the client about a shard failure: a shard's own error keeps its
    /// code and text; idgate's errors name the shard.
    pub(in crate::frontend) async fn send_backend_error(
        &mut self,
        seq: u8,
        e: &BackendError,
    ) -> std::io::Result<()> {
        let payload = match e {
            BackendError::Server { err, .. } => err.payload(""),
            BackendError::Connect { .. }
            | BackendError::Timeout { .. }
            | BackendError::Plugin { .. }
            | BackendError::Tls { .. } => {
                reply::err_packet(&codes::CR_CONN_HOST_ERROR, &e.to_string())
            }
            BackendError::PoolFull { .. } => {
                reply::err_packet(&codes::ER_CON_COUNT_ERROR, &e.to_string())
            }
            BackendError::Lost { .. }
            | BackendError::Protocol { .. }
            | BackendError::StateLost { .. } => {
                reply::err_packet(&codes::CR_SERVER_LOST, &e.to_string())
            }
        };
        self.client.write_packet(seq, &payload).await.map(|_| ())
    }

    /// Records that the client statement being run goes to `shards` (their
    /// diagnostics are the session's now), unless it is a diagnostics
    /// statement itself.
    pub(in crate::frontend) fn note_diag(&mut self, shards: &[usize]) {
        if !self.serving_diag && !shards.is_empty() {
            self.diag_shards.clear();
            self.diag_shards.extend_from_slice(shards);
        }
    }

    /// Sends one packet as the whole reply to the current command.
    pub(in crate::frontend) async fn reply_packet(
        &mut self,
        payload: &[u8],
    ) -> Result<(), CmdError> {
        let seq = self.next_seq;
        let last = self
            .client
            .write_packet(seq, payload)
            .await
            .map_err(CmdError::ClientGone)?;
        // A query of several statements goes on after it (`multi.rs`).
        self.next_seq = last.wrapping_add(1);
        Ok(())
    }

    /// The rule at `routed` (a [`crate::sql::RuleHit`]'s).
    pub(in crate::frontend) fn entry_at(
        &self,
        routed: Option<usize>,
    ) -> Option<&crate::rules::TableEntry> {
        self.rules.as_ref()?.entries().get(routed?)
    }
    /// The placement of the rule at `routed`.
    pub(in crate::frontend) fn placement_at(
        &self,
        routed: Option<usize>,
    ) -> Option<&crate::shard::placement::Placement> {
        self.entry_at(routed)?.placement()
    }

    /// Reports an error of idgate's own (a refused statement) to the client.
    pub(in crate::frontend) async fn send_refusal(
        &mut self,
        code: &ErrorCode,
        message: &str,
    ) -> Result<(), CmdError> {
        self.send_error(self.next_seq, code, message)
            .await
            .map_err(CmdError::ClientGone)
    }
}

/// What the relay saw of a reply.
#[derive(Debug, Default, Clone, Copy)]
pub(in crate::frontend) struct Outcome {
    /// OK packets that were results (not result-set terminators).
    pub(in crate::frontend) oks: usize,
    /// The reply ended with an ERR packet.
    pub(in crate::frontend) error: bool,
    /// ... one after which the shard closes the connection.
    pub(in crate::frontend) connection_ended: bool,
    /// ... a deadlock, after which the shard rolled the transaction back.
    pub(in crate::frontend) rolled_back: bool,
    /// ... the code of the error with which the deadlock detector's KILL
    /// ended the statement (that ERR packet was not relayed).
    pub(in crate::frontend) killed: Option<u16>,
}

/// Errors after which a shard closes the connection: killed (1927), idle
/// timeout (4031), shutdown (1053).
const CONNECTION_ENDING_ERRORS: [u16; 3] = [1927, 4031, 1053];

/// Whether a shard closed an idle connection (EOF or an unsolicited error
/// packet waiting on the socket).
pub(in crate::frontend) fn closed_by_peer(b: &BackendConn) -> bool {
    if !b.conn.buffered().is_empty() {
        return true;
    }
    let Some(tcp) = b.conn.tcp() else {
        return true;
    };
    // On TLS too: any byte on an idle connection (an alert, a record with an
    // error packet) means the shard is done with it.
    let mut probe = [0u8; 1];
    match tcp.try_read(&mut probe) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Whether a command payload is a statement (it resets diagnostics).
fn is_statement(payload: &[u8]) -> bool {
    matches!(
        payload.first(),
        Some(&cmd::QUERY) | Some(&cmd::STMT_EXECUTE) | Some(&cmd::STMT_PREPARE)
    )
}

/// An ERR packet for a shard's error, its message prefixed with the shard.
pub(in crate::frontend) fn shard_error(e: BackendError) -> CmdError {
    match &e {
        BackendError::Server { shard, err } => {
            CmdError::Reply(err.payload(&format!("shard {shard}: ")))
        }
        _ => CmdError::Backend(e),
    }
}
