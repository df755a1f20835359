//! The rules in force: [`LiveRules`] holds the current [`RuleSet`] behind
//! an atomic pointer and a version number, with what operators see of
//! reloads ([`RulesStatus`]). A state type only: reloading it is
//! `live.rs`' (which uses [`crate::frontend::shared::Shared`], which holds
//! this), so the two files do not depend on each other in a circle.

use crate::rules::views::ViewCatalog;
use crate::rules::RuleSet;
use arc_swap::ArcSwapOption;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// The rule set in force, its version, and how reloads went.
#[derive(Debug)]
pub struct LiveRules {
    current: ArcSwapOption<RuleSet>,
    /// 1 for the rules idgate started with; +1 per applied reload.
    version: AtomicU64,
    status: parking_lot::Mutex<RulesStatus>,
    /// One reload at a time.
    pub(crate) reloading: tokio::sync::Mutex<()>,
    /// The shards fold table names: every rule set matches them so
    /// ([`RuleSet::fold_names`]).
    fold: AtomicBool,
    /// The shards' views as last read (`frontend/views.rs`): every rule
    /// set in force is given them ([`RuleSet::attach_views`]). Held while
    /// a rule set is stored, so a new set and new views never cross.
    views: parking_lot::Mutex<Arc<ViewCatalog>>,
    /// One reading of the views at a time; requests that waited through
    /// a reading that started after them are served by it.
    pub(crate) reading_views: tokio::sync::Mutex<()>,
    pub(crate) views_asked: Coalesce,
    /// +1 whenever the rule set in force is replaced: a new version, or
    /// the same rules with new views. Sessions take the set in force when
    /// it moved (the version alone would miss new views).
    generation: AtomicU64,
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
    /// `source = "etcd"`: the published version that could not be applied
    /// last (the rules in force stayed); cleared when a version applies.
    pub failed_version: Option<u64>,
    /// `source = "etcd"`: where the rules idgate started with came from,
    /// when not from etcd (the cache file, etcd being unreachable).
    pub started_from: Option<String>,
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
                failed_version: None,
                started_from: None,
            }),
            reloading: tokio::sync::Mutex::new(()),
            fold: AtomicBool::new(false),
            views: parking_lot::Mutex::new(Arc::default()),
            reading_views: tokio::sync::Mutex::new(()),
            views_asked: Coalesce::default(),
            generation: AtomicU64::new(1),
        }
    }

    /// The shards compare table names case-insensitively: the rules in
    /// force, and every later version, do too (set at start-up, before
    /// any session).
    pub fn fold_names(&self) {
        self.fold.store(true, Ordering::Release);
        let _views = self.views.lock();
        if let Some(cur) = self.current.load_full() {
            let mut rules = (*cur).clone();
            rules.fold_names(true);
            self.current.store(Some(Arc::new(rules)));
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The shards' views as last read.
    pub fn views(&self) -> Arc<ViewCatalog> {
        self.views.lock().clone()
    }

    /// New views read from the shards: the rules in force are given them
    /// (same version; sessions see them at their next command). `false`
    /// when they are what was known already.
    pub(crate) fn set_views(&self, catalog: ViewCatalog) -> bool {
        let mut views = self.views.lock();
        if **views == catalog {
            return false;
        }
        let catalog = Arc::new(catalog);
        *views = catalog.clone();
        if let Some(cur) = self.current.load_full() {
            let mut rules = (*cur).clone();
            rules.attach_views(catalog);
            self.current.store(Some(Arc::new(rules)));
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        true
    }

    /// Moves whenever the rule set in force is replaced (a session
    /// compares it once per command).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
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

    /// `source = "etcd"`: the rules idgate starts with are published
    /// version `version` (0: nothing published yet), read from etcd or,
    /// said by `from`, from elsewhere (the cache file).
    pub fn start_at(&self, version: u64, from: Option<String>) {
        self.version.store(version, Ordering::Release);
        self.status.lock().started_from = from;
    }

    /// Makes `rules` the rules in force: as version `version` (a published
    /// version), or the next one.
    pub(crate) fn publish(&self, mut rules: RuleSet, version: Option<u64>) -> u64 {
        rules.fold_names(self.fold.load(Ordering::Acquire));
        let views = self.views.lock();
        rules.attach_views(views.clone());
        self.current.store(Some(Arc::new(rules)));
        self.generation.fetch_add(1, Ordering::AcqRel);
        drop(views);
        let v = match version {
            Some(v) => {
                self.version.store(v, Ordering::Release);
                v
            }
            None => self.version.fetch_add(1, Ordering::AcqRel) + 1,
        };
        let mut s = self.status.lock();
        s.applied_at = SystemTime::now();
        s.reloads += 1;
        s.last_attempt = Some(s.applied_at);
        s.last_error = None;
        s.failed_version = None;
        v
    }

    /// A reload (of published version `version`, if one) was refused.
    pub(crate) fn refused(&self, why: &str, version: Option<u64>) {
        let mut s = self.status.lock();
        s.failed_reloads += 1;
        s.last_attempt = Some(SystemTime::now());
        s.last_error = Some(why.to_string());
        s.failed_version = version;
    }
}

/// Requests for a piece of work that may be served by one run: each
/// request is numbered ([`Coalesce::ask`]); a run notes the last number
/// asked when it starts ([`Coalesce::start`]) and serves every request up
/// to it ([`Coalesce::done`]). A request whose number a finished run covers
/// needs no run of its own: a burst of DDL statements (or a client that
/// repeats one) costs one reading of the shards' views, not one each.
#[derive(Debug, Default)]
pub struct Coalesce {
    asked: AtomicU64,
    served: AtomicU64,
}

impl Coalesce {
    /// A new request's number.
    pub fn ask(&self) -> u64 {
        self.asked.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Under the caller's lock: `None` when request `mine` was served by a
    /// run that started after it; otherwise the number this run serves up to.
    pub fn start(&self, mine: u64) -> Option<u64> {
        if self.served.load(Ordering::Acquire) >= mine {
            return None;
        }
        Some(self.asked.load(Ordering::Acquire))
    }

    /// The run that started at `upto` finished.
    pub fn done(&self, upto: u64) {
        self.served.fetch_max(upto, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::Coalesce;

    #[test]
    fn one_run_serves_the_requests_made_before_it_started() {
        let c = Coalesce::default();
        let a = c.ask();
        let run1 = c.start(a).expect("the first request runs");
        // Asked while run 1 is under way: not served by it.
        let (b, d) = (c.ask(), c.ask());
        c.done(run1);
        let run2 = c.start(b).expect("b was asked after run 1 started");
        c.done(run2);
        assert_eq!(c.start(d), None, "run 2 started after d was asked");
        assert_eq!(c.start(a), None);
        let e = c.ask();
        assert!(c.start(e).is_some(), "a new request after every run");
    }
}
