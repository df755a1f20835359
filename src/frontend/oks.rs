//! The OK packets of a write that ran on several shards (or on every copy
//! of a broadcast table), combined into the one the client gets.

use crate::frontend::returned::Returned;
use crate::protocol::reply::{self, OkPacket};
use crate::protocol::wire::put_lenenc_bytes;

/// One shard's OK reply to a part of a multi-shard write.
pub(in crate::frontend) struct PartOk {
    pub ok: OkPacket,
    pub info: String,
    /// The ids of a `` RETURNING `id` `` idgate added (an INSERT IGNORE
    /// of several rows, `upsert.rs`): `ok` and `info` are what MariaDB sends
    /// without it.
    pub returned: Option<Vec<u64>>,
}

impl PartOk {
    /// `None` unless the reply is exactly one OK packet (a statement that
    /// returned rows, e.g. with RETURNING, cannot be combined), or with
    /// `returning` (deprecate_eof), the result of idgate's own RETURNING.
    pub(in crate::frontend) fn parse(
        packets: &[Vec<u8>],
        returning: Option<bool>,
    ) -> Option<PartOk> {
        if let Some(deprecate_eof) = returning {
            // The info text is made for the whole statement (`combined_ok`).
            let r = Returned::read_all(packets, deprecate_eof)?;
            let (ok, _) = r.ok_packet(1, 0)?;
            return Some(PartOk {
                ok,
                info: String::new(),
                returned: Some(r.ids),
            });
        }
        let [p] = packets else {
            return None;
        };
        if p.first() != Some(&reply::OK) {
            return None;
        }
        let ok = reply::parse_ok(p).ok()?;
        Some(PartOk {
            ok,
            info: reply::ok_info(p),
            returned: None,
        })
    }
}

/// The replies to report: every part's, or for a write to the copies of a
/// broadcast table, the first copy's (one server would have done what each
/// copy did once).
pub(in crate::frontend) fn one_copy(parts: &[PartOk], copies: bool) -> &[PartOk] {
    match parts {
        [first, ..] if copies => std::slice::from_ref(first),
        all => all,
    }
}

/// The OK packet the client gets for a write that ran on several shards:
/// affected rows, warnings and info numbers summed; `last_insert_id` given
/// by the caller; status from the last shard. For an INSERT of `rows` rows
/// (0 for other writes), the info is MariaDB's for the whole statement,
/// with each part's `Duplicates` from `duplicates`.
pub(in crate::frontend) fn combined_ok(
    parts: &[PartOk],
    last_insert_id: u64,
    rows: usize,
    duplicates: &dyn Fn(&PartOk) -> u64,
) -> Vec<u8> {
    let affected = parts.iter().map(|p| p.ok.affected_rows).sum();
    let warnings = parts
        .iter()
        .fold(0u16, |w, p| w.saturating_add(p.ok.warnings));
    let status = parts.last().map(|p| p.ok.status).unwrap_or(0);
    let info = if rows > 1 {
        let d: u64 = parts.iter().map(duplicates).sum();
        format!("Records: {rows}  Duplicates: {d}  Warnings: {warnings}")
    } else if rows == 1 {
        String::new()
    } else {
        let infos: Vec<String> = parts.iter().map(|p| p.info.clone()).collect();
        sum_info(&infos)
    };
    let mut tail = Vec::with_capacity(info.len() + 1);
    if !info.is_empty() {
        put_lenenc_bytes(&mut tail, info.as_bytes());
    }
    reply::ok_packet(
        &OkPacket {
            affected_rows: affected,
            last_insert_id,
            status,
            warnings,
        },
        &tail,
    )
}

/// Sums the numbers of OK-packet info texts written from the same template
/// ("Records: 3  Duplicates: 0  Warnings: 0", "Rows matched: 2  Changed: 2
/// Warnings: 0"); texts that differ in shape keep the first.
pub(in crate::frontend) fn sum_info(infos: &[String]) -> String {
    let Some(first) = infos.first() else {
        return String::new();
    };
    let split = |s: &str| -> (Vec<String>, Vec<u64>) {
        let mut text = vec![String::new()];
        let mut nums = Vec::new();
        let mut digits = String::new();
        for c in s.chars() {
            if c.is_ascii_digit() {
                digits.push(c);
            } else {
                if !digits.is_empty() {
                    nums.push(digits.parse().unwrap_or(0));
                    digits.clear();
                    text.push(String::new());
                }
                if let Some(t) = text.last_mut() {
                    t.push(c);
                }
            }
        }
        if !digits.is_empty() {
            nums.push(digits.parse().unwrap_or(0));
            text.push(String::new());
        }
        (text, nums)
    };
    let (text, mut total) = split(first);
    for other in &infos[1..] {
        let (t, n) = split(other);
        if t != text {
            return first.clone();
        }
        for (a, b) in total.iter_mut().zip(n) {
            *a = a.saturating_add(b);
        }
    }
    let mut out = String::new();
    for (i, t) in text.iter().enumerate() {
        out.push_str(t);
        if let Some(n) = total.get(i) {
            out.push_str(&n.to_string());
        }
    }
    out
}
