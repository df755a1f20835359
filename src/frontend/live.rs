//! The rules in force, and reloading them while idgate runs.
//!
//! [`LiveRules`] holds the current [`RuleSet`] behind an atomic pointer and
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
//! returned (and logged by the caller).

use crate::frontend::shared::Shared;
use crate::rules::diff::RuleDiff;
use crate::rules::RuleSet;
use arc_swap::ArcSwapOption;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;
use tracing::{error, info};

/// The rule set in force, its version, and how reloads went.
#[derive(Debug)]
pub struct LiveRules {
    current: ArcSwapOption<RuleSet>,
    /// 1 for the rules idgate started with; +1 per applied reload.
    version: AtomicU64,
    status: parking_lot::Mutex<RulesStatus>,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
}

/// What operators see of the rules (`SHOW IDGATE STATUS`, /metrics).
#[derive(Debug, Clone)]
pub struct RulesStatus {
    /// When the rules in force were applied.
    pub applied_at: SystemTime,
    /// Reloads applied.
    pub reloads: u64,
    /// Reloads refused (the rules in force stayed).
    pub failed_reloads: u64,
    /// When the last reload was tried, applied or not.
    pub last_attempt: Option<SystemTime>,
    /// Why the last reload was refused, if it was.
    pub last_error: Option<String>,
}

impl LiveRules {
    /// The rules idgate starts with (`None`: it only relays).
    pub fn new(rules: Option<Arc<RuleSet>>) -> LiveRules {
        LiveRules {
            current: ArcSwapOption::new(rules),
            version: AtomicU64::new(1),
            status: parking_lot::Mutex::new(RulesStatus {
                applied_at: SystemTime::now(),
                reloads: 0,
                failed_reloads: 0,
                last_attempt: None,
                last_error: None,
            }),
            reloading: tokio::sync::Mutex::new(()),
        }
    }

    /// The rules in force.
    #[inline]
    pub fn load(&self) -> Option<Arc<RuleSet>> {
        self.current.load_full()
    }

    /// Whether idgate fills ids at all (it has a rules directory).
    pub fn is_some(&self) -> bool {
        self.current.load().is_some()
    }

    /// The version of the rules in force.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// A copy of the reload status.
    pub fn status(&self) -> RulesStatus {
        self.status.lock().clone()
    }

    fn publish(&self, rules: RuleSet) -> u64 {
        self.current.store(Some(Arc::new(rules)));
        let v = self.version.fetch_add(1, Ordering::AcqRel) + 1;
        let mut s = self.status.lock();
        s.applied_at = SystemTime::now();
        s.reloads += 1;
        s.last_attempt = Some(s.applied_at);
        s.last_error = None;
        v
    }

    fn refused(&self, why: &str) {
        let mut s = self.status.lock();
        s.failed_reloads += 1;
        s.last_attempt = Some(SystemTime::now());
        s.last_error = Some(why.to_string());
    }
}

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
        let _one = self.rules.reloading.lock().await;
        let r = self.try_reload().await;
        match &r {
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
                self.rules.refused(e);
                error!("rules reload refused, the rules in force stay:\n{e}");
            }
        }
        r
    }

    async fn try_reload(&self) -> Result<Reloaded, String> {
        let (Some(cfg), Some(allocator)) = (&self.config.rules, &self.allocator) else {
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
        let old = self.rules.load().unwrap_or_default();
        let diff = crate::rules::diff::diff(&old, &new).map_err(|e| e.to_string())?;
        if diff.is_empty() {
            return Ok(Reloaded {
                version: self.rules.version(),
                diff,
            });
        }
        let mut problems = Vec::new();
        for (table, from, to) in &diff.moved {
            let Some(prev) = allocator.generator(from) else {
                continue; // never ran: it issued nothing
            };
            let r = match allocator.generator(to) {
                Some(next) => next.check_takes_over(&prev).await,
                None => {
                    let rule = new
                        .generator(to)
                        .expect("the loader checked table generators");
                    prev.check_new_takes_over(rule).await
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
            return Err(problems.join("\n"));
        }
        let added: Vec<_> = new
            .generators()
            .iter()
            .filter(|g| diff.generators_added.contains(&g.name))
            .filter(|g| allocator.generator(&g.name).is_none())
            .cloned()
            .collect();
        // A generator removed earlier and added back: it is still running,
        // so it is tuned (or refused) like a changed one.
        let tuned: Vec<_> = new
            .generators()
            .iter()
            .filter(|g| {
                diff.generators_tuned.iter().any(|(n, _)| *n == g.name)
                    || (diff.generators_added.contains(&g.name)
                        && allocator.generator(&g.name).is_some())
            })
            .cloned()
            .collect();
        allocator
            .apply(&added, &tuned)
            .await
            .map_err(|e| e.to_string())?;
        let version = self.rules.publish(new);
        Ok(Reloaded { version, diff })
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
