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

    /// Sends each `(shard, payload)`, then reads every reply in turn: the
    /// shards work at the same time. A shard without a connection, or whose
    /// send fails, gets its error without a read.
    async fn on_all(
        &mut self,
        sends: &[(usize, &[u8])],
    ) -> Vec<Result<Vec<Vec<u8>>, BackendError>> {
        let mut sent = Vec::with_capacity(sends.len());
        for &(shard, payload) in sends {
            sent.push(match self.backends[shard].as_mut() {
                Some(b) => b.send(payload).await.map(|_| ()),
                None => Err(BackendError::Lost {
                    shard: self.shared.config.shards[shard].name.clone(),
                    source: std::io::Error::other("no connection"),
                }),
            });
        }
        let mut out = Vec::with_capacity(sends.len());
        for (&(shard, _), s) in sends.iter().zip(sent) {
            out.push(match (s, self.backends[shard].as_mut()) {
                (Ok(()), Some(b)) => b.read_reply(Expect::Results).await,
                (Err(e), _) => Err(e),
                (Ok(()), None) => Err(BackendError::Lost {
                    shard: self.shared.config.shards[shard].name.clone(),
                    source: std::io::Error::other("no connection"),
                }),
            });
        }
        out
    }

    /// Runs each `(shard, COM_QUERY payload)` as one atomic write and returns
    /// each shard's OK, in order. Every phase (XA START, the statement, XA
    /// END, XA PREPARE, XA COMMIT) runs on all shards at once.
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
                match r.as_deref().and_then(PartOk::parse) {
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
        for verb in [&end, &prepare] {
            if failure.is_some() {
                break;
            }
            let sends = same(verb);
            let replies = self.on_all(&refs(&sends)).await;
            phase(replies, &mut failure);
        }
        if let Some(f) = failure {
            // A branch still active must be ended before it can be rolled
            // back; errors here mean it is gone already.
            let ends: Vec<(usize, Vec<u8>)> = started.iter().map(|&s| (s, end.clone())).collect();
            let _ = self.on_all(&refs(&ends)).await;
            let rollbacks: Vec<(usize, Vec<u8>)> =
                started.iter().map(|&s| (s, rollback.clone())).collect();
            let _ = self.on_all(&refs(&rollbacks)).await;
            return Err(f);
        }
        let mut late = Vec::new();
        let mut commits = Vec::with_capacity(started.len());
        for &shard in &started {
            let injected = self
                .shared
                .fault_xa_commit
                .compare_exchange(shard, usize::MAX, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
            if injected {
                // As if the shard went away right now.
                self.backends[shard] = None;
            }
            commits.push((shard, commit.clone()));
        }
        let replies = self.on_all(&refs(&commits)).await;
        for (&shard, r) in started.iter().zip(replies) {
            if r.is_err() {
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
