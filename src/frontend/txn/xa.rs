//! Writes that touch several shards, made atomic with XA (two-phase commit).
//!
//! Outside a transaction, a write whose rows are on several shards (a
//! multi-row INSERT split per shard, an UPDATE/DELETE without its shard key,
//! a write to a broadcast table) runs as one XA transaction with the same
//! xid on each shard:
//!
//! 1. `XA START xid`, the statement, `XA END xid` on each shard in turn. An
//!    error on any shard: `XA ROLLBACK` everywhere, the client gets that
//!    shard's error (code kept, message prefixed with the shard's name).
//! 2. `XA PREPARE xid` on each. A failure: `XA ROLLBACK` everywhere.
//! 3. `XA COMMIT xid` on each. Once every shard has prepared, the write is
//!    decided: a shard that fails now keeps its branch prepared (MariaDB
//!    keeps prepared XA branches across disconnects and restarts); idgate
//!    remembers it and commits it on its next connection to that shard, and
//!    the client gets an error that says so (the write is not lost, it is
//!    late on that shard). The decision is recorded in the allocator's
//!    store before the first `XA COMMIT` (see `xalog.rs`), so if idgate
//!    itself dies in this step, the next idgate commits the branches.

use crate::backend::BackendError;
use crate::frontend::oks::PartOk;
use crate::frontend::session::shard_error;
use crate::frontend::session::{CmdError, Session};
use crate::protocol::response::Expect;
use std::sync::atomic::Ordering;
use tracing::warn;

/// The COM_QUERY payload of `XA <verb> '<xid>'<suffix>`.
pub(in crate::frontend) fn xa_cmd(verb: &str, xid: &str, suffix: &str) -> Vec<u8> {
    format!("\x03XA {verb} '{xid}'{suffix}").into_bytes()
}

/// `(shard, payload)` pairs borrowed for [`Session::on_all`].
fn refs(v: &[(usize, Vec<u8>)]) -> Vec<(usize, &[u8])> {
    v.iter().map(|(s, p)| (*s, &p[..])).collect()
}

/// Each shard's reply of one phase, `None` for a shard that failed; the
/// first failure goes to `failure`.
fn phase(
    results: Vec<Result<Vec<Vec<u8>>, BackendError>>,
    failure: &mut Option<CmdError>,
) -> Vec<Option<Vec<Vec<u8>>>> {
    results
        .into_iter()
        .map(|r| match r {
            Ok(p) => Some(p),
            Err(e) => {
                if failure.is_none() {
                    *failure = Some(shard_error(e));
                }
                None
            }
        })
        .collect()
}

impl Session {
    /// Sends each `(shard, payload)`, then reads every reply in turn: the
    /// shards work at the same time. A shard without a connection, or whose
    /// send fails, gets its error without a read. A reply ended by the
    /// deadlock detector's KILL marks the session a victim (`killed`).
    async fn on_all(
        &mut self,
        sends: &[(usize, &[u8])],
    ) -> Vec<Result<Vec<Vec<u8>>, BackendError>> {
        let mut sent = Vec::with_capacity(sends.len());
        for &(shard, payload) in sends {
            if let Some(conn) = self.backends.get(shard).map(|b| b.connection_id) {
                self.round_begin(shard, conn).await;
            }
            sent.push(match self.backends.get_mut(shard) {
                Some(b) => b.send(payload).await.map(|_| ()),
                None => Err(BackendError::Lost {
                    shard: self.shared.config.shards[shard].name.clone(),
                    source: std::io::Error::other("no connection"),
                }),
            });
        }
        let mut out = Vec::with_capacity(sends.len());
        for (&(shard, _), s) in sends.iter().zip(sent) {
            let r = match (s, self.backends.get_mut(shard)) {
                (Ok(()), Some(b)) => b.read_reply(Expect::Results).await,
                (Err(e), _) => Err(e),
                (Ok(()), None) => Err(BackendError::Lost {
                    shard: self.shared.config.shards[shard].name.clone(),
                    source: std::io::Error::other("no connection"),
                }),
            };
            if self.round_end(shard).await {
                match &r {
                    Err(BackendError::Server { err, .. }) => {
                        self.note_killed(shard, Some(err.code));
                    }
                    Err(_) => {
                        self.note_killed(shard, None);
                    }
                    Ok(_) => {}
                }
            }
            out.push(r);
        }
        out
    }

    /// Runs each `(shard, COM_QUERY payload)` as one atomic write and returns
    /// each shard's OK, in order. Every phase (XA START, the statement, XA
    /// END, XA PREPARE, XA COMMIT) runs on all shards at once. The session
    /// is in the deadlock detector's registry meanwhile: this XA transaction
    /// holds locks on several shards.
    pub(in crate::frontend) async fn run_atomic(
        &mut self,
        parts: Vec<(usize, Vec<u8>)>,
        returning: bool,
    ) -> Result<Vec<PartOk>, CmdError> {
        let register = self.shared.deadlock_detection && !self.watching;
        if register {
            self.watch_register();
        }
        // Boxed: a write on several shards (`engine/size_tests.rs`).
        let result = Box::pin(self.run_atomic_xa(parts, returning)).await;
        if register {
            self.watch_deregister();
        }
        result
    }

    async fn run_atomic_xa(
        &mut self,
        parts: Vec<(usize, Vec<u8>)>,
        returning: bool,
    ) -> Result<Vec<PartOk>, CmdError> {
        let xid = self.new_xid();
        let start = xa_cmd("START", &xid, "");
        // Every connection first: a shard that is down fails the write
        // before any shard has started it.
        for (shard, _) in &parts {
            self.backend(*shard).await.map_err(CmdError::Backend)?;
        }
        let shards: Vec<usize> = parts.iter().map(|(s, _)| *s).collect();
        let same = |payload: &[u8]| -> Vec<(usize, Vec<u8>)> {
            shards.iter().map(|&s| (s, payload.to_vec())).collect()
        };
        let mut started: Vec<usize> = Vec::with_capacity(parts.len());
        let mut oks = Vec::with_capacity(parts.len());
        let mut failure = None;
        let starts = same(&start);
        let replies = self.on_all(&refs(&starts)).await;
        for (r, &s) in phase(replies, &mut failure).iter().zip(&shards) {
            if r.is_some() {
                started.push(s);
            }
        }
        if failure.is_none() {
            let replies = self.on_all(&refs(&parts)).await;
            for (r, &s) in phase(replies, &mut failure).into_iter().zip(&shards) {
                let rows = returning.then(|| self.deprecate_eof(s));
                match r.as_deref().and_then(|p| PartOk::parse(p, rows)) {
                    Some(ok) => oks.push(ok),
                    None if r.is_some() => {
                        failure.get_or_insert(CmdError::Refused(
                            crate::protocol::codes::ER_UNKNOWN_ERROR,
                            format!(
                                "idgate: shard {} answered the write with rows (RETURNING?), which cannot be combined across shards; nothing was written (send one row per statement, or leave out RETURNING)",
                                self.shared.config.shards[s].name
                            ),
                        ));
                    }
                    None => {}
                }
            }
        }
        if let Some(f) = failure {
            self.rollback_xa(&xid, &started).await;
            return Err(f);
        }
        self.two_phase_commit(&xid, &started, "the write").await?;
        // Each part's OK was sent inside the XA branch; the client's
        // autocommit statement has ended, as the status must say.
        for p in &mut oks {
            p.ok.status &= !crate::protocol::consts::status::IN_TRANS;
        }
        Ok(oks)
    }

    /// Whether replies on `shard`'s connection end result sets with OK packets.
    fn deprecate_eof(&self, shard: usize) -> bool {
        self.backends.get(shard).is_some_and(|b| b.deprecate_eof())
    }

    /// A new xid for this session: `<prefix>-<session>-<seq>`, the prefix
    /// being the commit log's (`idgate-<cluster>-<node>-<incarnation>`, at
    /// most 7 + 8 + 1 + 3 + 1 + 16 = 36 bytes, in practice under 30) or,
    /// without one, `idgate-<server tag>` (at most 35). With 1 + 8 + 1 + 16
    /// more: 64 at the very most, MariaDB's limit.
    pub(in crate::frontend) fn new_xid(&mut self) -> String {
        self.xa_seq += 1;
        match self.shared.xa_log.get() {
            Some(log) => format!("{}-{:x}-{:x}", log.prefix(), self.id, self.xa_seq),
            None => format!(
                "idgate-{}-{:x}-{:x}",
                self.shared.xa_tag, self.id, self.xa_seq
            ),
        }
    }

    /// Ends and rolls back branch `xid` on `shards` (errors mean a branch is
    /// gone already).
    pub(in crate::frontend) async fn rollback_xa(&mut self, xid: &str, shards: &[usize]) {
        for verb in ["END", "ROLLBACK"] {
            let sends: Vec<(usize, Vec<u8>)> =
                shards.iter().map(|&s| (s, xa_cmd(verb, xid, ""))).collect();
            let _ = self.on_all(&refs(&sends)).await;
        }
    }

    /// XA END and PREPARE on every shard of `started`, then XA COMMIT on
    /// every one. A failure before all have prepared rolls every one back.
    /// `what` names the work in messages ("the write", "the transaction").
    pub(in crate::frontend) async fn two_phase_commit(
        &mut self,
        xid: &str,
        started: &[usize],
        what: &str,
    ) -> Result<(), CmdError> {
        let mut failure = None;
        for verb in ["END", "PREPARE"] {
            let sends: Vec<(usize, Vec<u8>)> = started
                .iter()
                .map(|&s| (s, xa_cmd(verb, xid, "")))
                .collect();
            let replies = self.on_all(&refs(&sends)).await;
            phase(replies, &mut failure);
            if failure.is_some() {
                break;
            }
        }
        if let Some(f) = failure {
            self.rollback_xa(xid, started).await;
            return Err(f);
        }
        self.fault_crash(1, started)?;
        let log = self.shared.xa_log.get().cloned();
        if let Some(log) = &log {
            // The decision, durable before any shard is told to commit: a
            // restarted idgate commits the branches it finds prepared when
            // it finds this record, and rolls them back otherwise.
            if let Err(e) = log.record_commit(xid).await {
                warn!(conn = self.id, %xid, "cannot record the XA commit decision; rolling back: {e}");
                self.rollback_xa(xid, started).await;
                return Err(CmdError::Refused(
                    crate::protocol::codes::ER_ERROR_DURING_COMMIT,
                    format!("idgate: {what} was rolled back on every shard: its commit could not be recorded in the allocator's store ({e})"),
                ));
            }
        }
        self.fault_crash(2, started)?;
        let commit = xa_cmd("COMMIT", xid, "");
        let mut late = Vec::new();
        let mut commits = Vec::with_capacity(started.len());
        for &shard in started {
            let injected = self
                .shared
                .fault_xa_commit
                .compare_exchange(shard, usize::MAX, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
            if injected {
                // As if the shard went away right now.
                self.backends.release(shard);
            }
            commits.push((shard, commit.clone()));
        }
        let replies = self.on_all(&refs(&commits)).await;
        for (&shard, r) in started.iter().zip(replies) {
            if r.is_err() {
                let name = self.shared.config.shards[shard].name.clone();
                warn!(conn = self.id, shard = %name, %xid, "XA COMMIT failed after every shard prepared; will commit on reconnect");
                self.shared.pending_xa.lock().push((shard, xid.to_string()));
                self.backends.release(shard);
                self.stmts.forget_shard(shard);
                late.push(name);
            }
        }
        if late.is_empty() {
            if let Some(log) = &log {
                log.forget_later(xid.to_string());
            }
        } else {
            return Err(CmdError::Refused(
                crate::protocol::codes::CR_SERVER_LOST,
                format!(
                    "idgate: {what} is committed on some shards, and prepared but not yet committed on shard {} (XA transaction '{xid}'); idgate commits it there when it reconnects",
                    late.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// A write to several shards: inside the session's XA transaction, run
    /// on each shard with a savepoint (a failure on one undoes the others'
    /// part, as a failed statement does); outside, as its own XA
    /// transaction.
    ///
    /// With `returning`, each part's reply is the result of a `RETURNING`
    /// idgate added (`upsert.rs`).
    pub(in crate::frontend) async fn run_write(
        &mut self,
        parts: Vec<(usize, Vec<u8>)>,
        returning: bool,
    ) -> Result<Vec<PartOk>, CmdError> {
        let shards: Vec<usize> = parts.iter().map(|(s, _)| *s).collect();
        self.note_diag(&shards);
        if self.txn_xa.is_none() {
            return self.run_atomic(parts, returning).await;
        }
        for (shard, _) in &parts {
            self.backend(*shard).await.map_err(CmdError::Backend)?;
            self.enlist(*shard).await?;
        }
        let savepoints: Vec<(usize, Vec<u8>)> = parts
            .iter()
            .map(|(s, _)| (*s, b"\x03SAVEPOINT idgate_stmt".to_vec()))
            .collect();
        let mut failure = None;
        let replies = self.on_all(&refs(&savepoints)).await;
        phase(replies, &mut failure);
        let mut oks = Vec::with_capacity(parts.len());
        if failure.is_none() {
            let replies = self.on_all(&refs(&parts)).await;
            let shards: Vec<usize> = parts.iter().map(|(s, _)| *s).collect();
            for (r, s) in phase(replies, &mut failure).into_iter().zip(shards) {
                let rows = returning.then(|| self.deprecate_eof(s));
                match r.as_deref().map(|p| PartOk::parse(p, rows)) {
                    Some(Some(ok)) => oks.push(ok),
                    Some(None) => {
                        failure.get_or_insert(CmdError::Refused(
                            crate::protocol::codes::ER_UNKNOWN_ERROR,
                            "idgate: a shard answered the write with rows (RETURNING?), which cannot be combined across shards; the statement was undone".into(),
                        ));
                    }
                    None => {}
                }
            }
        }
        if let Some(f) = failure {
            let undo: Vec<(usize, Vec<u8>)> = parts
                .iter()
                .map(|(s, _)| (*s, b"\x03ROLLBACK TO SAVEPOINT idgate_stmt".to_vec()))
                .collect();
            let _ = self.on_all(&refs(&undo)).await;
            return Err(f);
        }
        Ok(oks)
    }

    /// Ends the session's XA transaction: COMMIT (one phase when one shard
    /// took part, two-phase otherwise) or ROLLBACK on every shard in it.
    /// With `reply`, the client gets the OK (or the error).
    pub(in crate::frontend) async fn finish_xa(
        &mut self,
        commit: bool,
        reply: bool,
    ) -> Result<(), CmdError> {
        // Boxed: once per transaction on several shards, which is far from
        // free already (`engine/size_tests.rs`).
        Box::pin(self.finish_xa_now(commit, reply)).await
    }

    async fn finish_xa_now(&mut self, commit: bool, reply: bool) -> Result<(), CmdError> {
        let Some(xid) = self.txn_xa.take() else {
            return Ok(());
        };
        self.txn_write = None;
        let shards: Vec<usize> = (0..self.backends.len())
            .filter(|&s| {
                self.backends
                    .get(s)
                    .is_some_and(|b| b.status & crate::protocol::consts::status::IN_TRANS != 0)
            })
            .collect();
        let result = if !commit {
            self.rollback_xa(&xid, &shards).await;
            Ok(())
        } else if let [one] = shards[..] {
            let mut failure = None;
            for (verb, suffix) in [("END", ""), ("COMMIT", " ONE PHASE")] {
                let sends = [(one, xa_cmd(verb, &xid, suffix))];
                let replies = self.on_all(&refs(&sends)).await;
                phase(replies, &mut failure);
                if failure.is_some() {
                    self.rollback_xa(&xid, &shards).await;
                    break;
                }
            }
            failure.map_or(Ok(()), Err)
        } else {
            self.two_phase_commit(&xid, &shards, "the transaction")
                .await
        };
        if !reply {
            return result;
        }
        result?;
        self.send_ok(self.next_seq, crate::protocol::consts::status::AUTOCOMMIT)
            .await
    }

    /// Fault injection (tests): at `point` (see `Shared::fault_xa_crash`),
    /// stop as if idgate died: the shard connections of `started` are
    /// dropped without a word, their branches stay prepared.
    fn fault_crash(&mut self, point: u8, started: &[usize]) -> Result<(), CmdError> {
        let hit = self
            .shared
            .fault_xa_crash
            .compare_exchange(point, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if !hit {
            return Ok(());
        }
        for &shard in started {
            self.backends.release(shard);
            self.stmts.forget_shard(shard);
        }
        Err(CmdError::End(format!(
            "fault injection: XA crash point {point}"
        )))
    }

    /// On a new connection to `shard`: commits the XA branches idgate left
    /// prepared there when a commit failed.
    pub(in crate::frontend) async fn commit_pending_xa(&mut self, shard: usize) {
        let pending: Vec<String> = {
            let mut all = self.shared.pending_xa.lock();
            let (mine, rest): (Vec<_>, Vec<_>) = all.drain(..).partition(|(s, _)| *s == shard);
            *all = rest;
            mine.into_iter().map(|(_, x)| x).collect()
        };
        for xid in pending {
            let commit = xa_cmd("COMMIT", &xid, "");
            let done = match self.backends.get_mut(shard) {
                Some(b) => b.run(&commit, Expect::Results).await,
                None => Err(BackendError::Lost {
                    shard: String::new(),
                    source: std::io::Error::other("no connection"),
                }),
            };
            match done {
                Ok(_) => warn!(conn = self.id, %xid, "committed a late XA branch"),
                // (The commit record stays: another shard of the same
                // transaction may be late too; recovery deletes it.)
                // Unknown xid: committed by someone else already.
                Err(BackendError::Server { err, .. }) if err.code == 1397 => {}
                Err(e) => {
                    warn!(conn = self.id, %xid, "late XA branch still not committed: {e}");
                    self.shared.pending_xa.lock().push((shard, xid));
                }
            }
        }
    }
}
