//! `SHOW IDGATE POOLS`: one row per shard's connection pool
//! (`backend::pool`): its cap, connections open, idle and in use, clients
//! waiting for one now, and since the start: waits, time waited, 1040s
//! given, connections created, closed, handed out again without a login,
//! and idle ones found closed by the shard before use; with
//! multiplexing, connections given back after a statement, connections
//! whose session state was reset and restored for their taker, and the
//! connections held now by pinned sessions, by reason
//! (`session/mux.rs`); with session threads, connections moved to the
//! thread of the session that took them.

use crate::frontend::session::mux::Pin;
use crate::frontend::session::{CmdError, Session};
use crate::protocol::resultset::ColumnType;

impl Session {
    pub(in crate::frontend) async fn show_pools(&mut self) -> Result<(), CmdError> {
        let rows: Vec<Vec<Option<String>>> = self
            .shared
            .pools
            .iter()
            .map(|p| {
                let v = p.view();
                let n = |x: u64| Some(x.to_string());
                vec![
                    Some(v.shard.clone()),
                    n(v.max as u64),
                    n(v.state.open as u64),
                    n(v.state.idle as u64),
                    n(v.in_use() as u64),
                    n(v.state.waiting as u64),
                    n(v.waits),
                    n(v.wait_us / 1000),
                    n(v.timeouts),
                    n(v.created),
                    n(v.closed),
                    n(v.reused),
                    n(v.stale),
                    n(v.multiplexed),
                    n(v.restored),
                    n(v.lid_reads),
                    n(v.moved),
                    Some(pinned_text(&v.pinned)),
                ]
            })
            .collect();
        use ColumnType::{Text, UInt};
        self.send_rows(
            &[
                ("Shard", Text),
                ("Max", UInt),
                ("Open", UInt),
                ("Idle", UInt),
                ("In_use", UInt),
                ("Waiting", UInt),
                ("Waits", UInt),
                ("Wait_ms", UInt),
                ("Timeouts", UInt),
                ("Created", UInt),
                ("Closed", UInt),
                ("Reused", UInt),
                ("Stale", UInt),
                ("Multiplexed", UInt),
                ("Restored", UInt),
                ("Lid_reads", UInt),
                ("Moved", UInt),
                ("Pinned", Text),
            ],
            &rows,
        )
        .await
    }
}

/// `reason=n` for each reason with connections pinned now, comma-separated
/// (empty when none).
fn pinned_text(pinned: &[u64]) -> String {
    Pin::ALL
        .iter()
        .filter_map(|p| {
            let n = pinned.get(*p as usize).copied().unwrap_or(0);
            (n > 0).then(|| format!("{}={n}", p.name()))
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    #[test]
    fn pinned_reasons_as_text() {
        let mut v = [0u64; crate::backend::pool::PIN_SLOTS];
        assert_eq!(super::pinned_text(&v), "");
        v[0] = 2;
        v[8] = 1;
        assert_eq!(super::pinned_text(&v), "transaction=2,user_variable=1");
    }
}
