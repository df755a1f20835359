//! What MariaDB stores in an integer column for a literal or a bound value,
//! exactly, so that an explicit id is observed (and routed) as the value the
//! row will hold, whatever form the application wrote it in.
//!
//! The rules (MariaDB 10.11, checked on the test bed by `tests/explicit_ids.rs`):
//! - an exact number (`33.5`, `30.0`, `'42.5'`, `'4.45e1'`, a DECIMAL
//!   parameter) rounds half away from zero (`Field_longlong::store` of a
//!   decimal; `my_strntoull10rnd` for strings, which reads the exponent
//!   exactly);
//! - an approximate number (`3.2e1`, FLOAT and DOUBLE parameters) rounds half
//!   to even (`rint`): `32.5e0` is stored as 32, `33.5e0` as 34;
//! - a hexadecimal or bit literal (`0x21`, `b'100011'`, `0b1`) is the
//!   unsigned integer of its bytes (more than 8 bytes: out of range);
//! - a string (`' 40'`, `'+41'`, `X'37'`, `_latin1'61'`, `N'64'`) is read as
//!   a number after leading white space, with an optional sign, and may end
//!   in spaces; anything else after the number is "data truncated" (an
//!   error in strict mode, the number's prefix otherwise), so such a string
//!   is left [`Converted::Unknown`] and the server's answer decides;
//! - `TRUE` and `FALSE` are 1 and 0.
//!
//! A value that converts to 0 makes MariaDB generate the id (unless
//! `NO_AUTO_VALUE_ON_ZERO`), as the literal `0` does. Values outside
//! `0..=i64::MAX` are not converted (out of range for a signed BIGINT, and
//! never an id a generator issues): they are [`Converted::Negative`] or
//! [`Converted::Unknown`].

use crate::protocol::stmt::{int_value, types, ParamType};

/// What a value becomes in an integer column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Converted {
    /// This non-negative integer, exactly.
    Int(u64),
    /// A negative integer: stored, never equal to a generated id; reported
    /// (as MariaDB reports it: the OK packet's last insert id is this value
    /// as an unsigned 64-bit number) when it is a statement's last explicit
    /// id.
    Negative(i64),
    /// Cannot be known before the server converts it (not a number, data
    /// truncated, out of range, an unknown character set).
    Unknown,
}

/// Character set introducers whose strings are ASCII-compatible bytes (a
/// number in them is its ASCII digits).
const ASCII_INTRODUCERS: &[&str] = &[
    "_binary",
    "_latin1",
    "_utf8",
    "_utf8mb3",
    "_utf8mb4",
    "_ascii",
    "_latin2",
    "_cp1250",
    "_cp1251",
    "_cp1252",
    "_swe7",
    "_dec8",
    "_hp8",
    "_koi8r",
    "_koi8u",
    "_greek",
    "_hebrew",
    "_latin5",
    "_latin7",
    "_cp850",
    "_cp852",
    "_cp866",
    "_armscii8",
    "_geostd8",
    "_keybcs2",
    "_macce",
    "_macroman",
    "_tis620",
];

/// Whether `word` (an identifier token's text) introduces a string whose
/// bytes read as ASCII digits: `N` or an ASCII-compatible `_charset`.
pub fn ascii_introducer(word: &str) -> bool {
    word.eq_ignore_ascii_case("N")
        || ASCII_INTRODUCERS
            .iter()
            .any(|c| c.eq_ignore_ascii_case(word))
}

fn from_i128(v: i128) -> Converted {
    if v < 0 {
        i64::try_from(v).map_or(Converted::Unknown, Converted::Negative)
    } else if v > i64::MAX as i128 {
        Converted::Unknown
    } else {
        Converted::Int(v as u64)
    }
}

/// An unquoted decimal number literal (`42`, `33.5`, `.5`, `3.2e1`): exact
/// without an exponent, a double with one. `negative`: a unary minus
/// stands before it.
pub fn number(text: &str, negative: bool) -> Converted {
    let b = text.as_bytes();
    if b.iter().any(|&c| c == b'e' || c == b'E') {
        let Ok(d) = text.parse::<f64>() else {
            return Converted::Unknown;
        };
        return double(if negative { -d } else { d });
    }
    match exact(b) {
        Some((v, _)) => from_i128(if negative { -v } else { v }),
        None => Converted::Unknown,
    }
}

/// A double stored into an integer column: rounded half to even.
pub fn double(d: f64) -> Converted {
    if !d.is_finite() {
        return Converted::Unknown;
    }
    let r = d.round_ties_even();
    if r == 0.0 {
        return Converted::Int(0);
    }
    if r < 0.0 {
        // -2^63 is the lowest double an i64 holds.
        if r < -9_223_372_036_854_775_808.0 {
            return Converted::Unknown;
        }
        return Converted::Negative(r as i64);
    }
    // 2^63 is the first double above i64::MAX.
    if r >= 9_223_372_036_854_775_808.0 {
        return Converted::Unknown;
    }
    Converted::Int(r as u64)
}

/// Digits with an optional fraction (no sign, no exponent), rounded half up:
/// the magnitude and the rest of the text after it.
fn exact(b: &[u8]) -> Option<(i128, &[u8])> {
    let mut i = 0;
    let mut v: i128 = 0;
    let mut digits = 0;
    while let Some(&c) = b.get(i).filter(|c| c.is_ascii_digit()) {
        v = v.checked_mul(10)?.checked_add(i128::from(c - b'0'))?;
        i += 1;
        digits += 1;
        if v > u64::MAX as i128 {
            return None;
        }
    }
    let mut round_up = false;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let mut first = true;
        while let Some(&c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            if first {
                round_up = c >= b'5';
                first = false;
            }
            digits += 1;
            i += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    Some((v + i128::from(round_up), &b[i..]))
}

/// A string's bytes read as an integer the way MariaDB stores a string in an
/// integer column (`my_strntoull10rnd`): leading white space, a sign,
/// digits, a fraction and an exponent, rounded half up, trailing spaces.
pub fn string(bytes: &[u8]) -> Converted {
    string_with(bytes, false)
}

/// [`string`], reading only the number at its start when anything else
/// follows (what a non-strict server stores, with a "data truncated"
/// warning; in strict mode the statement failed and stored nothing).
pub fn string_prefix(bytes: &[u8]) -> Converted {
    string_with(bytes, true)
}

fn string_with(bytes: &[u8], prefix: bool) -> Converted {
    let mut s = bytes;
    while let Some((&c, rest)) = s.split_first() {
        if matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
            s = rest;
        } else {
            break;
        }
    }
    let mut negative = false;
    if let Some((&c, rest)) = s.split_first() {
        if c == b'-' || c == b'+' {
            negative = c == b'-';
            s = rest;
        }
    }
    // Mantissa digits (integer and fraction) and the position of the point.
    let mut mantissa: Vec<u8> = Vec::new();
    let mut int_digits = 0usize;
    let mut i = 0;
    while let Some(&c) = s.get(i).filter(|c| c.is_ascii_digit()) {
        mantissa.push(c - b'0');
        int_digits += 1;
        i += 1;
    }
    if s.get(i) == Some(&b'.') {
        i += 1;
        while let Some(&c) = s.get(i).filter(|c| c.is_ascii_digit()) {
            mantissa.push(c - b'0');
            i += 1;
        }
    }
    if mantissa.is_empty() {
        return if prefix {
            Converted::Int(0)
        } else {
            Converted::Unknown
        };
    }
    let mut exp: i64 = 0;
    if matches!(s.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        let mut eneg = false;
        if let Some(&c) = s.get(j) {
            if c == b'-' || c == b'+' {
                eneg = c == b'-';
                j += 1;
            }
        }
        let start = j;
        while let Some(&c) = s.get(j).filter(|c| c.is_ascii_digit()) {
            exp = (exp * 10 + i64::from(c - b'0')).min(10_000);
            j += 1;
        }
        if j > start {
            if eneg {
                exp = -exp;
            }
            i = j;
        } else if !prefix {
            return Converted::Unknown;
        }
    }
    if !prefix && !s[i..].iter().all(|&c| c == b' ') {
        return Converted::Unknown;
    }
    // The decimal point moves by the exponent.
    let point = int_digits as i64 + exp;
    let mut v: i128 = 0;
    for k in 0..point.max(0) {
        let d = mantissa.get(k as usize).copied().unwrap_or(0);
        v = match v.checked_mul(10).and_then(|x| x.checked_add(i128::from(d))) {
            Some(x) if x <= u64::MAX as i128 => x,
            _ => return Converted::Unknown,
        };
    }
    let first_dropped = if point < 0 {
        0
    } else {
        mantissa.get(point as usize).copied().unwrap_or(0)
    };
    if first_dropped >= 5 {
        v += 1;
    }
    from_i128(if negative { -v } else { v })
}

/// A hexadecimal (`0x21`, `X'21'` is a string: see [`string`]) or bit
/// literal's digits as an integer: `radix` 16 or 2.
pub fn radix(digits: &str, radix: u32) -> Converted {
    let bits_per = if radix == 16 { 4 } else { 1 };
    // Leading zeros do not count towards the 8-byte limit of the value,
    // but MariaDB counts the literal's bytes: more than 8 is out of range.
    let bytes = (digits.len() * bits_per).div_ceil(8);
    if digits.is_empty() || bytes > 8 {
        return Converted::Unknown;
    }
    match u64::from_str_radix(digits, radix) {
        Ok(v) => from_i128(i128::from(v)),
        Err(_) => Converted::Unknown,
    }
}

/// The hexadecimal digits of `X'..'` as bytes (an even count), which
/// MariaDB stores in an integer column as the string of those bytes.
pub fn hex_string(digits: &str) -> Converted {
    if digits.len() % 2 != 0 {
        return Converted::Unknown;
    }
    let mut out = Vec::with_capacity(digits.len() / 2);
    for pair in digits.as_bytes().chunks(2) {
        let Some(s) = std::str::from_utf8(pair).ok() else {
            return Converted::Unknown;
        };
        match u8::from_str_radix(s, 16) {
            Ok(b) => out.push(b),
            Err(_) => return Converted::Unknown,
        }
    }
    string(&out)
}

/// A word token alone as a value: `TRUE`, `FALSE`, `0x..`, `0b..`.
pub fn word(w: &str) -> Converted {
    if w.eq_ignore_ascii_case("TRUE") {
        return Converted::Int(1);
    }
    if w.eq_ignore_ascii_case("FALSE") {
        return Converted::Int(0);
    }
    if let Some(d) = w.strip_prefix("0x") {
        return radix(d, 16);
    }
    if let Some(d) = w.strip_prefix("0b") {
        return radix(d, 2);
    }
    Converted::Unknown
}

/// A prefixed quoted literal, `prefix'content'`: `X'..'` (hex string),
/// `B'..'` (bit value), or an ASCII-compatible introducer (`_latin1'..'`,
/// `N'..'`). `content` is the text between the quotes, with no escapes.
pub fn prefixed(prefix: &str, content: &str) -> Converted {
    if prefix.eq_ignore_ascii_case("X") {
        hex_string(content)
    } else if prefix.eq_ignore_ascii_case("B") {
        radix(content, 2)
    } else if ascii_introducer(prefix) {
        string(content.as_bytes())
    } else {
        Converted::Unknown
    }
}

/// A bound DECIMAL/NEWDECIMAL parameter (its text).
pub fn decimal_text(text: &[u8]) -> Converted {
    let (neg, rest) = match text.split_first() {
        Some((b'-', r)) => (true, r),
        Some((b'+', r)) => (false, r),
        _ => (false, text),
    };
    match exact(rest) {
        Some((v, [])) => from_i128(if neg { -v } else { v }),
        _ => Converted::Unknown,
    }
}

/// A parameter bound in COM_STMT_EXECUTE (its binary value), as MariaDB
/// stores it in an integer column: integers as they are, FLOAT and DOUBLE
/// rounded half to even, DECIMAL half away from zero, strings and BLOBs as
/// strings ([`string`]). Dates and times: [`Converted::Unknown`].
pub fn bound(ty: ParamType, v: &[u8]) -> Converted {
    match ty[0] {
        types::TINY | types::SHORT | types::YEAR | types::LONG | types::INT24 | types::LONGLONG => {
            match int_value(ty, v) {
                Some(x) => from_i128(x),
                None => Converted::Unknown,
            }
        }
        types::FLOAT => match v.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()) {
            Some(b) => double(f64::from(f32::from_le_bytes(b))),
            None => Converted::Unknown,
        },
        types::DOUBLE => match v.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
            Some(b) => double(f64::from_le_bytes(b)),
            None => Converted::Unknown,
        },
        types::DECIMAL | types::NEWDECIMAL => decimal_text(v),
        // VARCHAR, the BLOBs, VAR_STRING, STRING.
        0x0f | types::TINY_BLOB..=types::STRING => string(v),
        _ => Converted::Unknown,
    }
}

/// A value a server returned as text in a column of type `ty` (a session
/// variable read back after the statement stored it): what storing that
/// value in an integer column gave (a string's leading number: the server
/// accepted the statement, so it was not strict about the rest).
pub fn text(ty: ParamType, v: &str) -> Converted {
    match ty[0] {
        types::TINY | types::SHORT | types::YEAR | types::LONG | types::INT24 | types::LONGLONG => {
            match v.parse::<i128>() {
                Ok(x) => from_i128(x),
                Err(_) => Converted::Unknown,
            }
        }
        types::FLOAT | types::DOUBLE => match v.parse::<f64>() {
            Ok(d) => double(d),
            Err(_) => Converted::Unknown,
        },
        types::DECIMAL | types::NEWDECIMAL => decimal_text(v.as_bytes()),
        0x0f | types::TINY_BLOB..=types::STRING => string_prefix(v.as_bytes()),
        _ => Converted::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::Converted::{Int, Negative, Unknown};
    use super::*;

    /// Each pair was stored so by MariaDB 10.11 in a BIGINT column.
    #[test]
    fn as_mariadb_stores_them() {
        assert_eq!(number("30.0", false), Int(30));
        assert_eq!(number("35.5", false), Int(36));
        assert_eq!(number("36.4", false), Int(36));
        assert_eq!(number("0.4", false), Int(0));
        assert_eq!(number("0.4", true), Int(0));
        assert_eq!(number("4.25e1", false), Int(42));
        assert_eq!(number("4.35e1", false), Int(44));
        assert_eq!(number("32.5e0", false), Int(32));
        assert_eq!(number("33.5e0", false), Int(34));
        assert_eq!(number("1e1", false), Int(10));
        assert_eq!(number("0e0", false), Int(0));
        assert_eq!(number("5", true), Negative(-5));
        assert_eq!(number("9223372036854775807.5", false), Unknown);
        assert_eq!(number("9223372036854775807", false), Int(i64::MAX as u64));
        assert_eq!(string(b" 40"), Int(40));
        assert_eq!(string(b"+41"), Int(41));
        assert_eq!(string(b"42.5"), Int(43));
        assert_eq!(string(b"4.45e1"), Int(45));
        assert_eq!(string(b"  47.5e0"), Int(48));
        assert_eq!(string(b"\t53"), Int(53));
        assert_eq!(string(b"\n54"), Int(54));
        assert_eq!(string(b"62 "), Int(62));
        assert_eq!(string(b"6.5e1"), Int(65));
        assert_eq!(string(b"66."), Int(66));
        assert_eq!(string(b".67e2"), Int(67));
        assert_eq!(string(b"5.5"), Int(6));
        assert_eq!(string(b"6.49999"), Int(6));
        assert_eq!(string(b"0"), Int(0));
        assert_eq!(string(b"-0"), Int(0));
        assert_eq!(string(b"-0.4"), Int(0));
        assert_eq!(string(b" 0"), Int(0));
        assert_eq!(string(b"63abc"), Unknown);
        assert_eq!(string(b"0x44"), Unknown);
        assert_eq!(string(b""), Unknown);
        assert_eq!(string(b"-5"), Negative(-5));
        assert_eq!(string(b"1e-1"), Int(0));
        assert_eq!(string(b"15e-1"), Int(2));
        assert_eq!(word("0x21"), Int(33));
        assert_eq!(word("0x0000000000000030"), Int(48));
        assert_eq!(word("0x010000000000000000"), Unknown);
        assert_eq!(word("0x00"), Int(0));
        assert_eq!(word("TRUE"), Int(1));
        assert_eq!(word("0b100011"), Int(35));
        assert_eq!(prefixed("b", "100011"), Int(35));
        assert_eq!(prefixed("X", "37"), Int(7));
        assert_eq!(prefixed("X", "22"), Unknown);
        assert_eq!(prefixed("_binary", "60"), Int(60));
        assert_eq!(prefixed("N", "64"), Int(64));
        assert_eq!(prefixed("_utf16", "64"), Unknown);
        assert_eq!(decimal_text(b"33.50"), Int(34));
        assert_eq!(decimal_text(b"-0.40"), Int(0));
        assert_eq!(decimal_text(b"-3"), Negative(-3));
        assert_eq!(double(0.4), Int(0));
        assert_eq!(double(2.5), Int(2));
        assert_eq!(double(-0.4), Int(0));
        assert_eq!(double(f64::NAN), Unknown);
        assert_eq!(string_prefix(b"77abc"), Int(77));
        assert_eq!(string_prefix(b" 7.5e1x"), Int(75));
        assert_eq!(string_prefix(b"1e"), Int(1));
        assert_eq!(string_prefix(b"abc"), Int(0));
        assert_eq!(text([types::VAR_STRING, 0], "900x"), Int(900));
        assert_eq!(text([types::DOUBLE, 0], "32.5"), Int(32));
        assert_eq!(text([types::NEWDECIMAL, 0], "32.5"), Int(33));
        assert_eq!(text([types::LONGLONG, 0], "-3"), Negative(-3));
    }

    #[test]
    fn bound_values() {
        let d = |x: f64| bound([types::DOUBLE, 0], &x.to_le_bytes());
        assert_eq!(d(1000.0), Int(1000));
        assert_eq!(d(32.5), Int(32));
        assert_eq!(d(-1.0), Negative(-1));
        let f = |x: f32| bound([types::FLOAT, 0], &x.to_le_bytes());
        assert_eq!(f(33.5), Int(34));
        assert_eq!(bound([types::NEWDECIMAL, 0], b"41.50"), Int(42));
        assert_eq!(bound([types::VAR_STRING, 0], b" +43"), Int(43));
        assert_eq!(bound([types::BLOB, 0], b"44"), Int(44));
        assert_eq!(
            bound(
                [types::LONGLONG, types::UNSIGNED_FLAG],
                &u64::MAX.to_le_bytes()
            ),
            Unknown
        );
        assert_eq!(bound([types::TINY, 0], &[0xff]), Negative(-1));
        assert_eq!(bound([types::DOUBLE, 0], &[1, 2]), Unknown);
        assert_eq!(bound([types::DATE, 0], &[0xe8, 7, 1, 2]), Unknown);
    }
}
