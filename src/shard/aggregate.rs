//! One aggregate column of a SELECT without GROUP BY, combined over the
//! shards' one-row replies.
//!
//! - `COUNT` and `SUM` add the shards' values, skipping NULLs (NULL when all
//!   are NULL): exactly for integer and DECIMAL columns (MariaDB returns
//!   `SUM` of integers as DECIMAL), in `f64` for FLOAT and DOUBLE. A sum that
//!   no longer fits the column's type is an error, not a wrapped value.
//! - `MIN` and `MAX` pick one shard's value (the first of equal ones) by
//!   `value::compare`, skipping NULLs, and send its bytes unchanged.
//! - `First` (a constant or plain column) takes shard 0's value.
//!
//! A sum is encoded as the column's type is in the protocol at hand: decimal
//! text, or in the binary protocol the integer's width or the float's
//! IEEE bytes. Floating-point sums are written as the shortest text that
//! reads back the same `f64`, in exponent form outside 1e-5..1e15 (MariaDB
//! writes `%g`-like text: clients read both alike). Adding per-shard partial
//! sums rounds differently from one server adding every row, so a FLOAT or
//! DOUBLE sum can differ from the unsharded one in its last digits.

use std::borrow::Cow;
use std::cmp::Ordering;

use super::decimal::{self, Decimal};
use super::value::{compare, Kind, Protocol, Value};

/// How one select-list column combines across shards when the query has
/// aggregates and no GROUP BY (each shard returns one row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    /// `COUNT(...)`: summed.
    Count,
    /// `SUM(...)`: summed (exactly, for integers and decimals); NULLs skipped.
    Sum,
    /// `MIN(...)`.
    Min,
    /// `MAX(...)`.
    Max,
    /// Not an aggregate (a constant): the first shard's value.
    First,
}
use crate::protocol::stmt::types;

/// One shard's value of the column, decoded and as sent; `None` for NULL.
pub type Input<'a> = Option<(Value<'a>, &'a [u8])>;

/// Why a column cannot be combined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CombineError {
    /// The sum does not fit the column's type.
    Overflow,
    /// The column's type cannot be summed.
    Unsupported(&'static str),
}

/// The client's value for one column: `inputs[i]` is shard i's. Borrowed
/// when one shard's value is the answer, built when it is a sum.
pub fn combine<'a>(
    agg: Agg,
    kind: Kind,
    column_type: u8,
    protocol: Protocol,
    inputs: &[Input<'a>],
) -> Result<Option<Cow<'a, [u8]>>, CombineError> {
    let values = inputs.iter().flatten();
    Ok(match agg {
        Agg::First => inputs.first().copied().flatten().map(|(_, b)| b.into()),
        Agg::Min => pick(values, Ordering::Less).map(Cow::Borrowed),
        Agg::Max => pick(values, Ordering::Greater).map(Cow::Borrowed),
        Agg::Count | Agg::Sum => sum(kind, column_type, protocol, values.map(|(v, _)| v))?,
    })
}

/// The bytes of the value that is `wanted` against all others (first wins ties).
fn pick<'x, 'a: 'x>(
    values: impl Iterator<Item = &'x (Value<'a>, &'a [u8])>,
    wanted: Ordering,
) -> Option<&'a [u8]> {
    let mut best: Option<&(Value<'a>, &'a [u8])> = None;
    for v in values {
        if best.is_none_or(|b| compare(&v.0, &b.0) == wanted) {
            best = Some(v);
        }
    }
    best.map(|(_, b)| *b)
}

fn sum<'x, 'a: 'x>(
    kind: Kind,
    column_type: u8,
    protocol: Protocol,
    values: impl Iterator<Item = &'x Value<'a>>,
) -> Result<Option<Cow<'a, [u8]>>, CombineError> {
    let other = CombineError::Unsupported("a value of another type than its column");
    let bytes = match kind {
        Kind::Int { ty, unsigned } => {
            let mut total: Option<i128> = None;
            for v in values {
                let Value::Int(x) = v else { return Err(other) };
                total = Some(
                    total
                        .unwrap_or(0)
                        .checked_add(*x)
                        .ok_or(CombineError::Overflow)?,
                );
            }
            total
                .map(|t| encode_int(t, ty, unsigned, protocol))
                .transpose()?
        }
        Kind::Decimal => {
            let mut total: Option<String> = None;
            for v in values {
                let Value::Decimal(x) = v else {
                    return Err(other);
                };
                let so_far = match &total {
                    Some(t) => Decimal::parse(t.as_bytes()).ok_or(other.clone())?,
                    None => Decimal::ZERO,
                };
                total = Some(decimal::add(&so_far, x));
            }
            total.map(String::into_bytes)
        }
        Kind::Float => {
            let mut total: Option<f64> = None;
            for v in values {
                let Value::Float(x) = v else {
                    return Err(other);
                };
                total = Some(total.unwrap_or(0.0) + x);
            }
            total.map(|t| encode_float(t, column_type == types::FLOAT, protocol))
        }
        Kind::DateTime | Kind::Time | Kind::Bytes { .. } | Kind::Text { .. } | Kind::Unknown => {
            return Err(CombineError::Unsupported(
                "COUNT or SUM over a column that is not a number",
            ))
        }
    };
    Ok(bytes.map(Cow::Owned))
}

/// An integer in the column's encoding, if it fits the column's type.
fn encode_int(
    v: i128,
    ty: u8,
    unsigned: bool,
    protocol: Protocol,
) -> Result<Vec<u8>, CombineError> {
    let width: u32 = match ty {
        types::TINY => 1,
        types::SHORT | types::YEAR => 2,
        types::LONG | types::INT24 => 4,
        _ => 8,
    };
    let bits = 8 * width;
    let (min, max) = if unsigned {
        (0, (1i128 << bits) - 1)
    } else {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    };
    if v < min || v > max {
        return Err(CombineError::Overflow);
    }
    Ok(match protocol {
        Protocol::Text => v.to_string().into_bytes(),
        Protocol::Binary => v.to_le_bytes()[..width as usize].to_vec(),
    })
}

/// A float sum in the column's encoding (FLOAT or DOUBLE).
fn encode_float(v: f64, single: bool, protocol: Protocol) -> Vec<u8> {
    match (protocol, single) {
        (Protocol::Binary, true) => (v as f32).to_le_bytes().to_vec(),
        (Protocol::Binary, false) => v.to_le_bytes().to_vec(),
        (Protocol::Text, single) => {
            let exponent = if v == 0.0 {
                0.0
            } else {
                v.abs().log10().floor()
            };
            let plain = (-5.0..15.0).contains(&exponent);
            match (single, plain) {
                (true, true) => format!("{}", v as f32),
                (true, false) => format!("{:e}", v as f32),
                (false, true) => format!("{v}"),
                (false, false) => format!("{v:e}"),
            }
            .into_bytes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_inputs<'a>(kind: Kind, cells: &[Option<&'a str>]) -> Vec<Input<'a>> {
        cells
            .iter()
            .map(|c| {
                c.map(|s| {
                    (
                        kind.decode(s.as_bytes(), Protocol::Text).unwrap(),
                        s.as_bytes(),
                    )
                })
            })
            .collect()
    }

    fn text_result(agg: Agg, kind: Kind, ty: u8, cells: &[Option<&str>]) -> Option<String> {
        combine(agg, kind, ty, Protocol::Text, &text_inputs(kind, cells))
            .unwrap()
            .map(|c| String::from_utf8(c.into_owned()).unwrap())
    }

    const BIGINT: Kind = Kind::Int {
        ty: types::LONGLONG,
        unsigned: false,
    };

    #[test]
    fn sums_skip_nulls_and_are_null_only_when_all_are() {
        let dec = Kind::Decimal;
        let ty = types::NEWDECIMAL;
        assert_eq!(
            text_result(Agg::Sum, dec, ty, &[Some("1.250"), None, Some("-0.500")]).as_deref(),
            Some("0.750")
        );
        assert_eq!(text_result(Agg::Sum, dec, ty, &[None, None]), None);
        assert_eq!(
            text_result(
                Agg::Sum,
                dec,
                ty,
                &[None, Some("99999999999999999999999999.5")]
            )
            .as_deref(),
            Some("99999999999999999999999999.5")
        );
        assert_eq!(
            text_result(
                Agg::Count,
                BIGINT,
                types::LONGLONG,
                &[Some("3"), Some("0"), Some("4")]
            )
            .as_deref(),
            Some("7")
        );
        let dbl = Kind::Float;
        assert_eq!(
            text_result(
                Agg::Sum,
                dbl,
                types::DOUBLE,
                &[Some("1.5"), None, Some("2.25")]
            )
            .as_deref(),
            Some("3.75")
        );
        assert_eq!(
            text_result(Agg::Sum, dbl, types::DOUBLE, &[Some("1e20"), Some("1e20")]).as_deref(),
            Some("2e20")
        );
    }

    #[test]
    fn integer_sums_that_leave_the_type_are_errors() {
        let tiny = Kind::Int {
            ty: types::TINY,
            unsigned: false,
        };
        let inputs = text_inputs(tiny, &[Some("100"), Some("27")]);
        assert_eq!(
            combine(Agg::Sum, tiny, types::TINY, Protocol::Binary, &inputs).unwrap(),
            Some(Cow::Owned(vec![127]))
        );
        let inputs = text_inputs(tiny, &[Some("100"), Some("28")]);
        assert_eq!(
            combine(Agg::Sum, tiny, types::TINY, Protocol::Text, &inputs),
            Err(CombineError::Overflow)
        );
        let inputs = text_inputs(BIGINT, &[Some("9223372036854775807"), Some("1")]);
        assert_eq!(
            combine(
                Agg::Count,
                BIGINT,
                types::LONGLONG,
                Protocol::Binary,
                &inputs
            ),
            Err(CombineError::Overflow)
        );
        let text = ci_kind();
        let inputs = text_inputs(text, &[Some("a")]);
        assert!(matches!(
            combine(Agg::Sum, text, 0xfd, Protocol::Text, &inputs),
            Err(CombineError::Unsupported(_))
        ));
    }

    fn ci_kind() -> Kind {
        Kind::Text {
            coll: crate::collation::by_name("utf8mb4_general_ci").unwrap(),
            cs: crate::collation::Charset::Utf8mb4,
        }
    }

    #[test]
    fn min_max_pick_a_shards_bytes_and_first_wins_ties() {
        let ci = ci_kind();
        let cells = [None, Some("b"), Some("A"), Some("a"), Some("B"), None];
        assert_eq!(
            text_result(Agg::Min, ci, 0xfd, &cells).as_deref(),
            Some("A")
        );
        assert_eq!(
            text_result(Agg::Max, ci, 0xfd, &cells).as_deref(),
            Some("b")
        );
        assert_eq!(text_result(Agg::Max, ci, 0xfd, &[None, None]), None);
        assert_eq!(text_result(Agg::First, ci, 0xfd, &[None, Some("x")]), None);
        assert_eq!(
            text_result(Agg::First, ci, 0xfd, &[Some("y"), Some("x")]).as_deref(),
            Some("y")
        );
        let dec = Kind::Decimal;
        let cells = [Some("10.0"), Some("9.99"), Some("-3")];
        assert_eq!(
            text_result(Agg::Max, dec, 0xf6, &cells).as_deref(),
            Some("10.0")
        );
        assert_eq!(
            text_result(Agg::Min, dec, 0xf6, &cells).as_deref(),
            Some("-3")
        );
    }

    #[test]
    fn binary_float_sums_keep_the_column_width() {
        let f = Kind::Float;
        let a = 1.5f32.to_le_bytes();
        let b = 2.25f32.to_le_bytes();
        let inputs: Vec<Input> = [&a[..], &b[..]]
            .iter()
            .map(|c| Some((f.decode(c, Protocol::Binary).unwrap(), *c)))
            .collect();
        assert_eq!(
            combine(Agg::Sum, f, types::FLOAT, Protocol::Binary, &inputs).unwrap(),
            Some(Cow::Owned(3.75f32.to_le_bytes().to_vec()))
        );
    }
}
