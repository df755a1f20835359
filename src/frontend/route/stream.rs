//! A merged scatter read as the client consumes it, in bounded memory.
//!
//! The statement has been sent to every shard (`scatter.rs`); each shard's
//! reply is read only when the merge ([`crate::shard::stream::Merger`])
//! needs that shard's next row, and rows go to the client in writes of at
//! most [`FLUSH_AT`] bytes, each awaited: a client that reads slowly stops
//! idgate reading the shards, whose sockets fill and whose server threads
//! wait (TCP backpressure), instead of rows piling up in idgate.
//!
//! What idgate holds for one statement (the column head, one row per shard,
//! an aggregate's rows, the unsent output, the rows of a cursor kept while
//! the session runs other statements) is capped by
//! `server.max_result_buffer`; past it the statement fails with
//! ER_OUT_OF_SORTMEMORY (1038, SQLSTATE HY001): that is MariaDB's error for
//! a sort that does not fit its buffer, which applications already treat as
//! "this query needs a bigger buffer or a smaller result", not as a broken
//! connection; the message names the cap and its value.
//!
//! After an error (the cap, a shard's ERR, rows the merge cannot read) the
//! shards' remaining rows are read and dropped, so their connections stay
//! usable (in bounded memory); a connection that broke is closed. A client
//! that goes away mid-stream ends its session, which closes the shard
//! connections: MariaDB sees the close and ends the query.

use crate::backend::BackendError;
use crate::frontend::session::{shard_error, CmdError, Session};
use crate::protocol::codes;
use crate::protocol::consts;
use crate::protocol::packet::{frame, ReadError};
use crate::protocol::reply;
use crate::protocol::response::{Expect, Kind, Tracker};
use crate::protocol::wire::Cursor;
use crate::protocol::Malformed;
use crate::shard::merge::{self, MergeSpec, Protocol};
use crate::shard::stream::{Merger, Pull};

/// Rows are written to the client once this many bytes are pending (or a
/// quarter of the cap, if smaller).
pub(in crate::frontend) const FLUSH_AT: usize = 64 * 1024;

/// Where one shard's reply is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Before the column count.
    Start,
    /// Column definitions (and the EOF after them) still to come.
    Header(u64),
    Rows,
    /// The reply is read to its end.
    Done,
}

/// One shard's reply being read.
#[derive(Debug)]
struct ShardRead {
    shard: usize,
    tracker: Tracker,
    part: Part,
    /// Its terminator, once seen.
    terminator: Option<Vec<u8>>,
    /// The deadlock detector's round trip is still open.
    round: bool,
}

/// A scattered SELECT under way: its merge and the shards' replies.
#[derive(Debug)]
pub(in crate::frontend) struct Scatter {
    merger: Merger,
    reads: Vec<ShardRead>,
    pub(in crate::frontend) deprecate_eof: bool,
    /// `server.max_result_buffer`.
    pub(in crate::frontend) cap: usize,
    /// The status of the last column-head EOF seen (the current
    /// transaction state), else of shard 0's connection before.
    pub(in crate::frontend) status: u16,
}

impl Scatter {
    /// Shard 0's column head, sent to the client before the rows.
    pub(in crate::frontend) fn head(&self) -> &[Vec<u8>] {
        self.merger.head()
    }
}

/// The error of a statement that would hold more than the cap.
pub(in crate::frontend) fn over_cap(cap: usize, what: &str) -> CmdError {
    CmdError::Refused(
        codes::ER_OUT_OF_SORTMEMORY,
        format!(
            "idgate: this statement needs more than server.max_result_buffer ({cap} bytes) held at once ({what}); raise server.max_result_buffer or select fewer or smaller rows"
        ),
    )
}

fn lost(shard: &str, source: std::io::Error) -> BackendError {
    BackendError::Lost {
        shard: shard.to_string(),
        source,
    }
}

fn malformed(shard: &str, what: &'static str) -> BackendError {
    BackendError::Protocol {
        shard: shard.to_string(),
        source: Malformed(what),
    }
}

/// What reading one packet of a shard's reply gave.
enum Got {
    /// A packet of the column head or a row.
    Packet(Vec<u8>),
    /// The terminator after the rows: the shard has no more rows.
    End,
}

impl Session {
    /// Writes the merged packets in `out` to the client once they reach
    /// `flush_at` bytes (awaited: a slow client holds back the shards);
    /// whether it did.
    pub(super) async fn flush_when_full(
        &mut self,
        out: &mut Vec<u8>,
        seq: u8,
        flush_at: usize,
    ) -> Result<bool, CmdError> {
        if out.len() < flush_at {
            return Ok(false);
        }
        self.client
            .write_raw(out)
            .await
            .map_err(CmdError::ClientGone)?;
        self.next_seq = seq;
        out.clear();
        Ok(true)
    }

    /// After a merge failed: when part of the result set already reached
    /// the client (`flushed`), the rows held since go too, so the error
    /// follows the rows it has.
    pub(super) async fn flush_before_error(
        &mut self,
        out: &[u8],
        seq: u8,
        flushed: bool,
    ) -> Result<(), CmdError> {
        if flushed {
            self.next_seq = seq;
            self.client
                .write_raw(out)
                .await
                .map_err(CmdError::ClientGone)?;
        }
        Ok(())
    }

    /// Reads the column heads of the replies to a statement sent to `sent`
    /// (shard, sequence id of the last packet sent) and sets up the merge
    /// by `spec`. On an error every reply is read to its end (or its
    /// connection closed) before it is returned.
    pub(in crate::frontend) async fn scatter_open(
        &mut self,
        sent: &[(usize, u8)],
        spec: &MergeSpec,
        protocol: Protocol,
    ) -> Result<Scatter, CmdError> {
        let cap = self.shared.config.server.max_result_buffer;
        let mut deprecate_eof = false;
        let mut status = 0;
        let mut reads = Vec::with_capacity(sent.len());
        for &(shard, _) in sent {
            let Some(b) = self.backends.get(shard) else {
                self.round_end(shard).await;
                continue;
            };
            deprecate_eof = b.deprecate_eof();
            if reads.is_empty() {
                status = b.status;
            }
            reads.push(ShardRead {
                shard,
                tracker: Tracker::new(Expect::Results, b.deprecate_eof(), b.status),
                part: Part::Start,
                terminator: None,
                round: true,
            });
        }
        let mut heads = Vec::with_capacity(reads.len());
        let mut error = None;
        let mut held = 0usize;
        for r in &mut reads {
            let mut head = Vec::new();
            while r.part != Part::Rows && error.is_none() {
                match self.read_packet(r, cap).await {
                    Ok(Got::Packet(p)) => {
                        if r.part == Part::Rows && !deprecate_eof {
                            // The EOF after the column definitions: the
                            // shard's status now.
                            if let Ok(t) = reply::parse_terminator(&p, false) {
                                status = t.status;
                            }
                        }
                        held += p.len();
                        head.push(p);
                        if held > cap {
                            error = Some(over_cap(cap, "the column definitions"));
                        }
                    }
                    Ok(Got::End) => {
                        error = Some(CmdError::Refused(
                            crate::frontend::errors::ER_NOT_ROUTABLE,
                            format!(
                                "idgate: cannot merge the shards' results: shard {}: expected one result set",
                                self.shared.config.shards[r.shard].name
                            ),
                        ));
                    }
                    Err(e) => error = Some(e),
                }
            }
            heads.push(head);
        }
        if let Some(e) = error {
            self.abort_reads(&mut reads).await;
            return Err(e);
        }
        let with = match self.with_collations(spec, heads.first()).await {
            Ok(w) => w,
            Err(e) => {
                self.abort_reads(&mut reads).await;
                return Err(e);
            }
        };
        let spec = with.as_ref().unwrap_or(spec);
        match Merger::new(heads, spec, protocol) {
            Ok(merger) => Ok(Scatter {
                merger,
                reads,
                deprecate_eof,
                cap,
                status,
            }),
            Err(e) => {
                self.abort_reads(&mut reads).await;
                Err(cannot_merge(e))
            }
        }
    }

    /// The client's next row (`None`: no more), reading the shards the
    /// merge needs. On an error the caller calls [`Session::scatter_abort`].
    /// `pending`: bytes the caller holds besides the merge (unsent output).
    pub(in crate::frontend) async fn scatter_pull(
        &mut self,
        sc: &mut Scatter,
        pending: usize,
    ) -> Result<Option<Vec<u8>>, CmdError> {
        loop {
            match sc.merger.pull().map_err(cannot_merge)? {
                Pull::Row(row) => return Ok(Some(row)),
                Pull::Done => return Ok(None),
                Pull::Need(i) => {
                    let room = sc.cap.saturating_sub(sc.merger.held() + pending);
                    let Some(r) = sc.reads.get_mut(i) else {
                        sc.merger.end(i);
                        continue;
                    };
                    if r.part == Part::Done {
                        sc.merger.end(i);
                        continue;
                    }
                    match self.read_packet(r, room).await? {
                        Got::Packet(row) => {
                            sc.merger.push(i, row).map_err(cannot_merge)?;
                            if sc.merger.held() + pending > sc.cap {
                                return Err(over_cap(sc.cap, "a row of each shard"));
                            }
                        }
                        Got::End => sc.merger.end(i),
                    }
                }
            }
        }
    }

    /// After the last row: reads what the shards still send (rows past a
    /// LIMIT) and returns the result set's terminator.
    pub(in crate::frontend) async fn scatter_finish(
        &mut self,
        sc: &mut Scatter,
    ) -> Result<Vec<u8>, CmdError> {
        for i in 0..sc.reads.len() {
            let r = &mut sc.reads[i];
            while r.part != Part::Done {
                self.read_packet(r, usize::MAX).await?;
            }
        }
        let terminators: Vec<&[u8]> = sc
            .reads
            .iter()
            .filter_map(|r| r.terminator.as_deref())
            .collect();
        merge::merge_terminators(&terminators, sc.deprecate_eof).map_err(cannot_merge)
    }

    /// After an error: every reply not read to its end is read and dropped
    /// (its connection stays usable), or, if that fails, its connection is
    /// closed. Never fails.
    pub(in crate::frontend) async fn scatter_abort(&mut self, sc: &mut Scatter) {
        self.abort_reads(&mut sc.reads).await;
    }

    async fn abort_reads(&mut self, reads: &mut [ShardRead]) {
        for r in reads {
            while r.part != Part::Done {
                // Every error leaves the reply done: a shard's ERR ends it,
                // a broken connection has been closed.
                let _ = self.read_packet(r, usize::MAX).await;
            }
        }
    }

    /// Reads one packet of `r`'s reply (at most `max` bytes). A shard's
    /// ERR packet is its error (`CmdError::Reply`, the shard named); a
    /// broken or garbled connection is closed and reported.
    async fn read_packet(&mut self, r: &mut ShardRead, max: usize) -> Result<Got, CmdError> {
        let shard = r.shard;
        let result = self.read_packet_inner(r, max).await;
        if r.part == Part::Done && r.round {
            r.round = false;
            let claimed = self.round_end(shard).await;
            match &result {
                Err(CmdError::Reply(p)) if claimed => {
                    let code = p.get(1..3).map(|c| u16::from_le_bytes([c[0], c[1]]));
                    self.note_killed(shard, code);
                }
                Err(CmdError::Backend(_)) if claimed => {
                    self.note_killed(shard, None);
                }
                _ => {}
            }
        }
        if let Err(CmdError::Backend(_)) = &result {
            // The connection is mid-reply or broken: closed.
            self.backends.release(shard);
            self.stmts.forget_shard(shard);
        }
        result
    }

    async fn read_packet_inner(&mut self, r: &mut ShardRead, max: usize) -> Result<Got, CmdError> {
        let shards = &self.shared.config.shards;
        let shard = r.shard;
        let name = || shards[shard].name.clone();
        let Some(b) = self.backends.get_mut(r.shard) else {
            r.part = Part::Done;
            return Err(CmdError::Backend(malformed(&name(), "connection closed")));
        };
        let mut buf = Vec::new();
        let got = b.conn.read_packet(&mut buf, max).await;
        match got {
            Ok(Some(_)) => {}
            Ok(None) => {
                r.part = Part::Done;
                return Err(CmdError::Backend(lost(
                    &name(),
                    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"),
                )));
            }
            Err(ReadError::TooLarge(n)) => {
                let cap = self.shared.config.server.max_result_buffer;
                let what = format!("a row of shard {} is {n} bytes or more", name());
                if r.part == Part::Rows {
                    // The row is skipped on the socket, not read: the
                    // connection stays usable, the rest is drained.
                    if let Err(e) = skip_packet(&mut b.conn).await {
                        r.part = Part::Done;
                        return Err(CmdError::Backend(lost(&name(), e)));
                    }
                } else {
                    r.part = Part::Done;
                    self.backends.release(r.shard);
                    self.stmts.forget_shard(r.shard);
                }
                return Err(over_cap(cap, &what));
            }
            Err(ReadError::Io(e)) => {
                r.part = Part::Done;
                return Err(CmdError::Backend(lost(&name(), e)));
            }
            Err(_) => {
                r.part = Part::Done;
                return Err(CmdError::Backend(malformed(
                    &name(),
                    "reply packets out of order",
                )));
            }
        }
        let kind = match r.tracker.feed(buf.len().min(consts::MAX_PAYLOAD - 1), &buf) {
            Ok(k) => k,
            Err(e) => {
                r.part = Part::Done;
                return Err(CmdError::Backend(BackendError::Protocol {
                    shard: name(),
                    source: e,
                }));
            }
        };
        let deprecate_eof = b.deprecate_eof();
        if r.tracker.is_done() {
            b.status = r.tracker.status();
        }
        match kind {
            Kind::Err => {
                r.part = Part::Done;
                return Err(shard_error(BackendError::Server {
                    shard: name(),
                    err: reply::parse_err(&buf).map_err(|source| {
                        CmdError::Backend(BackendError::Protocol {
                            shard: name(),
                            source,
                        })
                    })?,
                }));
            }
            Kind::LocalInfile => {
                r.part = Part::Done;
                return Err(CmdError::Backend(malformed(
                    &name(),
                    "a LOCAL INFILE request in reply to a SELECT",
                )));
            }
            Kind::Ok { .. } => {
                if r.tracker.is_done() {
                    r.part = Part::Done;
                }
                if r.terminator.is_none() {
                    // An OK packet where a result set was expected.
                    r.terminator = Some(buf);
                    return Ok(Got::End);
                }
                return Ok(Got::Packet(Vec::new()));
            }
            Kind::Other => {}
        }
        match r.part {
            Part::Start => {
                let cols = Cursor::new(&buf).lenenc().unwrap_or(0);
                let defs = cols + u64::from(!deprecate_eof);
                r.part = if defs == 0 {
                    Part::Rows
                } else {
                    Part::Header(defs)
                };
                Ok(Got::Packet(buf))
            }
            Part::Header(left) => {
                r.part = if left <= 1 {
                    Part::Rows
                } else {
                    Part::Header(left - 1)
                };
                Ok(Got::Packet(buf))
            }
            Part::Rows if reply::is_terminator(&buf, deprecate_eof) => {
                r.part = if r.tracker.is_done() {
                    Part::Done
                } else {
                    // More results follow (not a plain SELECT): read on
                    // and drop them, the first result set is the answer.
                    Part::Start
                };
                if r.terminator.is_none() {
                    r.terminator = Some(buf);
                    return Ok(Got::End);
                }
                Ok(Got::Packet(Vec::new()))
            }
            Part::Rows => Ok(Got::Packet(buf)),
            Part::Done => Ok(Got::Packet(Vec::new())),
        }
    }
}

fn cannot_merge(e: merge::MergeError) -> CmdError {
    CmdError::Refused(
        crate::frontend::errors::ER_NOT_ROUTABLE,
        format!("idgate: cannot merge the shards' results: {e}"),
    )
}

/// Skips the logical packet at the front of `conn` (its physical packets
/// not read yet), reading it in the buffer's chunks without holding it.
async fn skip_packet(conn: &mut crate::protocol::packet::PacketConn) -> std::io::Result<()> {
    loop {
        while conn.buffered().len() < 4 {
            conn.fill().await?;
        }
        let Some(h) = conn.header_at(0) else {
            continue;
        };
        let mut left = 4 + h.len;
        while left > 0 {
            if conn.buffered().is_empty() {
                conn.fill().await?;
            }
            let n = left.min(conn.buffered().len());
            conn.consume(n);
            left -= n;
        }
        if h.len < consts::MAX_PAYLOAD {
            return Ok(());
        }
    }
}

/// Frames `p` into `out` with the session's next sequence id.
pub(in crate::frontend) fn put(out: &mut Vec<u8>, seq: &mut u8, p: &[u8]) {
    *seq = frame(out, *seq, p).wrapping_add(1);
}
