//! Diagnostics statements on a sharded setup: `SHOW WARNINGS` and friends
//! go to the shards that ran the session's last statement.
//!
//! Each shard connection keeps the diagnostics (warnings, notes, errors) of
//! the last statement it ran. When statements are routed, the last
//! statement may have run on another shard than the default one, or on
//! several (a multi-row INSERT split per shard, a scattered SELECT, an
//! UPDATE without its shard key). So the session remembers which shards ran
//! its last statement, and:
//!
//! - `SHOW WARNINGS` / `SHOW ERRORS` `[LIMIT [offset,] n]` return the rows of
//!   those shards, concatenated in shard order, the limit applied after;
//! - `SHOW COUNT(*) WARNINGS|ERRORS` and `SELECT @@[session.]warning_count`
//!   / `@@error_count` return the sum;
//! - `GET DIAGNOSTICS` goes to the first of them.
//!
//! idgate's own statements around a client statement (`XA END/PREPARE/
//! COMMIT`, `SAVEPOINT`, `DO LAST_INSERT_ID(...)`) use no table, so MariaDB
//! keeps the statement's diagnostics through them.

use crate::frontend::session::{CmdError, Session};
use crate::shard::merge::{Agg, MergeSpec, Protocol};
use crate::sql::statement::Diag;

impl Session {
    /// Answers a diagnostics statement from the shards that ran the last
    /// statement.
    pub(in crate::frontend) async fn diagnostics(
        &mut self,
        payload: &[u8],
        d: Diag,
    ) -> Result<(), CmdError> {
        let mut shards = self.diag_shards.clone();
        if shards.is_empty() {
            shards.push(0);
        }
        self.serving_diag = true;
        let result = match (&shards[..], d) {
            ([], _) => Ok(()),
            ([one], _) | ([one, ..], Diag::Other) => self
                .forward(*one, payload, crate::protocol::response::Expect::Results)
                .await
                .map(|_| ()),
            (_, Diag::List { what, limit }) => {
                let (text, spec) = match limit {
                    None => (payload.to_vec(), MergeSpec::default()),
                    Some((offset, n)) => (
                        format!("\x03SHOW {what} LIMIT {}", offset.saturating_add(n)).into_bytes(),
                        MergeSpec {
                            limit: Some(n),
                            offset,
                            ..MergeSpec::default()
                        },
                    ),
                };
                let parts = shards.iter().map(|&s| (s, text.clone())).collect();
                self.scatter(parts, &spec, Protocol::Text).await
            }
            (_, Diag::Count) => {
                let spec = MergeSpec {
                    aggregates: Some(vec![Agg::Count]),
                    ..MergeSpec::default()
                };
                let parts = shards.iter().map(|&s| (s, payload.to_vec())).collect();
                self.scatter(parts, &spec, Protocol::Text).await
            }
        };
        self.serving_diag = false;
        result
    }
}
