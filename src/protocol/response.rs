//! Where a server's reply to a command ends.
//!
//! idgate relays replies byte for byte; it only needs to know which packet
//! closes the reply (so it can read the next command), which packets are the
//! OK packets of results (to fix last_insert_id where needed), and the final
//! server status (transaction state). [`Tracker`] follows the reply packet by
//! packet: plain OK/ERR, result sets with or without EOF packets
//! (`CLIENT_DEPRECATE_EOF`), multi-results, cursors, prepare replies, LOCAL
//! INFILE requests and split (16 MiB) rows.

use super::consts::{status, MAX_PAYLOAD};
use super::reply::{self, EOF, ERR, LOCAL_INFILE, OK};
use super::wire::Cursor;
use super::Malformed;

/// What kind of reply a command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// COM_QUERY and COM_STMT_EXECUTE: OK, ERR, LOCAL INFILE or a result set, possibly several.
    Results,
    /// COM_STMT_FETCH: rows then a terminator, or ERR.
    Rows,
    /// COM_STMT_PREPARE: prepare-OK with parameter and column definitions, or ERR.
    Prepare,
    /// COM_FIELD_LIST: column definitions then EOF, or ERR.
    FieldList,
    /// One packet: OK, ERR, EOF or a string (COM_PING, COM_STATISTICS, ...).
    Single,
}

/// What a fed packet was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The OK packet that is result number `index` of a reply (not a result-set terminator).
    Ok { index: usize },
    /// An ERR packet: the reply ends with it.
    Err,
    /// A LOCAL INFILE request: the client's file contents must be relayed next.
    LocalInfile,
    /// Anything else: column counts and definitions, rows, EOF, a continuation.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting the first packet of a result.
    Start,
    /// `n` column definitions still to come.
    Columns(u64),
    /// The EOF packet after column definitions (no DEPRECATE_EOF).
    ColumnsEof,
    Rows,
    /// Prepare reply: parameter definitions, then column definitions.
    PrepareDefs {
        params: u64,
        columns: u64,
    },
    PrepareParamsEof {
        columns: u64,
    },
    PrepareColumnsEof,
    FieldList,
    Single,
    Done,
}

/// Follows one reply, packet by packet.
#[derive(Debug, Clone)]
pub struct Tracker {
    state: State,
    deprecate_eof: bool,
    /// The previous physical packet was exactly 16 MiB - 1: this one continues it.
    continuation: bool,
    results: usize,
    status: u16,
    /// Warnings of the last result, plus one when the reply ended with an
    /// error: what `SHOW WARNINGS` would list after it.
    diagnostics: u16,
    /// The last OK packet's last insert id.
    insert_id: u64,
}

impl Tracker {
    /// A tracker for a reply of kind `expect`; `deprecate_eof` is whether the
    /// connection negotiated `CLIENT_DEPRECATE_EOF`; `status` the last known server status.
    pub fn new(expect: Expect, deprecate_eof: bool, status: u16) -> Self {
        let state = match expect {
            Expect::Results => State::Start,
            Expect::Rows => State::Rows,
            Expect::Prepare => State::PrepareDefs {
                params: u64::MAX,
                columns: 0,
            },
            Expect::FieldList => State::FieldList,
            Expect::Single => State::Single,
        };
        Tracker {
            state,
            deprecate_eof,
            continuation: false,
            results: 0,
            status,
            diagnostics: 0,
            insert_id: 0,
        }
    }

    /// What `SHOW WARNINGS` lists after this reply (its last result's
    /// warnings, one more for an error), as far as seen.
    pub fn diagnostics(&self) -> u16 {
        self.diagnostics
    }

    /// The last OK packet's last insert id (0 when none was seen).
    pub fn insert_id(&self) -> u64 {
        self.insert_id
    }

    fn note_ok(&mut self, ok: &reply::OkPacket) {
        self.diagnostics = ok.warnings;
        self.insert_id = ok.last_insert_id;
    }

    fn note_err(&mut self) {
        self.diagnostics = self.diagnostics.saturating_add(1);
    }

    /// Whether the reply is complete.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The server status from the last OK or EOF packet seen.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// After a LOCAL INFILE exchange the server answers with OK or ERR: the reply goes on.
    pub fn resume_after_infile(&mut self) {
        self.state = State::Start;
    }

    /// Feeds one physical packet: its payload length (from the header) and its payload.
    pub fn feed(&mut self, len: usize, payload: &[u8]) -> Result<Kind, Malformed> {
        let continuation = std::mem::replace(&mut self.continuation, len == MAX_PAYLOAD);
        if continuation {
            return Ok(Kind::Other);
        }
        let first = payload.first().copied();
        match self.state {
            State::Done => Err(Malformed("packet after the end of a reply")),
            State::Single => {
                self.state = State::Done;
                match first {
                    Some(ERR) => {
                        self.diagnostics = 0;
                        self.note_err();
                        Ok(Kind::Err)
                    }
                    Some(OK) if len < MAX_PAYLOAD => {
                        if let Ok(ok) = reply::parse_ok(payload) {
                            self.status = ok.status;
                            self.note_ok(&ok);
                        }
                        Ok(Kind::Ok { index: 0 })
                    }
                    _ => Ok(Kind::Other),
                }
            }
            State::Start => match first {
                Some(OK) => {
                    let ok = reply::parse_ok(payload)?;
                    self.note_ok(&ok);
                    let index = self.results;
                    self.end_result(ok.status);
                    Ok(Kind::Ok { index })
                }
                Some(ERR) => {
                    self.state = State::Done;
                    self.diagnostics = 0;
                    self.note_err();
                    Ok(Kind::Err)
                }
                Some(LOCAL_INFILE) => Ok(Kind::LocalInfile),
                _ => {
                    let n = Cursor::new(payload).lenenc()?;
                    if n == 0 {
                        return Err(Malformed("result set with no columns"));
                    }
                    self.state = State::Columns(n);
                    Ok(Kind::Other)
                }
            },
            State::Columns(n) => {
                self.state = match (n - 1, self.deprecate_eof) {
                    (0, false) => State::ColumnsEof,
                    (0, true) => State::Rows,
                    (k, _) => State::Columns(k),
                };
                Ok(Kind::Other)
            }
            State::ColumnsEof => {
                if !reply::is_eof(payload) {
                    return Err(Malformed("expected EOF after column definitions"));
                }
                let st = eof_status(payload)?;
                self.status = st;
                if st & status::CURSOR_EXISTS != 0 {
                    // A cursor was opened: rows come with COM_STMT_FETCH.
                    self.end_result(st & !status::MORE_RESULTS_EXISTS);
                } else {
                    self.state = State::Rows;
                }
                Ok(Kind::Other)
            }
            State::Rows | State::FieldList => {
                if first == Some(ERR) {
                    self.state = State::Done;
                    self.note_err();
                    return Ok(Kind::Err);
                }
                if self.is_terminator(len, payload) {
                    let st = self.terminator_status(payload)?;
                    // The result's warnings (an EOF has them at bytes
                    // 1..3, an OK terminator after two length-encoded
                    // integers).
                    self.diagnostics = self.terminator_warnings(payload);
                    self.insert_id = 0;
                    if self.state == State::FieldList {
                        self.status = st;
                        self.state = State::Done;
                    } else {
                        self.end_result(st);
                    }
                }
                Ok(Kind::Other)
            }
            State::PrepareDefs { params, columns } => {
                if params == u64::MAX {
                    // The prepare-OK packet.
                    match first {
                        Some(ERR) => {
                            self.state = State::Done;
                            return Ok(Kind::Err);
                        }
                        Some(OK) => {}
                        _ => return Err(Malformed("bad prepare reply")),
                    }
                    let mut c = Cursor::new(payload);
                    c.take(5)?;
                    let columns = c.u16()? as u64;
                    let params = c.u16()? as u64;
                    self.next_prepare_section(params, columns);
                    return Ok(Kind::Other);
                }
                if params > 0 {
                    self.next_prepare_section(params - 1, columns);
                    if params - 1 == 0 && !self.deprecate_eof {
                        self.state = State::PrepareParamsEof { columns };
                    }
                } else {
                    self.next_prepare_section(0, columns - 1);
                    if columns - 1 == 0 && !self.deprecate_eof {
                        self.state = State::PrepareColumnsEof;
                    }
                }
                Ok(Kind::Other)
            }
            State::PrepareParamsEof { columns } => {
                self.next_prepare_section(0, columns);
                Ok(Kind::Other)
            }
            State::PrepareColumnsEof => {
                self.state = State::Done;
                Ok(Kind::Other)
            }
        }
    }

    fn next_prepare_section(&mut self, params: u64, columns: u64) {
        self.state = if params == 0 && columns == 0 {
            State::Done
        } else {
            State::PrepareDefs { params, columns }
        };
    }

    fn end_result(&mut self, st: u16) {
        self.status = st;
        self.results += 1;
        self.state = if st & status::MORE_RESULTS_EXISTS != 0 {
            State::Start
        } else {
            State::Done
        };
    }

    fn is_terminator(&self, len: usize, payload: &[u8]) -> bool {
        payload.first() == Some(&EOF)
            && if self.deprecate_eof {
                len < MAX_PAYLOAD
            } else {
                len < 9
            }
    }

    fn terminator_warnings(&self, payload: &[u8]) -> u16 {
        if self.deprecate_eof && payload.len() >= 7 {
            reply::parse_ok(payload).map_or(0, |ok| ok.warnings)
        } else {
            match payload.get(1..3) {
                Some(w) => u16::from_le_bytes([w[0], w[1]]),
                None => 0,
            }
        }
    }

    fn terminator_status(&self, payload: &[u8]) -> Result<u16, Malformed> {
        if payload.len() < 9 && payload.len() >= 5 && !self.deprecate_eof {
            eof_status(payload)
        } else if self.deprecate_eof && payload.len() >= 7 {
            Ok(reply::parse_ok(payload)?.status)
        } else {
            eof_status(payload)
        }
    }
}

fn eof_status(payload: &[u8]) -> Result<u16, Malformed> {
    let mut c = Cursor::new(payload);
    c.u8()?;
    if c.remaining() < 4 {
        return Ok(0);
    }
    c.u16()?;
    c.u16()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::reply::{eof_packet, ok_packet, OkPacket};

    fn ok(status: u16) -> Vec<u8> {
        ok_packet(
            &OkPacket {
                affected_rows: 1,
                last_insert_id: 0,
                status,
                warnings: 0,
            },
            b"",
        )
    }

    fn run(t: &mut Tracker, packets: &[Vec<u8>]) -> Vec<Kind> {
        packets
            .iter()
            .map(|p| {
                assert!(!t.is_done(), "reply ended early");
                t.feed(p.len(), p).unwrap()
            })
            .collect()
    }

    #[test]
    fn multi_results_end_at_the_result_without_more_results() {
        let mut t = Tracker::new(Expect::Results, false, 0);
        let col = vec![3u8, b'd', b'e', b'f'];
        let kinds = run(
            &mut t,
            &[
                ok(status::MORE_RESULTS_EXISTS),
                vec![1],
                col.clone(),
                eof_packet(0, 0),
                vec![1, b'1'],
                eof_packet(0, status::MORE_RESULTS_EXISTS),
                ok(status::AUTOCOMMIT),
            ],
        );
        assert!(t.is_done());
        assert_eq!(kinds[0], Kind::Ok { index: 0 });
        assert_eq!(kinds[6], Kind::Ok { index: 2 });
        assert_eq!(t.status(), status::AUTOCOMMIT);
    }

    #[test]
    fn deprecate_eof_result_set() {
        let mut t = Tracker::new(Expect::Results, true, 0);
        let mut end = ok(status::IN_TRANS);
        end[0] = EOF;
        run(&mut t, &[vec![2], vec![3], vec![3], vec![1, b'x'], end]);
        assert!(t.is_done());
        assert_eq!(t.status(), status::IN_TRANS);
    }

    #[test]
    fn prepare_reply_with_params_and_columns() {
        for deprecate in [false, true] {
            let mut t = Tracker::new(Expect::Prepare, deprecate, 0);
            let mut packets = vec![vec![0, 1, 0, 0, 0, 2, 0, 3, 0, 0, 0, 0]];
            packets.extend((0..3).map(|_| vec![3u8]));
            if !deprecate {
                packets.push(eof_packet(0, 0));
            }
            packets.extend((0..2).map(|_| vec![3u8]));
            if !deprecate {
                packets.push(eof_packet(0, 0));
            }
            run(&mut t, &packets);
            assert!(t.is_done(), "deprecate_eof={deprecate}");
        }
    }

    #[test]
    fn cursor_open_ends_after_column_definitions() {
        let mut t = Tracker::new(Expect::Results, false, 0);
        run(
            &mut t,
            &[vec![1], vec![3], eof_packet(0, status::CURSOR_EXISTS)],
        );
        assert!(t.is_done());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut t = Tracker::new(Expect::Results, false, 0);
        assert!(t.feed(2, &[0xfc, 1]).is_err());
        let mut t = Tracker::new(Expect::Prepare, false, 0);
        assert!(t.feed(3, &[0, 1, 2]).is_err());
    }
}
