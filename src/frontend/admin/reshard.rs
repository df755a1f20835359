//! `SHOW IDGATE RESHARD` (or `IDGATE SHOW RESHARD`): one row per
//! resharding job document in the store (read now: what `idgate reshard`
//! wrote last), with this idgate's part in its pause beside it: whether
//! the table is paused here, statements held here now, the pause epoch in
//! force and the one this idgate acknowledged. A table paused here without
//! a job document still gets a row (its job columns NULL).

use crate::frontend::session::{CmdError, Session};
use crate::protocol::resultset::ColumnType;
use crate::reshard::protocol::{Job, Placement};

/// `s0,s1 mod id`: shards, then how rows are placed.
fn placement(p: &Placement) -> String {
    let mut s = p.shards.join(",");
    if let Some(how) = &p.sharding {
        s.push(' ');
        s.push_str(how);
        s.push(' ');
        s.push_str(p.shard_key.as_deref().unwrap_or("(id column)"));
    }
    s
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS` UTC.
fn when(ms: u64) -> String {
    crate::publish::utc(ms / 1000)
}

/// Seconds left at the copy's rate, when there is one.
fn eta(j: &Job) -> Option<u64> {
    let left = j.rows_total.saturating_sub(j.copied());
    (j.rate > 0 && j.phase <= crate::reshard::protocol::Phase::Copy).then(|| left / j.rate)
}

impl Session {
    pub(in crate::frontend) async fn show_reshard(&mut self) -> Result<(), CmdError> {
        let shared = self.shared.clone();
        let jobs = match shared.allocator.as_ref().map(|a| a.store()) {
            Some(store) => crate::frontend::pause::follow::refresh_jobs(&shared, &store).await,
            None => Vec::new(),
        };
        let pause = shared.pause.view();
        let n = |x: u64| Some(x.to_string());
        let here = |table: &str| {
            let paused = pause.tables.iter().any(|t| t == table);
            vec![
                Some(if paused { "yes" } else { "no" }.to_string()),
                n(if paused { pause.held } else { 0 }),
                n(pause.epoch),
                n(pause.acked),
            ]
        };
        let mut rows: Vec<Vec<Option<String>>> = jobs
            .iter()
            .map(|j| {
                let mut row = vec![
                    Some(j.table.clone()),
                    Some(j.id.clone()),
                    Some(j.phase.name().to_string()),
                    Some(placement(&j.from)),
                    Some(placement(&j.to)),
                    n(j.copied()),
                    n(j.rows_total),
                    n(j.rate),
                    eta(j).map(|s| s.to_string()),
                    Some(when(j.started_ms)),
                    Some(when(j.updated_ms)),
                    j.error.clone(),
                ];
                row.extend(here(&j.table));
                row
            })
            .collect();
        for t in &pause.tables {
            if !jobs.iter().any(|j| j.table == *t) {
                let mut row = vec![Some(t.clone()), Some(pause.job.clone())];
                row.extend(std::iter::repeat_n(None, 10));
                row.extend(here(t));
                rows.push(row);
            }
        }
        use ColumnType::{Text, UInt};
        self.send_rows(
            &[
                ("Table", Text),
                ("Job", Text),
                ("Phase", Text),
                ("From", Text),
                ("To", Text),
                ("Rows_copied", UInt),
                ("Rows_total", UInt),
                ("Rows_per_sec", UInt),
                ("ETA_secs", UInt),
                ("Started", Text),
                ("Updated", Text),
                ("Error", Text),
                ("Paused_here", Text),
                ("Held", UInt),
                ("Pause_epoch", UInt),
                ("Epoch_acked", UInt),
            ],
            &rows,
        )
        .await
    }
}
