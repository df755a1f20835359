//! A SELECT on several shards: the statement is sent to every shard at
//! once (pipelined), then the replies become one result set.
//!
//! - Nothing to merge (no ORDER BY, LIMIT or aggregate): rows are relayed as
//!   they come, shard after shard; the column definitions are the first
//!   shard's, the terminator is the last shard's with the warnings of all.
//!   Nothing is buffered beyond what the relay reads at once.
//! - ORDER BY / LIMIT / aggregates: merged as the rows come, each shard
//!   read only when the merge needs its next row (`stream.rs`), in memory
//!   bounded by `server.max_result_buffer`.
//!
//! A shard's error ends the result set with that error (its message names
//! the shard); the other shards' replies are read and dropped.

use super::stream::{put, FLUSH_AT};
use crate::backend::relay::{relay_reply, Action};
use crate::collation::{self, Collation};
use crate::frontend::session::{CmdError, Session};
use crate::protocol::column::ColumnDef;
use crate::protocol::reply;
use crate::protocol::response::{Expect, Kind, Tracker};
use crate::protocol::wire::Cursor;
use crate::shard::merge::{self, Agg, MergeSpec, Protocol};

/// Where a relayed result set is.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// Before the column count.
    Start,
    /// Column definitions (and the EOF after them) still to come.
    Header(u64),
    Rows,
    /// Ended (terminator or error seen).
    Done,
}

/// `p` (a terminator) with its warning count replaced.
fn with_warnings(p: &[u8], warnings: u16, deprecate_eof: bool) -> Option<Vec<u8>> {
    let t = reply::parse_terminator(p, deprecate_eof).ok()?;
    reply::terminator_with(p, deprecate_eof, reply::Terminator { warnings, ..t }).ok()
}

impl Session {
    /// Runs `parts` (shard, payload), one per shard, and sends the client one
    /// result set.
    pub(in crate::frontend) async fn scatter(
        &mut self,
        parts: Vec<(usize, Vec<u8>)>,
        spec: &MergeSpec,
        protocol: Protocol,
    ) -> Result<(), CmdError> {
        // Boxed: a statement on several shards allocates already, and its
        // future would otherwise size every session's (`engine/size_tests.rs`).
        Box::pin(async move {
            let expect = Expect::Results;
            let sent = self.send_parts(parts).await?;
            if spec.is_concat() {
                self.concat(&sent, expect).await
            } else {
                self.streamed(&sent, spec, protocol).await
            }
        })
        .await
    }

    /// The merged result set, streamed to the client (see `stream.rs`).
    async fn streamed(
        &mut self,
        sent: &[(usize, u8)],
        spec: &MergeSpec,
        protocol: Protocol,
    ) -> Result<(), CmdError> {
        let mut sc = self.scatter_open(sent, spec, protocol).await?;
        let flush_at = FLUSH_AT.min(sc.cap / 4);
        let mut out = Vec::new();
        let mut seq = self.next_seq;
        for p in sc.head() {
            put(&mut out, &mut seq, p);
        }
        let mut flushed = false;
        let end = loop {
            match self.scatter_pull(&mut sc, out.len()).await {
                Ok(Some(row)) => {
                    put(&mut out, &mut seq, &row);
                    flushed |= self.flush_when_full(&mut out, seq, flush_at).await?;
                }
                Ok(None) => break self.scatter_finish(&mut sc).await,
                Err(e) => break Err(e),
            }
        };
        match end {
            Ok(terminator) => {
                put(&mut out, &mut seq, &terminator);
                self.next_seq = seq;
                self.client
                    .write_raw(&out)
                    .await
                    .map_err(CmdError::ClientGone)
            }
            Err(e) => {
                self.scatter_abort(&mut sc).await;
                self.flush_before_error(&out, seq, flushed).await?;
                Err(e)
            }
        }
    }

    /// Sends every part (its shard, payload) before reading any reply;
    /// returns each shard with the sequence id of its last packet.
    pub(in crate::frontend) async fn send_parts(
        &mut self,
        parts: Vec<(usize, Vec<u8>)>,
    ) -> Result<Vec<(usize, u8)>, CmdError> {
        let shards: Vec<usize> = parts.iter().map(|(s, _)| *s).collect();
        self.note_diag(&shards);
        // Every connection first (a shard that is down fails the statement
        // before any shard has been sent it), then send everything: the
        // shards work in parallel.
        for (shard, _) in &parts {
            self.backend(*shard).await.map_err(CmdError::Backend)?;
            if self.txn_begin.is_some() || self.txn_xa.is_some() || !self.txn_savepoints.is_empty()
            {
                self.enlist(*shard).await?;
            }
        }
        let mut sent = Vec::with_capacity(parts.len());
        for (shard, payload) in &parts {
            let Some(conn) = self.backends.get(*shard).map(|b| b.connection_id) else {
                continue;
            };
            self.round_begin(*shard, conn).await;
            let Some(b) = self.backends.get_mut(*shard) else {
                self.round_end(*shard).await;
                continue;
            };
            match b.send(payload).await {
                Ok(seq) => sent.push((*shard, seq)),
                Err(e) => {
                    for &(s, _) in &sent {
                        // Their replies are never read: those connections go.
                        self.round_end(s).await;
                        self.backends.release(s);
                        self.stmts.forget_shard(s);
                    }
                    self.round_end(*shard).await;
                    return Err(CmdError::Backend(e));
                }
            }
        }
        Ok(sent)
    }

    async fn concat(&mut self, sent: &[(usize, u8)], expect: Expect) -> Result<(), CmdError> {
        let n = sent.len();
        let mut warnings: u16 = 0;
        let mut failed = false;
        let mut result = Ok(());
        let watched = self.watched_now();
        for (i, &(shard, seq)) in sent.iter().enumerate() {
            let name = self.shared.config.shards[shard].name.clone();
            let Some(b) = self.backends.get_mut(shard) else {
                self.round_end(shard).await;
                continue;
            };
            let mut killed = None;
            let deprecate_eof = b.deprecate_eof();
            let mut tracker = Tracker::new(expect, deprecate_eof, b.status);
            let mut part = Part::Start;
            let last = i + 1 == n;
            let mut hook = |kind: Kind, p: &[u8]| -> Action {
                if failed {
                    return Action::Drop;
                }
                match kind {
                    Kind::Err => {
                        failed = true;
                        part = Part::Done;
                        let code = p.get(1..3).map(|c| u16::from_le_bytes([c[0], c[1]]));
                        if let (Some(c), Some(w)) = (code, &watched) {
                            if w.killed_here(shard, c) {
                                // The deadlock detector's KILL: the client
                                // gets 1213 once the transaction is rolled back.
                                killed = code;
                                return Action::Drop;
                            }
                        }
                        return Action::Replace(prefix_error(p, &name));
                    }
                    Kind::Ok { .. } => {
                        part = Part::Done;
                        return if last { Action::Keep } else { Action::Drop };
                    }
                    _ => {}
                }
                let first = i == 0;
                match part {
                    Part::Start => {
                        let cols = Cursor::new(p).lenenc().unwrap_or(0);
                        let defs = cols + u64::from(!deprecate_eof);
                        part = if defs == 0 {
                            Part::Rows
                        } else {
                            Part::Header(defs)
                        };
                        if first {
                            Action::Keep
                        } else {
                            Action::Drop
                        }
                    }
                    Part::Header(left) => {
                        part = if left <= 1 {
                            Part::Rows
                        } else {
                            Part::Header(left - 1)
                        };
                        if first {
                            Action::Keep
                        } else {
                            Action::Drop
                        }
                    }
                    Part::Rows if reply::is_terminator(p, deprecate_eof) => {
                        part = Part::Done;
                        let w = reply::parse_terminator(p, deprecate_eof)
                            .map(|t| t.warnings)
                            .unwrap_or(0);
                        warnings = warnings.saturating_add(w);
                        if last {
                            match with_warnings(p, warnings, deprecate_eof) {
                                Some(out) => Action::Replace(out),
                                None => Action::Keep,
                            }
                        } else {
                            Action::Drop
                        }
                    }
                    Part::Rows => Action::Keep,
                    Part::Done => Action::Drop,
                }
            };
            let r = relay_reply(
                b,
                &mut self.client,
                &mut tracker,
                seq.wrapping_add(1),
                &mut self.next_seq,
                &mut hook,
            )
            .await;
            b.status = tracker.status();
            let claimed = self.round_end(shard).await;
            if let Some(code) = killed {
                // Its ERR packet was not relayed: the answer is the deadlock.
                self.mark_killed(shard, Some(code));
                result = Err(CmdError::Refused(
                    crate::protocol::codes::ER_LOCK_DEADLOCK,
                    crate::frontend::txn::watchlist::DEADLOCK_MESSAGE.into(),
                ));
            }
            if let Err(e) = r {
                if claimed && matches!(e, crate::backend::relay::RelayError::Backend(_)) {
                    self.note_killed(shard, None);
                }
                // Keep reading the other shards' replies? Their connections
                // stay usable only if read to the end; a broken relay
                // leaves this one unusable and the session reports it.
                result = Err(CmdError::from(e));
                for &(other, _) in &sent[i + 1..] {
                    self.round_end(other).await;
                    self.backends.release(other);
                    self.stmts.forget_shard(other);
                }
                break;
            }
        }
        result
    }
}

impl Session {
    /// `spec` with the collation of each string column the merge compares
    /// (ORDER BY keys, MIN/MAX), learnt from information_schema for the
    /// table column each result column comes from (its definition names
    /// it; for `MIN(col)`/`MAX(col)`, the column the analysis found in the
    /// statement's table). `None`: nothing to add. A column whose table
    /// cannot be read keeps no collation: the merge then refuses to order it.
    pub(in crate::frontend) async fn with_collations(
        &mut self,
        spec: &MergeSpec,
        head: Option<&Vec<Vec<u8>>>,
    ) -> Result<Option<MergeSpec>, CmdError> {
        let compares = !spec.order_by.is_empty()
            || spec
                .aggregates
                .as_ref()
                .is_some_and(|a| a.iter().any(|a| matches!(a, Agg::Min | Agg::Max)));
        let Some(head) = head.filter(|_| compares && self.rules.is_some()) else {
            return Ok(None);
        };
        let Some(columns) = head_columns(head) else {
            return Ok(None);
        };
        let mut collations = Vec::with_capacity(columns.len());
        for (i, def) in columns.iter().enumerate() {
            // Only strings of a known character set need a collation.
            if !merge::needs_collation(def) {
                collations.push(None);
                continue;
            }
            // `expr COLLATE name`: that collation, if idgate reproduces it.
            // MariaDB sorts an expression in latin1's `_bin` collations
            // without padding ('' before ' '), unlike a column: refused.
            if let Some(Some(name)) = spec.item_collations.get(i) {
                collations.push(
                    collation::by_name(name)
                        .filter(|c| !(c.is_binary() && c.charset == collation::Charset::Latin1)),
                );
                continue;
            }
            let (schema, table, column) = match head.get(i + 1).map(|p| ColumnDef::origin(p)) {
                Some(Ok((s, t, c))) if !t.is_empty() && !c.is_empty() => (
                    String::from_utf8_lossy(s).into_owned(),
                    String::from_utf8_lossy(t).into_owned(),
                    String::from_utf8_lossy(c).into_owned(),
                ),
                _ => match (spec.agg_columns.get(i).cloned().flatten(), &spec.table) {
                    (Some(c), Some((s, t))) => (
                        s.clone()
                            .or_else(|| self.schema.clone())
                            .unwrap_or_default(),
                        t.clone(),
                        c,
                    ),
                    _ => {
                        collations.push(None);
                        continue;
                    }
                },
            };
            collations.push(self.column_collation(&schema, &table, &column).await?);
        }
        let mut spec = spec.clone();
        spec.collations = collations;
        Ok(Some(spec))
    }

    /// The collation of `schema.table.column` if idgate reproduces it.
    async fn column_collation(
        &mut self,
        schema: &str,
        table: &str,
        column: &str,
    ) -> Result<Option<&'static Collation>, CmdError> {
        if schema.is_empty() {
            return Ok(None);
        }
        let known = match self.shared.columns.column_type(schema, table, column) {
            Some(t) => t,
            None => {
                // The session's shard connections are reading the
                // statement's rows: a side connection asks.
                match self.fetch_columns_via(schema, table, true).await {
                    Ok(()) => {}
                    Err(CmdError::Refused(..)) => return Ok(None),
                    Err(e) => return Err(e),
                }
                self.shared
                    .columns
                    .column_type(schema, table, column)
                    .flatten()
            }
        };
        Ok(known.and_then(|t| {
            t.collation
                .as_deref()
                .map_or(Some(collation::binary()), collation::by_name)
        }))
    }
}

/// The column definitions of a column head (count, definitions[, EOF]).
fn head_columns(head: &[Vec<u8>]) -> Option<Vec<ColumnDef<'_>>> {
    let count = usize::try_from(Cursor::new(head.first()?).lenenc().ok()?).ok()?;
    head.get(1..count.checked_add(1)?)?
        .iter()
        .map(|p| ColumnDef::decode(p).ok())
        .collect()
}

/// A shard's ERR packet with the shard's name in front of its message.
fn prefix_error(p: &[u8], shard: &str) -> Vec<u8> {
    match reply::parse_err(p) {
        Ok(e) => e.payload(&format!("shard {shard}: ")),
        Err(_) => p.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminators() {
        let eof = [0xfe, 3, 0, 2, 0];
        let t = reply::parse_terminator(&eof, false).unwrap();
        assert_eq!((t.warnings, t.status), (3, 2));
        assert_eq!(with_warnings(&eof, 9, false).unwrap(), [0xfe, 9, 0, 2, 0]);
        let ok = [0xfe, 0, 0, 2, 0, 4, 0];
        let t = reply::parse_terminator(&ok, true).unwrap();
        assert_eq!((t.warnings, t.status), (4, 2));
        assert_eq!(
            with_warnings(&ok, 7, true).unwrap(),
            [0xfe, 0, 0, 2, 0, 7, 0]
        );
        assert!(!reply::is_terminator(&[0x01, 0x31], false));
        // A text row whose first value is 8 bytes long or more starts with
        // 0xfe too: without DEPRECATE_EOF only a short packet ends the rows.
        assert!(!reply::is_terminator(&[0xfe; 12], false));
        let err = [0xff, 0x7a, 0x04, b'#', b'4', b'2', b'S', b'0', b'2', b'x'];
        assert_eq!(prefix_error(&err, "s1")[9..], *b"shard s1: x");
    }
}
