//! Semantic validation of a `[[generator]]` rule, and the resolved parameters
//! (defaults and presets applied) that the generators run with.

use crate::rules::spec::{GeneratorKind, GeneratorRule, TimeUnit};

/// Default epoch of snowflake generators: 2026-01-01T00:00:00Z.
pub const DEFAULT_EPOCH_MS: u64 = 1_767_225_600_000;
/// Default `max` of a sequence: the largest signed BIGINT, the usual id column.
pub const DEFAULT_SEQUENCE_MAX: u64 = i64::MAX as u64;
/// Widest node field accepted: node ids are leased one key each, and listing
/// more than 65,536 keys to find a free one is not a sensible layout.
pub const MAX_NODE_BITS: u32 = 16;

/// A sequence generator's parameters, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceParams {
    /// First id a fresh generator issues.
    pub start: u64,
    /// Largest id that may be issued (inclusive).
    pub max: u64,
    /// Step between ids; every id is `start + k * increment`.
    pub increment: u64,
    /// Ids per reservation at start.
    pub batch: u64,
    /// Lower bound of the adaptive batch.
    pub min_batch: u64,
    /// Upper bound of the adaptive batch.
    pub max_batch: u64,
    /// How long one segment should last at the measured rate, in ms.
    pub segment_ms: u64,
    /// Fraction of a segment left when the next one is reserved.
    pub refill_at: f64,
    /// `format`: ids written as decimal fields (daily with a date).
    pub format: Option<std::sync::Arc<super::format::Format>>,
    /// `scramble = true`: the keyed permutation ids are issued through.
    pub scramble: Option<std::sync::Arc<super::scramble::Scrambler>>,
}

/// A snowflake generator's layout, defaults and preset applied.
///
/// An id is `timestamp << (node_bits + sequence_bits) | node << sequence_bits | sequence`.
#[derive(Debug, Clone, PartialEq)]
pub struct SnowflakeParams {
    /// Unix time in ms that timestamp 0 stands for.
    pub epoch_ms: u64,
    /// Length of one timestamp tick in ms (1 or 1000).
    pub unit_ms: u64,
    /// Width of the timestamp field.
    pub timestamp_bits: u32,
    /// Width of the node-id field.
    pub node_bits: u32,
    /// Width of the per-tick sequence field.
    pub sequence_bits: u32,
    /// How many ticks the persisted ceiling runs ahead of issued timestamps.
    pub lead_ticks: u64,
    /// Largest tolerated lag (ms) of this node's clock behind the cluster
    /// high-water; beyond it the node issues from a logical clock.
    pub max_skew_ms: u64,
}

/// Resolved parameters of one generator.
#[derive(Debug, Clone, PartialEq)]
pub enum Params {
    /// A sequence generator.
    Sequence(SequenceParams),
    /// A snowflake generator.
    Snowflake(SnowflakeParams),
}

/// Checks one `[[generator]]` rule beyond what serde checks: known preset, bit
/// widths that fit 63 bits, batch sizes, fields that do not apply to the kind,
/// epoch syntax, `start <= max`. Returns the reason text on error; the rule
/// loader adds file:line.
pub fn validate(rule: &GeneratorRule) -> Result<(), String> {
    resolve(rule).map(|_| ())
}

/// Validates `rule` and applies defaults and presets.
pub fn resolve(rule: &GeneratorRule) -> Result<Params, String> {
    check_name(&rule.name)?;
    match rule.kind {
        GeneratorKind::Sequence => resolve_sequence(rule).map(Params::Sequence),
        GeneratorKind::Snowflake => resolve_snowflake(rule).map(Params::Snowflake),
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("name is empty".into());
    }
    if name.len() > 128 {
        return Err(format!("name is {} bytes long, at most 128", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!(
            "name {name:?} contains {c:?}; use letters, digits, '_', '-' and '.' (it names keys in the store)"
        ));
    }
    Ok(())
}

fn not_for(kind: &str, fields: &[(&str, bool)]) -> Result<(), String> {
    let present: Vec<&str> = fields.iter().filter(|f| f.1).map(|f| f.0).collect();
    match present.as_slice() {
        [] => Ok(()),
        [one] => Err(format!("field `{one}` does not apply to {kind} generators")),
        many => Err(format!(
            "fields `{}` do not apply to {kind} generators",
            many.join("`, `")
        )),
    }
}

fn resolve_sequence(r: &GeneratorRule) -> Result<SequenceParams, String> {
    not_for(
        "sequence",
        &[
            ("preset", r.preset.is_some()),
            ("epoch", r.epoch.is_some()),
            ("time_unit", r.time_unit.is_some()),
            ("timestamp_bits", r.timestamp_bits.is_some()),
            ("node_bits", r.node_bits.is_some()),
            ("sequence_bits", r.sequence_bits.is_some()),
            ("lead_ms", r.lead_ms.is_some()),
            ("max_clock_skew_ms", r.max_clock_skew_ms.is_some()),
        ],
    )?;
    let scramble = resolve_scramble(r)?;
    let format = match &r.format {
        None => {
            if r.prefix.is_some() || r.timezone.is_some() {
                return Err("`prefix` and `timezone` need a `format`".into());
            }
            None
        }
        Some(t) => {
            let f = super::format::Format::parse(t, r.prefix, r.timezone.as_deref())?;
            let stray = [
                ("start", r.start.is_some()),
                ("max", r.max.is_some()),
                ("increment", r.increment.is_some()),
                ("scramble", scramble.is_some()),
            ];
            if let Some((k, _)) = stray.iter().find(|k| k.1) {
                return Err(format!(
                    "`{k}` does not apply with `format` (the format fixes the ids)"
                ));
            }
            Some(std::sync::Arc::new(f))
        }
    };
    let batch = r.batch.unwrap_or(1000);
    if batch == 0 {
        return Err("batch must be at least 1".into());
    }
    if r.min_batch == Some(0) {
        return Err("min_batch must be at least 1".into());
    }
    if r.max_batch == Some(0) {
        return Err("max_batch must be at least 1".into());
    }
    let min_batch = r.min_batch.unwrap_or((batch / 10).max(1));
    let max_batch = r.max_batch.unwrap_or(batch.saturating_mul(1000));
    if min_batch > max_batch {
        return Err(format!(
            "min_batch ({min_batch}) is above max_batch ({max_batch})"
        ));
    }
    if batch < min_batch {
        return Err(format!("batch ({batch}) is below min_batch ({min_batch})"));
    }
    if batch > max_batch {
        return Err(format!("batch ({batch}) is above max_batch ({max_batch})"));
    }
    let segment_seconds = r.segment_seconds.unwrap_or(60);
    if segment_seconds == 0 || segment_seconds > 7 * 86_400 {
        return Err(format!(
            "segment_seconds ({segment_seconds}) must be between 1 and 604800 (one week)"
        ));
    }
    let refill_at = r.refill_at.unwrap_or(0.5);
    if !(refill_at > 0.0 && refill_at < 1.0) {
        return Err(format!(
            "refill_at ({refill_at}) must be a fraction strictly between 0 and 1"
        ));
    }
    // A format without a date is a plain sequence over its ids; with a
    // date, the generator moves the floor to each day's base itself.
    let (fmt_start, fmt_max) = match &format {
        Some(f) if !f.daily() => (f.render(0, 1), f.render(0, f.seq_max())),
        _ => (None, None),
    };
    let start = fmt_start.or(r.start).unwrap_or(1);
    if start == 0 {
        return Err("start must be at least 1 (MySQL reads an id of 0 as \"generate one\")".into());
    }
    let id_max = scramble.as_ref().map_or(DEFAULT_SEQUENCE_MAX, |s| s.max());
    let max = fmt_max.or(r.max).unwrap_or(id_max);
    if max > id_max {
        return Err(format!(
            "max ({max}) is above the largest {}-bit scrambled id ({id_max})",
            scramble.as_ref().map_or(63, |s| s.bits())
        ));
    }
    if start > max {
        return Err(format!("start ({start}) is above max ({max})"));
    }
    let increment = r.increment.unwrap_or(1);
    if increment == 0 {
        return Err("increment must be at least 1".into());
    }
    Ok(SequenceParams {
        start,
        max,
        increment,
        batch,
        min_batch,
        max_batch,
        segment_ms: segment_seconds * 1000,
        refill_at,
        format,
        scramble,
    })
}

/// `scramble`, `scramble_key_file`/`_env`, `bits`: the permutation, with
/// its key read now (once, when the rules are loaded).
fn resolve_scramble(
    r: &GeneratorRule,
) -> Result<Option<std::sync::Arc<super::scramble::Scrambler>>, String> {
    if r.scramble != Some(true) {
        let stray = [
            ("scramble_key_file", r.scramble_key_file.is_some()),
            ("scramble_key_env", r.scramble_key_env.is_some()),
            ("bits", r.bits.is_some()),
        ];
        if let Some((f, _)) = stray.iter().find(|f| f.1) {
            return Err(format!("field `{f}` needs scramble = true"));
        }
        return Ok(None);
    }
    let bits = r.bits.unwrap_or(63);
    if bits != 63 && bits != 53 {
        return Err(format!("bits ({bits}) must be 63 or 53"));
    }
    let key = match (&r.scramble_key_file, &r.scramble_key_env) {
        (Some(f), None) => {
            let mut k = std::fs::read(f).map_err(|e| format!("scramble_key_file {f:?}: {e}"))?;
            while k.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
                k.pop();
            }
            k
        }
        (None, Some(v)) => std::env::var(v)
            .map_err(|_| format!("scramble_key_env: environment variable {v:?} is not set"))?
            .into_bytes(),
        _ => {
            return Err(
                "scramble = true needs exactly one of scramble_key_file, scramble_key_env".into(),
            )
        }
    };
    if key.len() < 16 {
        return Err(format!(
            "the scramble key is {} bytes, at least 16 are needed",
            key.len()
        ));
    }
    Ok(Some(std::sync::Arc::new(super::scramble::Scrambler::new(
        &key, bits,
    ))))
}

fn resolve_snowflake(r: &GeneratorRule) -> Result<SnowflakeParams, String> {
    not_for(
        "snowflake",
        &[
            ("batch", r.batch.is_some()),
            ("min_batch", r.min_batch.is_some()),
            ("max_batch", r.max_batch.is_some()),
            ("segment_seconds", r.segment_seconds.is_some()),
            ("refill_at", r.refill_at.is_some()),
            ("start", r.start.is_some()),
            ("max", r.max.is_some()),
            ("increment", r.increment.is_some()),
            ("format", r.format.is_some()),
            ("prefix", r.prefix.is_some()),
            ("timezone", r.timezone.is_some()),
            ("scramble", r.scramble.is_some()),
            ("scramble_key_file", r.scramble_key_file.is_some()),
            ("scramble_key_env", r.scramble_key_env.is_some()),
            ("bits", r.bits.is_some()),
        ],
    )?;
    // (timestamp, node, sequence, unit, total bits allowed)
    let (ts, node, seq, unit, limit) = match r.preset.as_deref() {
        None | Some("twitter") => (41, 10, 12, TimeUnit::Ms, 63),
        // 41 bits of ms (~69 years), 32 nodes, 128 ids per ms per node
        // sustained (more in bursts: the sequence carries into the timestamp).
        Some("js53") => (41, 5, 7, TimeUnit::Ms, 53),
        Some(other) => {
            return Err(format!(
                "unknown preset {other:?} (known: \"twitter\", \"js53\")"
            ))
        }
    };
    let timestamp_bits = r.timestamp_bits.unwrap_or(ts);
    let node_bits = r.node_bits.unwrap_or(node);
    let sequence_bits = r.sequence_bits.unwrap_or(seq);
    let unit = r.time_unit.unwrap_or(unit);
    if timestamp_bits == 0 {
        return Err("timestamp_bits must be at least 1".into());
    }
    if node_bits > MAX_NODE_BITS {
        return Err(format!(
            "node_bits ({node_bits}) is over {MAX_NODE_BITS} (at most 65536 node ids)"
        ));
    }
    let total = u64::from(timestamp_bits) + u64::from(node_bits) + u64::from(sequence_bits);
    if total > 63 {
        return Err(format!(
            "timestamp_bits + node_bits + sequence_bits = {timestamp_bits} + {node_bits} + {sequence_bits} = {total} bits, over the 63 bits of a positive BIGINT"
        ));
    }
    if total > limit {
        return Err(format!(
            "preset \"js53\" ids must fit in 53 bits, but timestamp_bits + node_bits + sequence_bits = {total}"
        ));
    }
    let epoch_ms = match &r.epoch {
        None => DEFAULT_EPOCH_MS,
        Some(s) => parse_rfc3339_ms(s).map_err(|e| format!("epoch {s:?}: {e}"))?,
    };
    let unit_ms = match unit {
        TimeUnit::Ms => 1,
        TimeUnit::S => 1000,
    };
    let max_skew_ms = r.max_clock_skew_ms.unwrap_or(1000);
    if max_skew_ms > 86_400_000 {
        return Err(format!(
            "max_clock_skew_ms ({max_skew_ms}) must be at most 86400000 (one day)"
        ));
    }
    let lead_ms = r.lead_ms.unwrap_or(3000);
    if lead_ms == 0 || lead_ms > 3_600_000 {
        return Err(format!(
            "lead_ms ({lead_ms}) must be between 1 and 3600000 (one hour)"
        ));
    }
    Ok(SnowflakeParams {
        epoch_ms,
        unit_ms,
        timestamp_bits,
        node_bits,
        sequence_bits,
        lead_ticks: lead_ms.div_ceil(unit_ms),
        max_skew_ms,
    })
}

/// Parses an RFC 3339 instant (`2026-01-01T00:00:00Z`, `...T01:00:00.5+01:00`)
/// into ms since the Unix epoch. Instants before 1970 are rejected.
pub fn parse_rfc3339_ms(s: &str) -> Result<u64, String> {
    let b = s.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let part = b.get(range.clone()).ok_or("too short")?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err(format!("expected digits at byte {}", range.start));
        }
        Ok(part.iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0')))
    };
    let expect = |i: usize, chars: &[u8]| -> Result<(), String> {
        match b.get(i) {
            Some(c) if chars.contains(c) => Ok(()),
            _ => Err(format!(
                "expected {:?} at byte {i}",
                chars.iter().map(|&c| c as char).collect::<String>()
            )),
        }
    };
    let year = num(0..4)?;
    expect(4, b"-")?;
    let month = num(5..7)?;
    expect(7, b"-")?;
    let day = num(8..10)?;
    expect(10, b"Tt ")?;
    let hour = num(11..13)?;
    expect(13, b":")?;
    let minute = num(14..16)?;
    expect(16, b":")?;
    let second = num(17..19)?;
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while let Some(d) = b.get(i).filter(|c| c.is_ascii_digit()) {
            if i - start < 3 {
                millis = millis * 10 + i64::from(d - b'0');
            }
            i += 1;
        }
        if i == start {
            return Err("expected digits after '.'".into());
        }
        for _ in (i - start)..3 {
            millis *= 10;
        }
    }
    let offset_min = match b.get(i) {
        Some(b'Z' | b'z') => {
            i += 1;
            0
        }
        Some(&sign @ (b'+' | b'-')) => {
            let oh = num(i + 1..i + 3)?;
            expect(i + 3, b":")?;
            let om = num(i + 4..i + 6)?;
            if oh > 23 || om > 59 {
                return Err("offset out of range".into());
            }
            i += 6;
            let m = oh * 60 + om;
            if sign == b'-' {
                -m
            } else {
                m
            }
        }
        _ => return Err("expected 'Z' or a +hh:mm offset".into()),
    };
    if i != b.len() {
        return Err(format!("unexpected text after byte {i}"));
    }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let mdays = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month) {
        return Err(format!("month {month} out of range"));
    }
    let dim = mdays.get((month - 1) as usize).copied().unwrap_or(31);
    if day < 1 || day > dim {
        return Err(format!("day {day} out of range"));
    }
    if hour > 23 || minute > 59 || second > 60 {
        return Err("time of day out of range".into());
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset_min * 60;
    let ms = secs * 1000 + millis;
    u64::try_from(ms).map_err(|_| "instants before 1970 are not supported".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(kind: GeneratorKind) -> GeneratorRule {
        GeneratorRule::new("orders", kind)
    }

    #[test]
    fn rfc3339() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_rfc3339_ms("2026-01-01T00:00:00Z"),
            Ok(DEFAULT_EPOCH_MS)
        );
        assert_eq!(
            parse_rfc3339_ms("2010-11-04T01:42:54.657Z"),
            Ok(1_288_834_974_657)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-01-01T01:00:00.5+01:00"),
            Ok(DEFAULT_EPOCH_MS + 500)
        );
        for bad in [
            "",
            "2026",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00Zx",
            "1969-12-31T23:59:59Z",
            "2026-01-01T00:00:00.Z",
            "２０２６-01-01T00:00:00Z",
        ] {
            assert!(parse_rfc3339_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sequence_defaults_and_errors() {
        let p = resolve(&rule(GeneratorKind::Sequence)).unwrap();
        let Params::Sequence(s) = p else { panic!() };
        assert_eq!(
            (s.start, s.batch, s.min_batch, s.max_batch),
            (1, 1000, 100, 1_000_000)
        );
        let mut r = rule(GeneratorKind::Sequence);
        r.batch = Some(0);
        assert_eq!(validate(&r).unwrap_err(), "batch must be at least 1");
        let mut r = rule(GeneratorKind::Sequence);
        r.node_bits = Some(3);
        assert!(validate(&r)
            .unwrap_err()
            .contains("`node_bits` does not apply"));
        let mut r = rule(GeneratorKind::Sequence);
        r.start = Some(10);
        r.max = Some(5);
        assert!(validate(&r)
            .unwrap_err()
            .contains("start (10) is above max (5)"));
        let mut r = rule(GeneratorKind::Sequence);
        r.refill_at = Some(f64::NAN);
        assert!(validate(&r).is_err());
        let mut r = rule(GeneratorKind::Sequence);
        r.name = "a/b".into();
        assert!(validate(&r).is_err());
    }

    #[test]
    fn snowflake_presets_and_errors() {
        let Params::Snowflake(s) = resolve(&rule(GeneratorKind::Snowflake)).unwrap() else {
            panic!()
        };
        assert_eq!(
            (s.timestamp_bits, s.node_bits, s.sequence_bits),
            (41, 10, 12)
        );
        assert_eq!(s.lead_ticks, 3000);
        let mut r = rule(GeneratorKind::Snowflake);
        r.preset = Some("js53".into());
        let Params::Snowflake(s) = resolve(&r).unwrap() else {
            panic!()
        };
        assert!(s.timestamp_bits + s.node_bits + s.sequence_bits <= 53);
        r.timestamp_bits = Some(45);
        assert!(validate(&r).unwrap_err().contains("53 bits"));
        let mut r = rule(GeneratorKind::Snowflake);
        r.timestamp_bits = Some(42);
        assert!(validate(&r).unwrap_err().contains("64 bits, over the 63"));
        let mut r = rule(GeneratorKind::Snowflake);
        r.preset = Some("sonyflake".into());
        assert!(validate(&r).unwrap_err().contains("unknown preset"));
        let mut r = rule(GeneratorKind::Snowflake);
        r.batch = Some(5);
        r.max = Some(5);
        assert!(validate(&r)
            .unwrap_err()
            .contains("fields `batch`, `max` do not apply"));
        let mut r = rule(GeneratorKind::Snowflake);
        r.epoch = Some("yesterday".into());
        assert!(validate(&r).unwrap_err().starts_with("epoch \"yesterday\""));
        let mut r = rule(GeneratorKind::Snowflake);
        r.time_unit = Some(TimeUnit::S);
        r.lead_ms = Some(1500);
        let Params::Snowflake(s) = resolve(&r).unwrap() else {
            panic!()
        };
        assert_eq!((s.unit_ms, s.lead_ticks), (1000, 2));
    }
    #[test]
    fn scramble_fields() {
        let mut r = GeneratorRule::new("s", GeneratorKind::Sequence);
        r.scramble = Some(true);
        assert!(validate(&r)
            .unwrap_err()
            .contains("exactly one of scramble_key_file"));
        r.scramble_key_env = Some("IDGATE_SURELY_UNSET_SCRAMBLE_KEY".into());
        assert!(validate(&r).unwrap_err().contains("is not set"));
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, "tooshort\n").unwrap();
        r.scramble_key_env = None;
        r.scramble_key_file = Some(short.display().to_string());
        assert!(validate(&r).unwrap_err().contains("at least 16"));
        let good = dir.path().join("good");
        std::fs::write(&good, "0123456789abcdef").unwrap();
        r.scramble_key_file = Some(good.display().to_string());
        assert!(validate(&r).is_ok());
        r.bits = Some(54);
        assert!(validate(&r).unwrap_err().contains("63 or 53"));
        r.bits = Some(53);
        r.max = Some(1 << 53);
        assert!(validate(&r).unwrap_err().contains("53-bit"));
        let mut plain = GeneratorRule::new("p", GeneratorKind::Sequence);
        plain.bits = Some(53);
        assert!(validate(&plain)
            .unwrap_err()
            .contains("needs scramble = true"));
        let mut snow = GeneratorRule::new("f", GeneratorKind::Snowflake);
        snow.scramble = Some(true);
        assert!(validate(&snow).unwrap_err().contains("scramble"));
    }
}
