//! What a session does about the deadlock detector (`watchlist.rs` holds
//! the shared types): registering while in a transaction, marking round
//! trips to shards, and answering as a victim.

use crate::frontend::session::{CmdError, Session};
use crate::frontend::txn::watchlist::{is_kill_code, Watched, DEADLOCK_MESSAGE};
use crate::protocol::codes;
use crate::protocol::consts::status;
use crate::protocol::response::Expect;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, warn};

impl Session {
    /// How long a session waits for the detector's KILL to be answered.
    fn kill_wait(&self) -> Duration {
        self.shared.connect_timeout() * 2
    }

    /// Puts the session in the registry as a transaction starting now.
    pub(in crate::frontend) fn watch_register(&mut self) {
        let shards = self.backends.len();
        let id = self.id;
        let w = self
            .watched
            .get_or_insert_with(|| Arc::new(Watched::new(id, shards)))
            .clone();
        let conns = self.backends.open().map(|(i, b)| (i, b.connection_id));
        self.shared.watch.register(&w, conns);
        self.watching = true;
    }

    pub(in crate::frontend) fn watch_deregister(&mut self) {
        if self.watching {
            self.shared.watch.deregister(self.id);
            self.watching = false;
        }
    }

    /// Before a command: a session inside a transaction (or about to open
    /// one: autocommit off) is registered.
    pub(in crate::frontend) fn watch_command_start(&mut self) {
        if !self.watching && self.shared.deadlock_detection && self.in_txn() {
            self.watch_register();
        }
    }

    /// After a command: a victim flag still set belongs to a statement that
    /// finished before the KILL landed (every round trip of the command has
    /// ended, so no KILL is under way); a session whose transaction ended
    /// leaves the registry.
    pub(in crate::frontend) fn watch_command_end(&mut self) {
        if let Some(w) = &self.watched {
            if w.is_victim() {
                w.clear_victim();
            }
        }
        if self.watching && !self.txn_open() {
            self.watch_deregister();
        }
    }

    /// A round trip to `shard` (thread `conn`) starts.
    pub(in crate::frontend) async fn round_begin(&self, shard: usize, conn: u32) {
        if !self.watching {
            return;
        }
        if let Some(w) = &self.watched {
            w.begin(shard, conn, self.shared.watch.now_ms(), self.kill_wait())
                .await;
        }
    }

    /// The round trip to `shard` is over; `true` if the detector claimed it
    /// to kill it (its KILL has been answered by now).
    pub(in crate::frontend) async fn round_end(&self, shard: usize) -> bool {
        if !self.watching {
            return false;
        }
        match &self.watched {
            Some(w) => w.end(shard, self.kill_wait()).await,
            None => false,
        }
    }

    /// The session's entry while it is registered, for a reply relay's hook
    /// (see [`Watched::killed_here`]).
    pub(in crate::frontend) fn watched_now(&self) -> Option<Arc<Watched>> {
        if self.watching {
            self.watched.clone()
        } else {
            None
        }
    }

    /// After a round trip the detector claimed, that ended with `failed`
    /// (`Some(code)` of its error, `None` for a lost connection): whether
    /// the KILL ended it, making the session a deadlock victim. A round
    /// trip that finished before the KILL landed is not.
    pub(in crate::frontend) fn note_killed(&mut self, shard: usize, failed: Option<u16>) -> bool {
        let victim = self.watched.as_ref().is_some_and(|w| w.is_victim());
        let killed = victim && failed.is_none_or(is_kill_code);
        if killed {
            self.mark_killed(shard, failed);
        }
        killed
    }

    /// The detector's KILL ended the round trip on `shard` (with error
    /// `failed`, or the connection was lost): the session is a victim.
    pub(in crate::frontend) fn mark_killed(&mut self, shard: usize, failed: Option<u16>) {
        self.killed = true;
        if failed.is_none_or(|c| c == codes::ER_CONNECTION_KILLED.code) {
            // The shard closed the connection: its branch is rolled back.
            self.backends.release(shard);
            self.stmts.forget_shard(shard);
        }
    }

    /// The session was chosen as a deadlock victim and its waiting statement
    /// was killed: rolls its whole transaction back on every shard (an XA
    /// write of its own was rolled back already), and makes the command's
    /// answer MariaDB's deadlock error.
    pub(in crate::frontend) async fn deadlock_victim(
        &mut self,
        result: Result<(), CmdError>,
    ) -> Result<(), CmdError> {
        if let Err(CmdError::ClientGone(e)) = result {
            return Err(CmdError::ClientGone(e));
        }
        if let Some(w) = &self.watched {
            w.clear_victim();
        }
        if self.txn_xa.is_some() {
            if let Err(e) = self.finish_xa(false, false).await {
                debug!(conn = self.id, "rollback of a deadlock victim: {e}");
            }
        } else {
            for shard in 0..self.backends.len() {
                let Some(b) = self.backends.get_mut(shard) else {
                    continue;
                };
                if b.status & status::IN_TRANS == 0 {
                    continue;
                }
                if let Err(e) = b.run(b"\x03ROLLBACK", Expect::Results).await {
                    warn!(conn = self.id, "rollback of a deadlock victim: {e}");
                    self.backends.release(shard);
                    self.stmts.forget_shard(shard);
                }
            }
        }
        self.txn_begin = None;
        self.txn_write = None;
        Err(CmdError::Refused(
            codes::ER_LOCK_DEADLOCK,
            DEADLOCK_MESSAGE.to_string(),
        ))
    }
}
