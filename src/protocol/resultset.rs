//! Text-protocol result sets that idgate writes itself (admin commands).

use super::consts::DEFAULT_CHARSET;
use super::packet::frame;
use super::reply;
use super::wire::put_lenenc_bytes;

/// MYSQL_TYPE_VAR_STRING: every column of idgate's own result sets is text.
const VAR_STRING: u8 = 0xfd;
/// MYSQL_TYPE_LONGLONG.
const LONGLONG: u8 = 0x08;

/// Type of a column idgate writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Text,
    /// Unsigned 64-bit integer (sent as text, typed so clients decode numbers).
    UInt,
    /// Signed 64-bit integer that may be NULL: what MariaDB describes
    /// `NEXTVAL(seq)` with (LONGLONG, binary, 20 digits, BINARY | NUM).
    BigInt,
}

/// What the client negotiated that changes how a result set is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Framing {
    /// `CLIENT_DEPRECATE_EOF`: OK instead of EOF packets.
    pub deprecate_eof: bool,
    /// MariaDB's extended metadata: column definitions carry type info.
    pub extended_metadata: bool,
}

/// Frames a complete text result set (column count, definitions, rows,
/// terminator) starting at sequence id `seq`; returns the bytes to send.
pub fn text_result_set(
    seq: u8,
    columns: &[(&str, ColumnType)],
    rows: &[Vec<Option<String>>],
    framing: Framing,
    status: u16,
) -> Vec<u8> {
    let deprecate_eof = framing.deprecate_eof;
    let mut out = Vec::new();
    let mut seq = seq;
    let mut push = |out: &mut Vec<u8>, payload: &[u8]| {
        seq = frame(out, seq, payload).wrapping_add(1);
    };
    let mut p = Vec::new();
    super::wire::put_lenenc(&mut p, columns.len() as u64);
    push(&mut out, &p);
    for (name, ty) in columns {
        p.clear();
        column_definition(&mut p, name, *ty, framing);
        push(&mut out, &p);
    }
    if !deprecate_eof {
        push(&mut out, &reply::eof_packet(0, status));
    }
    for row in rows {
        p.clear();
        for v in row {
            match v {
                Some(s) => put_lenenc_bytes(&mut p, s.as_bytes()),
                None => p.push(0xfb),
            }
        }
        push(&mut out, &p);
    }
    push(
        &mut out,
        &reply::terminator_packet(status, 0, deprecate_eof),
    );
    out
}

/// One column definition packet's payload (catalog `def`, no schema or
/// table, `name` as name and original name).
pub fn column_definition(p: &mut Vec<u8>, name: &str, ty: ColumnType, framing: Framing) {
    put_lenenc_bytes(p, b"def");
    put_lenenc_bytes(p, b"");
    put_lenenc_bytes(p, b"");
    put_lenenc_bytes(p, b"");
    put_lenenc_bytes(p, name.as_bytes());
    put_lenenc_bytes(p, name.as_bytes());
    if framing.extended_metadata {
        // No extended type info.
        put_lenenc_bytes(p, b"");
    }
    p.push(0x0c);
    let (charset, len, t, flags): (u16, u32, u8, u16) = match ty {
        ColumnType::Text => (DEFAULT_CHARSET as u16, 1024, VAR_STRING, 0),
        // binary charset, 20 digits, NOT_NULL | UNSIGNED | NUM
        ColumnType::UInt => (63, 20, LONGLONG, 0x0001 | 0x0020 | 0x8000),
        // binary charset, 20 digits, BINARY | NUM
        ColumnType::BigInt => (63, 20, LONGLONG, 0x0080 | 0x8000),
    };
    p.extend_from_slice(&charset.to_le_bytes());
    p.extend_from_slice(&len.to_le_bytes());
    p.push(t);
    p.extend_from_slice(&flags.to_le_bytes());
    p.push(0);
    p.extend_from_slice(&[0, 0]);
}

/// The reply to a COM_STMT_PREPARE that idgate answers itself: the
/// statement OK (`stmt_id`, no parameters) and one BIGINT definition per
/// column name, starting at sequence id `seq`.
pub fn prepare_ok(seq: u8, stmt_id: u32, columns: &[&str], framing: Framing) -> Vec<u8> {
    let mut out = Vec::new();
    let mut seq = seq;
    let mut push = |out: &mut Vec<u8>, payload: &[u8]| {
        seq = frame(out, seq, payload).wrapping_add(1);
    };
    let mut p = vec![0u8];
    p.extend_from_slice(&stmt_id.to_le_bytes());
    p.extend_from_slice(&(columns.len() as u16).to_le_bytes());
    p.extend_from_slice(&0u16.to_le_bytes()); // parameters
    p.push(0);
    p.extend_from_slice(&0u16.to_le_bytes()); // warnings
    push(&mut out, &p);
    if !columns.is_empty() {
        for name in columns {
            p.clear();
            column_definition(&mut p, name, ColumnType::BigInt, framing);
            push(&mut out, &p);
        }
        if !framing.deprecate_eof {
            push(&mut out, &reply::eof_packet(0, 0));
        }
    }
    out
}

/// A complete binary-protocol result set (the reply to COM_STMT_EXECUTE)
/// of one row of BIGINT columns (`None`: NULL), starting at `seq`.
pub fn binary_bigint_row(
    seq: u8,
    columns: &[&str],
    row: &[Option<i64>],
    framing: Framing,
    status: u16,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut seq = seq;
    let mut push = |out: &mut Vec<u8>, payload: &[u8]| {
        seq = frame(out, seq, payload).wrapping_add(1);
    };
    let mut p = Vec::new();
    super::wire::put_lenenc(&mut p, columns.len() as u64);
    push(&mut out, &p);
    for name in columns {
        p.clear();
        column_definition(&mut p, name, ColumnType::BigInt, framing);
        push(&mut out, &p);
    }
    if !framing.deprecate_eof {
        push(&mut out, &reply::eof_packet(0, status));
    }
    // Row: 0x00, the NULL bitmap (offset 2), then each non-NULL value.
    p.clear();
    p.push(0);
    let mut bitmap = vec![0u8; (columns.len() + 7 + 2) / 8];
    for (i, v) in row.iter().enumerate() {
        if v.is_none() {
            if let Some(b) = bitmap.get_mut((i + 2) / 8) {
                *b |= 1 << ((i + 2) % 8);
            }
        }
    }
    p.extend_from_slice(&bitmap);
    for v in row.iter().flatten() {
        p.extend_from_slice(&v.to_le_bytes());
    }
    push(&mut out, &p);
    push(
        &mut out,
        &reply::terminator_packet(status, 0, framing.deprecate_eof),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::response::{Expect, Tracker};

    #[test]
    fn result_sets_are_complete_for_the_tracker_in_both_eof_modes() {
        for deprecate in [false, true] {
            let bytes = text_result_set(
                1,
                &[("name", ColumnType::Text), ("n", ColumnType::UInt)],
                &[
                    vec![Some("a".into()), Some("1".into())],
                    vec![None, Some("2".into())],
                ],
                Framing {
                    deprecate_eof: deprecate,
                    extended_metadata: deprecate,
                },
                2,
            );
            let mut t = Tracker::new(Expect::Results, deprecate, 0);
            let mut pos = 0;
            let mut expected_seq = 1u8;
            while pos < bytes.len() {
                let len =
                    u32::from_le_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], 0]) as usize;
                assert_eq!(bytes[pos + 3], expected_seq);
                expected_seq += 1;
                assert!(!t.is_done());
                t.feed(len, &bytes[pos + 4..pos + 4 + len]).unwrap();
                pos += 4 + len;
            }
            assert!(t.is_done(), "deprecate_eof={deprecate}");
        }
    }

    /// Feeds framed packets to a tracker: every packet in order, and the
    /// tracker done exactly at the end.
    fn complete(bytes: &[u8], expect: Expect, deprecate: bool) -> Vec<Vec<u8>> {
        let mut t = Tracker::new(expect, deprecate, 0);
        let mut pos = 0;
        let mut packets = Vec::new();
        while pos < bytes.len() {
            let len = u32::from_le_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], 0]) as usize;
            assert!(!t.is_done());
            t.feed(len, &bytes[pos + 4..pos + 4 + len]).unwrap();
            packets.push(bytes[pos + 4..pos + 4 + len].to_vec());
            pos += 4 + len;
        }
        assert!(t.is_done(), "deprecate_eof={deprecate}");
        packets
    }

    #[test]
    fn answered_prepares_and_binary_rows_are_complete() {
        for deprecate in [false, true] {
            let framing = Framing {
                deprecate_eof: deprecate,
                extended_metadata: false,
            };
            let p = complete(
                &prepare_ok(1, 7, &["NEXTVAL(idgate.o)", "l"], framing),
                Expect::Prepare,
                deprecate,
            );
            assert_eq!(&p[0][1..5], &7u32.to_le_bytes());
            assert_eq!(&p[0][5..9], &[2, 0, 0, 0]);
            let r = complete(
                &binary_bigint_row(1, &["a", "b"], &[Some(-5), None], framing, 2),
                Expect::Results,
                deprecate,
            );
            // The row: header, NULL bitmap (b is column 1: bit 3), -5.
            let row = &r[if deprecate { 3 } else { 4 }];
            assert_eq!(row[..2], [0, 0b1000]);
            assert_eq!(row[2..], (-5i64).to_le_bytes());
        }
    }
}
