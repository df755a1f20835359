//! Reply encoding, RESP2 and RESP3.
//!
//! Replies are appended to the connection's output buffer, so a pipeline of
//! commands is answered with one write. The two protocol versions differ
//! only in maps (RESP3 `%`, RESP2 a flat array) and null (`_` / `$-1`).

/// Protocol version of a connection (`HELLO 3` switches to RESP3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// RESP2, every connection's start.
    V2,
    /// RESP3.
    V3,
}

/// Appends the decimal digits of `v`.
#[inline]
pub fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// `:v\r\n`.
#[inline]
pub fn int(out: &mut Vec<u8>, v: u64) {
    out.push(b':');
    push_u64(out, v);
    out.extend_from_slice(b"\r\n");
}

/// `+s\r\n` (`s` must not contain CR or LF: callers pass constants).
#[inline]
pub fn simple(out: &mut Vec<u8>, s: &str) {
    out.push(b'+');
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `-msg\r\n`. `msg` starts with the error code (`ERR`, `NOPERM`, ...);
/// CR and LF in it (from a client's bytes or an error's text) become spaces,
/// so an error can never break the framing.
pub fn error(out: &mut Vec<u8>, msg: &str) {
    out.push(b'-');
    out.extend(
        msg.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// `$len\r\nbytes\r\n`.
#[inline]
pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    push_u64(out, b.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// A bulk string holding the decimal digits of `v` (Redis `GET` of a counter).
#[inline]
pub fn bulk_u64(out: &mut Vec<u8>, v: u64) {
    let mut digits = Vec::with_capacity(20);
    push_u64(&mut digits, v);
    bulk(out, &digits);
}

/// Null: `$-1` (RESP2) or `_` (RESP3).
pub fn null(out: &mut Vec<u8>, proto: Proto) {
    out.extend_from_slice(match proto {
        Proto::V2 => b"$-1\r\n".as_slice(),
        Proto::V3 => b"_\r\n".as_slice(),
    });
}

/// The header of an array of `n` elements.
#[inline]
pub fn array(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    push_u64(out, n as u64);
    out.extend_from_slice(b"\r\n");
}

/// The header of a map of `n` pairs (RESP2: an array of `2n` elements).
pub fn map(out: &mut Vec<u8>, n: usize, proto: Proto) {
    match proto {
        Proto::V2 => array(out, 2 * n),
        Proto::V3 => {
            out.push(b'%');
            push_u64(out, n as u64);
            out.extend_from_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn encodings() {
        assert_eq!(s(|o| int(o, 0)), ":0\r\n");
        assert_eq!(s(|o| int(o, u64::MAX)), ":18446744073709551615\r\n");
        assert_eq!(s(|o| simple(o, "OK")), "+OK\r\n");
        assert_eq!(s(|o| error(o, "ERR a\r\nb")), "-ERR a  b\r\n");
        assert_eq!(s(|o| bulk(o, b"")), "$0\r\n\r\n");
        assert_eq!(s(|o| bulk_u64(o, 1234)), "$4\r\n1234\r\n");
        assert_eq!(s(|o| null(o, Proto::V2)), "$-1\r\n");
        assert_eq!(s(|o| null(o, Proto::V3)), "_\r\n");
        assert_eq!(s(|o| map(o, 2, Proto::V2)), "*4\r\n");
        assert_eq!(s(|o| map(o, 2, Proto::V3)), "%2\r\n");
    }
}
