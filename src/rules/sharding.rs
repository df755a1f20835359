//! The sharding keys of a `[[table]]` entry (`shard_key`, `sharding`,
//! `shards`, `ranges`, `broadcast`): their checks, each problem at its line,
//! and the [`Placement`] they describe (see `shard::placement` for the
//! formulas).

use super::names::check_ident;
use super::spec::{RangeRule, TableRule};
use crate::shard::placement::{Placement, Sharding};

/// Values `[[table]] sharding` may take.
pub const SHARDING_KINDS: &[&str] = &["mod", "hash", "range"];

/// Lines (1-based) of the sharding keys of one `[[table]]` entry.
pub(super) struct ShardingLines {
    /// The entry's `name`: where problems without a line of their own go.
    pub name: usize,
    pub shard_key: Option<usize>,
    pub sharding: Option<usize>,
    pub hash: Option<usize>,
    /// `shards`: the key's line and each name's line.
    pub shards: Option<(usize, Vec<usize>)>,
    /// `ranges`: the key's line and each entry's lines.
    pub ranges: Option<(usize, Vec<RangeLines>)>,
}

/// Lines of one `ranges` entry.
pub(super) struct RangeLines {
    pub entry: usize,
    pub from: Option<usize>,
    pub to: Option<usize>,
    pub shard: usize,
}

/// Checks the sharding keys of one table rule and builds its placement
/// (`None`: not sharded, the default shard). Problems are `(line,
/// reason)`; the placement is `None` when there are any.
pub(super) fn placement(
    names: &[String],
    t: &TableRule,
    l: &ShardingLines,
) -> (Vec<(usize, String)>, Option<Placement>) {
    let mut found: Vec<(usize, String)> = Vec::new();
    let broadcast = t.broadcast == Some(true);
    let kind = t.sharding.as_deref();
    let line_or_name = |x: Option<usize>| x.unwrap_or(l.name);

    if let Some(key) = &t.shard_key {
        let line = line_or_name(l.shard_key);
        // Any column of the table: the id column (rows are placed by the id
        // idgate fills or checks) or another one (placed by the value each
        // row gives it; checked against the table when a statement is planned).
        if let Err(reason) = check_ident("shard_key", key) {
            found.push((line, reason));
        }
        if broadcast {
            found.push((line, "a broadcast table has no shard_key".into()));
        } else if kind.is_none() {
            found.push((
                line,
                format!(
                    "shard_key without sharding: add sharding = \"mod\", \"hash\" or \"range\" (or remove shard_key: the table then lives on the default shard `{}`)",
                    names.first().map_or("", String::as_str)
                ),
            ));
        }
    }
    if let Some(k) = kind {
        let line = line_or_name(l.sharding);
        if !SHARDING_KINDS.contains(&k) {
            found.push((
                line,
                format!("sharding `{k}` is not one of {}", SHARDING_KINDS.join(", ")),
            ));
        }
        if broadcast {
            found.push((line, "a broadcast table has no sharding".into()));
        } else if t.shard_key.is_none() {
            found.push((line, "sharding without shard_key".into()));
        }
        if k == "range" && t.ranges.is_none() && !broadcast {
            found.push((
                line,
                "sharding = \"range\" needs ranges = [ { to = ..., shard = \"...\" }, ..., { from = ..., shard = \"...\" } ]".into(),
            ));
        }
    }

    let by_bytes = match t.hash.as_deref() {
        None | Some("collation") => false,
        Some("bytes") => true,
        Some(other) => {
            found.push((
                line_or_name(l.hash),
                format!("hash `{other}` is not one of collation, bytes"),
            ));
            false
        }
    };
    if t.hash.is_some() && kind != Some("hash") {
        found.push((
            line_or_name(l.hash),
            "hash = \"...\" is for sharding = \"hash\" only".into(),
        ));
    }

    let index_of = |name: &str| names.iter().position(|n| n == name);
    let unknown = |name: &str| {
        format!(
            "unknown shard `{name}` (the config's shards: {})",
            names.join(", ")
        )
    };

    // `shards`: the list of a mod/hash/broadcast table.
    let mut list: Option<Vec<usize>> = None;
    if let Some(given) = &t.shards {
        let (line, entry_lines) = match &l.shards {
            Some((line, entries)) => (*line, entries.as_slice()),
            None => (l.name, &[][..]),
        };
        let entry_line = |i: usize| entry_lines.get(i).copied().unwrap_or(line);
        if kind == Some("range") {
            found.push((
                line,
                "a range table names its shards in `ranges`, not in `shards`".into(),
            ));
        } else if !broadcast && kind.is_none() {
            found.push((
                line,
                "shards without sharding or broadcast = true (a table without shard_key lives on the default shard)".into(),
            ));
        }
        if given.is_empty() {
            found.push((line, "shards is empty: name at least one shard".into()));
        }
        let mut indexes = Vec::with_capacity(given.len());
        for (i, name) in given.iter().enumerate() {
            if given[..i].contains(name) {
                found.push((
                    entry_line(i),
                    format!("shard `{name}` is listed twice in shards"),
                ));
            }
            match index_of(name) {
                Some(x) => indexes.push(x),
                None => found.push((entry_line(i), unknown(name))),
            }
        }
        list = Some(indexes);
    }

    // `ranges`: the intervals of a range table.
    let mut range: Option<(usize, Vec<(i128, usize)>)> = None;
    if let Some(ranges) = &t.ranges {
        let (line, entry_lines) = match &l.ranges {
            Some((line, entries)) => (*line, entries.as_slice()),
            None => (l.name, &[][..]),
        };
        if broadcast {
            found.push((line, "a broadcast table has no ranges".into()));
        } else if kind != Some("range") {
            found.push((line, "ranges without sharding = \"range\"".into()));
        } else if ranges.is_empty() {
            found.push((
                line,
                "ranges is empty: write at least one { shard = \"...\" }".into(),
            ));
        } else {
            let (first, rest) =
                check_ranges(ranges, entry_lines, line, &index_of, &unknown, &mut found);
            range = Some((first, rest));
        }
    }

    if !found.is_empty() {
        return (found, None);
    }
    let every = || (0..names.len()).collect::<Vec<usize>>();
    let built = match (broadcast, kind) {
        (true, _) => Placement::broadcast(list.unwrap_or_else(every)),
        (false, Some("mod")) => Placement::modulo(list.unwrap_or_else(every)),
        (false, Some("hash")) if by_bytes => Placement::hash_bytes(list.unwrap_or_else(every)),
        (false, Some("hash")) => Placement::hash(list.unwrap_or_else(every)),
        (false, Some("range")) => match &range {
            Some((first, rest)) => Placement::range(*first, rest),
            None => return (found, None),
        },
        _ => return (found, None),
    };
    match built {
        Ok(p) => (found, Some(p)),
        Err(e) => (vec![(l.name, format!("cannot place the table: {e}"))], None),
    }
}

/// Checks `ranges` (contiguous, ordered, first without `from`, last without
/// `to`, known shards), pushing `(line, reason)` problems; returns the
/// placement's first shard and `(from, shard)` of the others.
fn check_ranges(
    ranges: &[RangeRule],
    entry_lines: &[RangeLines],
    key_line: usize,
    index_of: &dyn Fn(&str) -> Option<usize>,
    unknown: &dyn Fn(&str) -> String,
    found: &mut Vec<(usize, String)>,
) -> (usize, Vec<(i128, usize)>) {
    let last = ranges.len().saturating_sub(1);
    let mut first_shard = 0;
    let mut rest = Vec::with_capacity(last);
    for (i, r) in ranges.iter().enumerate() {
        let lines = entry_lines.get(i);
        let entry = lines.map_or(key_line, |x| x.entry);
        let from_line = lines.and_then(|x| x.from).unwrap_or(entry);
        let to_line = lines.and_then(|x| x.to).unwrap_or(entry);
        let shard_line = lines.map_or(entry, |x| x.shard);
        let nth = i + 1;
        match (i, r.from) {
            (0, Some(f)) => found.push((
                from_line,
                format!("the first range has from = {f}: leave `from` out, it starts at the smallest key"),
            )),
            (_, None) if i > 0 => found.push((
                entry,
                format!("range {nth} has no `from`: only the first range starts at the smallest key"),
            )),
            _ => {}
        }
        match r.to {
            Some(to) if i == last => found.push((
                to_line,
                format!("the last range has to = {to}: leave `to` out, it runs to the largest key"),
            )),
            None if i < last => found.push((
                entry,
                format!("range {nth} has no `to`: only the last range runs to the largest key"),
            )),
            _ => {}
        }
        if let (Some(f), Some(to)) = (r.from, r.to) {
            if f >= to {
                found.push((
                    from_line,
                    format!("range {nth} is empty: from = {f} is not below to = {to}"),
                ));
            }
        }
        if i > 0 {
            if let (Some(prev), Some(f)) = (ranges.get(i - 1).and_then(|p| p.to), r.from) {
                if f > prev {
                    found.push((
                        from_line,
                        format!(
                            "gap before range {nth}: keys {prev} to {} are in no range (each `from` must equal the previous `to`)",
                            i128::from(f) - 1
                        ),
                    ));
                } else if f < prev {
                    found.push((
                        from_line,
                        format!(
                            "range {nth} (from = {f}) overlaps the previous range (to = {prev}): ranges must be in ascending order and each `from` must equal the previous `to`"
                        ),
                    ));
                }
            }
        }
        let shard = match index_of(&r.shard) {
            Some(x) => x,
            None => {
                found.push((shard_line, unknown(&r.shard)));
                0
            }
        };
        if i == 0 {
            first_shard = shard;
        } else if let Some(f) = r.from {
            rest.push((i128::from(f), shard));
        }
    }
    (first_shard, rest)
}

/// One line about a placement: `hash(id) over s0, s1`, `range(id): ..100 s0,
/// 100.. s1`, `broadcast to s0, s1 (reads from s0)`.
pub(super) fn describe(names: &[String], key: Option<&str>, p: &Placement) -> String {
    let name = |i: &usize| names.get(*i).map_or("?", String::as_str);
    let list = || p.list().iter().map(name).collect::<Vec<_>>().join(", ");
    let key = key.unwrap_or("");
    match p.kind() {
        Sharding::Broadcast => format!(
            "broadcast to {} (reads from {})",
            list(),
            name(&p.read_shard())
        ),
        Sharding::Mod | Sharding::Hash => format!("{}({key}) over {}", p.kind(), list()),
        Sharding::Range => {
            let mut parts = Vec::new();
            let b = p.bounds();
            for (i, s) in p.list().iter().enumerate() {
                let from = i.checked_sub(1).and_then(|j| b.get(j));
                let to = b.get(i);
                let f = from.map_or(String::new(), i128::to_string);
                let t = to.map_or(String::new(), i128::to_string);
                parts.push(format!("{f}..{t} {}", name(s)));
            }
            format!("range({key}): {}", parts.join(", "))
        }
    }
}
