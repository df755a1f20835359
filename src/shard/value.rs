//! Column values as the merge compares them: decoded from a row's text or
//! binary form by the column's type ([`Kind`]), and ordered as MariaDB
//! orders them ([`compare`]).
//!
//! Strings compare as their column's collation does (`crate::collation`,
//! the same code that places string shard keys): the caller says which
//! collation each column has ([`Kind::of`]); the values arrive in the
//! character set the column definition names (the session's
//! `character_set_results`). The `binary` character set compares bytes; a
//! column whose collation is not known is `_bin` (the BINARY flag: bytes,
//! PAD SPACE) or cannot be ordered ([`Kind::Unknown`]): idgate refuses
//! rather than answer in another order than MariaDB.

use std::cmp::Ordering;

use super::decimal::Decimal;

/// Which protocol the rows are in: the binary one answers COM_STMT_EXECUTE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// COM_QUERY: values as length-encoded strings.
    Text,
    /// COM_STMT_EXECUTE: a NULL bitmap and values in their types' binary form.
    Binary,
}
use crate::collation::{self, Charset, Collation};
use crate::protocol::column::{flags, ColumnDef, BINARY_CHARSET};
use crate::protocol::stmt::{int_value, types};

/// How a column's values decode and compare, from its definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// TINYINT..BIGINT and YEAR; `ty` is the type code (its binary width).
    Int { ty: u8, unsigned: bool },
    /// DECIMAL: exact, from its text.
    Decimal,
    /// FLOAT and DOUBLE.
    Float,
    /// DATE, DATETIME, TIMESTAMP.
    DateTime,
    /// TIME: signed, may exceed 24 hours.
    Time,
    /// Bytes; `pad_space`: trailing spaces do not count (`_bin` collations).
    Bytes { pad_space: bool },
    /// Text in collation `coll`, sent in character set `cs`.
    Text {
        coll: &'static Collation,
        cs: Charset,
    },
    /// Text whose collation idgate does not know or reproduce: not orderable.
    Unknown,
}

/// A decoded value. Values of one column are always of one variant.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Int(i128),
    Decimal(Decimal<'a>),
    Float(f64),
    /// Year, month, day, hour, minute, second, microsecond.
    DateTime([u32; 7]),
    /// Signed microseconds.
    Time(i128),
    Bytes {
        bytes: &'a [u8],
        pad_space: bool,
    },
    Text {
        bytes: &'a [u8],
        coll: &'static Collation,
        cs: Charset,
    },
}

impl Kind {
    /// The kind of a column's values; `coll`: the collation MariaDB orders
    /// the column by, when known (strings only).
    pub fn of(def: &ColumnDef<'_>, coll: Option<&'static Collation>) -> Kind {
        use types::*;
        match def.column_type {
            TINY | SHORT | LONG | INT24 | LONGLONG | YEAR => Kind::Int {
                ty: def.column_type,
                unsigned: def.is_unsigned(),
            },
            DECIMAL | NEWDECIMAL => Kind::Decimal,
            FLOAT | DOUBLE => Kind::Float,
            DATE | DATETIME | TIMESTAMP => Kind::DateTime,
            TIME => Kind::Time,
            _ if def.charset == BINARY_CHARSET => Kind::Bytes { pad_space: false },
            _ => match (coll, collation::by_id(def.charset)) {
                (Some(coll), Some(sent)) => Kind::Text {
                    coll,
                    cs: sent.charset,
                },
                _ if def.flags & flags::BINARY != 0 => Kind::Bytes { pad_space: true },
                _ => Kind::Unknown,
            },
        }
    }

    /// Decodes one non-NULL value (a [`crate::protocol::row::Cell`]'s bytes).
    pub fn decode<'a>(self, cell: &'a [u8], protocol: Protocol) -> Result<Value<'a>, &'static str> {
        let text = || std::str::from_utf8(cell).map_err(|_| "number is not ASCII");
        Ok(match (self, protocol) {
            (Kind::Int { .. }, Protocol::Text) => {
                Value::Int(text()?.parse().map_err(|_| "bad integer")?)
            }
            (Kind::Int { ty, unsigned }, Protocol::Binary) => {
                let flag = if unsigned { types::UNSIGNED_FLAG } else { 0 };
                Value::Int(int_value([ty, flag], cell).ok_or("bad integer")?)
            }
            (Kind::Decimal, _) => Value::Decimal(Decimal::parse(cell).ok_or("bad decimal")?),
            (Kind::Float, Protocol::Text) => {
                Value::Float(text()?.parse().map_err(|_| "bad floating-point number")?)
            }
            (Kind::Float, Protocol::Binary) => Value::Float(match *cell {
                [a, b, c, d] => f32::from_le_bytes([a, b, c, d]).into(),
                [a, b, c, d, e, f, g, h] => f64::from_le_bytes([a, b, c, d, e, f, g, h]),
                _ => return Err("bad floating-point number"),
            }),
            (Kind::DateTime, Protocol::Text) => {
                Value::DateTime(text_datetime(cell).ok_or("bad date or time")?)
            }
            (Kind::DateTime, Protocol::Binary) => {
                Value::DateTime(binary_datetime(cell).ok_or("bad date or time")?)
            }
            (Kind::Time, Protocol::Text) => Value::Time(text_time(cell).ok_or("bad time")?),
            (Kind::Time, Protocol::Binary) => Value::Time(binary_time(cell).ok_or("bad time")?),
            (Kind::Bytes { pad_space }, _) => Value::Bytes {
                bytes: cell,
                pad_space,
            },
            (Kind::Text { coll, cs }, _) => Value::Text {
                bytes: cell,
                coll,
                cs,
            },
            (Kind::Unknown, _) => return Err(UNKNOWN_COLLATION),
        })
    }
}

/// Why a string column of unknown collation cannot be ordered.
const UNKNOWN_COLLATION: &str = "its collation is not one idgate knows for this column (an expression, or a collation idgate does not reproduce), so idgate cannot order it as MariaDB does; order by a plain column of the table";

/// Why ORDER BY (or MIN/MAX) cannot use a column of `kind`, if it cannot:
/// MariaDB sorts ENUM and SET columns by their internal number, which the
/// values sent do not carry; a string of unknown collation.
pub fn unorderable(def: &ColumnDef<'_>, kind: Kind) -> Option<&'static str> {
    let enum_or_set = def.flags & (flags::ENUM | flags::SET) != 0
        || matches!(def.column_type, types::ENUM | types::SET);
    if enum_or_set {
        return Some(
            "ENUM and SET columns sort by their member number, which the shards' rows do not carry",
        );
    }
    (kind == Kind::Unknown).then_some(UNKNOWN_COLLATION)
}

/// Orders two values of one column as MariaDB does (ascending).
pub fn compare(a: &Value<'_>, b: &Value<'_>) -> Ordering {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::Decimal(x), Value::Decimal(y)) => x.cmp(y),
        // -0.0 == 0.0; MariaDB stores no NaN.
        (Value::Float(x), Value::Float(y)) if x == y => Ordering::Equal,
        (Value::Float(x), Value::Float(y)) => x.total_cmp(y),
        (Value::DateTime(x), Value::DateTime(y)) => x.cmp(y),
        (Value::Time(x), Value::Time(y)) => x.cmp(y),
        (
            Value::Bytes {
                bytes: x,
                pad_space: false,
            },
            Value::Bytes { bytes: y, .. },
        ) => x.cmp(y),
        (Value::Bytes { bytes: x, .. }, Value::Bytes { bytes: y, .. }) => {
            collation::cmp_padded(x.iter().copied(), y.iter().copied(), b' ')
        }
        (
            Value::Text {
                bytes: x,
                coll,
                cs: xcs,
            },
            Value::Text {
                bytes: y, cs: ycs, ..
            },
        ) => coll.compare(x, *xcs, y, *ycs),
        // Different kinds never meet in one column; any fixed order will do.
        _ => rank(a).cmp(&rank(b)),
    }
}

/// [`compare`] with NULL before every value, as MariaDB sorts NULL in ASC.
pub fn compare_nullable(a: Option<&Value<'_>>, b: Option<&Value<'_>>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => compare(x, y),
        (x, y) => x.is_some().cmp(&y.is_some()),
    }
}

fn rank(v: &Value<'_>) -> u8 {
    match v {
        Value::Int(_) => 0,
        Value::Decimal(_) => 1,
        Value::Float(_) => 2,
        Value::DateTime(_) => 3,
        Value::Time(_) => 4,
        Value::Bytes { .. } => 5,
        Value::Text { .. } => 6,
    }
}

/// The digits of `s` as a number; `None` when empty, not all digits, or too long.
fn number(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Fraction digits as microseconds (`5` -> 500000); more than 6 digits are cut.
fn micros(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut d = [b'0'; 6];
    for (dst, src) in d.iter_mut().zip(s) {
        *dst = *src;
    }
    number(&d)
}

/// `YYYY-MM-DD[ HH:MM:SS[.ffffff]]`.
fn text_datetime(s: &[u8]) -> Option<[u32; 7]> {
    let (date, time) = match s.iter().position(|&b| b == b' ') {
        Some(i) => (s.get(..i)?, Some(s.get(i + 1..)?)),
        None => (s, None),
    };
    let mut out = [0u32; 7];
    let mut parts = date.split(|&b| b == b'-');
    for slot in out.iter_mut().take(3) {
        *slot = number(parts.next()?)?;
    }
    if parts.next().is_some() {
        return None;
    }
    if let Some(time) = time {
        let (hms, frac) = split_fraction(time)?;
        let mut parts = hms.split(|&b| b == b':');
        for slot in out.iter_mut().skip(3).take(3) {
            *slot = number(parts.next()?)?;
        }
        if parts.next().is_some() {
            return None;
        }
        out[6] = frac;
    }
    Some(out)
}

/// `[-]H+:MM:SS[.ffffff]` as signed microseconds.
fn text_time(s: &[u8]) -> Option<i128> {
    let (negative, s) = match s.split_first() {
        Some((b'-', r)) => (true, r),
        _ => (false, s),
    };
    let (hms, frac) = split_fraction(s)?;
    let mut parts = hms.split(|&b| b == b':');
    let mut total: i128 = 0;
    for _ in 0..3 {
        total = total * 60 + i128::from(number(parts.next()?)?);
    }
    if parts.next().is_some() {
        return None;
    }
    let v = total * 1_000_000 + i128::from(frac);
    Some(if negative { -v } else { v })
}

/// Splits `x.ffffff` into `x` and microseconds (0 without a fraction).
fn split_fraction(s: &[u8]) -> Option<(&[u8], u32)> {
    match s.iter().position(|&b| b == b'.') {
        Some(i) => Some((s.get(..i)?, micros(s.get(i + 1..)?)?)),
        None => Some((s, 0)),
    }
}

/// Binary DATE/DATETIME/TIMESTAMP: 0, 4, 7 or 11 bytes.
fn binary_datetime(b: &[u8]) -> Option<[u32; 7]> {
    if !matches!(b.len(), 0 | 4 | 7 | 11) {
        return None;
    }
    let mut out = [0u32; 7];
    if let [y0, y1, mo, d, rest @ ..] = b {
        out[0] = u16::from_le_bytes([*y0, *y1]).into();
        out[1] = (*mo).into();
        out[2] = (*d).into();
        if let [h, mi, s, rest @ ..] = rest {
            out[3] = (*h).into();
            out[4] = (*mi).into();
            out[5] = (*s).into();
            if let [a, b, c, d] = rest {
                out[6] = u32::from_le_bytes([*a, *b, *c, *d]);
            }
        }
    }
    Some(out)
}

/// Binary TIME: 0, 8 or 12 bytes, as signed microseconds.
fn binary_time(b: &[u8]) -> Option<i128> {
    match b {
        [] => Some(0),
        [neg, d0, d1, d2, d3, h, mi, s, rest @ ..] => {
            let micro = match rest {
                [] => 0,
                [a, b, c, d] => u32::from_le_bytes([*a, *b, *c, *d]),
                _ => return None,
            };
            let days = i128::from(u32::from_le_bytes([*d0, *d1, *d2, *d3]));
            let secs = ((days * 24 + i128::from(*h)) * 60 + i128::from(*mi)) * 60 + i128::from(*s);
            let v = secs * 1_000_000 + i128::from(micro);
            Some(if *neg != 0 { -v } else { v })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn def(column_type: u8, charset: u16, flags: u16) -> ColumnDef<'static> {
        ColumnDef {
            name: b"c",
            org_name: b"c",
            charset,
            length: 10,
            column_type,
            flags,
            decimals: 0,
        }
    }

    fn text_kind() -> Kind {
        Kind::of(&def(0xfd, 45, 0), collation::by_name("utf8mb4_general_ci"))
    }

    fn cmp(kind: Kind, protocol: Protocol, a: &[u8], b: &[u8]) -> Ordering {
        compare(
            &kind.decode(a, protocol).unwrap(),
            &kind.decode(b, protocol).unwrap(),
        )
    }

    /// Checks that `values` are strictly ascending under `kind`.
    fn ascending(kind: Kind, protocol: Protocol, values: &[&[u8]]) {
        for (i, a) in values.iter().enumerate() {
            for (j, b) in values.iter().enumerate() {
                assert_eq!(
                    cmp(kind, protocol, a, b),
                    i.cmp(&j),
                    "{:?} vs {:?}",
                    String::from_utf8_lossy(a),
                    String::from_utf8_lossy(b)
                );
            }
        }
    }

    #[test]
    fn kinds_follow_type_charset_and_flags() {
        assert_eq!(
            Kind::of(&def(types::LONGLONG, 63, flags::UNSIGNED), None),
            Kind::Int {
                ty: types::LONGLONG,
                unsigned: true
            }
        );
        assert_eq!(
            Kind::of(&def(types::NEWDECIMAL, 63, 0), None),
            Kind::Decimal
        );
        assert_eq!(Kind::of(&def(types::TIME, 63, 0), None), Kind::Time);
        assert_eq!(
            Kind::of(&def(0xfc, 63, flags::BINARY), None),
            Kind::Bytes { pad_space: false }
        );
        assert_eq!(
            Kind::of(&def(0xfd, 33, flags::BINARY), None),
            Kind::Bytes { pad_space: true }
        );
        assert!(
            matches!(text_kind(), Kind::Text { coll, cs: Charset::Utf8mb4 } if coll.name == "utf8mb4_general_ci")
        );
        assert!(unorderable(&def(0xfe, 33, flags::ENUM), text_kind()).is_some());
        assert!(unorderable(&def(0xfe, 33, 0), text_kind()).is_none());
        assert!(unorderable(&def(0xfe, 33, 0), Kind::Unknown).is_some());
    }

    #[test]
    fn integers_signed_and_unsigned_in_both_protocols() {
        let signed = Kind::of(&def(types::LONGLONG, 63, 0), None);
        ascending(
            signed,
            Protocol::Text,
            &[b"-9223372036854775808", b"-1", b"0", b"7"],
        );
        let unsigned = Kind::of(&def(types::LONGLONG, 63, flags::UNSIGNED), None);
        ascending(
            unsigned,
            Protocol::Binary,
            &[
                &1u64.to_le_bytes(),
                &(1u64 << 63).to_le_bytes(),
                &u64::MAX.to_le_bytes(),
            ],
        );
        let tiny = Kind::of(&def(types::TINY, 63, 0), None);
        ascending(tiny, Protocol::Binary, &[&[0x80], &[0xff], &[0], &[0x7f]]);
        assert!(signed.decode(b"1.5", Protocol::Text).is_err());
        assert!(signed.decode(b"", Protocol::Text).is_err());
        assert!(signed.decode(&[1, 2], Protocol::Binary).is_err());
    }

    #[test]
    fn floats_decimals_and_temporals() {
        let dbl = Kind::of(&def(types::DOUBLE, 63, 0), None);
        ascending(
            dbl,
            Protocol::Text,
            &[b"-1e300", b"-2.5", b"0", b"1e-7", b"3", b"1.5e300"],
        );
        assert_eq!(cmp(dbl, Protocol::Text, b"-0", b"0"), Ordering::Equal);
        let flt = Kind::of(&def(types::FLOAT, 63, 0), None);
        ascending(
            flt,
            Protocol::Binary,
            &[&(-1.5f32).to_le_bytes(), &0.25f32.to_le_bytes()],
        );
        assert!(dbl.decode(&[0; 5], Protocol::Binary).is_err());
        assert!(dbl.decode(b"abc", Protocol::Text).is_err());

        let dec = Kind::of(&def(types::NEWDECIMAL, 63, 0), None);
        ascending(
            dec,
            Protocol::Binary,
            &[b"-10.5", b"-0.001", b"0.000", b"0.1", b"2"],
        );

        let dt = Kind::of(&def(types::DATETIME, 63, 0), None);
        ascending(
            dt,
            Protocol::Text,
            &[
                b"0000-00-00 00:00:00",
                b"2024-01-31",
                b"2024-01-31 00:00:00.000001",
                b"2024-01-31 09:05:00.5",
                b"2024-01-31 10:00:00",
                b"2024-02-01 00:00:00",
            ],
        );
        ascending(
            dt,
            Protocol::Binary,
            &[
                &[],
                &[0xe8, 0x07, 1, 31],
                &[0xe8, 0x07, 1, 31, 0, 0, 0, 1, 0, 0, 0],
                &[0xe8, 0x07, 1, 31, 10, 0, 0],
            ],
        );
        for bad in [
            &b"2024-01"[..],
            b"2024-01-01-01",
            b"2024-01-01 10:00",
            b"x",
            b"2024-01-01 1:2:3.",
        ] {
            assert!(dt.decode(bad, Protocol::Text).is_err(), "{bad:?}");
        }
        assert!(dt.decode(&[1, 2, 3], Protocol::Binary).is_err());

        let time = Kind::of(&def(types::TIME, 63, 0), None);
        ascending(
            time,
            Protocol::Text,
            &[
                b"-838:59:59",
                b"-01:00:00",
                b"-00:00:00.5",
                b"00:00:00",
                b"23:59:59",
                b"24:00:00",
                b"100:00:00.000001",
            ],
        );
        // -1 day 2 hours < -1 hour < 0 < 25 hours (1 day 1 hour), and 100 hours in text equals 4 days 4 hours in binary.
        ascending(
            time,
            Protocol::Binary,
            &[
                &[1, 1, 0, 0, 0, 2, 0, 0],
                &[1, 0, 0, 0, 0, 1, 0, 0],
                &[],
                &[0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
            ],
        );
        assert!(matches!(
            (time.decode(b"100:00:00", Protocol::Text), time.decode(&[0, 4, 0, 0, 0, 4, 0, 0], Protocol::Binary)),
            (Ok(Value::Time(a)), Ok(Value::Time(b))) if a == b
        ));
        assert!(time.decode(&[0; 9], Protocol::Binary).is_err());
        assert!(time.decode(b"1:2", Protocol::Text).is_err());
    }

    #[test]
    fn strings_binary_pad_space_and_case_insensitive() {
        let bin = Kind::Bytes { pad_space: false };
        ascending(bin, Protocol::Text, &[b"", b"A", b"a", b"a ", b"ab"]);
        let bin_pad = Kind::Bytes { pad_space: true };
        assert_eq!(cmp(bin_pad, Protocol::Text, b"a", b"a  "), Ordering::Equal);
        // PAD SPACE: "a" is "a " against "a\t", and ' ' > '\t'.
        assert_eq!(
            cmp(bin_pad, Protocol::Text, b"a", b"a\t"),
            Ordering::Greater
        );
        assert_eq!(cmp(bin_pad, Protocol::Text, b"A", b"a"), Ordering::Less);

        let ci = text_kind();
        assert_eq!(
            cmp(ci, Protocol::Text, b"Hello", b"hELLO "),
            Ordering::Equal
        );
        // Uppercase folding, as general_ci: 'a' (as 'A', 0x41) sorts before '_' (0x5f).
        ascending(
            ci,
            Protocol::Text,
            &[b"", b"0", b"9", b"a", b"B", b"c_", b"C_A", b"_"],
        );
        assert_eq!(
            cmp(
                ci,
                Protocol::Binary,
                "привет".as_bytes(),
                "ПРИВЕТ".as_bytes()
            ),
            Ordering::Equal
        );
        assert_eq!(
            cmp(ci, Protocol::Text, "ÀB".as_bytes(), "àb".as_bytes()),
            Ordering::Equal
        );
        // general_ci folds accents too.
        assert_eq!(
            cmp(
                ci,
                Protocol::Text,
                "Éclair".as_bytes(),
                "eclair ".as_bytes()
            ),
            Ordering::Equal
        );
        // A column of unknown collation does not decode.
        assert!(Kind::of(&def(0xfd, 45, 0), None)
            .decode(b"a", Protocol::Text)
            .is_err());
        assert_eq!(
            Kind::of(&def(0xfd, 45, flags::BINARY), None),
            Kind::Bytes { pad_space: true }
        );
    }

    #[test]
    fn nulls_sort_first() {
        let v = Value::Int(-5);
        assert_eq!(compare_nullable(None, Some(&v)), Ordering::Less);
        assert_eq!(compare_nullable(Some(&v), None), Ordering::Greater);
        assert_eq!(compare_nullable(None, None), Ordering::Equal);
    }

    fn any_kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Int {
                ty: types::LONGLONG,
                unsigned: false
            }),
            Just(Kind::Int {
                ty: types::TINY,
                unsigned: true
            }),
            Just(Kind::Decimal),
            Just(Kind::Float),
            Just(Kind::DateTime),
            Just(Kind::Time),
            Just(Kind::Bytes { pad_space: true }),
            Just(text_kind()),
            Just(Kind::Unknown),
        ]
    }

    proptest! {
        #[test]
        fn decoding_garbage_never_panics(
            kind in any_kind(),
            binary in any::<bool>(),
            bytes in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let protocol = if binary { Protocol::Binary } else { Protocol::Text };
            if let Ok(v) = kind.decode(&bytes, protocol) {
                prop_assert_eq!(compare(&v, &v), Ordering::Equal);
            }
        }

        #[test]
        fn text_comparison_is_a_total_order(
            mut words in proptest::collection::vec("[a-cA-C_ \\t]{0,4}", 1..8),
        ) {
            let kind = text_kind();
            let c = |a: &String, b: &String| cmp(kind, Protocol::Text, a.as_bytes(), b.as_bytes());
            words.sort_by(c);
            // Antisymmetric, and transitive: every earlier word is <= every later one.
            for (i, a) in words.iter().enumerate() {
                for b in &words[i..] {
                    prop_assert_ne!(c(a, b), Ordering::Greater);
                    prop_assert_eq!(c(a, b), c(b, a).reverse());
                }
            }
        }
    }
}
