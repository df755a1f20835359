//! A `RETURNING <id>` result set that idgate added to a write (so the
//! reply tells which ids were stored), read packet by packet and turned
//! back into the OK packet the client expects. Used by the id filler and
//! by the combining of a split write's replies (`oks`).

use crate::protocol::reply::{self, OkPacket, ERR};
use crate::protocol::wire::{put_lenenc, put_lenenc_bytes, Cursor};

/// A `RETURNING <id>` result set, read packet by packet.
#[derive(Debug)]
pub(in crate::frontend) struct Returned {
    binary: bool,
    deprecate_eof: bool,
    state: State,
    /// The ids returned, in order.
    pub ids: Vec<u64>,
    /// The terminator's status flags and warning count, and what an OK
    /// packet terminator carries after them (session state changes).
    pub end: Option<(u16, u16, Vec<u8>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Count,
    Columns(u64),
    ColumnsEof,
    Rows,
    Done,
}

/// What [`Returned::feed`] made of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::frontend) enum Step {
    /// Part of the result set: not for the client.
    Swallow,
    /// The terminator: the result is complete.
    End,
    /// Not a result set (an ERR, or an OK): pass it on.
    Other,
}

impl Returned {
    /// A reader for a text (`binary = false`) or binary protocol result.
    pub fn new(binary: bool, deprecate_eof: bool) -> Returned {
        Returned {
            binary,
            deprecate_eof,
            state: State::Count,
            ids: Vec::new(),
            end: None,
        }
    }

    /// Feeds the next packet of the reply.
    pub fn feed(&mut self, p: &[u8]) -> Step {
        match self.state {
            State::Count => match p.first() {
                Some(&reply::OK) | Some(&ERR) | None => {
                    self.state = State::Done;
                    Step::Other
                }
                Some(_) => {
                    let n = Cursor::new(p).lenenc().unwrap_or(0);
                    self.state = State::Columns(n);
                    Step::Swallow
                }
            },
            State::Columns(n) => {
                self.state = match n.saturating_sub(1) {
                    0 if self.deprecate_eof => State::Rows,
                    0 => State::ColumnsEof,
                    m => State::Columns(m),
                };
                Step::Swallow
            }
            State::ColumnsEof => {
                self.state = State::Rows;
                Step::Swallow
            }
            State::Rows if p.first() == Some(&ERR) => {
                self.state = State::Done;
                Step::Other
            }
            State::Rows if reply::is_terminator(p, self.deprecate_eof) => {
                self.state = State::Done;
                if let Ok(t) = reply::parse_terminator(p, self.deprecate_eof) {
                    let rest = if self.deprecate_eof {
                        let mut c = Cursor::new(p);
                        let tail = c
                            .u8()
                            .and_then(|_| c.lenenc())
                            .and_then(|_| c.lenenc())
                            .and_then(|_| c.u16())
                            .and_then(|_| c.u16());
                        match tail {
                            Ok(_) => c.rest().to_vec(),
                            Err(_) => Vec::new(),
                        }
                    } else {
                        Vec::new()
                    };
                    self.end = Some((t.status, t.warnings, rest));
                }
                Step::End
            }
            State::Rows => {
                if let Some(id) = self.row_id(p) {
                    self.ids.push(id);
                }
                Step::Swallow
            }
            State::Done => Step::Other,
        }
    }

    /// The id in a one-column row.
    fn row_id(&self, p: &[u8]) -> Option<u64> {
        let mut c = Cursor::new(p);
        if self.binary {
            // Header 0x00, a one-byte NULL bitmap, then the BIGINT.
            c.take(2).ok()?;
            c.u64().ok()
        } else {
            std::str::from_utf8(c.lenenc_bytes().ok()?)
                .ok()?
                .parse()
                .ok()
        }
    }

    /// The OK packet MariaDB sends for the same INSERT IGNORE without
    /// RETURNING, of `rows` rows, reporting `last_insert_id`.
    pub fn ok_packet(&self, rows: usize, last_insert_id: u64) -> Option<(OkPacket, Vec<u8>)> {
        let (status, warnings, rest) = self.end.as_ref()?;
        let ok = OkPacket {
            affected_rows: self.ids.len() as u64,
            last_insert_id,
            status: *status,
            warnings: *warnings,
        };
        let stored = self.ids.len();
        // A one-row INSERT has no info text.
        let info = if rows > 1 {
            format!(
                "Records: {rows}  Duplicates: {}  Warnings: {warnings}",
                rows.saturating_sub(stored)
            )
        } else {
            String::new()
        };
        let mut out = Vec::with_capacity(24 + info.len() + rest.len());
        out.push(reply::OK);
        put_lenenc(&mut out, ok.affected_rows);
        put_lenenc(&mut out, ok.last_insert_id);
        out.extend_from_slice(&ok.status.to_le_bytes());
        out.extend_from_slice(&ok.warnings.to_le_bytes());
        // What followed the terminator's fixed fields: its (empty) info and
        // session state changes; the info becomes ours.
        let state = {
            let mut c = Cursor::new(rest);
            match c.lenenc_bytes() {
                Ok(_) => c.rest(),
                Err(_) => &[][..],
            }
        };
        if !info.is_empty() || !state.is_empty() {
            put_lenenc_bytes(&mut out, info.as_bytes());
        }
        out.extend_from_slice(state);
        Some((ok, out))
    }

    /// Reads a whole reply (a shard's part of a split statement); `None`
    /// unless it is one complete RETURNING result.
    pub fn read_all(packets: &[Vec<u8>], deprecate_eof: bool) -> Option<Returned> {
        let mut r = Returned::new(false, deprecate_eof);
        for p in packets {
            if r.feed(p) == Step::Other {
                return None;
            }
        }
        r.end.is_some().then_some(r)
    }
}
