//! The resharding cutover's pause, idgate's side of
//! [`crate::reshard::protocol`] (its module doc has the handshake).
//!
//! [`PauseGate`] (in [`crate::frontend::Shared`]) says which tables are paused. A session
//! checks it once per statement with one atomic load
//! ([`PauseGate::active`]); only while a pause is active does it look at
//! the statement's text (`Session::hold_if_paused`): a statement that
//! names a paused table waits (it is *held*) until the release, then runs
//! on the rules in force then (the new placement), or fails with 1205
//! past the pause's deadline. Nothing else of the session changes, and no
//! other session notices.
//!
//! Which statements may still run on the old placement once the pause is
//! seen: the commands already running (they started before the pause, so
//! they did not look), and the statements of transactions open at that
//! moment (such a transaction may have used the table already: holding it
//! would deadlock with the shard's `RENAME`, which waits for its metadata
//! lock). Both sets are taken from the session registry when the pause
//! begins (`PauseGate::begin`: the *let-run* sessions). This idgate
//! acknowledges the pause (its member value) only once every let-run
//! session has finished its command and ended its transaction
//! (`follow.rs`): after the acknowledgement, no statement on the table runs
//! here on the old rules. That waits for whole transactions open at the
//! pause, not only those that used the table (idgate does not record the
//! tables of a transaction: that would cost every statement), so a long
//! transaction open at the pause can make the mover give the cutover up
//! and retry.
//!
//! A table is matched by its bare name anywhere in the statement (a column
//! or another schema's table of that name too): at worst a statement is
//! held that did not need to be, never the reverse.
//!
//! Files: `gate.rs` (the state in `Shared`), `mod.rs` (the session's
//! hold), `follow.rs` (the task that follows the pause epochs in the
//! store, acknowledges them, and caches the job documents for `SHOW
//! IDGATE RESHARD` and the metrics).

pub mod follow;
pub mod gate;

pub use gate::{PauseGate, PauseView};

use crate::frontend::session::{CmdError, Session};
use crate::protocol::codes;
use gate::unix_ms;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counts a held statement while it waits (also when the wait is dropped).
struct Holding<'a>(&'a AtomicU64);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Session {
    /// Holds the statement `sql` while it names a paused table (see the
    /// module doc); returns once it may run. Called only when
    /// [`PauseGate::active`]. After a hold the session takes the rules in
    /// force, even inside a transaction: the transaction began after the
    /// pause (else it is let run), so it has not touched the table on the
    /// old rules, and the cutover's version changes only that table.
    ///
    /// # Errors
    /// 1205 past the pause's deadline, naming the table; the client gone.
    pub(in crate::frontend) async fn hold_if_paused(&mut self, sql: &[u8]) -> Result<(), CmdError> {
        let Ok(text) = std::str::from_utf8(sql) else {
            // Not UTF-8: matched on its readable part.
            let lossy = String::from_utf8_lossy(sql).into_owned();
            return Box::pin(self.hold_if_paused(lossy.as_bytes())).await;
        };
        // The session's sql_mode (ANSI_QUOTES makes "t" a name); a shard
        // that cannot say leaves the default.
        let modes = self
            .sql_modes()
            .await
            .map(|m| m.lexer())
            .unwrap_or_default();
        let shared = self.shared.clone();
        let gate = &shared.pause;
        let mut held_once = false;
        let mut rx = gate.changed.subscribe();
        let mut fence_until = None;
        loop {
            rx.borrow_and_update();
            if gate.fenced() {
                let rules = shared.rules.load();
                let ruled = |w: &str| rules.as_ref().is_some_and(|r| r.has_table_name(w));
                if crate::sql::mentions_table(text, modes, &ruled) {
                    held_once = true;
                    let until = *fence_until
                        .get_or_insert_with(|| tokio::time::Instant::now() + FENCE_WAIT);
                    let _holding = {
                        gate.held.fetch_add(1, Ordering::Relaxed);
                        Holding(&gate.held)
                    };
                    let gone = client_gone(self.client.tcp());
                    tokio::select! {
                        r = rx.changed() => if r.is_err() { break },
                        () = tokio::time::sleep_until(until) => {
                            gate.deadline_failures.fetch_add(1, Ordering::Relaxed);
                            return Err(CmdError::Refused(
                                codes::ER_LOCK_WAIT_TIMEOUT,
                                "idgate: this idgate lost its place among the resharding members (the store, etcd, is unreachable), so a cutover may be under way without it: statements on rule tables wait until it is back; the statement did not run; run it again".into(),
                            ));
                        }
                        e = gone => return Err(CmdError::ClientGone(e)),
                    }
                    continue;
                }
            }
            let in_txn = self.txn_open();
            let names =
                |t: &str| crate::sql::mentions_table(text, modes, &|w| w.eq_ignore_ascii_case(t));
            let Some(h) = gate.check(self.id, in_txn, &names) else {
                break;
            };
            if !held_once {
                held_once = true;
                tracing::info!(conn = self.id, table = %h.table, job = %h.job, "statement held for a resharding cutover");
            }
            let _holding = {
                gate.held.fetch_add(1, Ordering::Relaxed);
                Holding(&gate.held)
            };
            let left = h.deadline_ms.saturating_sub(unix_ms());
            let timeout = tokio::time::sleep(Duration::from_millis(left));
            let gone = client_gone(self.client.tcp());
            tokio::select! {
                r = rx.changed() => if r.is_err() { break },
                () = timeout => {
                    gate.deadline_failures.fetch_add(1, Ordering::Relaxed);
                    return Err(CmdError::Refused(
                        codes::ER_LOCK_WAIT_TIMEOUT,
                        format!(
                            "idgate: table {} is being resharded (job {}): the statement waited for the cutover past its deadline and did not run; run it again",
                            h.table, h.job
                        ),
                    ));
                }
                e = gone => return Err(CmdError::ClientGone(e)),
            }
        }
        if held_once && self.shared.rules.generation() != self.rules_version {
            self.rules_version = self.shared.rules.generation();
            self.rules = self.shared.rules.load();
        }
        Ok(())
    }
}

/// How long a statement on a rule table waits while this idgate is fenced
/// (`PauseGate::fence`) before it fails with 1205.
const FENCE_WAIT: Duration = Duration::from_secs(10);

/// Completes when the client closed its connection (a held statement then
/// ends with its session; nothing of it is left behind). Pending forever
/// when the client sends more (pipelined commands stay unread) or the
/// socket cannot be probed.
async fn client_gone(tcp: Option<&tokio::net::TcpStream>) -> std::io::Error {
    let Some(tcp) = tcp else {
        return std::future::pending().await;
    };
    let mut b = [0u8; 1];
    match tcp.peek(&mut b).await {
        Ok(0) => std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the client left while its statement was held",
        ),
        Ok(_) => std::future::pending().await,
        Err(e) => e,
    }
}
