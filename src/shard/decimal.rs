//! Exact decimal numbers in the text form MariaDB sends DECIMAL values in
//! (both protocols): `-123.450`. Compared and added digit by digit, never
//! through `f64`, so `SUM` over shards is exact at any precision.

use std::cmp::Ordering;

/// A decimal number borrowed from its text.
#[derive(Debug, Clone, Copy)]
pub struct Decimal<'a> {
    /// Never set for zero (`-0.00` is zero).
    negative: bool,
    /// Integer digits without leading zeros (empty for zero).
    int: &'a [u8],
    /// Fraction digits as sent: their number is the scale.
    frac: &'a [u8],
}

impl<'a> Decimal<'a> {
    /// `0`, of scale 0.
    pub const ZERO: Decimal<'static> = Decimal {
        negative: false,
        int: b"",
        frac: b"",
    };

    /// Parses `[-+]digits[.digits]` (at least one digit). `None` for
    /// anything else.
    pub fn parse(s: &'a [u8]) -> Option<Self> {
        let (negative, rest) = match s.split_first() {
            Some((b'-', r)) => (true, r),
            Some((b'+', r)) => (false, r),
            _ => (false, s),
        };
        let (int, frac) = match rest.iter().position(|&b| b == b'.') {
            Some(i) => (rest.get(..i)?, rest.get(i + 1..)?),
            None => (rest, &[][..]),
        };
        if int.is_empty() && frac.is_empty() || !int.iter().chain(frac).all(u8::is_ascii_digit) {
            return None;
        }
        let zeros = int.iter().take_while(|&&d| d == b'0').count();
        let int = int.get(zeros..)?;
        let zero = int.is_empty() && frac.iter().all(|&d| d == b'0');
        Some(Decimal {
            negative: negative && !zero,
            int,
            frac,
        })
    }

    /// Digits after the point.
    pub fn scale(&self) -> usize {
        self.frac.len()
    }

    /// Compares absolute values.
    fn cmp_magnitude(&self, other: &Self) -> Ordering {
        let trim = |f: &'a [u8]| {
            let n = f.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
            f.get(..n).unwrap_or(f)
        };
        self.int
            .len()
            .cmp(&other.int.len())
            .then_with(|| self.int.cmp(other.int))
            .then_with(|| trim(self.frac).cmp(trim(other.frac)))
    }

    /// The digits as numbers, least significant first, with `scale`
    /// fraction digits (`scale >= self.scale()`).
    fn digits(&self, scale: usize) -> Vec<u8> {
        let pad = scale.saturating_sub(self.frac.len());
        std::iter::repeat_n(0, pad)
            .chain(self.frac.iter().rev().map(|d| d - b'0'))
            .chain(self.int.iter().rev().map(|d| d - b'0'))
            .collect()
    }
}

impl Ord for Decimal<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.cmp_magnitude(other),
            (true, true) => other.cmp_magnitude(self),
        }
    }
}

impl PartialOrd for Decimal<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Equal values, whatever their scale: `1.5 == 1.50`.
impl PartialEq for Decimal<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Decimal<'_> {}

/// `a + b` in text form, with the larger of the two scales
/// (`1.5 + 2.25 = 3.75`, `1.50 + 1 = 2.50`); `-` only before a non-zero result.
pub fn add(a: &Decimal<'_>, b: &Decimal<'_>) -> String {
    let scale = a.scale().max(b.scale());
    let (negative, digits) = if a.negative == b.negative {
        (a.negative, add_digits(&a.digits(scale), &b.digits(scale)))
    } else if a.cmp_magnitude(b) == Ordering::Less {
        (b.negative, sub_digits(&b.digits(scale), &a.digits(scale)))
    } else {
        (a.negative, sub_digits(&a.digits(scale), &b.digits(scale)))
    };
    format(negative, &digits, scale)
}

fn add_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0;
    for i in 0..a.len().max(b.len()) {
        let s = a.get(i).copied().unwrap_or(0) + b.get(i).copied().unwrap_or(0) + carry;
        out.push(s % 10);
        carry = s / 10;
    }
    if carry > 0 {
        out.push(carry);
    }
    out
}

/// `a - b` for `|a| >= |b|`.
fn sub_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len());
    let mut borrow = 0;
    for (i, &d) in a.iter().enumerate() {
        let s = b.get(i).copied().unwrap_or(0) + borrow;
        if d >= s {
            out.push(d - s);
            borrow = 0;
        } else {
            out.push(d + 10 - s);
            borrow = 1;
        }
    }
    out
}

/// Least-significant-first digits with `scale` fraction digits, as text.
fn format(negative: bool, digits: &[u8], scale: usize) -> String {
    let (frac, int) = digits.split_at(scale.min(digits.len()));
    let int: Vec<u8> = {
        let mut d: Vec<u8> = int.iter().rev().copied().skip_while(|&d| d == 0).collect();
        if d.is_empty() {
            d.push(0);
        }
        d
    };
    let zero = int == [0] && frac.iter().all(|&d| d == 0);
    let mut s = String::with_capacity(digits.len() + 3);
    if negative && !zero {
        s.push('-');
    }
    s.extend(int.iter().map(|&d| char::from(b'0' + d)));
    if scale > 0 {
        s.push('.');
        s.extend(frac.iter().rev().map(|&d| char::from(b'0' + d)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn d(s: &str) -> Decimal<'_> {
        Decimal::parse(s.as_bytes()).unwrap()
    }

    fn sum(a: &str, b: &str) -> String {
        add(&d(a), &d(b))
    }

    #[test]
    fn parse_accepts_decimals_only() {
        for bad in ["", "-", ".", "1e5", "1.2.3", " 1", "--1", "0x10", "1,5"] {
            assert!(Decimal::parse(bad.as_bytes()).is_none(), "{bad:?}");
        }
        assert!(!d("-0.000").negative);
        assert_eq!(d(".5"), d("0.50"));
        assert_eq!(d("+7"), d("007.0"));
    }

    #[test]
    fn comparison_is_exact_across_signs_and_scales() {
        let ascending = [
            "-100.5",
            "-99.999",
            "-1",
            "-0.001",
            "0",
            "0.000001",
            "0.1",
            "0.12",
            "1",
            "1.0001",
            "9.9",
            "10",
            "99999999999999999999.999",
        ];
        for (i, a) in ascending.iter().enumerate() {
            for (j, b) in ascending.iter().enumerate() {
                assert_eq!(d(a).cmp(&d(b)), i.cmp(&j), "{a} vs {b}");
            }
        }
        // Beyond f64 precision.
        assert!(d("12345678901234567890.000000000001") > d("12345678901234567890"));
        assert_eq!(d("1.5").cmp(&d("1.500")), Ordering::Equal);
        assert_eq!(d("-0").cmp(&d("0.0")), Ordering::Equal);
    }

    #[test]
    fn addition_carries_borrows_and_keeps_the_larger_scale() {
        assert_eq!(sum("999.999", "0.001"), "1000.000");
        assert_eq!(sum("1.5", "2.25"), "3.75");
        assert_eq!(sum("1.50", "1"), "2.50");
        assert_eq!(sum("-1.5", "-2.75"), "-4.25");
        assert_eq!(sum("-1.5", "2"), "0.5");
        assert_eq!(sum("1.5", "-2"), "-0.5");
        assert_eq!(sum("1000", "-999.99"), "0.01");
        assert_eq!(sum("-2.50", "2.5"), "0.00");
        assert_eq!(sum("0", "0"), "0");
        assert_eq!(sum("-0.000", "0"), "0.000");
        assert_eq!(
            sum("99999999999999999999999999999999", "1"),
            "100000000000000000000000000000000"
        );
        assert_eq!(sum("007", "-0.5"), "6.5");
    }

    proptest! {
        #[test]
        fn addition_and_order_agree_with_integers(
            a in -10_i128.pow(24)..10_i128.pow(24),
            b in -10_i128.pow(24)..10_i128.pow(24),
            sa in 0u32..6,
            sb in 0u32..6,
        ) {
            // a / 10^sa and b / 10^sb as text; checked against integer arithmetic at scale 6.
            let text = |v: i128, s: u32| {
                let p = 10_i128.pow(s);
                let (sign, m) = if v < 0 { ("-", -v) } else { ("", v) };
                if s == 0 {
                    format!("{sign}{m}")
                } else {
                    format!("{sign}{}.{:0w$}", m / p, m % p, w = s as usize)
                }
            };
            let (ta, tb) = (text(a, sa), text(b, sb));
            let scaled = |v: i128, s: u32| v * 10_i128.pow(6 - s);
            let expected = scaled(a, sa) + scaled(b, sb);
            let scale = sa.max(sb);
            prop_assert_eq!(sum(&ta, &tb), text(expected / 10_i128.pow(6 - scale), scale));
            prop_assert_eq!(d(&ta).cmp(&d(&tb)), scaled(a, sa).cmp(&scaled(b, sb)));
        }

        #[test]
        fn parse_never_panics(s in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Some(x) = Decimal::parse(&s) {
                let _ = add(&x, &x);
            }
        }
    }
}
