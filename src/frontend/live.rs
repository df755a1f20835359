//! The rules in force, and reloading them while idgate runs.
//!
//! [`crate::frontend::inforce::LiveRules`] holds the current [`RuleSet`] behind an atomic pointer and
//! a version number. A session takes a snapshot at the start of a command
//! when the version moved and it is not inside a transaction (so a
//! statement runs on the rules it started with, and a transaction on one
//! rule set from its first statement to its end); the check is one atomic
//! load per command, the lookups stay lock-free.
//!
//! [`Shared::reload_rules`] (`kill -HUP`, `IDGATE RELOAD RULES`) reads the
//! rules directory again and validates the new set whole: the loader's
//! checks (file:line), then what may change live ([`crate::rules::diff`]),
//! then the moves of tables to other generators against the store. Only
//! then does it add and tune generators ([`crate::idgen::Allocator::apply`])
//! and publish the new set. On any error nothing changes and the errors are
//! returned (and logged by the caller). Either way the shards' views are
//! read again (`views.rs`).
//!
//! With `[rules] source = "etcd"` the rules come from the published
//! versions instead of the directory: `follow.rs` loads each version and
//! applies it through the same [`Shared::apply_rules`], and the version
//! number in force is the published one.

use crate::frontend::shared::Shared;
use crate::rules::diff::RuleDiff;
use crate::rules::RuleSet;
use std::time::SystemTime;
use tracing::{error, info};

/// An applied reload.
#[derive(Debug, Clone)]
pub struct Reloaded {
    /// The version now in force.
    pub version: u64,
    /// What changed (empty: the files say what was in force already; the
    /// version does not move then).
    pub diff: RuleDiff,
}

impl Shared {
    /// Reads the rules directory again and applies it, all or nothing (see
    /// the module doc). Errors: every reason, one per line (`file:line:
    /// reason` where there is a place).
    pub async fn reload_rules(&self) -> Result<Reloaded, String> {
        if self
            .config
            .rules
            .as_ref()
            .is_some_and(|r| r.source == crate::config::RulesSource::Etcd)
        {
            // The published version is the source: catch up with it.
            let r = self.catch_up().await.map_err(|e| e.why);
            self.read_views().await;
            return r;
        }
        let r = {
            let _one = self.rules.reloading.lock().await;
            let r = self.try_reload().await;
            log_outcome(&r);
            if let Err(e) = &r {
                self.rules.refused(e, None);
            }
            r
        };
        // Views made on a shard directly are learned here too.
        self.read_views().await;
        r
    }

    async fn try_reload(&self) -> Result<Reloaded, String> {
        let Some(cfg) = &self.config.rules else {
            return Err("idgate runs without [rules] (it only relays): there are no rules to reload; add [rules] to the config and restart".into());
        };
        let dir = cfg.dir.clone();
        let shards: Vec<String> = self.config.shards.iter().map(|s| s.name.clone()).collect();
        let new = tokio::task::spawn_blocking(move || {
            RuleSet::load_dir(&dir, &shards, &crate::idgen::validate)
        })
        .await
        .map_err(|e| format!("reading the rules failed: {e}"))?
        .map_err(|e| e.to_string())?;
        self.apply_rules(new, None, None).await.map_err(|e| e.why)
    }

    /// Applies `new` (published version `version`, if one) with the checks
    /// of a reload (see the module doc). The caller holds `reloading`.
    /// `resharded`: the version is a resharding cutover's, which may
    /// change that one table's placement ([`crate::rules::diff::diff_resharded`]).
    pub(crate) async fn apply_rules(
        &self,
        new: RuleSet,
        version: Option<u64>,
        resharded: Option<&crate::rules::diff::Resharded>,
    ) -> Result<Reloaded, Refusal> {
        let refused = |why: String| Refusal {
            why,
            transient: false,
        };
        let Some(allocator) = &self.allocator else {
            return Err(refused("idgate runs without [rules] (it only relays): there are no rules to reload; add [rules] to the config and restart".into()));
        };
        let old = self.rules.load().unwrap_or_default();
        let diff = crate::rules::diff::diff_resharded(&old, &new, resharded)
            .map_err(|e| refused(e.to_string()))?;
        if diff.is_empty() && version.is_none_or(|v| v == self.rules.version()) {
            return Ok(Reloaded {
                version: self.rules.version(),
                diff,
            });
        }
        let mut problems = Vec::new();
        for (table, from, to) in &diff.moved {
            let r = match (allocator.generator(from), allocator.generator(to)) {
                (Some(prev), Some(next)) => next.check_takes_over(&prev).await,
                (Some(prev), None) => match new.generator(to) {
                    Some(rule) => prev.check_new_takes_over(rule).await,
                    None => Err(format!("generator {to:?} is not defined")),
                },
                // Not running (yet: started from the cache file while etcd
                // was down): checked from the store alone.
                (None, _) => {
                    let timeout =
                        std::time::Duration::from_millis(self.config.allocator.store_timeout_ms);
                    let moved = [(table.clone(), from.clone(), to.clone())];
                    crate::idgen::check_moves(
                        &allocator.store(),
                        old.generators(),
                        new.generators(),
                        &moved,
                        timeout,
                    )
                    .await
                    .into_iter()
                    .next()
                    .map_or(Ok(()), |(_, why)| Err(why))
                }
            };
            if let Err(why) = r {
                let origin = new
                    .entries()
                    .iter()
                    .find(|e| e.rule().name == *table)
                    .map(|e| format!("{}:{}: ", e.origin().file.display(), e.origin().line))
                    .unwrap_or_default();
                problems.push(format!(
                    "{origin}table {table:?} moves to another generator: {why}"
                ));
            }
        }
        if !problems.is_empty() {
            return Err(refused(problems.join("\n")));
        }
        let added: Vec<_> = new
            .generators()
            .iter()
            .filter(|g| diff.generators_added.contains(&g.name))
            .filter(|g| allocator.generator(&g.name).is_none())
            .cloned()
            .collect();
        // A generator removed earlier and added back: it is still running,
        // so it is tuned (or refused) like a changed one. One not running
        // yet (idgate started from its cache file while etcd was down) is
        // started with its new rule by `follow::start_pending`.
        let tuned: Vec<_> = new
            .generators()
            .iter()
            .filter(|g| allocator.generator(&g.name).is_some())
            .filter(|g| {
                diff.generators_tuned.iter().any(|(n, _)| *n == g.name)
                    || diff.generators_added.contains(&g.name)
            })
            .cloned()
            .collect();
        allocator.apply(&added, &tuned).await.map_err(|e| Refusal {
            transient: !matches!(
                e,
                crate::idgen::IdgenError::Invalid { .. } | crate::idgen::IdgenError::Duplicate(_)
            ),
            why: e.to_string(),
        })?;
        let version = self.rules.publish(new, version);
        Ok(Reloaded { version, diff })
    }
}

/// Why rules were not applied.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// Every reason, one per line.
    pub why: String,
    /// The store failed (trying again later may work), rather than the
    /// rules being refused.
    pub transient: bool,
}

/// Logs an applied or refused reload.
pub(crate) fn log_outcome(r: &Result<Reloaded, String>) {
    match r {
        Ok(done) if done.diff.is_empty() => {
            info!(version = done.version, "rules reloaded: nothing changed")
        }
        Ok(done) => {
            let summary: Vec<String> = done
                .diff
                .lines()
                .into_iter()
                .map(|(what, name, detail)| {
                    if detail.is_empty() {
                        format!("{what} {name}")
                    } else {
                        format!("{what} {name} ({detail})")
                    }
                })
                .collect();
            info!(
                version = done.version,
                "rules reloaded: {}",
                summary.join("; ")
            );
        }
        Err(e) => {
            error!("rules reload refused, the rules in force stay:\n{e}");
        }
    }
}

/// `t` as `YYYY-MM-DD HH:MM:SS` UTC (MySQL's DATETIME text).
pub fn utc(t: SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (y, m, d) = crate::idgen::format::civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}
