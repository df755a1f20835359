//! Formatted sequences: integer ids written as decimal fields, e.g.
//! `format = "{prefix:2}{yyyyMMdd}{seq:8}"` with `prefix = 17` gives
//! `17` `20261124` `00000123` = 172026112400000123.
//!
//! Fields: `{prefix:W}` (the rule's `prefix`, W digits), the date in the
//! rule's `timezone` (`{yyyyMMdd}`, `{yyMMdd}`, or `{yyyy}`/`{yy}`,
//! `{MM}`, `{dd}` in that order), and `{seq:W}`, last. An id is the
//! decimal concatenation, so it is an integer, and ids of a later day are
//! larger (the date is more significant than the counter).
//!
//! The generator behind a formatted sequence is one sequence in the id
//! space itself (`generator.rs`): a day starts by raising its floor to the
//! day's base (`{date}{seq:0}`), which every idgate process on the store
//! has skipped when it returns, so the counter restarts at 1 and no process
//! issues an id of an older day afterwards. This file is pure: layout,
//! rendering, decoding, validation.

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date `(year, month, day)` of a day number since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// One field of a format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// The rule's prefix, this many digits.
    Prefix(u32),
    /// Four-digit year.
    Year4,
    /// Two-digit year.
    Year2,
    /// Month, two digits.
    Month,
    /// Day of month, two digits.
    Day,
    /// The counter, this many digits.
    Seq(u32),
}

impl Field {
    fn digits(self) -> u32 {
        match self {
            Field::Prefix(w) | Field::Seq(w) => w,
            Field::Year4 => 4,
            Field::Year2 | Field::Month | Field::Day => 2,
        }
    }
}

/// A parsed `format` with its prefix and timezone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// Fields, most significant first; `Seq` is last.
    fields: Vec<Field>,
    /// The prefix value.
    prefix: u64,
    /// Timezone offset from UTC, ms.
    offset_ms: i64,
    /// Width of the counter.
    seq_digits: u32,
    /// Whether the id has a date (then the counter restarts every day).
    daily: bool,
}

/// Parses a timezone: `UTC`, `Z`, or a fixed offset `+08:00` / `-05:30`.
pub fn parse_timezone(s: &str) -> Result<i64, String> {
    if s == "UTC" || s == "Z" {
        return Ok(0);
    }
    let b = s.as_bytes();
    let ok = b.len() == 6
        && matches!(b[0], b'+' | b'-')
        && b[3] == b':'
        && [1, 2, 4, 5].iter().all(|&i| b[i].is_ascii_digit());
    if !ok {
        return Err(format!(
            "timezone {s:?}: use \"UTC\" or a fixed offset like \"+08:00\" (no tz database names)"
        ));
    }
    let h = i64::from(b[1] - b'0') * 10 + i64::from(b[2] - b'0');
    let m = i64::from(b[4] - b'0') * 10 + i64::from(b[5] - b'0');
    if h > 14 || m > 59 {
        return Err(format!("timezone {s:?}: offset out of range"));
    }
    let ms = (h * 60 + m) * 60_000;
    Ok(if b[0] == b'-' { -ms } else { ms })
}

impl Format {
    /// Parses `template` with `prefix` and `timezone` (default UTC).
    ///
    /// Errors: an unknown field, a width outside 1..=18, no `{seq:W}` or
    /// one that is not last, date parts out of order or incomplete, a
    /// prefix wider than its field, or ids that can exceed BIGINT
    /// (9223372036854775807).
    pub fn parse(
        template: &str,
        prefix: Option<u64>,
        timezone: Option<&str>,
    ) -> Result<Format, String> {
        let mut fields = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            let Some(body) = rest.strip_prefix('{') else {
                return Err(format!(
                    "format {template:?}: expected '{{' at {:?} (only {{fields}}, no literal text)",
                    rest
                ));
            };
            let Some(end) = body.find('}') else {
                return Err(format!("format {template:?}: unclosed '{{'"));
            };
            let (name, width) = match body[..end].split_once(':') {
                Some((n, w)) => (
                    n,
                    Some(
                        w.parse::<u32>()
                            .ok()
                            .filter(|w| (1..=18).contains(w))
                            .ok_or_else(|| {
                                format!("format {template:?}: width {w:?} must be 1 to 18")
                            })?,
                    ),
                ),
                None => (&body[..end], None),
            };
            let f: &[Field] = match (name, width) {
                ("prefix", Some(w)) => &[Field::Prefix(w)],
                ("seq", Some(w)) => &[Field::Seq(w)],
                ("yyyyMMdd", None) => &[Field::Year4, Field::Month, Field::Day],
                ("yyMMdd", None) => &[Field::Year2, Field::Month, Field::Day],
                ("yyyy", None) => &[Field::Year4],
                ("yy", None) => &[Field::Year2],
                ("MM", None) => &[Field::Month],
                ("dd", None) => &[Field::Day],
                _ => {
                    return Err(format!(
                        "format {template:?}: unknown field {{{}}} (known: {{prefix:W}}, {{seq:W}}, {{yyyyMMdd}}, {{yyMMdd}}, {{yyyy}}, {{yy}}, {{MM}}, {{dd}})",
                        &body[..end]
                    ))
                }
            };
            fields.extend_from_slice(f);
            rest = &body[end + 1..];
        }
        let Some(Field::Seq(seq_digits)) = fields.last().copied() else {
            return Err(format!(
                "format {template:?}: {{seq:W}} must be the last field"
            ));
        };
        if fields.iter().filter(|f| matches!(f, Field::Seq(_))).count() != 1 {
            return Err(format!("format {template:?}: one {{seq:W}} field"));
        }
        if fields
            .iter()
            .filter(|f| matches!(f, Field::Prefix(_)))
            .count()
            > 1
        {
            return Err(format!(
                "format {template:?}: at most one {{prefix:W}} field"
            ));
        }
        let dates: Vec<Field> = fields
            .iter()
            .copied()
            .filter(|f| matches!(f, Field::Year4 | Field::Year2 | Field::Month | Field::Day))
            .collect();
        let daily = !dates.is_empty();
        if daily
            && dates != [Field::Year4, Field::Month, Field::Day]
            && dates != [Field::Year2, Field::Month, Field::Day]
        {
            return Err(format!(
                "format {template:?}: the date must be year, month and day in that order (ids of a later day must be larger)"
            ));
        }
        let has_prefix = fields.iter().any(|f| matches!(f, Field::Prefix(_)));
        let prefix = match (has_prefix, prefix) {
            (true, Some(p)) => p,
            (true, None) => {
                return Err(format!(
                    "format {template:?} has {{prefix:W}}: set `prefix`"
                ))
            }
            (false, Some(_)) => return Err("`prefix` needs a {prefix:W} field in `format`".into()),
            (false, None) => 0,
        };
        if let Some(Field::Prefix(w)) = fields.iter().find(|f| matches!(f, Field::Prefix(_))) {
            if prefix >= 10u64.pow(*w) {
                return Err(format!("prefix {prefix} does not fit in {w} digits"));
            }
        }
        let offset_ms = match timezone {
            Some(tz) => parse_timezone(tz)?,
            None => 0,
        };
        if timezone.is_some() && !daily {
            return Err("`timezone` needs a date field in `format`".into());
        }
        let f = Format {
            fields,
            prefix,
            offset_ms,
            seq_digits,
            daily,
        };
        // The largest id: prefix, year 9999 (or 99), month 12, day 31, all 9s.
        let digits: u32 = f.fields.iter().map(|x| x.digits()).sum();
        let mut max: u128 = 0;
        for x in &f.fields {
            let v: u128 = match x {
                Field::Prefix(_) => u128::from(prefix),
                Field::Year4 => 9999,
                Field::Year2 => 99,
                Field::Month => 12,
                Field::Day => 31,
                Field::Seq(w) => 10u128.pow(*w) - 1,
            };
            max = max * 10u128.pow(x.digits()) + v;
        }
        if max > i64::MAX as u128 {
            return Err(format!(
                "format {template:?}: ids of {digits} digits can reach {max}, over BIGINT's 9223372036854775807"
            ));
        }
        Ok(f)
    }

    /// The largest counter value: `10^W - 1`.
    pub fn seq_max(&self) -> u64 {
        10u64.pow(self.seq_digits) - 1
    }

    /// Whether the counter restarts every day.
    pub fn daily(&self) -> bool {
        self.daily
    }

    /// The day (days since 1970-01-01 in the timezone) at `wall_ms`.
    pub fn day_at(&self, wall_ms: u64) -> i64 {
        (wall_ms as i64 + self.offset_ms).div_euclid(86_400_000)
    }

    /// The id of counter value `seq` on `day` (ignored without a date).
    /// `None` when `seq` does not fit its width or the date is out of range.
    pub fn render(&self, day: i64, seq: u64) -> Option<u64> {
        if seq >= 10u64.pow(self.seq_digits) {
            return None;
        }
        let (y, m, d) = civil_from_days(day);
        let mut v: u128 = 0;
        for x in &self.fields {
            let part: u128 = match x {
                Field::Prefix(_) => u128::from(self.prefix),
                Field::Year4 if (0..=9999).contains(&y) => y as u128,
                Field::Year2 if (2000..=2099).contains(&y) => (y - 2000) as u128,
                Field::Year4 | Field::Year2 => return None,
                Field::Month => u128::from(m),
                Field::Day => u128::from(d),
                Field::Seq(_) => u128::from(seq),
            };
            v = v * 10u128.pow(x.digits()) + part;
        }
        u64::try_from(v).ok()
    }

    /// The day and counter of an id of this format; `None` when `id` is
    /// not one (other prefix, impossible date, counter 0).
    pub fn decode(&self, id: u64) -> Option<(i64, u64)> {
        let mut v = id as u128;
        let mut parts = Vec::with_capacity(self.fields.len());
        for x in self.fields.iter().rev() {
            let p = 10u128.pow(x.digits());
            parts.push((*x, (v % p) as u64));
            v /= p;
        }
        if v != 0 {
            return None;
        }
        let (mut y, mut m, mut d, mut seq) = (None, 0u32, 0u32, 0u64);
        for (x, p) in parts {
            match x {
                Field::Prefix(_) if p != self.prefix => return None,
                Field::Prefix(_) => {}
                Field::Year4 => y = Some(p as i64),
                Field::Year2 => y = Some(2000 + p as i64),
                Field::Month => m = p as u32,
                Field::Day => d = p as u32,
                Field::Seq(_) => seq = p,
            }
        }
        if seq == 0 {
            return None;
        }
        let day = match y {
            None => 0,
            Some(y) => {
                if !(1..=12).contains(&m) || d == 0 {
                    return None;
                }
                let day = days_from_civil(y, m, d);
                if civil_from_days(day) != (y, m, d) {
                    return None; // 31 November and the like
                }
                day
            }
        };
        Some((day, seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_example_and_decoding() {
        let f = Format::parse("{prefix:2}{yyyyMMdd}{seq:8}", Some(17), Some("UTC")).unwrap();
        let day = days_from_civil(2026, 11, 24);
        assert_eq!(f.render(day, 123), Some(172026112400000123));
        assert_eq!(f.decode(172026112400000123), Some((day, 123)));
        assert_eq!(f.render(day, 100_000_000), None);
        assert_eq!(f.decode(172026113100000001), None, "31 November");
        assert_eq!(f.decode(182026112400000001), None, "other prefix");
        assert_eq!(f.decode(172026112400000000), None, "counter 0");
        // Later days are larger, whatever the counters.
        assert!(f.render(day + 1, 1).unwrap() > f.render(day, 99_999_999).unwrap());
        for z in [-1000, 0, 19_000, 20_781, 2_932_896] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
    }

    #[test]
    fn timezones_and_days() {
        let f = Format::parse("{yyyyMMdd}{seq:6}", None, Some("+08:00")).unwrap();
        // 2026-11-24T16:00:00Z is midnight of the 25th in +08:00.
        let t = (days_from_civil(2026, 11, 24) as u64) * 86_400_000 + 16 * 3_600_000;
        assert_eq!(f.day_at(t - 1), days_from_civil(2026, 11, 24));
        assert_eq!(f.day_at(t), days_from_civil(2026, 11, 25));
        assert!(parse_timezone("Asia/Shanghai")
            .unwrap_err()
            .contains("fixed offset"));
        assert_eq!(parse_timezone("-05:30"), Ok(-(5 * 60 + 30) * 60_000));
    }

    #[test]
    fn refusals() {
        let e = |t: &str, p: Option<u64>| Format::parse(t, p, None).unwrap_err();
        assert!(e("{prefix:3}{yyyyMMdd}{seq:9}", Some(999)).contains("over BIGINT"));
        assert!(Format::parse("{prefix:2}{yyyyMMdd}{seq:9}", Some(91), None).is_ok());
        assert!(e("{prefix:2}{yyyyMMdd}{seq:9}", Some(92)).contains("over BIGINT"));
        assert!(e("{seq:4}{yyyyMMdd}", None).contains("last"));
        assert!(e("{ddMMyyyy}{seq:4}", None).contains("unknown field"));
        assert!(e("{dd}{MM}{yyyy}{seq:4}", None).contains("in that order"));
        assert!(e("{yyyyMMdd}-{seq:4}", None).contains("literal"));
        assert!(e("{prefix:2}{seq:4}", None).contains("set `prefix`"));
        assert!(e("{prefix:2}{seq:4}", Some(100)).contains("does not fit"));
        assert!(e("{seq:0}", None).contains("1 to 18"));
        assert!(Format::parse("{seq:4}", None, Some("UTC"))
            .unwrap_err()
            .contains("date field"));
    }
}
