//! Following the rules published through etcd (`[rules] source = "etcd"`,
//! `crate::publish`).
//!
//! [`follow`] watches `<prefix>/rules/current` (the store's `follow`: it
//! reads the key, then watches from the next revision, and does both again
//! after a lost watch, so nothing published meanwhile is missed) and
//! applies each new version with [`Shared::catch_up`]: the checks and
//! guarantees of a reload ([`Shared::apply_rules`]). A version refused
//! here stays refused (logged, counted, in `SHOW IDGATE STATUS`) and the
//! rules in force stay until a newer version comes; a store failure is
//! tried again.
//!
//! [`start_pending`]: an idgate started from its cache file while etcd was
//! down has no generator running; they are started once etcd answers.

use crate::frontend::live::{log_outcome, Refusal, Reloaded};
use crate::frontend::shared::Shared;
use crate::publish::{cache, Published, CURRENT};
use crate::rules::diff::RuleDiff;
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info, warn};

impl Shared {
    /// The published versions, in the allocator's store.
    fn published(&self) -> Option<Published> {
        let a = self.allocator.as_ref()?;
        Some(Published::new(
            a.store(),
            Duration::from_millis(self.config.allocator.store_timeout_ms),
        ))
    }

    /// `dir <path>` or `etcd <prefix>/rules/` (`SHOW IDGATE STATUS`).
    pub fn rules_source(&self) -> String {
        match &self.config.rules {
            None => "none (no [rules])".into(),
            Some(r) if r.source == crate::config::RulesSource::Etcd => format!(
                "etcd {}/rules/",
                self.config.allocator.etcd_prefix.trim_end_matches('/')
            ),
            Some(r) => format!("dir {}", r.dir.display()),
        }
    }

    /// Applies the version published now when it is newer than the one in
    /// force (`IDGATE RELOAD RULES`, `kill -HUP` and the watch all come
    /// here). Errors: why it was not applied (the rules in force stay).
    pub async fn catch_up(&self) -> Result<Reloaded, Refusal> {
        let _one = self.rules.reloading.lock().await;
        let unchanged = || Reloaded {
            version: self.rules.version(),
            diff: RuleDiff::default(),
        };
        let Some(published) = self.published() else {
            return Err(Refusal {
                why: "idgate runs without [rules] (it only relays)".into(),
                transient: false,
            });
        };
        let bundle = match published.fetch_current().await {
            Ok(Some(b)) if b.meta.version > self.rules.version() => b,
            Ok(_) => return Ok(unchanged()),
            Err(why) => {
                warn!(
                    "cannot read the published rules; version {} stays: {why}",
                    self.rules.version()
                );
                return Err(Refusal {
                    why,
                    transient: true,
                });
            }
        };
        let v = bundle.meta.version;
        let shards: Vec<String> = self.config.shards.iter().map(|s| s.name.clone()).collect();
        // A resharding cutover's version: the job says which table's
        // placement it may change, and to what.
        let resharded = match &bundle.meta.reshard_job {
            Some(job) => match self.resharded_by(job, v, &shards).await {
                Ok(r) => Some(r),
                Err(why) => {
                    let transient = why.transient;
                    error!(
                        version = v,
                        "published rules version {v} not applied: {}", why.why
                    );
                    if !transient {
                        self.rules
                            .refused(&format!("version {v}: {}", why.why), Some(v));
                    }
                    return Err(why);
                }
            },
            None => None,
        };
        let r = match bundle.rules(&shards, &crate::idgen::validate) {
            Ok(new) => self.apply_rules(new, Some(v), resharded.as_ref()).await,
            Err(e) => Err(Refusal {
                why: e.to_string(),
                transient: false,
            }),
        };
        match &r {
            Ok(_) => {
                log_outcome(&r.clone().map_err(|e: Refusal| e.why));
                self.write_cache(bundle).await;
            }
            Err(e) => {
                error!(
                    version = v,
                    by = %format!("{}@{}", bundle.meta.user, bundle.meta.host),
                    "published rules version {v} not applied, version {} stays:\n{}",
                    self.rules.version(),
                    e.why
                );
                self.rules
                    .refused(&format!("version {v}: {}", e.why), Some(v));
            }
        }
        r
    }

    /// The table and placement resharding job `job` moved, which rules
    /// version `v` (published by its cutover) may change: the job's
    /// document must be in phase cutover, or later with `v` as the version
    /// it published.
    async fn resharded_by(
        &self,
        job: &str,
        v: u64,
        shards: &[String],
    ) -> Result<crate::rules::diff::Resharded, Refusal> {
        use crate::reshard::protocol::{Job, Phase, JOB_PREFIX};
        let store = self
            .allocator
            .as_ref()
            .map(|a| a.store())
            .ok_or_else(|| Refusal {
                why: "idgate runs without [rules]".into(),
                transient: false,
            })?;
        let docs = store.list_docs(JOB_PREFIX).await.map_err(|e| Refusal {
            why: format!("reading the resharding job {job:?} it names: {e}"),
            transient: true,
        })?;
        let found = docs
            .iter()
            .filter_map(|(k, raw)| Job::decode(k, raw).ok())
            .find(|j| j.id == job);
        let Some(j) = found else {
            return Err(Refusal {
                why: format!("it names resharding job {job:?}, which has no job document under {JOB_PREFIX} (a placement change needs the job that moved the rows)"),
                transient: false,
            });
        };
        let ok = j.phase == Phase::Cutover
            || (matches!(j.phase, Phase::Cleanup | Phase::Done) && j.published_version == Some(v));
        if !ok {
            return Err(Refusal {
                why: format!(
                    "it names resharding job {job:?} of table {}, which is in phase {} (a placement change is accepted from a job in phase cutover)",
                    j.table,
                    j.phase.name()
                ),
                transient: false,
            });
        }
        Ok(crate::rules::diff::Resharded {
            table: j.table,
            shards: j.to.shards,
            sharding: j.to.sharding,
            shard_key: j.to.shard_key,
            config_shards: shards.to_vec(),
        })
    }

    /// Keeps `[rules] cache_file` at the version just applied (logged when
    /// it cannot be written: the next start without etcd would be refused
    /// or start from an older version).
    pub async fn write_cache(&self, bundle: crate::rules::bundle::Bundle) {
        let Some(path) = self
            .config
            .rules
            .as_ref()
            .and_then(|r| r.cache_file.clone())
        else {
            return;
        };
        let v = bundle.meta.version;
        let r = tokio::task::spawn_blocking(move || cache::write(&path, &bundle)).await;
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => error!("rules cache file not written (version {v}): {e}"),
            Err(e) => error!("rules cache file not written (version {v}): {e}"),
        }
    }
}

/// Watches the published version and applies each new one (see the module
/// doc), as long as the store keeps the watch (the server's lifetime).
pub fn follow(shared: Arc<Shared>) -> Option<tokio::task::JoinHandle<()>> {
    let mut rx = shared.allocator.as_ref()?.store().follow(CURRENT)?;
    Some(tokio::spawn(async move {
        let mut backoff = Duration::from_millis(200);
        // The newest version refused here (not a store failure): it is not
        // tried again, a newer one is.
        let mut refused = 0;
        loop {
            let seen = *rx.borrow_and_update();
            let retry = if seen > shared.rules.version() && seen > refused {
                match shared.catch_up().await {
                    Ok(_) => {
                        backoff = Duration::from_millis(200);
                        false
                    }
                    Err(e) if e.transient => true,
                    Err(_) => {
                        refused = shared
                            .rules
                            .status()
                            .failed_version
                            .unwrap_or(seen)
                            .max(seen);
                        false
                    }
                }
            } else {
                false
            };
            if retry {
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            } else if rx.changed().await.is_err() {
                return;
            }
        }
    }))
}

/// Starts the generators of the rules in force that are not running (an
/// idgate started from its cache file while etcd was down), trying again
/// until the store answers. Until then their statements wait for ids and
/// fail with 1467, as during an etcd outage.
pub fn start_pending(shared: Arc<Shared>) -> Option<tokio::task::JoinHandle<()>> {
    let allocator = shared.allocator.clone()?;
    Some(tokio::spawn(async move {
        let mut backoff = Duration::from_millis(200);
        loop {
            let rules = shared.rules.load().unwrap_or_default();
            let missing: Vec<_> = rules
                .generators()
                .iter()
                .filter(|g| allocator.generator(&g.name).is_none())
                .cloned()
                .collect();
            if missing.is_empty() {
                // The XA commit log could not be opened at start either
                // (it leases a node id in the store): now it can.
                crate::frontend::txn::recovery::start(&shared).await;
                return;
            }
            match allocator.apply(&missing, &[]).await {
                Ok(()) => {
                    let names: Vec<&str> = missing.iter().map(|g| g.name.as_str()).collect();
                    info!(
                        "the store answers: generators started: {}",
                        names.join(", ")
                    );
                }
                Err(e) => {
                    warn!(
                        "generators not started yet (their INSERTs fail with 1467 until then): {e}"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::idgen::{Allocator, Fault, MemoryStore, Store, SystemClock};
    use crate::publish::Who;
    use crate::rules::bundle::BundleFile;

    const CONFIG: &str = "[server]\nlisten = \"127.0.0.1:0\"\n\
        [[users]]\nname = \"app\"\npassword = \"x\"\n\
        [backend]\nuser = \"root\"\n\
        [[shards]]\nname = \"s0\"\naddress = \"127.0.0.1:3306\"\n\
        [allocator]\nstore = \"etcd\"\netcd_endpoints = [\"http://127.0.0.1:1\"]\n\
        [rules]\nsource = \"etcd\"\n";

    fn files(tables: &[&str]) -> Vec<BundleFile> {
        let mut text = String::from("[[generator]]\nname = \"g\"\nkind = \"sequence\"\n");
        for t in tables {
            text.push_str(&format!(
                "\n[[table]]\nname = \"{t}\"\ncolumn = \"id\"\ngenerator = \"g\"\n"
            ));
        }
        vec![BundleFile {
            name: "a.toml".into(),
            text,
        }]
    }

    async fn until(what: &str, f: impl Fn() -> bool) {
        for _ in 0..6000 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{what} never happened");
    }

    /// The follower applies each published version; a version the store
    /// fails to deliver is tried again; a version refused here is not, and
    /// the next one applies.
    #[tokio::test]
    async fn follows_retries_store_failures_and_skips_refused_versions() {
        let m = MemoryStore::new();
        let store: Arc<dyn Store> = m.clone();
        let cfg = Config::parse(CONFIG, "t.toml").unwrap();
        let allocator = Allocator::with_store(store.clone(), Arc::new(SystemClock::new()), &[])
            .await
            .unwrap();
        let shared = Arc::new(Shared::with_rules(
            cfg,
            Some(Arc::new(crate::rules::RuleSet::default())),
            Some(allocator.clone()),
        ));
        shared.rules.start_at(0, None);
        let task = follow(shared.clone()).expect("the memory store follows");
        let published = Published::new(store, Duration::from_secs(5));
        let who = Who {
            user: "u".into(),
            host: "h".into(),
        };
        let push = |f: Vec<BundleFile>| {
            let published = published.clone();
            let who = who.clone();
            async move {
                let cur = published.current().await.unwrap();
                published
                    .publish(cur, f, vec![], None, &who, 0)
                    .await
                    .unwrap()
            }
        };
        push(files(&["s.a"])).await;
        until("version 1", || shared.rules.version() == 1).await;
        assert!(allocator.generator("g").is_some());

        // The store fails while version 2 is fetched: tried again.
        let cur = published.current().await.unwrap();
        let store2 = m.clone();
        let p2 = published.clone();
        let who2 = who.clone();
        let publish = tokio::spawn(async move {
            let r = p2
                .publish(cur, files(&["s.a", "s.b"]), vec![], None, &who2, 0)
                .await;
            // The follower wakes on the write; fail its reads for a while.
            store2.set_fault(Fault::Fail);
            r
        });
        publish.await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(shared.rules.version(), 1, "applied through a failing store");
        m.set_fault(Fault::None);
        until("version 2 after the store recovered", || {
            shared.rules.version() == 2
        })
        .await;

        // Version 3 changes the generator's start: refused here, kept so.
        let mut bad = files(&["s.a", "s.b"]);
        bad[0].text = bad[0]
            .text
            .replace("kind = \"sequence\"", "kind = \"sequence\"\nstart = 9");
        push(bad).await;
        until("version 3 refused", || {
            shared.rules.status().failed_version == Some(3)
        })
        .await;
        assert_eq!(shared.rules.version(), 2);
        let st = shared.rules.status();
        assert!(
            st.last_error
                .as_deref()
                .is_some_and(|e| e.starts_with("version 3: v3/a.toml:2: ")),
            "{st:?}"
        );
        // Version 4 (back to version 2's files) applies.
        push(files(&["s.a"])).await;
        until("version 4", || shared.rules.version() == 4).await;
        assert_eq!(shared.rules.status().failed_version, None);
        assert_eq!(shared.rules.load().unwrap().tables().len(), 1);
        task.abort();
        allocator.shutdown().await;
    }
}
