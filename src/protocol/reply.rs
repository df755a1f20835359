//! OK, ERR and EOF packets (protocol 4.1), and the packet that ends a
//! result set's rows ([`Terminator`]).

use super::codes::ErrorCode;
use super::wire::{put_lenenc, Cursor};
use super::Malformed;

/// First byte of an OK packet.
pub const OK: u8 = 0x00;
/// First byte of an ERR packet.
pub const ERR: u8 = 0xff;
/// First byte of an EOF packet (and of an OK that ends a result set under DEPRECATE_EOF).
pub const EOF: u8 = 0xfe;
/// First byte of a LOCAL INFILE request.
pub const LOCAL_INFILE: u8 = 0xfb;

/// The fixed fields of an OK packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OkPacket {
    pub affected_rows: u64,
    pub last_insert_id: u64,
    pub status: u16,
    pub warnings: u16,
}

/// Parses an OK packet (first byte `0x00` or `0xfe`).
pub fn parse_ok(payload: &[u8]) -> Result<OkPacket, Malformed> {
    let mut c = Cursor::new(payload);
    match c.u8()? {
        OK | EOF => {}
        _ => return Err(Malformed("not an OK packet")),
    }
    Ok(OkPacket {
        affected_rows: c.lenenc()?,
        last_insert_id: c.lenenc()?,
        status: c.u16()?,
        warnings: c.u16()?,
    })
}

/// The same OK packet with another last_insert_id; everything after the fixed
/// fields (info, session state changes) is kept byte for byte.
pub fn with_last_insert_id(payload: &[u8], last_insert_id: u64) -> Result<Vec<u8>, Malformed> {
    let mut c = Cursor::new(payload);
    let head = c.u8()?;
    let affected = c.lenenc()?;
    c.lenenc()?;
    let rest = c.rest();
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.push(head);
    put_lenenc(&mut out, affected);
    put_lenenc(&mut out, last_insert_id);
    out.extend_from_slice(rest);
    Ok(out)
}

/// Builds an OK packet.
pub fn ok_packet(p: &OkPacket, info: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + info.len());
    out.push(OK);
    put_lenenc(&mut out, p.affected_rows);
    put_lenenc(&mut out, p.last_insert_id);
    out.extend_from_slice(&p.status.to_le_bytes());
    out.extend_from_slice(&p.warnings.to_le_bytes());
    out.extend_from_slice(info);
    out
}

/// Builds an EOF packet.
pub fn eof_packet(warnings: u16, status: u16) -> Vec<u8> {
    let mut out = vec![EOF];
    out.extend_from_slice(&warnings.to_le_bytes());
    out.extend_from_slice(&status.to_le_bytes());
    out
}

/// Builds an ERR packet.
pub fn err_packet(code: &ErrorCode, message: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + message.len());
    out.push(ERR);
    out.extend_from_slice(&code.code.to_le_bytes());
    out.push(b'#');
    let state = code.state.as_bytes();
    out.extend_from_slice(&state[..state.len().min(5)]);
    out.extend_from_slice(message.as_bytes());
    out
}

/// An ERR packet's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrPacket {
    pub code: u16,
    pub state: String,
    pub message: String,
}

impl ErrPacket {
    /// The ERR packet again, its message after `prefix` (a malformed
    /// SQLSTATE becomes `HY000`).
    pub fn payload(&self, prefix: &str) -> Vec<u8> {
        let mut p = Vec::with_capacity(9 + prefix.len() + self.message.len());
        p.push(ERR);
        p.extend_from_slice(&self.code.to_le_bytes());
        p.push(b'#');
        let state = if self.state.len() == 5 {
            self.state.as_str()
        } else {
            "HY000"
        };
        p.extend_from_slice(state.as_bytes());
        p.extend_from_slice(prefix.as_bytes());
        p.extend_from_slice(self.message.as_bytes());
        p
    }
}

impl std::fmt::Display for ErrPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ERROR {} ({}): {}", self.code, self.state, self.message)
    }
}

/// Parses an ERR packet.
pub fn parse_err(payload: &[u8]) -> Result<ErrPacket, Malformed> {
    let mut c = Cursor::new(payload);
    if c.u8()? != ERR {
        return Err(Malformed("not an ERR packet"));
    }
    let code = c.u16()?;
    let mut state = String::new();
    if c.remaining() >= 6 && payload.get(3) == Some(&b'#') {
        c.u8()?;
        state = String::from_utf8_lossy(c.take(5)?).into_owned();
    }
    Ok(ErrPacket {
        code,
        state,
        message: String::from_utf8_lossy(c.rest()).into_owned(),
    })
}

/// Whether a payload is an EOF packet (a `0xfe` packet shorter than 9 bytes).
pub fn is_eof(payload: &[u8]) -> bool {
    payload.first() == Some(&EOF) && payload.len() < 9
}

/// Whether a whole payload (split packets joined) ends a result set's rows:
/// `0xfe` first, and shorter than any row that can start with `0xfe` (a
/// text row whose first value is 16 MiB or longer).
pub fn is_terminator(payload: &[u8], deprecate_eof: bool) -> bool {
    payload.first() == Some(&EOF)
        && if deprecate_eof {
            payload.len() < super::consts::MAX_PAYLOAD
        } else {
            payload.len() < 9
        }
}

/// The status flags and warning count of the packet that ends a result
/// set's rows: an EOF packet, or under `CLIENT_DEPRECATE_EOF` an OK packet
/// with header `0xfe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminator {
    pub status: u16,
    pub warnings: u16,
}

/// Where a terminator's status and warnings are: (status offset, warnings offset).
fn terminator_offsets(payload: &[u8], deprecate_eof: bool) -> Result<(usize, usize), Malformed> {
    let mut c = Cursor::new(payload);
    if c.u8()? != EOF {
        return Err(Malformed("result set without its terminator"));
    }
    let (status_at, warnings_at) = if deprecate_eof {
        c.lenenc()?;
        c.lenenc()?;
        (c.pos(), c.pos() + 2)
    } else {
        (3, 1)
    };
    if payload.len() < status_at.max(warnings_at) + 2 {
        return Err(Malformed("terminator too short"));
    }
    Ok((status_at, warnings_at))
}

fn u16_at(payload: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([
        *payload.get(at)?,
        *payload.get(at + 1)?,
    ]))
}

/// Parses a result set's terminator.
pub fn parse_terminator(payload: &[u8], deprecate_eof: bool) -> Result<Terminator, Malformed> {
    let (s, w) = terminator_offsets(payload, deprecate_eof)?;
    match (u16_at(payload, s), u16_at(payload, w)) {
        (Some(status), Some(warnings)) => Ok(Terminator { status, warnings }),
        _ => Err(Malformed("terminator too short")),
    }
}

/// A result set's terminator written by idgate: an EOF packet, or under
/// CLIENT_DEPRECATE_EOF the OK packet with the EOF header that replaces it.
pub fn terminator_packet(status: u16, warnings: u16, deprecate_eof: bool) -> Vec<u8> {
    if !deprecate_eof {
        return eof_packet(warnings, status);
    }
    let mut ok = ok_packet(
        &OkPacket {
            affected_rows: 0,
            last_insert_id: 0,
            status,
            warnings,
        },
        b"",
    );
    if let Some(b) = ok.first_mut() {
        *b = EOF;
    }
    ok
}

/// The same terminator with other status flags and warning count; every
/// other byte (an OK packet's info and session state changes) is kept.
pub fn terminator_with(
    payload: &[u8],
    deprecate_eof: bool,
    t: Terminator,
) -> Result<Vec<u8>, Malformed> {
    let (s, w) = terminator_offsets(payload, deprecate_eof)?;
    let mut out = payload.to_vec();
    for (at, v) in [(s, t.status), (w, t.warnings)] {
        match out.get_mut(at..at + 2) {
            Some(dst) => dst.copy_from_slice(&v.to_le_bytes()),
            None => return Err(Malformed("terminator too short")),
        }
    }
    Ok(out)
}

/// The info text at the end of an OK packet: a length-encoded string
/// (MariaDB always writes it so; a MySQL server without
/// CLIENT_SESSION_TRACK writes the bare text).
pub fn ok_info(p: &[u8]) -> String {
    let mut c = crate::protocol::wire::Cursor::new(p);
    let fixed = c.u8().and_then(|_| c.lenenc()).and_then(|_| c.lenenc());
    let status = fixed.and_then(|_| c.u16());
    let fixed = status.and_then(|s| c.u16().map(|_| s));
    let Ok(status) = fixed else {
        return String::new();
    };
    let rest = c.rest();
    let mut l = crate::protocol::wire::Cursor::new(rest);
    match l.lenenc_bytes() {
        Ok(text)
            if l.is_empty()
                || status & crate::protocol::consts::status::SESSION_STATE_CHANGED != 0 =>
        {
            String::from_utf8_lossy(text).into_owned()
        }
        _ => String::from_utf8_lossy(rest).into_owned(),
    }
}

/// `Records: 3  Duplicates: 1  Warnings: 0` -> (3, 1).
pub fn parse_records(info: &str) -> Option<(u64, u64)> {
    let num = |key: &str| -> Option<u64> {
        let rest = info.get(info.find(key)? + key.len()..)?;
        rest.trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((num("Records:")?, num("Duplicates:").unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codes;

    #[test]
    fn ok_round_trip_and_last_insert_id_rewrite_keeps_the_tail() {
        let p = OkPacket {
            affected_rows: 3,
            last_insert_id: 0,
            status: 2,
            warnings: 1,
        };
        let raw = ok_packet(&p, b"Records: 3");
        assert_eq!(parse_ok(&raw), Ok(p));
        let re = with_last_insert_id(&raw, 1 << 40).unwrap();
        let q = parse_ok(&re).unwrap();
        assert_eq!(q.last_insert_id, 1 << 40);
        assert_eq!(q.affected_rows, 3);
        assert!(re.ends_with(b"Records: 3"));
    }

    #[test]
    fn terminators_in_both_eof_modes() {
        let eof = eof_packet(3, 0x22);
        let t = Terminator {
            status: 0x22,
            warnings: 3,
        };
        assert_eq!(parse_terminator(&eof, false), Ok(t));
        let u = Terminator {
            status: 2,
            warnings: 65535,
        };
        let re = terminator_with(&eof, false, u).unwrap();
        assert_eq!(re, eof_packet(65535, 2));

        let mut ok = ok_packet(
            &OkPacket {
                affected_rows: 300,
                last_insert_id: 0,
                status: 0x22,
                warnings: 3,
            },
            b"\x03abc",
        );
        ok[0] = EOF;
        assert_eq!(parse_terminator(&ok, true), Ok(t));
        let re = terminator_with(&ok, true, u).unwrap();
        assert_eq!(parse_terminator(&re, true), Ok(u));
        assert!(re.ends_with(b"\x03abc"), "the tail is kept");
        assert_eq!(parse_ok(&re).unwrap().affected_rows, 300);

        for bad in [
            &b""[..],
            &[0xfe, 1, 0, 2],
            &[0x00, 1, 0, 2, 0],
            &[0xfe, 0xfc, 1],
        ] {
            assert!(parse_terminator(bad, false).is_err(), "{bad:?}");
            assert!(parse_terminator(bad, true).is_err(), "{bad:?}");
        }
        assert!(terminator_with(&[0xfe, 0, 0], false, u).is_err());
    }

    #[test]
    fn err_round_trip() {
        let raw = err_packet(&codes::ER_ACCESS_DENIED_ERROR, "Access denied");
        let e = parse_err(&raw).unwrap();
        assert_eq!(e.code, 1045);
        assert_eq!(e.state, "28000");
        assert_eq!(e.message, "Access denied");
        assert!(parse_err(&[0xff]).is_err());
        assert!(parse_ok(&[0x00, 0xfc]).is_err());
    }
}
