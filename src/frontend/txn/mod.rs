//! Transactions across shards.
//!
//! A session's transaction lives on every shard connection it touched:
//! `BEGIN` / `START TRANSACTION` is answered by the default shard and
//! started again on each other shard the first time a statement of the
//! transaction goes there; `COMMIT` / `ROLLBACK` end it on every shard
//! connection that is in a transaction (the other shards first, silently,
//! then the default shard, whose reply the client gets; if another shard
//! failed, the client gets that shard's error instead).
//!
//! An explicit transaction (`BEGIN`, `START TRANSACTION` without options)
//! runs as one XA transaction: `XA START` on the default shard answers the
//! client's BEGIN, and on every other shard the transaction reaches; COMMIT
//! is `XA COMMIT ... ONE PHASE` when one shard took part, and a two-phase
//! commit (END, PREPARE on all, COMMIT on all) when several did, so writes
//! to several shards commit atomically. A statement that writes to several
//! shards inside it is made atomic on its own with a savepoint on each.
//!
//! Savepoints (`SAVEPOINT`, `ROLLBACK [WORK] TO [SAVEPOINT]`, `RELEASE
//! SAVEPOINT`) run on every shard connection in the transaction, and a
//! shard the transaction reaches later gets the open savepoints set before
//! its first statement (all of its work comes after them), so `ROLLBACK TO
//! SAVEPOINT` undoes the work done since on every shard.
//!
//! `START TRANSACTION` with options (READ ONLY, WITH CONSISTENT SNAPSHOT)
//! and `autocommit = 0` use plain transactions on each shard: there all
//! writes must go to one shard, so its COMMIT is atomic; a write that would
//! make such a transaction write to a second shard is refused before it runs
//! (the transaction stays open and usable). Outside a transaction, a write
//! to several shards is made atomic with XA (see `xa.rs`).

pub mod deadlock;
pub mod recovery;
pub mod watch;
pub mod watchlist;
pub mod xa;
pub mod xalog;

use crate::frontend::session::{CmdError, Session};
use crate::protocol::codes::ErrorCode;
use crate::protocol::consts::status;
use crate::protocol::response::Expect;
use crate::sql::statement::first_keyword;
use crate::sql::statement::txn::plain_begin;
use crate::sql::statement::SavepointOp;

/// Refused: this would need a distributed transaction idgate does not run.
pub(in crate::frontend) const ER_MULTI_SHARD_TXN: ErrorCode = ErrorCode {
    code: 1235,
    state: "42000",
};

impl Session {
    /// The session runs in a transaction: an explicit one, or autocommit off.
    pub(in crate::frontend) fn in_txn(&self) -> bool {
        if self.txn_open() {
            return true;
        }
        let autocommit = self
            .backends
            .conns()
            .next()
            .is_none_or(|b| b.status & status::AUTOCOMMIT != 0);
        !autocommit
    }

    /// A transaction has begun and not ended: an explicit or XA one, or
    /// one a statement started under autocommit off (between COMMIT and
    /// the next statement there is none).
    pub(in crate::frontend) fn txn_open(&self) -> bool {
        self.txn_begin.is_some()
            || self.txn_xa.is_some()
            || self
                .backends
                .conns()
                .any(|b| b.status & status::IN_TRANS != 0)
    }

    /// Before a statement of the session's explicit transaction goes to
    /// `shard`: starts the transaction there if it is not yet.
    /// Then sets the transaction's savepoints there if it lacks them.
    pub(in crate::frontend) async fn enlist(&mut self, shard: usize) -> Result<(), CmdError> {
        let begin = match (&self.txn_xa, &self.txn_begin) {
            (Some(xid), _) => Some(crate::frontend::txn::xa::xa_cmd("START", xid, "")),
            (None, Some(b)) => Some(b.clone()),
            (None, None) => None,
        };
        let b = self.backend(shard).await.map_err(CmdError::Backend)?;
        if let Some(begin) = begin {
            if b.status & status::IN_TRANS == 0 {
                b.run(&begin, Expect::Results)
                    .await
                    .map_err(CmdError::Backend)?;
            }
        }
        if self.txn_savepoints.is_empty() || self.savepoints_on.get(shard) == Some(&true) {
            return Ok(());
        }
        let set: Vec<String> = self
            .txn_savepoints
            .iter()
            .map(|name| format!("\x03SAVEPOINT `{}`", name.replace('`', "``")))
            .collect();
        let b = self.backend(shard).await.map_err(CmdError::Backend)?;
        for sql in set {
            b.run(sql.as_bytes(), Expect::Results)
                .await
                .map_err(CmdError::Backend)?;
        }
        self.mark_savepoints(shard);
        Ok(())
    }

    fn mark_savepoints(&mut self, shard: usize) {
        if self.savepoints_on.len() <= shard {
            self.savepoints_on.resize(shard + 1, false);
        }
        self.savepoints_on[shard] = true;
    }

    /// Forgets the transaction's savepoints (it ended).
    pub(in crate::frontend) fn forget_savepoints(&mut self) {
        self.txn_savepoints.clear();
        self.savepoints_on.clear();
    }

    /// `SAVEPOINT` / `ROLLBACK TO SAVEPOINT` / `RELEASE SAVEPOINT` in a
    /// transaction: on every shard connection that has the transaction's
    /// savepoints or is in the transaction (the others first, then the
    /// default shard, whose reply the client gets). Outside a transaction,
    /// or for a name idgate did not see set, the default shard alone
    /// answers, as MariaDB would.
    pub(in crate::frontend) async fn savepoint(
        &mut self,
        payload: &[u8],
        op: SavepointOp,
        name: String,
    ) -> Result<(), CmdError> {
        let at = self
            .txn_savepoints
            .iter()
            .position(|n| n.eq_ignore_ascii_case(&name));
        if !self.in_txn() || (op != SavepointOp::Set && at.is_none()) {
            return self.forward(0, payload, Expect::Results).await.map(|_| ());
        }
        // Shard 0 answers: the transaction must be there too.
        if self.txn_xa.is_some() {
            self.enlist(0).await?;
        }
        // The shards it runs on: then they have every savepoint.
        let mut ran = vec![0];
        for shard in 1..self.backends.len() {
            let Some(b) = self.backends.get_mut(shard) else {
                continue;
            };
            let has = self.savepoints_on.get(shard) == Some(&true);
            if !has && b.status & status::IN_TRANS == 0 {
                continue;
            }
            ran.push(shard);
            if !has {
                // In the transaction (a read reached it) but without the
                // savepoints set before: all its work comes after them.
                self.enlist(shard).await?;
            }
            let Some(b) = self.backends.get_mut(shard) else {
                continue;
            };
            b.run(payload, Expect::Results)
                .await
                .map_err(CmdError::Backend)?;
        }
        let outcome = self.forward(0, payload, Expect::Results).await?;
        if outcome.error {
            return Ok(());
        }
        match (op, at) {
            (SavepointOp::Set, at) => {
                // A name set again moves to the end.
                if let Some(i) = at {
                    self.txn_savepoints.remove(i);
                }
                self.txn_savepoints.push(name);
                for s in ran {
                    self.mark_savepoints(s);
                }
            }
            // Later savepoints are gone; this one stays.
            (SavepointOp::RollbackTo, Some(i)) => self.txn_savepoints.truncate(i + 1),
            // This one and later ones are gone.
            (SavepointOp::Release, Some(i)) => self.txn_savepoints.truncate(i),
            _ => {}
        }
        Ok(())
    }

    /// A write is about to go to `shards`: inside a transaction they must be
    /// the one shard the transaction writes to.
    pub(in crate::frontend) fn check_write(&mut self, shards: &[usize]) -> Result<(), CmdError> {
        if !self.in_txn() || self.txn_xa.is_some() {
            return Ok(());
        }
        let names = |s: &[usize]| {
            s.iter()
                .filter_map(|&i| self.shared.config.shards.get(i).map(|s| s.name.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match (shards, self.txn_write) {
            ([one], None) => {
                self.txn_write = Some(*one);
                Ok(())
            }
            ([one], Some(w)) if *one == w => Ok(()),
            ([_], Some(w)) => Err(CmdError::Refused(
                ER_MULTI_SHARD_TXN,
                format!(
                    "idgate: this transaction already wrote to shard {}; a write to shard {} in the same transaction could not be committed atomically (commit first, or keep a transaction's writes on one shard)",
                    names(&[w]),
                    names(shards)
                ),
            )),
            _ => Err(CmdError::Refused(
                ER_MULTI_SHARD_TXN,
                format!(
                    "idgate: this write goes to shards {} and cannot be atomic inside a transaction (outside a transaction idgate commits it on all shards atomically with XA)",
                    names(shards)
                ),
            )),
        }
    }

    /// `BEGIN` / `START TRANSACTION`: an open transaction is committed on
    /// every shard (as MariaDB does implicitly), then the new one starts on
    /// the default shard, and on others as statements reach them.
    pub(in crate::frontend) async fn begin(&mut self, payload: &[u8]) -> Result<(), CmdError> {
        if self.txn_xa.is_some() {
            // BEGIN commits the open transaction implicitly, as in MariaDB.
            // If that fails it was rolled back (the statement that failed
            // told the client already), and the new transaction starts.
            if let Err(e) = self.finish_xa(true, false).await {
                tracing::warn!(
                    conn = self.id,
                    "implicit commit at BEGIN failed, rolled back: {e}"
                );
            }
        }
        self.end_elsewhere(b"\x03COMMIT").await?;
        self.txn_write = None;
        self.forget_savepoints();
        if plain_begin(&payload[1..])
            && self
                .backends
                .get(0)
                .is_none_or(|b| b.status & status::IN_TRANS == 0)
        {
            let xid = self.new_xid();
            let start = crate::frontend::txn::xa::xa_cmd("START", &xid, "");
            let outcome = self.forward(0, &start, Expect::Results).await?;
            self.txn_begin = None;
            self.txn_xa = (!outcome.error).then_some(xid);
            return Ok(());
        }
        let outcome = self.forward(0, payload, Expect::Results).await?;
        self.txn_begin = (!outcome.error).then(|| payload.to_vec());
        Ok(())
    }

    /// `COMMIT` / `ROLLBACK`: on every shard in the transaction.
    pub(in crate::frontend) async fn end(&mut self, payload: &[u8]) -> Result<(), CmdError> {
        self.forget_savepoints();
        if self.txn_xa.is_some() {
            let commit = first_keyword(&payload[1..]) == *b"COMMIT\0\0";
            return self.finish_xa(commit, true).await;
        }
        let failed = self.end_elsewhere(payload).await;
        self.txn_begin = None;
        self.txn_write = None;
        match failed {
            Ok(()) => self.forward(0, payload, Expect::Results).await.map(|_| ()),
            Err(e) => {
                if let Some(b) = self.backends.get_mut(0) {
                    if b.status & status::IN_TRANS != 0 {
                        let _ = b.run(payload, Expect::Results).await;
                    }
                }
                Err(e)
            }
        }
    }

    /// Runs `payload` (COMMIT or ROLLBACK) on every shard connection but the
    /// default shard's that is in a transaction. Returns the first failure
    /// (after trying them all).
    async fn end_elsewhere(&mut self, payload: &[u8]) -> Result<(), CmdError> {
        let mut first_err = None;
        for shard in 1..self.backends.len() {
            let Some(b) = self.backends.get_mut(shard) else {
                continue;
            };
            if b.status & status::IN_TRANS == 0 {
                continue;
            }
            if let Err(e) = b.run(payload, Expect::Results).await {
                first_err.get_or_insert(CmdError::Backend(e));
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// After a command: forgets the transaction once no shard is in one.
    pub(in crate::frontend) fn txn_settled(&mut self) {
        if self.txn_begin.is_none()
            && self.txn_write.is_none()
            && self.txn_xa.is_none()
            && self.txn_savepoints.is_empty()
        {
            return;
        }
        let open = self
            .backends
            .conns()
            .any(|b| b.status & status::IN_TRANS != 0);
        let autocommit = self
            .backends
            .conns()
            .all(|b| b.status & status::AUTOCOMMIT != 0);
        if !open && (autocommit || self.txn_begin.is_some() || self.txn_xa.is_some()) {
            self.txn_begin = None;
            self.txn_write = None;
            self.txn_xa = None;
            self.forget_savepoints();
        }
    }

    /// Runs a statement that changed session state (`SET`, `USE`,
    /// COM_INIT_DB) on every other open shard connection too. A connection
    /// that refuses it is closed: it reopens with the recorded state replayed
    /// (or fails loudly if that cannot be done).
    pub(in crate::frontend) async fn propagate(
        &mut self,
        done_on: usize,
        payload: &[u8],
        expect: Expect,
    ) {
        for shard in 0..self.backends.len() {
            if shard == done_on {
                continue;
            }
            let Some(b) = self.backends.get_mut(shard) else {
                continue;
            };
            if b.run(payload, expect).await.is_err() {
                self.backends.release(shard);
                self.stmts.forget_shard(shard);
            }
        }
    }
}
