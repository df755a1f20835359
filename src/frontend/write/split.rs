//! An INSERT into a routed (sharded or broadcast) rule table: each row
//! placed by its shard key (the id, or another column), the statement split
//! per shard and run atomically (XA) when its rows go to several, the
//! parts' replies combined into one OK; and where one execute of a prepared
//! INSERT goes. The router (`route/`) and the id filler (`inject`) both
//! send INSERTs through here.

use crate::collation::Charset;
use crate::frontend::errors::refuse;
use crate::frontend::oks::{combined_ok, one_copy, PartOk};
use crate::frontend::session::{CmdError, Session};
use crate::frontend::shardkey::{self, KeyType, Purpose};
use crate::frontend::write::target::InsertTargets;
use crate::frontend::write::upsert::{After, Tracked};
use crate::protocol::consts::cap;
use crate::protocol::reply;
use crate::rules::TableEntry;
use crate::shard::placement::KeyValue;
use crate::sql::route::KeyArg;
use crate::sql::{QueryRewrite, Report, RowKey};
use std::collections::BTreeMap;

impl Session {
    /// An INSERT/REPLACE into a routed table (`rw` has exactly one
    /// statement, planned with its rows); `ids` are allocated, `plain` as in
    /// `inject` (ids written plainly, reported by idgate).
    pub(in crate::frontend) async fn insert_routed(
        &mut self,
        rw: &QueryRewrite,
        ids: &[u64],
        report: Report,
    ) -> Result<(), CmdError> {
        let Some(rules) = self.rules.clone() else {
            return Ok(());
        };
        let st = &rw.statements()[0];
        let Some(hit) = &st.rule else {
            return Ok(());
        };
        let Some(entry) = hit.routed.and_then(|i| rules.entries().get(i)) else {
            return Ok(());
        };
        let Some(placement) = entry.placement() else {
            return Ok(());
        };
        let (ty, charset) = self.insert_key_ctx(&hit.table, entry).await?;
        // Which rows go where.
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        if placement.is_broadcast() {
            for &s in placement.shards() {
                groups.insert(s, (0..st.rows.len()).collect());
            }
        } else {
            if st.rows.is_empty() {
                return Err(refuse(format!(
                    "INSERT into sharded table {}: its rows could not be located in the statement",
                    hit.table
                )));
            }
            for (i, r) in st.rows.iter().enumerate() {
                // Sharded by another column: the row's value of it (the
                // planner refused rows without a literal there).
                let key = match st.shard_keys.get(i) {
                    Some(KeyArg::Value(v)) => Some(v.clone()),
                    Some(KeyArg::Param(_)) => None,
                    None => match r.key {
                        RowKey::Generated(slot) => ids.get(slot).copied(),
                        RowKey::Explicit(v) => Some(v),
                        RowKey::Unknown => None,
                    }
                    .map(|id| KeyValue::Int(i128::from(id))),
                };
                let Some(key) = key else {
                    return Err(refuse(format!(
                        "INSERT into sharded table {}: row {} gives shard key `{}` a value idgate cannot evaluate; write an integer literal, or NULL/DEFAULT/0 for a generated id",
                        hit.table,
                        i + 1,
                        hit.column
                    )));
                };
                let row_error = |e: String| {
                    refuse(format!(
                        "INSERT into sharded table {}: row {}: shard key column `{}`: {e}",
                        hit.table,
                        i + 1,
                        entry.shard_key().unwrap_or_default()
                    ))
                };
                let key = shardkey::canonical(&key, placement, ty, charset, Purpose::Store)
                    .map_err(row_error)?
                    .unwrap_or(key);
                let shard = placement
                    .shard_of(&key)
                    .map_err(|e| row_error(e.to_string()))?;
                groups.entry(shard).or_default().push(i);
            }
        }
        let shards: Vec<usize> = groups.keys().copied().collect();
        self.check_write(&shards)?;
        let first_id = (st.generated > 0)
            .then(|| ids.get(st.first_slot).copied())
            .flatten();
        if let [shard] = shards[..] {
            // The whole statement on one shard: as without sharding.
            self.send_rewrite(shard, rw, ids, &[report]).await?;
            return Ok(());
        }
        let broadcast = placement.is_broadcast();
        let mut parts = Vec::with_capacity(groups.len());
        for (&shard, rows) in &groups {
            let mut out = String::from("\x03");
            if broadcast {
                rw.render_with(ids, None, &|_| report, &mut out)
                    .map_err(CmdError::Sql)?;
            } else {
                rw.render_rows(0, rows, ids, report, &mut out)
                    .map_err(CmdError::Sql)?;
            }
            parts.push((shard, out.into_bytes()));
        }
        let returning = report == Report::Returning;
        let tracked = matches!(report, Report::Track | Report::Returning);
        // Each part's first generated id (the one that saves the shard's value).
        let part_first: Vec<(usize, u64)> = groups
            .iter()
            .filter_map(|(&shard, rows)| {
                let first = if broadcast {
                    first_id
                } else {
                    rows.iter()
                        .find_map(|&i| match st.rows.get(i).map(|r| r.key) {
                            Some(RowKey::Generated(s)) => ids.get(s).copied(),
                            _ => None,
                        })
                };
                first.map(|f| (shard, f))
            })
            .collect();
        let oks = match self.run_write(parts, returning).await {
            Ok(oks) => oks,
            Err(e) => {
                if tracked {
                    // Undone: the shards that saved their value get it back.
                    for (shard, first) in part_first {
                        if self.backends.is_open(shard) {
                            let _ = self.after_tracked(shard, After::Failed, &[first]).await;
                        }
                    }
                }
                return Err(e);
            }
        };
        let found_rows = self.login.capabilities & cap::FOUND_ROWS != 0;
        let u = st.upsert.as_deref();
        let ignore = u.is_some_and(|u| u.ignore);
        let odku = u.is_some_and(|u| u.odku_end.is_some());
        // Rows of the whole statement, for its info text.
        let total_rows = if broadcast { 0 } else { st.rows.len() };
        if tracked {
            return self
                .split_tracked(st, ids, &groups, &oks, broadcast, found_rows)
                .await;
        }
        let plain = report == Report::Plain;
        // The shard holding the statement's first generated row keeps the
        // session's LAST_INSERT_ID().
        let home = match st
            .rows
            .iter()
            .position(|r| matches!(r.key, RowKey::Generated(s) if s == st.first_slot))
        {
            Some(row) => groups
                .iter()
                .find(|(_, rows)| rows.contains(&row))
                .map(|(&s, _)| s),
            None => None,
        };
        let oks = one_copy(&oks, broadcast);
        let inserted: u64 = oks.iter().map(|p| p.ok.affected_rows).sum();
        let last_insert_id = match first_id {
            Some(id) if !plain || inserted > 0 => id,
            _ => st.last_explicit().unwrap_or(0),
        };
        let dups = |p: &PartOk| one_row_duplicates(p, ignore, odku, found_rows, None);
        let ok = combined_ok(oks, last_insert_id, total_rows, &dups);
        // Only when the generated id is what is reported (not the explicit
        // id of a statement that stored no generated row).
        if let Some(id) = first_id.filter(|&id| id == last_insert_id) {
            let home = home.unwrap_or(shards[0]);
            if plain || broadcast {
                self.set_last_insert_id(home, id).await?;
            }
            self.last_id_home(home);
        }
        self.reply_packet(&ok).await
    }

    /// The reply to a tracked INSERT IGNORE / ON DUPLICATE KEY UPDATE that
    /// ran in parts on several shards (`oks` in the order of `groups`):
    /// reported as MariaDB would the whole statement (`upsert.rs`), from
    /// each part's register or RETURNING rows.
    async fn split_tracked(
        &mut self,
        st: &crate::sql::StmtInfo,
        ids: &[u64],
        groups: &BTreeMap<usize, Vec<usize>>,
        oks: &[PartOk],
        broadcast: bool,
        found_rows: bool,
    ) -> Result<(), CmdError> {
        let u = st.upsert.as_deref();
        let ignore = u.is_some_and(|u| u.ignore);
        let odku = u.is_some_and(|u| u.odku_end.is_some());
        let all_ids = ids
            .get(st.first_slot..st.first_slot + st.generated)
            .unwrap_or(&[]);
        let mut outcomes = Vec::with_capacity(oks.len());
        for ((_, rows), ok) in groups.iter().zip(oks) {
            // The part's generated ids, and the id its last row was written with.
            let key_id = |k: Option<RowKey>| match k {
                Some(RowKey::Generated(s)) => ids.get(s).copied(),
                Some(RowKey::Explicit(v)) => Some(v),
                _ => None,
            };
            let part_rows: Vec<usize> = if broadcast {
                (0..st.rows.len()).collect()
            } else {
                rows.clone()
            };
            let part_ids: Vec<u64> = part_rows
                .iter()
                .filter_map(|&i| match st.rows.get(i).map(|r| r.key) {
                    Some(RowKey::Generated(s)) => ids.get(s).copied(),
                    _ => None,
                })
                .collect();
            let last_row = key_id(
                part_rows
                    .last()
                    .and_then(|&i| st.rows.get(i))
                    .map(|r| r.key),
            );
            let t = Tracked {
                ids: &part_ids,
                rows: part_rows.len(),
                ignore,
                odku,
                last_row,
            };
            outcomes.push(match &ok.returned {
                Some(r) => t.read_returned(r),
                None => t.read_ok(&ok.ok, &ok.info),
            });
        }
        let shards: Vec<usize> = groups.keys().copied().collect();
        // The first stored generated row of the statement (its ids go up
        // with the rows), and the part holding it.
        let position = |v: u64| all_ids.iter().position(|&x| x == v).unwrap_or(usize::MAX);
        let first = outcomes
            .iter()
            .enumerate()
            .filter_map(|(k, o)| o.stored.map(|v| (position(v), k, v)))
            .min();
        let report = match (first, broadcast) {
            (_, true) => outcomes.first().map_or(0, |o| o.report()),
            (Some((_, _, v)), false) => v,
            (None, false) => {
                let copied: u64 = outcomes.iter().map(|o| o.copied).sum();
                // The part holding the statement's last row.
                let last_part = groups
                    .values()
                    .position(|rows| rows.contains(&st.rows.len().saturating_sub(1)));
                match last_part.and_then(|k| outcomes.get(k)) {
                    Some(o) if copied > 0 => o.last,
                    _ => 0,
                }
            }
        };
        let part_rows: Vec<usize> = groups.values().map(Vec::len).collect();
        let dups = |p: &PartOk| {
            let k = oks.iter().position(|q| std::ptr::eq(q, p));
            match (&p.returned, k.and_then(|k| part_rows.get(k))) {
                // INSERT IGNORE: every row not stored.
                (Some(r), Some(&n)) => (n as u64).saturating_sub(r.len() as u64),
                _ => {
                    let inserted = k.and_then(|k| outcomes.get(k)).map(|o| o.stored.is_some());
                    one_row_duplicates(p, ignore, odku, found_rows, inserted)
                }
            }
        };
        let total_rows = if broadcast { 0 } else { st.rows.len() };
        let ok = combined_ok(one_copy(oks, broadcast), report, total_rows, &dups);
        // Each shard's LAST_INSERT_ID(): the part with the first stored row
        // holds the session's value (home); the others are clobbered and
        // get it from home when a statement needs it (lastid.rs). Without a
        // stored row, every shard gets its saved value back.
        let home_part = match (first, broadcast) {
            (Some((_, k, _)), false) => Some(k),
            (_, true) if outcomes.first().is_some_and(|o| o.stored.is_some()) => Some(0),
            _ => None,
        };
        for (k, (&shard, o)) in shards.iter().zip(&outcomes).enumerate() {
            let after = match home_part {
                Some(h) if h == k || broadcast => o.after(),
                Some(_) => continue,
                None => After::Restore,
            };
            self.after_tracked(shard, after, all_ids).await?;
        }
        if let Some(h) = home_part.and_then(|k| shards.get(k)) {
            self.last_id_home(*h);
        }
        self.reply_packet(&ok).await
    }

    /// The shard to prepare an INSERT into a rule table on.
    pub(in crate::frontend) fn insert_prepare_shard(
        &self,
        plan: &crate::sql::PrepareRewrite,
    ) -> usize {
        self.placement_at(plan.rule.routed)
            .map(|p| p.shards()[0])
            .unwrap_or(0)
    }
    /// Where one execute of a prepared INSERT into a routed table goes,
    /// from the ids of its rows (generated and explicit) or the shard key
    /// values bound: one shard, every copy of a broadcast table, or
    /// [`InsertTargets::Split`] when its rows go to several shards.
    pub(in crate::frontend) fn prepared_insert_shards(
        &self,
        plan: &crate::sql::PrepareRewrite,
        ids: &[u64],
        params: &dyn Fn(usize) -> Option<KeyValue>,
        (ty, charset): (Option<KeyType>, Charset),
    ) -> Result<InsertTargets, CmdError> {
        let table = &plan.rule.table;
        let Some(placement) = self.placement_at(plan.rule.routed) else {
            return Ok(InsertTargets::Shards(vec![0]));
        };
        if placement.is_broadcast() {
            // Every copy.
            return Ok(InsertTargets::Shards(placement.shards().to_vec()));
        }
        let keys: Vec<KeyValue> = if plan.shard_keys.is_empty() {
            // Sharded by the id column: the ids of the rows.
            if ids.len() < plan.row_count() {
                return Err(refuse(format!(
                    "prepared INSERT into sharded table {table}: a row's shard key `{}` is bound to a value idgate cannot evaluate; bind an integer, or NULL/0 for a generated id",
                    plan.rule.column
                )));
            }
            ids.iter().map(|&k| KeyValue::Int(i128::from(k))).collect()
        } else {
            let mut keys = Vec::with_capacity(plan.shard_keys.len());
            for k in &plan.shard_keys {
                keys.push(match k {
                    KeyArg::Value(v) => v.clone(),
                    KeyArg::Param(i) => params(*i).ok_or_else(|| {
                        refuse(format!(
                            "prepared INSERT into sharded table {table}: shard key parameter {} is bound to a value idgate cannot place (bind an integer or a string)",
                            i + 1
                        ))
                    })?,
                });
            }
            keys
        };
        let mut shard = None;
        for k in &keys {
            let key_error = |e: String| {
                refuse(format!(
                    "INSERT into sharded table {table}: shard key column `{}`: {e}",
                    self.entry_at(plan.rule.routed)
                        .and_then(TableEntry::shard_key)
                        .unwrap_or_default()
                ))
            };
            let k = shardkey::canonical(k, placement, ty, charset, Purpose::Store)
                .map_err(key_error)?
                .unwrap_or_else(|| k.clone());
            let s = placement
                .shard_of(&k)
                .map_err(|e| key_error(e.to_string()))?;
            if shard.is_some_and(|x| x != s) {
                return Ok(InsertTargets::Split);
            }
            shard = Some(s);
        }
        Ok(InsertTargets::Shards(vec![
            shard.unwrap_or_else(|| placement.shards()[0])
        ]))
    }
}

/// The `Duplicates` count of a part of a split INSERT: from its info text,
/// or for a one-row part (MariaDB sends no info for one row) from its
/// affected rows: IGNORE counts a row not written, ON DUPLICATE KEY UPDATE
/// a row it changed (any row it found, with CLIENT_FOUND_ROWS; `inserted`
/// tells an insert from an unchanged row there when known).
fn one_row_duplicates(
    p: &PartOk,
    ignore: bool,
    odku: bool,
    found_rows: bool,
    inserted: Option<bool>,
) -> u64 {
    if let Some((_, d)) = reply::parse_records(&p.info) {
        return d;
    }
    let affected = p.ok.affected_rows;
    match (odku, ignore) {
        (true, _) if affected == 2 => 1,
        (true, _) if found_rows && affected == 1 => u64::from(inserted == Some(false)),
        (true, _) => 0,
        (false, true) => u64::from(affected == 0),
        (false, false) => 0,
    }
}
