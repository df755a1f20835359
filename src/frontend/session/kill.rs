//! `KILL` of idgate sessions.
//!
//! The connection id a client learns from the handshake is idgate's (one
//! session has a connection on each shard it uses, each with its own
//! MariaDB thread id). So `KILL [CONNECTION | QUERY] n` and
//! COM_PROCESS_KILL name an idgate session, and are never relayed: on a
//! shard, `n` would be some other connection's thread, perhaps another
//! client's. idgate looks the session up and:
//!
//! - `KILL QUERY n`: sends `KILL QUERY <thread>` to every shard connection
//!   of session `n` (from a connection of its own); the running statement
//!   ends with error 1317, as on MariaDB, and the session goes on;
//! - `KILL [CONNECTION] n`: the same with `KILL CONNECTION`, and session `n`
//!   closes (at once when it waits for a command, after its running
//!   statement otherwise). Killing one's own session answers error 1927.
//!
//! Only the same login user may kill a session (error 1095 otherwise;
//! idgate has no PROCESS/SUPER privilege model); an unknown id is error
//! 1094. `KILL USER` and `KILL QUERY ID` are refused with 1235.

use crate::frontend::session::{CmdError, Session};
use crate::protocol::codes::{self, ErrorCode};
use crate::sql::statement::Kill;
use std::sync::atomic::Ordering;
use tracing::{info, warn};

impl Session {
    /// Runs a `KILL` for the client.
    pub(in crate::frontend) async fn kill(&mut self, k: Kill) -> Result<(), CmdError> {
        let seq = self.next_seq;
        let target = u32::try_from(k.id)
            .ok()
            .and_then(|id| self.shared.sessions.get(id));
        let Some(target) = target else {
            let msg = format!("Unknown thread id: {}", k.id);
            return self.reply_error(seq, &codes::ER_NO_SUCH_THREAD, &msg).await;
        };
        if *target.user.lock() != self.login.user {
            let msg = format!("You are not owner of thread {}", k.id);
            return self
                .reply_error(seq, &codes::ER_KILL_DENIED_ERROR, &msg)
                .await;
        }
        let own = u64::from(self.id) == k.id;
        if !k.query {
            target.killed.store(true, Ordering::Relaxed);
            target.wake.notify_one();
        }
        if !own {
            let threads: Vec<(usize, u32)> = target
                .threads
                .lock()
                .iter()
                .enumerate()
                .filter_map(|(s, t)| t.map(|t| (s, t)))
                .collect();
            let verb = if k.query { "QUERY" } else { "CONNECTION" };
            for (shard, thread) in threads {
                self.kill_on_shard(shard, verb, thread).await;
            }
            info!(conn = self.id, target = k.id, query = k.query, "KILL");
        }
        if own && !k.query {
            self.reply_error(seq, &codes::ER_CONNECTION_KILLED, "Connection was killed")
                .await?;
            return Err(CmdError::End("killed itself".into()));
        }
        // (KILL QUERY of one's own session: no statement of it is running.)
        self.send_ok(seq, self.status()).await
    }

    /// `KILL <verb> <thread>` on `shard`, from a connection of idgate's own.
    async fn kill_on_shard(&self, shard: usize, verb: &str, thread: u32) {
        let name = &self.shared.config.shards[shard].name;
        match self.shared.side_connection(shard).await {
            Ok(mut c) => {
                // An unknown thread (1094): that connection is gone already.
                if let Err(e) = c.query_rows(&format!("KILL {verb} {thread}")).await {
                    if !matches!(&e, crate::backend::BackendError::Server { err, .. } if err.code == 1094)
                    {
                        warn!(conn = self.id, shard = %name, thread, "KILL {verb} failed: {e}");
                    }
                }
                let _ = c.send(&[crate::protocol::consts::cmd::QUIT]).await;
            }
            Err(e) => {
                warn!(conn = self.id, shard = %name, "cannot reach the shard to KILL {verb} {thread}: {e}")
            }
        }
    }

    async fn reply_error(&mut self, seq: u8, code: &ErrorCode, msg: &str) -> Result<(), CmdError> {
        self.send_error(seq, code, msg)
            .await
            .map_err(CmdError::ClientGone)
    }
}
