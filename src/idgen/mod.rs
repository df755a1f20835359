//! The id allocator: sequence and snowflake generators whose state is
//! persisted in a store (etcd, a local file, or memory for tests), so that an
//! id is never issued twice whatever fails (crash, kill -9, store outage,
//! several processes, clock jumps).
//!
//! Steady state never touches the store: ids come from memory through one
//! atomic compare-and-swap; background tasks reserve ahead.
//!
//! # Files
//!
//! - `mod.rs`: [`Allocator`] (opens the store, prepares the generators, shutdown).
//! - `generator.rs`: [`Generator`] (the operations the session calls),
//!   [`GeneratorStats`], the background task.
//! - `sequence.rs`: segments reserved by compare-and-swap, double buffer,
//!   adaptive batch, floor.
//! - `snowflake.rs`: timestamp | node | sequence with carry, persisted
//!   ceiling against clock rollback, node-id leases.
//! - `format.rs`: [`format::Format`], ids written as decimal fields
//!   (`{prefix:2}{yyyyMMdd}{seq:8}`), daily with a date.
//! - `scramble.rs`: [`scramble::Scrambler`], the keyed permutation of
//!   `scramble = true` sequences (non-enumerable ids).
//! - `params.rs`: [`validate`] and the resolved parameters (presets, defaults).
//! - `clock.rs`: [`Clock`], [`SystemClock`], [`FakeClock`].
//! - `error.rs`: [`IdgenError`], [`StoreError`].
//! - `store/mod.rs`: the [`Store`] trait; `store/etcd.rs`, `store/file.rs`,
//!   `store/memory.rs`: its implementations.
//! - `explicit_tests.rs`: explicit ids across processes (unit tests).
//!
//! Explicit ids (`Generator::observe`): once observed, no process on the
//! store issues them; free when no other process can hold the id, else
//! confirmed with the other processes before the client's reply (see the
//! module docs of `sequence.rs` and `snowflake.rs`).

#![warn(missing_docs)]

#[cfg(test)]
mod block_tests;
mod clock;
#[cfg(test)]
mod daily_tests;
mod error;
#[cfg(test)]
mod explicit_tests;
pub mod format;
mod generator;
mod params;
pub mod scramble;
mod sequence;
mod snowflake;
pub mod store;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::JoinHandle;

pub use clock::{Clock, FakeClock, SystemClock};
pub use error::{IdgenError, StoreError};
pub use generator::{Generator, GeneratorStats, MAX_IDS_PER_REQUEST};
pub use params::{parse_rfc3339_ms, validate};
pub use store::etcd::{EtcdOptions, EtcdStore};
pub use store::file::FileStore;
pub use store::memory::{Fault, MemoryStore};
pub use store::{Members, Store};

use crate::config::{AllocatorConfig, StoreKind};
use crate::rules::ruleset::NameHasher;
use crate::rules::spec::GeneratorRule;

/// Tunables of the allocator.
#[derive(Debug, Clone)]
pub struct AllocatorOptions {
    /// Longest a request waits for the store when its cache is exhausted
    /// (then it fails with "store unavailable"), and bound on every
    /// background store operation.
    pub timeout: Duration,
}

impl Default for AllocatorOptions {
    fn default() -> Self {
        AllocatorOptions {
            timeout: Duration::from_secs(3),
        }
    }
}

/// All generators of the rule files, over one store. Cheap to clone.
#[derive(Clone)]
pub struct Allocator {
    /// Shared state.
    inner: Arc<Inner>,
}

/// Generators by name, hashed as the rule index hashes table names (FNV-1a:
/// the names come from the rule files, not from clients).
type GenMap = HashMap<String, Arc<Generator>, std::hash::BuildHasherDefault<NameHasher>>;

struct Inner {
    /// Generators by name: read lock-free by every statement, replaced
    /// whole when a rule reload adds generators ([`Allocator::apply`]).
    generators: arc_swap::ArcSwap<GenMap>,
    /// Serializes [`Allocator::apply`].
    applying: tokio::sync::Mutex<()>,
    /// The store's clock and the requests' bound, for generators added later.
    clock: Arc<dyn Clock>,
    options: AllocatorOptions,
    /// Background tasks, aborted on shutdown.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// For logs.
    store_name: String,
    /// The store, for other records kept beside the generators' (XA commit decisions).
    store: Arc<dyn Store>,
}

impl std::fmt::Debug for Allocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocator")
            .field("store", &self.inner.store_name)
            .field(
                "generators",
                &self.inner.generators.load().keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Allocator {
    /// Opens the store from `[allocator]` and prepares every generator
    /// (sequences reserve their first segment; snowflakes lease a node id and
    /// persist their timestamp lead).
    ///
    /// Errors: [`IdgenError::Open`] if the store cannot be opened (state file
    /// locked by another process, corrupt, no etcd endpoints), or the first
    /// error of a generator (invalid rule, duplicate name, store unreachable).
    pub async fn open(
        cfg: &AllocatorConfig,
        generators: &[GeneratorRule],
    ) -> Result<Allocator, IdgenError> {
        let options = AllocatorOptions {
            timeout: Duration::from_millis(cfg.request_timeout_ms),
        };
        let store = Allocator::open_store(cfg).await?;
        Allocator::with_options(store, Arc::new(SystemClock::new()), generators, options).await
    }

    /// The store `[allocator]` describes, opened with its bounds
    /// (`store_timeout_ms` per call, `lease_ttl_secs`): what
    /// [`Allocator::open`] puts the generators on.
    pub async fn open_store(cfg: &AllocatorConfig) -> Result<Arc<dyn Store>, IdgenError> {
        let store: Arc<dyn Store> = match cfg.store {
            StoreKind::Etcd => Arc::new(
                EtcdStore::connect(
                    &cfg.etcd_endpoints,
                    &cfg.etcd_prefix,
                    EtcdOptions {
                        lease_ttl: Duration::from_secs(cfg.lease_ttl_secs),
                        timeout: Duration::from_millis(cfg.store_timeout_ms),
                    },
                )
                .await
                .map_err(IdgenError::Open)?,
            ),
            StoreKind::File => {
                let path = cfg.file_path.clone();
                let timeout = Duration::from_millis(cfg.store_timeout_ms);
                let opened = tokio::task::spawn_blocking(move || FileStore::open(&path, timeout))
                    .await
                    .map_err(|e| IdgenError::Open(StoreError::Unavailable(e.to_string())))?;
                Arc::new(opened.map_err(IdgenError::Open)?)
            }
        };
        Ok(store)
    }

    /// Same as [`Allocator::open`] with an explicit store and clock (tests,
    /// fault injection).
    pub async fn with_store(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        generators: &[GeneratorRule],
    ) -> Result<Allocator, IdgenError> {
        Allocator::with_options(store, clock, generators, AllocatorOptions::default()).await
    }

    /// Same as [`Allocator::with_store`] with explicit tunables.
    pub async fn with_options(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        generators: &[GeneratorRule],
        options: AllocatorOptions,
    ) -> Result<Allocator, IdgenError> {
        let map = prepare_all(&store, &clock, generators, &options, &GenMap::default()).await?;
        let tasks = map.values().flat_map(spawn_tasks).collect();
        Ok(Allocator {
            inner: Arc::new(Inner {
                generators: arc_swap::ArcSwap::from_pointee(map),
                applying: tokio::sync::Mutex::new(()),
                tasks: Mutex::new(tasks),
                store_name: store.describe(),
                store,
                clock,
                options,
            }),
        })
    }

    /// A rule reload: prepares the generators of `added` (sequences reserve
    /// their first segment, snowflakes lease a node id) and applies the new
    /// tunables of `tuned` (`batch`, `min_batch`, `max_batch`,
    /// `segment_seconds`, `max` of sequences; the caller has checked that
    /// nothing else changed). All or nothing: on an error no generator is
    /// added and none is tuned. A generator no rule names any more keeps
    /// running (statements that started on the old rules may still use it;
    /// its ids are never issued again either way).
    ///
    /// Errors: an invalid rule, a name already taken, the store
    /// unreachable, or a `max` that cannot go down yet.
    pub async fn apply(
        &self,
        added: &[GeneratorRule],
        tuned: &[GeneratorRule],
    ) -> Result<(), IdgenError> {
        let _one = self.inner.applying.lock().await;
        let current = self.inner.generators.load_full();
        let mut tunes = Vec::new();
        for rule in tuned {
            let g = current.get(&rule.name).ok_or_else(|| IdgenError::Invalid {
                generator: rule.name.clone(),
                reason: "no such generator is running".into(),
            })?;
            let params = params::resolve(rule).map_err(|reason| IdgenError::Invalid {
                generator: rule.name.clone(),
                reason,
            })?;
            g.check_tune(&params)
                .map_err(|reason| IdgenError::Invalid {
                    generator: rule.name.clone(),
                    reason,
                })?;
            tunes.push((g.clone(), params));
        }
        let fresh = prepare_all(
            &self.inner.store,
            &self.inner.clock,
            added,
            &self.inner.options,
            &current,
        )
        .await?;
        // Checked above; a lower max can still be refused if a background
        // refill reserved past it meanwhile: then everything is undone.
        let mut done: Vec<(Arc<Generator>, params::Params)> = Vec::new();
        for (g, params) in &tunes {
            let before = g.current_params();
            if let Err(reason) = g.tune(params) {
                for (g, old) in done.iter().rev() {
                    let _ = g.tune(old);
                }
                for g in fresh.values() {
                    g.stop().await;
                }
                return Err(IdgenError::Invalid {
                    generator: g.name().to_string(),
                    reason,
                });
            }
            done.push((g.clone(), before));
        }
        if !fresh.is_empty() {
            let mut tasks: Vec<JoinHandle<()>> = fresh.values().flat_map(spawn_tasks).collect();
            self.inner.tasks.lock().append(&mut tasks);
            let mut map = (*current).clone();
            map.extend(fresh);
            self.inner.generators.store(Arc::new(map));
        }
        Ok(())
    }

    /// The store the generators persist their state in.
    pub fn store(&self) -> Arc<dyn Store> {
        self.inner.store.clone()
    }

    /// The generator called `name`.
    pub fn generator(&self, name: &str) -> Option<Arc<Generator>> {
        self.inner.generators.load().get(name).cloned()
    }

    /// Names of all generators.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.inner.generators.load().keys().cloned().collect();
        v.sort();
        v
    }

    /// Stats of every generator, by name.
    pub fn stats(&self) -> Vec<GeneratorStats> {
        let mut v: Vec<GeneratorStats> = self
            .inner
            .generators
            .load()
            .values()
            .map(|g| g.stats())
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Releases node-id leases and stops background tasks. Ids still cached
    /// are abandoned (a gap, never a duplicate). Later requests that need the
    /// store fail with [`IdgenError::Shutdown`].
    pub async fn shutdown(&self) {
        for g in self.inner.generators.load().values() {
            g.stop().await;
        }
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *self.inner.tasks.lock());
        for t in tasks {
            t.abort();
        }
    }
}

/// For `idgate rules push` and `rules check --against-store`, without a
/// running allocator: each table of `moved` (table, old generator, new
/// generator) that the store says may not move, with why. `old` are the
/// generators of the rules in force, `new` those of the new rules. Reads
/// the store only (no segment is reserved, nothing is written).
pub async fn check_moves(
    store: &Arc<dyn Store>,
    old: &[GeneratorRule],
    new: &[GeneratorRule],
    moved: &[(String, String, String)],
    timeout: Duration,
) -> Vec<(String, String)> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let build = |rule: &GeneratorRule| -> Result<Generator, String> {
        let params = params::resolve(rule)?;
        Ok(Generator::new(
            &rule.name,
            params,
            store.clone(),
            clock.clone(),
            timeout,
        ))
    };
    let mut problems = Vec::new();
    for (table, from, to) in moved {
        let Some(prev) = old.iter().find(|g| g.name == *from) else {
            continue;
        };
        let r = async {
            let prev = build(prev)?;
            match (
                old.iter().find(|g| g.name == *to),
                new.iter().find(|g| g.name == *to),
            ) {
                (Some(existing), _) => build(existing)?.check_takes_over(&prev).await,
                (None, Some(rule)) => prev.check_new_takes_over(rule).await,
                (None, None) => Err(format!("generator {to:?} is not defined")),
            }
        }
        .await;
        if let Err(why) = r {
            problems.push((table.clone(), why));
        }
    }
    problems
}

/// Creates and prepares a generator for each of `rules` (none may be in
/// `existing`); on an error stops the ones prepared and returns it.
async fn prepare_all(
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
    rules: &[GeneratorRule],
    options: &AllocatorOptions,
    existing: &GenMap,
) -> Result<GenMap, IdgenError> {
    let mut map = GenMap::default();
    for rule in rules {
        let params = params::resolve(rule).map_err(|reason| IdgenError::Invalid {
            generator: rule.name.clone(),
            reason,
        })?;
        if map.contains_key(&rule.name) || existing.contains_key(&rule.name) {
            return Err(IdgenError::Duplicate(rule.name.clone()));
        }
        let g = Generator::new(
            &rule.name,
            params,
            store.clone(),
            clock.clone(),
            options.timeout,
        );
        let g = Arc::new(g);
        g.bind();
        map.insert(rule.name.clone(), g);
    }
    let mut prepared: Vec<Arc<Generator>> = Vec::new();
    for g in map.values() {
        // Each step inside is bounded; this bounds the whole (a few calls).
        let r = match tokio::time::timeout(options.timeout * 4, g.prepare()).await {
            Ok(r) => r,
            Err(_) => Err(IdgenError::Store {
                generator: g.name().to_string(),
                source: StoreError::Timeout(options.timeout * 4),
            }),
        };
        if let Err(e) = r {
            for p in &prepared {
                p.stop().await;
            }
            g.stop().await;
            return Err(e);
        }
        prepared.push(g.clone());
    }
    Ok(map)
}

/// The background tasks of a prepared generator.
fn spawn_tasks(g: &Arc<Generator>) -> Vec<JoinHandle<()>> {
    let mut tasks = vec![tokio::spawn(generator::run_background(Arc::downgrade(g)))];
    if g.kind() == crate::rules::spec::GeneratorKind::Snowflake {
        tasks.push(tokio::spawn(generator::run_ticker(Arc::downgrade(g))));
    }
    if let Some(rx) = g.follow_floor() {
        tasks.push(tokio::spawn(generator::run_follow(Arc::downgrade(g), rx)));
    }
    tasks
}
