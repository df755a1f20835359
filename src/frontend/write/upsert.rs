//! Reading the reply of a tracked INSERT IGNORE / ON DUPLICATE KEY UPDATE
//! (written by [`crate::sql::upsert`]): which id MariaDB would report for
//! an AUTO_INCREMENT column, and what the session's `LAST_INSERT_ID()`
//! needs on the shard afterwards.
//!
//! From an OK packet: its last_insert_id is the tracking register. One of
//! the statement's ids: the first stored generated row (the register is
//! what `LAST_INSERT_ID()` must be, nothing to do). Anything else: no
//! generated row was stored; the report is the register (the last row's id
//! as it ended up) when a row was written (`copied`, from affected rows and
//! `Duplicates`), else 0, and the shard gets its saved value back.
//!
//! From a `RETURNING` result (multi-row INSERT IGNORE): the rows are the
//! stored ids; the OK packet MariaDB would have sent is rebuilt from them
//! and the terminator (affected rows, last_insert_id, status, warnings,
//! `Records: n  Duplicates: d  Warnings: w`, session state changes).

use crate::backend::relay::Action;
pub(in crate::frontend) use crate::frontend::returned::{Returned, Step};
use crate::protocol::reply::parse_records;
use crate::protocol::reply::{self, OkPacket};

/// A tracked statement, or one shard's part of it.
#[derive(Debug, Clone, Copy)]
pub(in crate::frontend) struct Tracked<'a> {
    /// Its generated ids, in row order.
    pub ids: &'a [u64],
    /// Rows it inserts.
    pub rows: usize,
    /// `INSERT IGNORE`.
    pub ignore: bool,
    /// `ON DUPLICATE KEY UPDATE`.
    pub odku: bool,
    /// The id the last row was written with (explicit, or generated), when
    /// known: MariaDB reports it when no generated row was stored but a
    /// row was written and the register could not follow the last row
    /// (an explicit row inserted; an INSERT IGNORE's ignored row).
    pub last_row: Option<u64>,
}

/// What the shard's `LAST_INSERT_ID()` needs after the statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::frontend) enum After {
    /// It holds the right value.
    Keep,
    /// `DO LAST_INSERT_ID(v)`.
    Set(u64),
    /// The value the statement saved (`DO LAST_INSERT_ID(@idgate_lid)`).
    Restore,
    /// The statement failed: the saved value, if it got as far as saving it.
    Failed,
}

/// What a tracked statement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::frontend) struct Outcome {
    /// The first stored generated id.
    pub stored: Option<u64>,
    /// The shard's `LAST_INSERT_ID()` already holds `stored`.
    pub held: bool,
    /// Rows written (inserted, or changed by the update): MariaDB's `copied`.
    pub copied: u64,
    /// The last row's id as it ended up (reported when no generated row was
    /// stored but a row was written).
    pub last: u64,
}

impl Outcome {
    /// The last_insert_id MariaDB reports in the OK packet.
    pub fn report(&self) -> u64 {
        match self.stored {
            Some(v) => v,
            None if self.copied > 0 => self.last,
            None => 0,
        }
    }

    /// What the shard's `LAST_INSERT_ID()` needs.
    pub fn after(&self) -> After {
        match self.stored {
            Some(_) if self.held => After::Keep,
            Some(v) => After::Set(v),
            None => After::Restore,
        }
    }
}

impl Tracked<'_> {
    /// Reads the OK packet `ok` (with its info text) of the statement.
    pub fn read_ok(&self, ok: &OkPacket, info: &str) -> Outcome {
        let register = ok.last_insert_id;
        let counts = parse_records(info);
        // A row ignored for another reason than a duplicate leaves the
        // register on its own id: a one-row statement that wrote nothing
        // stored nothing.
        let stored = (register != 0 && (self.rows > 1 || ok.affected_rows > 0))
            .then_some(register)
            .filter(|r| self.ids.contains(r));
        if let Some(v) = stored {
            return Outcome {
                stored: Some(v),
                held: true,
                copied: ok.affected_rows.max(1),
                last: v,
            };
        }
        let copied = if !self.odku {
            ok.affected_rows
        } else if self.rows <= 1 {
            // One row, a duplicate: 2 when updated, 0 (1 with
            // CLIENT_FOUND_ROWS) when unchanged.
            ok.affected_rows.saturating_sub(1)
        } else {
            let (records, duplicates) = counts.unwrap_or((self.rows as u64, 0));
            // `Duplicates` counts rows the update changed (all it touched
            // with CLIENT_FOUND_ROWS); with IGNORE, every row not written.
            if self.ignore {
                records.saturating_sub(duplicates)
            } else {
                ok.affected_rows.saturating_sub(duplicates)
            }
        };
        let last = match register {
            r if r != 0 && self.odku => r,
            _ => self.last_row.unwrap_or(0),
        };
        Outcome {
            stored: None,
            held: false,
            copied,
            last,
        }
    }

    /// Reads the ids a `RETURNING` clause gave back (the stored rows).
    pub fn read_returned(&self, returned: &[u64]) -> Outcome {
        let stored = returned.iter().copied().find(|r| self.ids.contains(r));
        Outcome {
            stored,
            // The register holds the first generated id.
            held: stored.is_some() && stored == self.ids.first().copied(),
            copied: returned.len() as u64,
            // MariaDB: the id the last row was written with, stored or not.
            last: self
                .last_row
                .or_else(|| returned.last().copied())
                .unwrap_or(0),
        }
    }
}

/// The hook action for an OK packet whose last_insert_id becomes `v`.
pub(in crate::frontend) fn report_action(p: &[u8], ok: &OkPacket, v: u64) -> Action {
    if ok.last_insert_id == v {
        return Action::Keep;
    }
    match reply::with_last_insert_id(p, v) {
        Ok(out) => Action::Replace(out),
        Err(_) => Action::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::wire::put_lenenc_bytes;

    fn ok(affected: u64, lid: u64, info: &str) -> (OkPacket, String) {
        let o = OkPacket {
            affected_rows: affected,
            last_insert_id: lid,
            status: 2,
            warnings: 0,
        };
        (o, info.to_string())
    }

    const IDS: &[u64] = &[100, 101, 102];

    fn odku(rows: usize) -> Tracked<'static> {
        Tracked {
            ids: &IDS[..rows],
            rows,
            ignore: false,
            odku: true,
            last_row: None,
        }
    }

    #[test]
    fn one_row_upsert() {
        let t = odku(1);
        // Inserted.
        let (o, p) = ok(1, 100, "");
        let r = t.read_ok(&o, &p);
        assert_eq!((r.report(), r.after()), (100, After::Keep));
        // Updated: the existing row's id; LAST_INSERT_ID() unchanged.
        let (o, p) = ok(2, 7, "");
        let r = t.read_ok(&o, &p);
        assert_eq!((r.report(), r.after()), (7, After::Restore));
        // Unchanged (0, or 1 with CLIENT_FOUND_ROWS): 0.
        for affected in [0, 1] {
            let (o, p) = ok(affected, 7, "");
            let r = t.read_ok(&o, &p);
            assert_eq!((r.report(), r.after()), (0, After::Restore));
        }
    }

    #[test]
    fn multi_row_upsert() {
        let t = odku(3);
        // A middle row stored first.
        let (o, p) = ok(5, 101, "Records: 3  Duplicates: 2  Warnings: 0");
        let r = t.read_ok(&o, &p);
        assert_eq!((r.report(), r.after()), (101, After::Keep));
        // Every row a duplicate, one changed: the last row's id.
        let (o, p) = ok(2, 9, "Records: 3  Duplicates: 1  Warnings: 0");
        assert_eq!(t.read_ok(&o, &p).report(), 9);
        // With CLIENT_FOUND_ROWS, unchanged rows count in both numbers.
        let (o, p) = ok(3, 9, "Records: 3  Duplicates: 3  Warnings: 0");
        assert_eq!(t.read_ok(&o, &p).report(), 0);
        let (o, p) = ok(0, 9, "Records: 3  Duplicates: 0  Warnings: 0");
        assert_eq!(t.read_ok(&o, &p).report(), 0);
    }

    #[test]
    fn ignore() {
        let t = Tracked {
            ignore: true,
            odku: false,
            ..odku(1)
        };
        let (o, p) = ok(0, 100, "");
        let r = t.read_ok(&o, &p);
        assert_eq!((r.report(), r.after()), (0, After::Restore));
        let (o, p) = ok(1, 100, "");
        assert_eq!(t.read_ok(&o, &p).after(), After::Keep);
        let t = Tracked {
            ignore: true,
            odku: false,
            ..odku(3)
        };
        let r = t.read_returned(&[101, 102]);
        assert_eq!((r.report(), r.after()), (101, After::Set(101)));
        let r = t.read_returned(&[]);
        assert_eq!((r.report(), r.after()), (0, After::Restore));
    }

    #[test]
    fn returning_result_becomes_the_ok_packet() {
        // Text protocol, classic EOF: count, column, EOF, rows, EOF.
        let mut r = Returned::new(false, false);
        let col = vec![3, b'd', b'e', b'f'];
        let eof = reply::eof_packet(0, 2);
        assert_eq!(r.feed(&[1]), Step::Swallow);
        assert_eq!(r.feed(&col), Step::Swallow);
        assert_eq!(r.feed(&eof), Step::Swallow);
        assert_eq!(r.feed(b"\x041017"), Step::Swallow);
        assert_eq!(r.feed(&reply::eof_packet(1, 2)), Step::End);
        assert_eq!(r.ids, vec![1017]);
        let (ok, p) = r.ok_packet(2, 1017).unwrap();
        assert_eq!(ok.affected_rows, 1);
        assert_eq!(ok.warnings, 1);
        let mut want = vec![0, 1, 0xfc, 0xf9, 0x03, 2, 0, 1, 0];
        put_lenenc_bytes(&mut want, b"Records: 2  Duplicates: 1  Warnings: 1");
        assert_eq!(p, want);
        // Binary rows, DEPRECATE_EOF, an ERR instead.
        let mut b = Returned::new(true, true);
        b.feed(&[1]);
        b.feed(&col);
        let mut row = vec![0, 0];
        row.extend_from_slice(&5u64.to_le_bytes());
        b.feed(&row);
        assert_eq!(b.feed(&[0xfe, 0, 0, 3, 0, 0, 0]), Step::End);
        assert_eq!(b.ids, vec![5]);
        let (ok, p) = b.ok_packet(1, 5).unwrap();
        assert_eq!(ok.status, 3);
        assert_eq!(p, vec![0, 1, 5, 3, 0, 0, 0]);
        let mut e = Returned::new(false, true);
        assert_eq!(e.feed(&[0xff, 0x26, 0x04]), Step::Other);
    }
}
