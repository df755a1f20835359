//! A cursor (COM_STMT_EXECUTE with a cursor flag, then COM_STMT_FETCH) on a
//! prepared SELECT that runs on several shards.
//!
//! The shards run the execute without a cursor; idgate reads their column
//! heads and answers what MariaDB sends when it opens a cursor (the column
//! definitions, then a terminator with `SERVER_STATUS_CURSOR_EXISTS`). It
//! reads the first rows (up to 64 KiB) at once: a result that ends there
//! is held whole and its terminator's status is the open's, as MariaDB's
//! (a longer one shows the status of the column head or the connection). Each
//! COM_STMT_FETCH of n rows pulls the next n rows through the streaming
//! merge (`stream.rs`), reading the shards' result sets, which stay open
//! meanwhile; its terminator says `CURSOR_EXISTS` while rows may remain,
//! `LAST_ROW_SENT` once the fetch ran out.
//!
//! While the cursor streams, the session's connections to those shards are
//! busy with its result sets. Any other command of the session first
//! settles it ([`Session::settle_cursor`]), as MariaDB, which materializes
//! a cursor's result in a temporary table, lets a session run other
//! statements while a cursor is open:
//! - COM_STMT_CLOSE, COM_STMT_RESET or a new COM_STMT_EXECUTE of the
//!   cursor's statement, COM_RESET_CONNECTION and COM_CHANGE_USER close it:
//!   the rest of the shards' rows are read and dropped;
//! - any other command first reads the cursor's remaining rows into memory
//!   (up to `server.max_result_buffer`), freeing the shard connections; the
//!   cursor goes on from there. Past the cap, the rest is dropped and the
//!   cursor's next fetch fails with the cap error (1038).

use std::collections::VecDeque;

use super::stream::{over_cap, put, Scatter, FLUSH_AT};
use crate::frontend::session::stmt::MergedCursor;
use crate::frontend::session::{CmdError, Session};
use crate::protocol::consts::{cmd, status};
use crate::protocol::reply::{self, Terminator};
use crate::protocol::stmt as wire_stmt;
use crate::shard::merge::{MergeSpec, Protocol};

/// The flags of the execute's status a fetch's terminator keeps (MariaDB
/// drops the per-statement ones, such as "no index used").
const FETCH_STATUS: u16 = status::IN_TRANS | status::AUTOCOMMIT;

/// Status flags a terminator may carry that a fetch sets itself.
const CURSOR_FLAGS: u16 =
    status::CURSOR_EXISTS | status::LAST_ROW_SENT | status::MORE_RESULTS_EXISTS;

/// A merged cursor whose rows are still on the shards.
#[derive(Debug)]
pub(in crate::frontend) struct LiveCursor {
    /// The client's statement id.
    id: u32,
    scatter: Scatter,
}

/// The ERR payload a failed cursor answers its next fetch with.
fn error_payload(e: &CmdError) -> Vec<u8> {
    match e {
        CmdError::Refused(code, message) => reply::err_packet(code, message),
        CmdError::Reply(p) => p.clone(),
        other => reply::err_packet(
            &crate::protocol::codes::ER_UNKNOWN_ERROR,
            &format!("idgate: the cursor's rows could not be read: {other}"),
        ),
    }
}

impl Session {
    /// The id of the merged cursor still streaming, if any.
    fn live_cursor_id(&self) -> Option<u32> {
        self.cursor_stream
            .as_ref()
            .and_then(|c| c.downcast_ref::<LiveCursor>())
            .map(|c| c.id)
    }

    /// Takes the merged cursor still streaming out of the session (the
    /// core's opaque slot holds only this handler's `LiveCursor`).
    fn take_live_cursor(&mut self) -> Option<Box<LiveCursor>> {
        self.cursor_stream.take()?.downcast::<LiveCursor>().ok()
    }
}

impl Session {
    /// Runs `parts` (executes of statement `id`, one per shard, sent with
    /// the client's cursor flag) without a cursor, and opens the client's
    /// cursor on their merge by `spec`.
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
        let sent = self.send_parts(parts).await?;
        let mut sc = self.scatter_open(&sent, spec, Protocol::Binary).await?;
        let deprecate_eof = sc.deprecate_eof;
        // The first rows are read now: a small result ends here, and its
        // terminator gives the status MariaDB shows at the cursor's open
        // (flags such as "no index used" come only with the shards' last
        // packet under CLIENT_DEPRECATE_EOF). A larger one streams on.
        let prefetch = FLUSH_AT.min(sc.cap / 4);
        let mut rows = VecDeque::new();
        let mut bytes = 0;
        let mut status = sc.status;
        let mut warnings = 0;
        let mut live = true;
        while bytes < prefetch {
            let next = match self.scatter_pull(&mut sc, bytes).await {
                Ok(Some(row)) => {
                    bytes += row.len();
                    rows.push_back(row);
                    continue;
                }
                Ok(None) => self.scatter_finish(&mut sc).await,
                Err(e) => Err(e),
            };
            match next {
                Ok(t) => {
                    if let Ok(t) = reply::parse_terminator(&t, deprecate_eof) {
                        status = t.status;
                        warnings = t.warnings;
                    }
                    live = false;
                    break;
                }
                Err(e) => {
                    self.scatter_abort(&mut sc).await;
                    return Err(e);
                }
            }
        }
        let base = status & !CURSOR_FLAGS;
        // The column count and definitions, then the terminator in place of
        // the EOF after them (or, with CLIENT_DEPRECATE_EOF, after them).
        let head = sc.head();
        let defs = head.len() - usize::from(!deprecate_eof);
        let mut out = Vec::new();
        let mut seq = self.next_seq;
        for p in head.iter().take(defs) {
            put(&mut out, &mut seq, p);
        }
        put(
            &mut out,
            &mut seq,
            &reply::terminator_packet(base | status::CURSOR_EXISTS, warnings, deprecate_eof),
        );
        let cursor = MergedCursor {
            rows,
            terminator: reply::terminator_packet(base, 0, deprecate_eof),
            status: base,
            deprecate_eof,
            failed: None,
        };
        match self.stmts.get_mut(id) {
            Some(s) => {
                s.merged = Some(Box::new(cursor));
                if live {
                    self.cursor_stream = Some(Box::new(LiveCursor { id, scatter: sc }));
                }
            }
            None => self.scatter_abort(&mut sc).await,
        }
        self.next_seq = seq;
        self.client
            .write_raw(&out)
            .await
            .map_err(CmdError::ClientGone)
    }

    /// Before command `payload`: a cursor still streaming is closed or
    /// read into memory, unless the command fetches from it (module doc).
    pub(in crate::frontend) async fn settle_cursor(&mut self, payload: &[u8]) {
        let Some(live_id) = self.live_cursor_id() else {
            return;
        };
        let command = payload.first().copied().unwrap_or(0);
        let stmt = payload.get(1..).and_then(|p| wire_stmt::stmt_id(p).ok());
        let on_it = stmt == Some(live_id)
            && matches!(
                command,
                cmd::STMT_FETCH | cmd::STMT_CLOSE | cmd::STMT_RESET | cmd::STMT_EXECUTE
            );
        if command == cmd::QUIT || (on_it && command == cmd::STMT_FETCH) {
            return;
        }
        let Some(mut live) = self.take_live_cursor() else {
            return;
        };
        if on_it || matches!(command, cmd::RESET_CONNECTION | cmd::CHANGE_USER) {
            self.scatter_abort(&mut live.scatter).await;
            if let Some(s) = self.stmts.get_mut(live.id) {
                s.merged = None;
            }
            return;
        }
        let cap = live.scatter.cap;
        let mut rows = self
            .stmts
            .get_mut(live.id)
            .and_then(|s| s.merged.as_deref_mut())
            .map(|c| std::mem::take(&mut c.rows))
            .unwrap_or_default();
        let mut bytes: usize = rows.iter().map(Vec::len).sum();
        let failed = loop {
            match self.scatter_pull(&mut live.scatter, bytes).await {
                Ok(Some(row)) => {
                    bytes += row.len();
                    rows.push_back(row);
                    if bytes > cap {
                        break Some(over_cap(
                            cap,
                            "the rest of a merged cursor's rows, read into memory because the session ran another command",
                        ));
                    }
                }
                Ok(None) => match self.scatter_finish(&mut live.scatter).await {
                    Ok(_) => break None,
                    Err(e) => break Some(e),
                },
                Err(e) => break Some(e),
            }
        };
        if let Some(e) = &failed {
            self.scatter_abort(&mut live.scatter).await;
            rows.clear();
            tracing::debug!(conn = self.id, stmt = live.id, "merged cursor failed: {e}");
        }
        if let Some(c) = self
            .stmts
            .get_mut(live.id)
            .and_then(|s| s.merged.as_deref_mut())
        {
            c.rows = rows;
            c.failed = failed.as_ref().map(error_payload);
        }
    }

    /// COM_STMT_FETCH of `n` rows from a cursor idgate serves; `false` when
    /// statement `id` has none (the fetch goes to its shard).
    pub(in crate::frontend) async fn fetch_merged(
        &mut self,
        id: u32,
        n: u32,
    ) -> Result<bool, CmdError> {
        let Some(c) = self.stmts.get_mut(id).and_then(|s| s.merged.as_mut()) else {
            return Ok(false);
        };
        if let Some(err) = c.failed.take() {
            if let Some(s) = self.stmts.get_mut(id) {
                s.merged = None;
            }
            return Err(CmdError::Reply(err));
        }
        let (template, base, deprecate_eof) = (c.terminator.clone(), c.status, c.deprecate_eof);
        let mut live = self.take_live_cursor().filter(|l| l.id == id);
        let flush_at = FLUSH_AT.min(self.shared.config.server.max_result_buffer / 4);
        let mut out = Vec::new();
        let mut seq = self.next_seq;
        let mut sent = 0u32;
        let mut flushed = false;
        let mut failed = None;
        while sent < n {
            let held = self
                .stmts
                .get_mut(id)
                .and_then(|s| s.merged.as_mut())
                .and_then(|c| c.rows.pop_front());
            let row = match (held, live.as_mut()) {
                (Some(row), _) => Some(row),
                (None, Some(l)) => match self.scatter_pull(&mut l.scatter, out.len()).await {
                    Ok(Some(row)) => Some(row),
                    Ok(None) => match self.scatter_finish(&mut l.scatter).await {
                        Ok(_) => {
                            live = None;
                            None
                        }
                        Err(e) => {
                            failed = Some(e);
                            None
                        }
                    },
                    Err(e) => {
                        failed = Some(e);
                        None
                    }
                },
                (None, None) => None,
            };
            let Some(row) = row else { break };
            put(&mut out, &mut seq, &row);
            sent += 1;
            flushed |= self.flush_when_full(&mut out, seq, flush_at).await?;
        }
        if let Some(e) = failed {
            if let Some(mut l) = live {
                self.scatter_abort(&mut l.scatter).await;
            }
            if let Some(s) = self.stmts.get_mut(id) {
                s.merged = None;
            }
            self.flush_before_error(&out, seq, flushed).await?;
            return Err(e);
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
            &template,
            deprecate_eof,
            Terminator {
                status: (base & FETCH_STATUS) | flag,
                warnings: 0,
            },
        )
        .unwrap_or_else(|_| reply::eof_packet(0, (base & FETCH_STATUS) | flag));
        put(&mut out, &mut seq, &end);
        if last {
            // Closed: a further fetch is answered by the shard (no open
            // cursor there), as MariaDB answers it.
            if let Some(s) = self.stmts.get_mut(id) {
                s.merged = None;
            }
        } else {
            self.cursor_stream = live.map(|l| l as Box<dyn std::any::Any + Send + Sync>);
        }
        self.next_seq = seq;
        self.client
            .write_raw(&out)
            .await
            .map_err(CmdError::ClientGone)?;
        Ok(true)
    }
}
