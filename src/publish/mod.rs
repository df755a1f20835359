//! Rules published through etcd (`[rules] source = "etcd"`): versions
//! under the allocator's prefix, pushed by DBAs with a compare-and-swap,
//! followed by every idgate.
//!
//! Store layout (keys relative to `[allocator] etcd_prefix`):
//! - `rules/current`: the number of the version in force (a counter);
//! - `rules/v/<n>`: version `n`, a [`Bundle`] (its files as text, who
//!   published it, when, what changed);
//! - `rules/meta/<n>`: its metadata alone, for `rules history`.
//!
//! A push writes all three in one transaction that compares
//! `rules/current`'s revision with the one the pusher read: of two DBAs
//! pushing at once, one wins, the other is told which version won and
//! nothing of its push is written. A version is never changed or deleted;
//! a rollback publishes an old version's files as a new version.
//!
//! Files: `mod.rs` (layout, push, history), `cache.rs` (the local copy
//! of the version last applied, `[rules] cache_file`), `start.rs` (the
//! rules idgate starts with: etcd, or the cache file while etcd is down),
//! `cli.rs` (the `idgate rules` commands that talk to the store).

pub mod cache;
pub mod cli;
pub mod start;

use std::sync::Arc;
use std::time::Duration;

use crate::idgen::Store;
use crate::rules::bundle::{Bundle, BundleFile, Meta};
use crate::rules::diff::RuleDiff;
use crate::rules::RuleSet;

/// The counter holding the version in force.
pub const CURRENT: &str = "rules/current";

/// Key of version `n`.
pub fn version_key(n: u64) -> String {
    format!("rules/v/{n}")
}

/// Key of version `n`'s metadata.
pub fn meta_key(n: u64) -> String {
    format!("rules/meta/{n}")
}

/// Who publishes (read from the OS by the command line, passed in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// OS user.
    pub user: String,
    /// Host name.
    pub host: String,
}

/// Why a push published nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// Another push moved `rules/current` after this one read it.
    #[error("{0}")]
    Lost(String),
    /// The new rules are refused (file:line: reason, one per line).
    #[error("{0}")]
    Refused(String),
    /// The files are the rules in force already.
    #[error("nothing to publish: version {0} in force has the same rules")]
    Unchanged(u64),
    /// The store failed.
    #[error("{0}")]
    Store(String),
}

/// The published versions of one store.
#[derive(Clone)]
pub struct Published {
    store: Arc<dyn Store>,
    /// Bound on each store call.
    timeout: Duration,
}

impl std::fmt::Debug for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Published")
            .field("store", &self.store.describe())
            .finish()
    }
}

impl Published {
    /// Versions kept in `store`; every call bounded by `timeout`.
    pub fn new(store: Arc<dyn Store>, timeout: Duration) -> Published {
        Published { store, timeout }
    }

    /// The store (for its checks of table moves).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    async fn bounded<T>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = Result<T, crate::idgen::StoreError>>,
    ) -> Result<T, String> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(format!("{what}: {} {e}", self.store.describe())),
            Err(_) => Err(format!(
                "{what}: {} did not answer within {:?}",
                self.store.describe(),
                self.timeout
            )),
        }
    }

    /// The version in force and the revision a push must compare with;
    /// `None`: nothing published yet.
    pub async fn current(&self) -> Result<Option<(u64, u64)>, String> {
        let v = self
            .bounded("reading the rules version", self.store.load(CURRENT))
            .await?;
        Ok(v.map(|v| (v.value, v.version)))
    }

    /// Version `n`; `None` if there is none.
    pub async fn fetch(&self, n: u64) -> Result<Option<Bundle>, String> {
        let key = version_key(n);
        let raw = self
            .bounded("reading a rules version", self.store.load_doc(&key))
            .await?;
        raw.map(|b| Bundle::decode(&key, &b)).transpose()
    }

    /// The version in force; `None`: nothing published yet.
    pub async fn fetch_current(&self) -> Result<Option<Bundle>, String> {
        let Some((n, _)) = self.current().await? else {
            return Ok(None);
        };
        match self.fetch(n).await? {
            Some(b) => Ok(Some(b)),
            None => Err(format!(
                "{} says version {n}, but {} is missing",
                CURRENT,
                version_key(n)
            )),
        }
    }

    /// Every version's metadata, oldest first.
    pub async fn history(&self) -> Result<Vec<Meta>, String> {
        let docs = self
            .bounded(
                "listing rules versions",
                self.store.list_docs("rules/meta/"),
            )
            .await?;
        let mut out = Vec::with_capacity(docs.len());
        for (key, raw) in docs {
            let text = String::from_utf8_lossy(&raw);
            let meta: Meta = toml::from_str(&text)
                .map_err(|e| format!("{key}: not a rules version's metadata: {}", e.message()))?;
            out.push(meta);
        }
        out.sort_by_key(|m| m.version);
        Ok(out)
    }

    /// Publishes `files` as the next version, if `rules/current` still has
    /// revision `expected` (what [`Published::current`] returned: `None`
    /// when nothing was published). `changes` says what it changes.
    /// Returns the new version's metadata.
    ///
    /// A reply lost after the transaction (a timeout) is resolved by
    /// reading the version back: the nonce tells whether it is this one.
    pub async fn publish(
        &self,
        expected: Option<(u64, u64)>,
        files: Vec<BundleFile>,
        changes: Vec<String>,
        rollback_of: Option<u64>,
        who: &Who,
        now_unix: u64,
    ) -> Result<Meta, PushError> {
        self.publish_for(expected, files, changes, rollback_of, None, who, now_unix)
            .await
    }

    /// [`Published::publish`] of the version a resharding job's cutover
    /// publishes (`Meta.reshard_job`: the one kind of version that may
    /// change a table's placement live).
    #[allow(clippy::too_many_arguments)]
    pub async fn publish_for(
        &self,
        expected: Option<(u64, u64)>,
        files: Vec<BundleFile>,
        changes: Vec<String>,
        rollback_of: Option<u64>,
        reshard_job: Option<String>,
        who: &Who,
        now_unix: u64,
    ) -> Result<Meta, PushError> {
        let next = expected.map_or(1, |(n, _)| n + 1);
        let meta = Meta {
            version: next,
            published_at: now_unix,
            user: who.user.clone(),
            host: who.host.clone(),
            changes,
            rollback_of,
            nonce: nonce(),
            reshard_job,
        };
        let bundle = Bundle {
            meta: meta.clone(),
            files,
        };
        let docs = vec![
            (
                version_key(next),
                bundle.encode().map_err(PushError::Store)?.into_bytes(),
            ),
            (
                meta_key(next),
                toml::to_string(&meta)
                    .map_err(|e| PushError::Store(e.to_string()))?
                    .into_bytes(),
            ),
        ];
        let r = self
            .bounded(
                "publishing the rules",
                self.store
                    .publish(CURRENT, expected.map(|(_, r)| r), next, &docs),
            )
            .await;
        match r {
            Ok(Some(_)) => Ok(meta),
            Ok(None) => Err(PushError::Lost(self.who_won(next - 1).await)),
            Err(e) => {
                // Applied or not? The version's nonce says.
                match self.fetch(next).await {
                    Ok(Some(b)) if b.meta.nonce == meta.nonce => Ok(meta),
                    Ok(Some(_)) => Err(PushError::Lost(self.who_won(next - 1).await)),
                    _ => Err(PushError::Store(format!(
                        "{e}; whether version {next} was published is unknown: see `idgate rules history`"
                    ))),
                }
            }
        }
    }

    /// The refusal of a push that read version `read` and lost the race.
    async fn who_won(&self, read: u64) -> String {
        let won = match self.current().await {
            Ok(Some((n, _))) => n,
            _ => read + 1,
        };
        let by = match self.fetch(won).await {
            Ok(Some(b)) => format!(
                " by {}@{} at {} UTC",
                b.meta.user,
                b.meta.host,
                utc(b.meta.published_at)
            ),
            _ => String::new(),
        };
        format!(
            "version {won} was published{by} while this push was being checked (it read version {read}); nothing was published: check your rules against version {won} (`idgate rules show {won}`) and push again"
        )
    }
}

/// What a push of `new` over the version in force (`old`, none: nothing
/// published yet) changes, after the checks a reload makes: the rules that
/// may not change live ([`crate::rules::diff`]) and the tables moved to
/// another generator, against the store.
///
/// # Errors
/// Every reason, one per line (`file:line: reason`).
pub async fn check_change(
    store: &Arc<dyn Store>,
    old: &RuleSet,
    new: &RuleSet,
    timeout: Duration,
) -> Result<RuleDiff, String> {
    let diff = crate::rules::diff::diff(old, new).map_err(|e| e.to_string())?;
    let moved = crate::idgen::check_moves(
        store,
        old.generators(),
        new.generators(),
        &diff.moved,
        timeout,
    )
    .await;
    if moved.is_empty() {
        return Ok(diff);
    }
    let lines: Vec<String> = moved
        .into_iter()
        .map(|(table, why)| {
            let origin = new
                .entries()
                .iter()
                .find(|e| e.rule().name == table)
                .map(|e| format!("{}:{}: ", e.origin().file.display(), e.origin().line))
                .unwrap_or_default();
            format!("{origin}table {table:?} moves to another generator: {why}")
        })
        .collect();
    Err(lines.join("\n"))
}

/// `idgate rules push` and `rollback`: loads `files` (each named as
/// errors should name it: the DBA's path, or `v<N>/<file>` for a
/// rollback) with the config's `shards`, checks them against the version
/// in force as a reload would ([`check_change`]), and publishes them as
/// the next version (compare-and-swap on the version read).
///
/// The first version is not compared with anything: idgates that
/// started with nothing published apply it like any other version, but
/// one that shards a table needs them restarted (statement routing is
/// set at start).
///
/// # Errors
/// [`PushError`]: refused (every `file:line: reason`), unchanged, lost
/// to another push (which version won), or the store's failure.
pub async fn push(
    published: &Published,
    files: &[(std::path::PathBuf, String)],
    shards: &[String],
    rollback_of: Option<u64>,
    who: &Who,
    now_unix: u64,
) -> Result<Meta, PushError> {
    let new = RuleSet::load_files(files, shards, &crate::idgen::validate)
        .map_err(|e| PushError::Refused(e.to_string()))?;
    let cur = published.current().await.map_err(PushError::Store)?;
    let changes = match cur {
        None => vec![format!(
            "first version: {} generator(s), {} table rule(s)",
            new.generators().len(),
            new.tables().len()
        )],
        Some((n, _)) => {
            let old = published
                .fetch(n)
                .await
                .map_err(PushError::Store)?
                .ok_or_else(|| PushError::Store(format!("{} is missing", version_key(n))))?;
            let old = old
                .rules(shards, &crate::idgen::validate)
                .map_err(|e| {
                    PushError::Refused(format!(
                        "version {n} in force does not load with this config's shards, so nothing can be checked against it:\n{e}"
                    ))
                })?;
            let diff = check_change(published.store(), &old, &new, published.timeout)
                .await
                .map_err(PushError::Refused)?;
            if diff.is_empty() {
                return Err(PushError::Unchanged(n));
            }
            change_lines(&diff)
        }
    };
    let bundle_files = Bundle::files_of(files);
    published
        .publish(cur, bundle_files, changes, rollback_of, who, now_unix)
        .await
}

/// The lines of a diff as `rules history` shows them.
pub fn change_lines(diff: &RuleDiff) -> Vec<String> {
    diff.lines()
        .into_iter()
        .map(|(what, name, detail)| {
            if detail.is_empty() {
                format!("{what} {name}")
            } else {
                format!("{what} {name} ({detail})")
            }
        })
        .collect()
}

/// `secs` (Unix) as `YYYY-MM-DD HH:MM:SS`.
pub fn utc(secs: u64) -> String {
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    let (y, m, d) = crate::idgen::format::civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// 128 random bits in hex.
fn nonce() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests;
