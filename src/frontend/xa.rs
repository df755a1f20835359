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
//!    late on that shard). If idgate itself dies in this step, `XA RECOVER`
//!    on the shard lists the branch (`idgate-...`), to be committed by hand.

use super::route::PartOk;
use super::session::{CmdError, Session};
use crate::backend::BackendError;
use crate::protocol::response::Expect;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::warn;

/// A tag that sets one server's xids apart from every other's (another
/// idgate process, or another server in this process): start time, process
/// id and a counter.
pub(super) fn server_tag() -> String {
    static SERVERS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = SERVERS.fetch_add(1, Ordering::Relaxed) & 0xffff;
    format!("{:x}{:x}{n:x}", nanos as u64, std::process::id())
}

/// An ERR packet for a shard's error, its message prefixed with the shard.
pub(super) fn shard_error(e: BackendError) -> CmdError {
    match &e {
        BackendError::Server { shard, err } => {
            CmdError::Reply(err.payload(&format!("shard {shard}: ")))
        }
        _ => CmdError::Backend(e),
    }
}

impl Session {
    fn xa(&mut self, verb: &str, xid: &str, suffix: &str) -> Vec<u8> {
        let _ = self;
        format!("\x03XA {verb} '{xid}'{suffix}").into_bytes()
    }

    /// Runs each `(shard, COM_QUERY payload)` as one atomic write and returns
    /// each shard's OK, in order.
    pub(super) async fn run_atomic(
        &mut self,
        parts: Vec<(usize, Vec<u8>)>,
    ) -> Result<Vec<PartOk>, CmdError> {
        self.xa_seq += 1;
        // At most 7 + 28 + 1 + 8 + 1 + 16 = 61 bytes: MariaDB takes 64.
        let xid = format!(
            "idgate-{}-{:x}-{:x}",
            self.shared.xa_tag, self.id, self.xa_seq
        );
        let start = self.xa("START", &xid, "");
        let end = self.xa("END", &xid, "");
        let prepare = self.xa("PREPARE", &xid, "");
        let rollback = self.xa("ROLLBACK", &xid, "");
        let commit = self.xa("COMMIT", &xid, "");
        let mut started: Vec<usize> = Vec::with_capacity(parts.len());
        let mut oks = Vec::with_capacity(parts.len());
        let mut failure = None;
        for (shard, payload) in &parts {
            let b = match self.backend(*shard).await {
                Ok(b) => b,
                Err(e) => {
                    failure = Some(CmdError::Backend(e));
                    break;
                }
            };
            if let Err(e) = b.run(&start, Expect::Results).await {
                failure = Some(shard_error(e));
                break;
            }
            started.push(*shard);
            let result = b.run(payload, Expect::Results).await;
            let ended = b.run(&end, Expect::Results).await;
            match (result, ended) {
                (Ok(packets), Ok(_)) => match PartOk::parse(&packets) {
                    Some(ok) => oks.push(ok),
                    None => {
                        failure = Some(CmdError::Refused(
                            crate::protocol::codes::ER_UNKNOWN_ERROR,
                            format!(
                                "idgate: shard {} did not answer the write with an OK packet",
                                self.shared.config.shards[*shard].name
                            ),
                        ));
                        break;
                    }
                },
                (Err(e), _) | (_, Err(e)) => {
                    failure = Some(shard_error(e));
                    break;
                }
            }
        }
        if failure.is_none() {
            for &shard in &started {
                let Some(b) = self.backends[shard].as_mut() else {
                    continue;
                };
                if let Err(e) = b.run(&prepare, Expect::Results).await {
                    failure = Some(shard_error(e));
                    break;
                }
            }
        }
        if let Some(f) = failure {
            for &shard in &started {
                if let Some(b) = self.backends[shard].as_mut() {
                    // A branch still active must be ended before it can be
                    // rolled back; errors here mean it is gone already.
                    let _ = b.run(&end, Expect::Results).await;
                    let _ = b.run(&rollback, Expect::Results).await;
                }
            }
            return Err(f);
        }
        let mut late = Vec::new();
        for &shard in &started {
            let injected = self
                .shared
                .fault_xa_commit
                .compare_exchange(shard, usize::MAX, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
            let ok = match self.backends[shard].as_mut() {
                Some(b) if !injected => b.run(&commit, Expect::Results).await.is_ok(),
                _ => false,
            };
            if !ok {
                let name = self.shared.config.shards[shard].name.clone();
                warn!(conn = self.id, shard = %name, %xid, "XA COMMIT failed after every shard prepared; will commit on reconnect");
                self.shared.pending_xa.lock().push((shard, xid.clone()));
                self.backends[shard] = None;
                self.stmts.forget_shard(shard);
                late.push(name);
            }
        }
        if !late.is_empty() {
            return Err(CmdError::Refused(
                crate::protocol::codes::CR_SERVER_LOST,
                format!(
                    "idgate: the write is committed on some shards, and prepared but not yet committed on shard {} (XA transaction '{xid}'); idgate commits it there when it reconnects",
                    late.join(", ")
                ),
            ));
        }
        Ok(oks)
    }

    /// On a new connection to `shard`: commits the XA branches idgate left
    /// prepared there when a commit failed.
    pub(super) async fn commit_pending_xa(&mut self, shard: usize) {
        let pending: Vec<String> = {
            let mut all = self.shared.pending_xa.lock();
            let (mine, rest): (Vec<_>, Vec<_>) = all.drain(..).partition(|(s, _)| *s == shard);
            *all = rest;
            mine.into_iter().map(|(_, x)| x).collect()
        };
        for xid in pending {
            let commit = self.xa("COMMIT", &xid, "");
            let done = match self.backends[shard].as_mut() {
                Some(b) => b.run(&commit, Expect::Results).await,
                None => Err(BackendError::Lost {
                    shard: String::new(),
                    source: std::io::Error::other("no connection"),
                }),
            };
            match done {
                Ok(_) => warn!(conn = self.id, %xid, "committed a late XA branch"),
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
