//! A cursor (COM_STMT_EXECUTE with a cursor flag, then COM_STMT_FETCH) on a
//! prepared SELECT that runs on several shards.
//!
//! The shards run the execute without a cursor; idgate merges their replies
//! as for any scattered SELECT (`scatter.rs`) and holds the merged rows. The
//! client gets what MariaDB sends when it opens a cursor (the column
//! definitions, then a terminator with `SERVER_STATUS_CURSOR_EXISTS`), and
//! each COM_STMT_FETCH of n rows gets the next n rows and a terminator with
//! `CURSOR_EXISTS` while rows remain, `LAST_ROW_SENT` with the last ones.
//! The rows are held in memory, as the merge of such a SELECT already does.

use crate::frontend::session::stmt::MergedCursor;
use crate::frontend::session::{CmdError, Session};
use crate::protocol::consts::status;
use crate::protocol::packet::frame;
use crate::protocol::reply::{self, Terminator};
use crate::shard::merge::{MergeSpec, Protocol};

/// The flags of the execute's status a fetch's terminator keeps (MariaDB
/// drops the per-statement ones, such as "no index used").
const FETCH_STATUS: u16 = status::IN_TRANS | status::AUTOCOMMIT;

/// Status flags a terminator may carry that a fetch sets itself.
const CURSOR_FLAGS: u16 =
    status::CURSOR_EXISTS | status::LAST_ROW_SENT | status::MORE_RESULTS_EXISTS;

impl Session {
    /// Runs `parts` (executes of statement `id`, one per shard, sent with
    /// the client's cursor flag) without a cursor, merges them by `spec`,
    /// and opens the client's cursor on the merged rows.
    pub(in crate::frontend) async fn open_merged_cursor(
        &mut self,
        id: u32,
        mut parts: Vec<(usize, Vec<u8>)>,
        spec: &MergeSpec,
    ) -> Result<(), CmdError> {
        for (_, p) in &mut parts {
            // The execute's flags byte (after the command and statement id).
            if let Some(f) = p.get_mut(5) {
                *f = 0;
            }
        }
        let (packets, deprecate_eof) = self.scatter_collect(parts, spec, Protocol::Binary).await?;
        let merged = crate::shard::reply::split(&packets, deprecate_eof).map_err(|e| {
            CmdError::Refused(
                crate::frontend::errors::ER_NOT_ROUTABLE,
                format!("idgate: the merged result of the shards is not one result set: {e:?}"),
            )
        })?;
        let malformed = |_| {
            CmdError::Refused(
                crate::frontend::errors::ER_NOT_ROUTABLE,
                "idgate: a shard ended its rows with a malformed terminator".into(),
            )
        };
        let t = reply::parse_terminator(merged.terminator, deprecate_eof).map_err(malformed)?;
        let base = t.status & !CURSOR_FLAGS;
        let open = reply::terminator_with(
            merged.terminator,
            deprecate_eof,
            Terminator {
                status: base | status::CURSOR_EXISTS,
                warnings: t.warnings,
            },
        )
        .map_err(malformed)?;
        // The column count and definitions, then the terminator in place of
        // the EOF after them (or, with CLIENT_DEPRECATE_EOF, after them).
        let defs = merged.columns.len() + 1;
        let mut out = Vec::new();
        let mut seq = self.next_seq;
        for p in merged.head.iter().take(defs) {
            seq = frame(&mut out, seq, p).wrapping_add(1);
        }
        seq = frame(&mut out, seq, &open).wrapping_add(1);
        let cursor = MergedCursor {
            rows: merged.rows.iter().cloned().collect(),
            terminator: merged.terminator.to_vec(),
            status: base,
            deprecate_eof,
        };
        if let Some(s) = self.stmts.get_mut(id) {
            s.merged = Some(Box::new(cursor));
        }
        self.next_seq = seq;
        self.client
            .write_raw(&out)
            .await
            .map_err(CmdError::ClientGone)
    }

    /// COM_STMT_FETCH of `n` rows from a cursor idgate holds; `false` when
    /// statement `id` has none (the fetch goes to its shard).
    pub(in crate::frontend) async fn fetch_merged(
        &mut self,
        id: u32,
        n: u32,
    ) -> Result<bool, CmdError> {
        let Some(s) = self.stmts.get_mut(id) else {
            return Ok(false);
        };
        let Some(c) = s.merged.as_mut() else {
            return Ok(false);
        };
        let mut out = Vec::new();
        let mut seq = self.next_seq;
        let mut sent = 0u32;
        while sent < n {
            let Some(row) = c.rows.pop_front() else { break };
            seq = frame(&mut out, seq, &row).wrapping_add(1);
            sent += 1;
        }
        // As MariaDB: the last row is "sent" by the fetch that runs out
        // (one that takes exactly the rest still says the cursor exists).
        let last = sent < n;
        let flag = if last {
            status::LAST_ROW_SENT
        } else {
            status::CURSOR_EXISTS
        };
        let end = reply::terminator_with(
            &c.terminator,
            c.deprecate_eof,
            Terminator {
                status: (c.status & FETCH_STATUS) | flag,
                warnings: 0,
            },
        )
        .unwrap_or_else(|_| reply::eof_packet(0, (c.status & FETCH_STATUS) | flag));
        seq = frame(&mut out, seq, &end).wrapping_add(1);
        if last {
            // Closed: a further fetch is answered by the shard (no open
            // cursor there), as MariaDB answers it.
            s.merged = None;
        }
        self.next_seq = seq;
        self.client
            .write_raw(&out)
            .await
            .map_err(CmdError::ClientGone)?;
        Ok(true)
    }
}
