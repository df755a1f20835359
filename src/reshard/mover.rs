//! The mover: `idgate reshard` driving one job through its phases (plan,
//! copy, catch-up, verify, cutover, cleanup), checkpointing the
//! [`Job`] in the store after every chunk and phase change so that a mover
//! killed at any point and started again with the same arguments resumes.
//!
//! Everything runs in one task, one step after another: a copy chunk is
//! read and written before the change log is read, so a row the copy read
//! before a change is always re-copied after it (a catch-up running beside
//! the copy could write a new value that the copy then overwrote with the
//! value it had read before).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::progress::Progress;
use super::protocol::{
    job_key, log_table, old_table, shadow_table, Job, Pause, Phase, SourceProgress, MEMBERS, PAUSE,
    PAUSE_DOC,
};
use super::rule::{self, Side};
use super::shard::{Rows, Shard};
use super::sql;
use super::throttle::Throttle;
use crate::config::{Config, RulesSource, StoreKind};
use crate::idgen::{Allocator, Store};
use crate::protocol::stmt::{int_value, types};
use crate::publish::{Published, Who};
use crate::rules::bundle::Bundle;
use crate::sql::insel::write_literal;

/// Rows read per copy chunk (and per catch-up batch, per verified range).
pub const CHUNK: usize = 1000;

/// How long idgates may hold statements on the table at the cutover
/// before failing them (the pause document's deadline).
const PAUSE_DEADLINE: Duration = Duration::from_millis(3000);

/// How long the mover waits for every idgate to acknowledge a pause
/// before giving the cutover up and retrying: well before the deadline.
const ACK_BUDGET: Duration = Duration::from_millis(500);

/// How long the mover waits, all told, for unreachable shards before it
/// gives up (the job keeps its checkpoint; a new run resumes).
const MAX_OUTAGE: Duration = Duration::from_secs(600);

/// Cutover attempts before the job fails (and at least a member lease's
/// time: see `Mover::member_ttl`).
const CUTOVER_ATTEMPTS: u32 = 20;

/// Verification re-checks of a mismatched range (each after draining the
/// change logs) before the move stops.
const VERIFY_RETRIES: u32 = 8;

/// What the command line asks.
#[derive(Debug, Clone)]
pub struct Args {
    /// `schema.table`.
    pub table: String,
    /// `--shards`.
    pub shards: Vec<String>,
    /// `--sharding`.
    pub sharding: Option<String>,
    /// `--shard-key`.
    pub shard_key: Option<String>,
    /// `--max-rows-per-second`.
    pub max_rows_per_second: u64,
    /// `--abort`.
    pub abort: bool,
    /// `--no-cutover`: stop once verified (a later run cuts over).
    pub no_cutover: bool,
    /// Who publishes the new rules version.
    pub who: Who,
}

/// The counter that orders the writes of a job document: a mover's write
/// compares it, so of two movers on one table the second one's first
/// write fails (outside [`protocol::JOB_PREFIX`], which holds documents).
fn job_counter(table: &str) -> String {
    format!("reshard/jobrev/{table}")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs the job `args` asks for; returns the final line to print.
///
/// # Errors
/// Why it stopped (the job, when there is one, says where it is).
pub async fn run(cfg: &Config, args: &Args, progress: &mut Progress) -> Result<String, String> {
    match &cfg.rules {
        Some(r) if r.source == RulesSource::Etcd => {}
        _ => {
            return Err(
                "idgate reshard needs [rules] source = \"etcd\": the cutover publishes the table's new placement as a rules version that every idgate follows".into(),
            )
        }
    }
    if cfg.allocator.store != StoreKind::Etcd {
        return Err("idgate reshard needs [allocator] store = \"etcd\" (the job's checkpoint and the pause live there)".into());
    }
    let (schema, table) = rule::split_table(&args.table)?;
    let store = Allocator::open_store(&cfg.allocator)
        .await
        .map_err(|e| format!("cannot open the store: {e}"))?;
    let timeout = Duration::from_millis(cfg.allocator.store_timeout_ms.max(1));
    let published = Published::new(store.clone(), timeout);
    let names: Vec<String> = cfg.shards.iter().map(|s| s.name.clone()).collect();
    let shards: Vec<Shard> = (0..cfg.shards.len())
        .filter_map(|i| Shard::new(cfg, i))
        .collect();
    let key = job_key(&args.table);
    let existing = match store.load_doc(&key).await {
        Ok(Some(b)) => Some(Job::decode(&key, &b)?),
        Ok(None) => None,
        Err(e) => return Err(format!("reading {key}: {e}")),
    };
    let rev = store
        .load(&job_counter(&args.table))
        .await
        .map_err(|e| format!("reading the job's counter: {e}"))?;
    let current = published
        .fetch_current()
        .await?
        .ok_or("no rules version is published (`idgate rules push` first)")?;
    let live = existing
        .filter(|j| !matches!(j.phase, Phase::Done | Phase::Aborted))
        .map(|mut j| {
            if j.phase == Phase::Failed {
                // Resumed after the cause was fixed: from the phase it
                // failed in is not recorded, so from the verify (the copy
                // is checkpointed per source; a failed verify re-runs).
                j.phase = if j.sources.iter().all(|s| s.done) {
                    Phase::CatchUp
                } else {
                    Phase::Copy
                };
                j.error = None;
            }
            j
        });
    let mut m = Mover {
        member_ttl: Duration::from_secs(cfg.allocator.lease_ttl_secs),
        store,
        published,
        schema,
        table,
        full: args.table.clone(),
        names,
        shards,
        job: None,
        rev: rev.map(|v| v.version),
        counter: rev.map_or(0, |v| v.value),
        from: None,
        to: None,
        cols: Vec::new(),
        pk: Vec::new(),
        progress,
        throttle: Throttle::new(args.max_rows_per_second),
        who: args.who.clone(),
        phase_started: Instant::now(),
        timings: Vec::new(),
    };
    if args.abort {
        let Some(job) = live else {
            return Err(format!(
                "no move of {} is in progress: nothing to abort",
                args.table
            ));
        };
        m.job = Some(job);
        return m.abort().await;
    }
    let rules_now = current
        .rules(&m.names, &crate::idgen::validate)
        .map_err(|e| format!("the rules in force do not load: {e}"))?;
    match live {
        Some(job) => {
            let base = m.bundle_at(job.rules_version, &current).await?;
            let rules = base
                .rules(&m.names, &crate::idgen::validate)
                .map_err(|e| format!("rules version {} does not load: {e}", job.rules_version))?;
            let from = rule::side_of(&rules, &args.table, &m.names)?;
            let want = rule::wanted(
                &args.shards,
                args.sharding.as_deref(),
                args.shard_key.as_deref(),
                &from.id_column,
                &m.names,
            )?;
            if want != job.to {
                return Err(format!(
                    "a move of {} onto {} is in progress (job {}, phase {}): run it again with the same --shards/--sharding/--shard-key to resume it, or with --abort",
                    job.table,
                    job.to.shards.join(","),
                    job.id,
                    job.phase.name()
                ));
            }
            let (_, to) = rule::target(&base, &args.table, &job.to, &m.names)?;
            m.from = Some(from);
            m.to = Some(to);
            m.job = Some(job);
        }
        None => {
            let from = rule::side_of(&rules_now, &args.table, &m.names)?;
            let want = rule::wanted(
                &args.shards,
                args.sharding.as_deref(),
                args.shard_key.as_deref(),
                &from.id_column,
                &m.names,
            )?;
            if want == from.want {
                return Err(format!(
                    "{} is already placed on {} ({}): nothing to move",
                    args.table,
                    want.shards.join(","),
                    want.sharding.as_deref().unwrap_or("one shard")
                ));
            }
            let (files, to) = rule::target(&current, &args.table, &want, &m.names)?;
            // The running idgates must be able to apply the cutover's
            // version (a move that turns statement routing on cannot be
            // applied live): refused now, before anything is written.
            let new_rules = Bundle {
                meta: current.meta.clone(),
                files,
            }
            .rules(&m.names, &crate::idgen::validate)
            .map_err(|e| format!("the rules with {} moved do not load:\n{e}", args.table))?;
            let resharded = crate::rules::diff::Resharded {
                table: args.table.clone(),
                shards: want.shards.clone(),
                sharding: want.sharding.clone(),
                shard_key: want.shard_key.clone(),
                config_shards: m.names.clone(),
            };
            crate::rules::diff::diff_resharded(&rules_now, &new_rules, Some(&resharded)).map_err(
                |e| {
                    format!(
                        "the running idgates could not apply this move's rules version, so nothing was started:\n{e}"
                    )
                },
            )?;
            let now = now_ms();
            m.job = Some(Job {
                table: args.table.clone(),
                id: format!("{:016x}", rand::random::<u64>()),
                from: from.want.clone(),
                to: want,
                phase: Phase::Plan,
                rules_version: current.meta.version,
                published_version: None,
                swapped: Vec::new(),
                rows_total: 0,
                sources: from
                    .shards
                    .iter()
                    .map(|&i| SourceProgress {
                        shard: m.names.get(i).cloned().unwrap_or_default(),
                        last_key: Vec::new(),
                        end_key: Vec::new(),
                        copied: 0,
                        done: false,
                    })
                    .collect(),
                caught_up: 0,
                verified_chunks: 0,
                rate: 0,
                max_rows_per_second: args.max_rows_per_second,
                started_ms: now,
                updated_ms: now,
                error: None,
            });
            m.from = Some(from);
            m.to = Some(to);
            m.save().await?;
        }
    }
    m.drive(args.no_cutover).await
}

struct Mover<'p> {
    store: Arc<dyn Store>,
    published: Published,
    schema: String,
    table: String,
    full: String,
    names: Vec<String>,
    shards: Vec<Shard>,
    job: Option<Job>,
    /// The job counter's revision this mover last wrote (or read).
    rev: Option<u64>,
    counter: u64,
    from: Option<Side>,
    to: Option<Side>,
    /// Every column, in table order.
    cols: Vec<String>,
    /// Primary-key columns and their `COLUMN_TYPE`.
    pk: Vec<(String, String)>,
    progress: &'p mut Progress,
    throttle: Throttle,
    who: Who,
    /// When the phase under way began in this process, and how long the
    /// phases this process finished took (for the final line).
    phase_started: Instant,
    timings: Vec<(Phase, Duration)>,
    /// `allocator.lease_ttl_secs`: how long a dead idgate's member record
    /// lives; the cutover keeps trying at least that long (plus a margin)
    /// before it gives up, so a killed idgate delays it, never fails it.
    member_ttl: Duration,
}

impl Mover<'_> {
    fn job(&self) -> Result<&Job, String> {
        self.job.as_ref().ok_or_else(|| "no job".to_string())
    }

    fn job_mut(&mut self) -> Result<&mut Job, String> {
        self.job.as_mut().ok_or_else(|| "no job".to_string())
    }

    fn sides(&self) -> Result<(&Side, &Side), String> {
        match (&self.from, &self.to) {
            (Some(f), Some(t)) => Ok((f, t)),
            _ => Err("the job's placements are not known".into()),
        }
    }

    fn shard(&mut self, i: usize) -> Result<&mut Shard, String> {
        self.shards
            .get_mut(i)
            .ok_or_else(|| format!("shard #{i} is not in the config"))
    }

    /// The rules version `v` (the one the job began on), or `current`.
    async fn bundle_at(&self, v: u64, current: &Bundle) -> Result<Bundle, String> {
        if current.meta.version == v {
            return Ok(current.clone());
        }
        self.published
            .fetch(v)
            .await?
            .ok_or_else(|| format!("rules version {v}, the job's starting point, is missing"))
    }

    /// Writes the job document (compare-and-swap on the job's counter).
    async fn save(&mut self) -> Result<(), String> {
        let key = job_key(&self.full);
        let counter = job_counter(&self.full);
        let job = self.job_mut()?;
        job.updated_ms = now_ms();
        let bytes = job.encode()?;
        let next = self.counter + 1;
        let docs = vec![(key.clone(), bytes)];
        match self.store.publish(&counter, self.rev, next, &docs).await {
            Ok(Some(r)) => {
                self.rev = Some(r);
                self.counter = next;
                Ok(())
            }
            Ok(None) => Err(format!(
                "{key} was written by another process (a second `idgate reshard` on {}?): this one stops",
                self.full
            )),
            Err(e) => Err(format!("writing {key}: {e}")),
        }
    }

    async fn set_phase(&mut self, phase: Phase) -> Result<(), String> {
        let was = self.job()?.phase;
        self.timings.push((was, self.phase_started.elapsed()));
        self.phase_started = Instant::now();
        self.job_mut()?.phase = phase;
        self.save().await?;
        let job = self.job()?.clone();
        self.progress.phase(&job);
        Ok(())
    }

    /// Shards the move touches: sources and targets, in config order.
    fn involved(&self) -> Result<Vec<usize>, String> {
        let (f, t) = self.sides()?;
        let mut all: Vec<usize> = f.shards.iter().chain(&t.shards).copied().collect();
        all.sort_unstable();
        all.dedup();
        Ok(all)
    }

    async fn drive(mut self, no_cutover: bool) -> Result<String, String> {
        // Time spent waiting for shards to come back since the last step
        // that succeeded.
        let mut waited = Duration::ZERO;
        loop {
            let phase = self.job()?.phase;
            if phase >= Phase::Copy && phase < Phase::Cleanup && self.cols.is_empty() {
                self.learn_columns().await?;
            }
            let r = match phase {
                Phase::Plan => self.plan().await,
                Phase::Copy => self.copy().await,
                Phase::CatchUp => self.catch_up().await,
                Phase::Verify => self.verify().await,
                Phase::Cutover if no_cutover => {
                    return Ok(format!(
                        "{}: copied and verified; the change log keeps the copy current. Run the same command without --no-cutover to cut over{}",
                        self.full,
                        self.timing_text()
                    ))
                }
                Phase::Cutover => self.cutover().await,
                Phase::Cleanup => self.cleanup().await,
                Phase::Done => {
                    let job = self.job()?;
                    return Ok(format!(
                        "{}: moved onto {} (rules version {}); {} rows copied, {} re-copied by the catch-up{}",
                        job.table,
                        job.to.shards.join(","),
                        job.published_version.unwrap_or(0),
                        job.copied(),
                        job.caught_up,
                        self.timing_text()
                    ));
                }
                Phase::Aborted => return Ok(format!("{}: move aborted", self.full)),
                Phase::Failed => {
                    return Err(self.job()?.error.clone().unwrap_or_else(|| "failed".into()))
                }
            };
            // Every shard's flag cleared, not only the first set.
            let mut transient = false;
            for s in &mut self.shards {
                transient |= s.take_transient();
            }
            match r {
                Ok(()) => {
                    if !waited.is_zero() {
                        waited = Duration::ZERO;
                        if let Ok(job) = self.job_mut() {
                            job.error = None;
                        }
                    }
                }
                Err(e) if transient && waited < MAX_OUTAGE => {
                    // A shard down pauses the move: the phase runs again
                    // from the checkpoint once the shards answer.
                    let wait = (waited * 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
                    self.progress.note(&format!(
                        "{e}; retrying in {} s (the move is paused, nothing is lost)",
                        wait.as_secs()
                    ));
                    if let Ok(job) = self.job_mut() {
                        job.error = Some(e.clone());
                    }
                    let _ = self.save().await;
                    tokio::time::sleep(wait).await;
                    waited += wait;
                }
                Err(e) => {
                    // Recorded for `SHOW IDGATE RESHARD`; the process exits
                    // non-zero and a new run resumes.
                    if let Ok(job) = self.job_mut() {
                        job.error = Some(e.clone());
                    }
                    let _ = self.save().await;
                    return Err(e);
                }
            }
        }
    }

    /// `; this run: copy 12.0 s (83000 rows/s), ...`: the phases this
    /// process ran (the copy's rate over its rows copied here).
    fn timing_text(&self) -> String {
        if self.timings.is_empty() {
            return String::new();
        }
        let copied_here = self.throttle.total();
        let parts: Vec<String> = self
            .timings
            .iter()
            .map(|(p, d)| {
                let secs = d.as_secs_f64();
                if *p == Phase::Copy && secs > 0.0 {
                    format!(
                        "{} {secs:.1} s ({:.0} rows/s)",
                        p.name(),
                        copied_here as f64 / secs
                    )
                } else {
                    format!("{} {secs:.1} s", p.name())
                }
            })
            .collect();
        format!("; this run: {}", parts.join(", "))
    }

    /// Columns and primary key, from whichever of the table's names exists
    /// on a source shard (the table, or after the swap its old name).
    async fn learn_columns(&mut self) -> Result<(), String> {
        let (f, t) = self.sides()?;
        let candidates: Vec<usize> = f.shards.iter().chain(&t.shards).copied().collect();
        let schema = self.schema.clone();
        for name in [
            self.table.clone(),
            old_table(&self.table),
            shadow_table(&self.table),
        ] {
            for &i in &candidates {
                let s = self.shard(i)?;
                let cols = s
                    .text(&format!(
                        "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = {} AND TABLE_NAME = {} ORDER BY ORDINAL_POSITION",
                        sql::lit(&schema),
                        sql::lit(&name)
                    ))
                    .await?;
                if cols.is_empty() {
                    continue;
                }
                let pk = s
                    .text(&format!(
                        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = {} AND TABLE_NAME = {} AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
                        sql::lit(&schema),
                        sql::lit(&name)
                    ))
                    .await?;
                let all: Vec<(String, String)> = cols
                    .into_iter()
                    .map(|r| {
                        let mut r = r.into_iter();
                        (
                            r.next().flatten().unwrap_or_default(),
                            r.next().flatten().unwrap_or_default(),
                        )
                    })
                    .collect();
                if pk.is_empty() {
                    return Err(format!(
                        "{}.{}: the table has no PRIMARY KEY: the mover copies and tracks rows by it",
                        self.schema, self.table
                    ));
                }
                self.pk = pk
                    .into_iter()
                    .filter_map(|r| r.into_iter().next().flatten())
                    .map(|c| {
                        let ty = all
                            .iter()
                            .find(|(n, _)| *n == c)
                            .map(|(_, t)| t.clone())
                            .unwrap_or_else(|| "bigint".into());
                        (c, ty)
                    })
                    .collect();
                self.cols = all.iter().map(|(c, _)| c.clone()).collect();
                let (_, to) = self.sides()?;
                let key = to.key.clone();
                match all.iter().find(|(c, _)| *c == key) {
                    Some((_, ty)) if ty.contains("int") => {}
                    Some((_, ty)) => {
                        return Err(format!(
                            "{}.{}: shard key column {key} is {ty}: the mover places rows by an integer key only (string keys are placed by collation in idgate; not supported by the mover yet)",
                            self.schema, self.table
                        ))
                    }
                    None => {
                        return Err(format!(
                            "{}.{}: the shard key column {key} is not a column of the table",
                            self.schema, self.table
                        ))
                    }
                }
                return Ok(());
            }
        }
        Err(format!(
            "{}.{}: the table is on none of the shards {}",
            self.schema,
            self.table,
            candidates
                .iter()
                .map(|&i| self.names.get(i).cloned().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    /// Runs `stmts` (the three triggers' CREATE or DROP) on shard `i`
    /// under `LOCK TABLES <table> WRITE` where the table exists, so other
    /// sessions see all three triggers or none: a statement the shard
    /// prepared while only some existed failed with "Table
    /// `_idgate_log_<table>` doesn't exist" when executed after the others
    /// were created (seen on MariaDB 10.11 with idgate's prepared
    /// statements).
    async fn with_table_locked(&mut self, i: usize, stmts: &[String]) -> Result<(), String> {
        let t = sql::qualified(&self.schema, &self.table);
        let s = self.shard(i)?;
        let locked = s.exec(&format!("LOCK TABLES {t} WRITE")).await.is_ok();
        let mut r = Ok(());
        for q in stmts {
            r = s.exec(q).await;
            if r.is_err() {
                break;
            }
        }
        if locked {
            let u = s.exec("UNLOCK TABLES").await;
            r = r.and(u);
        }
        r
    }

    fn pk_names(&self) -> Vec<String> {
        self.pk.iter().map(|(c, _)| c.clone()).collect()
    }

    /// Plan: the change log and its triggers on every source (first: every
    /// change from then on is logged), the shadow on every target.
    async fn plan(&mut self) -> Result<(), String> {
        self.learn_columns().await?;
        let (f, t) = self.sides()?;
        let (sources, targets) = (f.shards.clone(), t.shards.clone());
        let (schema, table) = (self.schema.clone(), self.table.clone());
        let first = *sources.first().ok_or("the table has no source shard")?;
        let show = self
            .shard(first)?
            .text(&format!(
                "SHOW CREATE TABLE {}",
                sql::qualified(&schema, &table)
            ))
            .await?;
        let create = show
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().nth(1).flatten())
            .ok_or_else(|| format!("SHOW CREATE TABLE {schema}.{table} returned nothing"))?;
        let shadow = sql::shadow_create(&create, &schema, &table)?;
        // Leftovers of an earlier move (aborted, or killed in this phase).
        for i in self.involved()? {
            self.with_table_locked(i, &sql::trigger_drops(&schema, &table))
                .await?;
            let s = self.shard(i)?;
            for n in [log_table(&table), shadow_table(&table), old_table(&table)] {
                s.exec(&format!(
                    "DROP TABLE IF EXISTS {}",
                    sql::qualified(&schema, &n)
                ))
                .await?;
            }
        }
        for &i in &targets {
            let s = self.shard(i)?;
            s.exec(&format!(
                "CREATE DATABASE IF NOT EXISTS {}",
                sql::q(&schema)
            ))
            .await?;
            s.exec(&shadow).await?;
        }
        let pk = self.pk.clone();
        let pk_names = self.pk_names();
        let mut total = 0u64;
        for &i in &sources {
            self.shard(i)?
                .exec(&sql::log_create(&schema, &table, &pk))
                .await?;
            self.with_table_locked(i, &sql::trigger_creates(&schema, &table, &pk_names))
                .await?;
            total += self
                .shard(i)?
                .value(&format!(
                    "SELECT COUNT(*) FROM {}",
                    sql::qualified(&schema, &table)
                ))
                .await?
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
        self.job_mut()?.rows_total = total;
        self.set_phase(Phase::Copy).await
    }

    /// The literal of every column of `row`, as `(v1, v2, ...)`.
    fn row_text(&self, rows: &Rows, row: &[Option<Vec<u8>>]) -> Result<String, String> {
        let mut text = String::with_capacity(64);
        text.push('(');
        for (i, col) in rows.columns.iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            write_literal(&mut text, col, row.get(i).and_then(|c| c.as_deref())).map_err(|e| {
                format!(
                    "{}: column {}: {e}",
                    self.full,
                    rows.names.get(i).map_or("?", String::as_str)
                )
            })?;
        }
        text.push(')');
        Ok(text)
    }

    /// The primary key of `row` as literals.
    fn key_literals(&self, rows: &Rows, row: &[Option<Vec<u8>>]) -> Result<Vec<String>, String> {
        let mut out = Vec::with_capacity(self.pk.len());
        for (c, _) in &self.pk {
            let i = rows
                .names
                .iter()
                .position(|n| n == c)
                .ok_or_else(|| format!("{}: primary-key column {c} not read", self.full))?;
            let mut s = String::new();
            write_literal(
                &mut s,
                &rows.columns[i],
                row.get(i).and_then(|v| v.as_deref()),
            )
            .map_err(|e| format!("{}: primary-key column {c}: {e}", self.full))?;
            out.push(s);
        }
        Ok(out)
    }

    /// The target shard of `row` (by the target rule's key column).
    fn target_of(&self, rows: &Rows, row: &[Option<Vec<u8>>]) -> Result<usize, String> {
        let (_, to) = self.sides()?;
        let i = rows
            .names
            .iter()
            .position(|n| *n == to.key)
            .ok_or_else(|| format!("{}: shard key column {} not read", self.full, to.key))?;
        let col = &rows.columns[i];
        let flag = if col.unsigned {
            types::UNSIGNED_FLAG
        } else {
            0
        };
        let cell = row.get(i).and_then(|v| v.as_deref());
        let Some(v) = cell else {
            return Err(format!(
                "{}: a row has NULL in shard key column {}: it has no shard",
                self.full, to.key
            ));
        };
        let k = int_value([col.ty, flag], v).ok_or_else(|| {
            format!(
                "{}: shard key column {} holds a value that is not an integer",
                self.full, to.key
            )
        })?;
        to.shard_of(k)
            .map_err(|e| format!("{}: shard key {k}: {e}", self.full))
    }

    /// Writes `rows` into the shadows of their target shards (batched
    /// REPLACE; `delete`: the keys are first deleted from every target's
    /// shadow, in the same transaction, for the catch-up).
    async fn write_rows(&mut self, rows: &Rows, delete: &[Vec<String>]) -> Result<(), String> {
        let targets = self.sides()?.1.shards.clone();
        let mut per: Vec<(usize, Vec<String>)> = targets.iter().map(|&t| (t, Vec::new())).collect();
        for row in &rows.rows {
            let t = self.target_of(rows, row)?;
            let text = self.row_text(rows, row)?;
            match per.iter_mut().find(|(s, _)| *s == t) {
                Some((_, v)) => v.push(text),
                None => {
                    return Err(format!(
                        "{}: a row placed on shard #{t}, not a target",
                        self.full
                    ))
                }
            }
        }
        let (schema, table) = (self.schema.clone(), self.table.clone());
        let cols = self.cols.clone();
        let pk = self.pk_names();
        for (t, texts) in per {
            if texts.is_empty() && delete.is_empty() {
                continue;
            }
            let s = self.shard(t)?;
            let txn = !delete.is_empty();
            if txn {
                s.exec("START TRANSACTION").await?;
                let r = s
                    .exec(&format!(
                        "DELETE FROM {} WHERE {}",
                        sql::qualified(&schema, &shadow_table(&table)),
                        sql::key_in(&pk, delete)
                    ))
                    .await;
                if let Err(e) = r {
                    let _ = s.exec("ROLLBACK").await;
                    return Err(e);
                }
            }
            // Statements of at most ~4 MB (under max_allowed_packet).
            let mut start = 0;
            while start < texts.len() {
                let mut end = start;
                let mut bytes = 0;
                while end < texts.len() && (end == start || bytes + texts[end].len() < 4 << 20) {
                    bytes += texts[end].len() + 2;
                    end += 1;
                }
                let r = s
                    .exec(&sql::replace_rows(
                        &schema,
                        &table,
                        &cols,
                        &texts[start..end],
                    ))
                    .await;
                if let Err(e) = r {
                    if txn {
                        let _ = s.exec("ROLLBACK").await;
                    }
                    return Err(e);
                }
                start = end;
            }
            if txn {
                s.exec("COMMIT").await?;
            }
        }
        Ok(())
    }

    /// Copy: every source shard by primary-key chunks, a catch-up batch
    /// after each chunk (the log stays short), throttled.
    async fn copy(&mut self) -> Result<(), String> {
        let (schema, table) = (self.schema.clone(), self.table.clone());
        let cols = self.cols.clone();
        let pk = self.pk_names();
        let sources = self.sides()?.0.shards.clone();
        let involved = self.involved()?;
        for (k, &src) in sources.iter().enumerate() {
            loop {
                let (done, last, mut end) = {
                    let p = self
                        .job()?
                        .sources
                        .get(k)
                        .ok_or("the job's sources do not match the placement")?;
                    (p.done, p.last_key.clone(), p.end_key.clone())
                };
                if done {
                    break;
                }
                if end.is_empty() {
                    // Where this source's copy ends, read once and kept in
                    // the checkpoint (a resumed copy ends at the same key).
                    let top = self
                        .shard(src)?
                        .binary(&sql::last_key_select(&schema, &table, &pk))
                        .await?;
                    end = match top.rows.first() {
                        Some(r) => self.key_literals(&top, r)?,
                        None => Vec::new(),
                    };
                    let job = self.job_mut()?;
                    if let Some(p) = job.sources.get_mut(k) {
                        p.end_key = end.clone();
                        // An empty table: nothing to copy.
                        p.done = end.is_empty();
                    }
                    self.save().await?;
                    if end.is_empty() {
                        break;
                    }
                }
                self.throttle.wait(&mut self.shards, &involved).await;
                let rows = self
                    .shard(src)?
                    .binary(&sql::chunk_select(
                        &schema, &table, &cols, &pk, &last, &end, CHUNK,
                    ))
                    .await?;
                let n = rows.rows.len();
                if n == 0 {
                    if let Some(p) = self.job_mut()?.sources.get_mut(k) {
                        p.done = true;
                    }
                    self.save().await?;
                    break;
                }
                self.write_rows(&rows, &[]).await?;
                let last_key = match rows.rows.last() {
                    Some(r) => self.key_literals(&rows, r)?,
                    None => last,
                };
                self.throttle.rows(n as u64);
                let rate = self.throttle.rate();
                {
                    let job = self.job_mut()?;
                    if let Some(p) = job.sources.get_mut(k) {
                        p.last_key = last_key;
                        p.copied += n as u64;
                    }
                    job.rate = rate;
                }
                self.drain_once(CHUNK).await?;
                self.save().await?;
                let job = self.job()?.clone();
                self.progress.update(&job);
            }
        }
        self.set_phase(Phase::CatchUp).await
    }

    /// One catch-up batch on every source: returns the log rows processed.
    async fn drain_once(&mut self, limit: usize) -> Result<usize, String> {
        let sources = self.sides()?.0.shards.clone();
        let mut total = 0;
        for src in sources {
            total += self.drain_batch(src, limit).await?;
        }
        Ok(total)
    }

    /// Drains the logs until a pass finds at most `small` rows (`0`:
    /// empty).
    async fn drain_until(&mut self, small: usize) -> Result<(), String> {
        loop {
            let n = self.drain_once(CHUNK).await?;
            if n <= small {
                return Ok(());
            }
        }
    }

    /// One batch of source `src`'s change log: the logged keys re-read from
    /// the source and written to the targets (deleted everywhere first),
    /// then those log rows deleted by `seq`.
    async fn drain_batch(&mut self, src: usize, limit: usize) -> Result<usize, String> {
        let (schema, table) = (self.schema.clone(), self.table.clone());
        let pk = self.pk_names();
        let cols = self.cols.clone();
        let log = self
            .shard(src)?
            .binary(&format!(
                "SELECT `_idgate_seq`, {} FROM {} ORDER BY `_idgate_seq` LIMIT {limit}",
                sql::column_list(&pk),
                sql::qualified(&schema, &log_table(&table))
            ))
            .await?;
        if log.rows.is_empty() {
            return Ok(0);
        }
        let mut seqs = Vec::with_capacity(log.rows.len());
        let mut keys: Vec<Vec<String>> = Vec::with_capacity(log.rows.len());
        for row in &log.rows {
            let mut seq = String::new();
            if let Some(c) = log.columns.first() {
                write_literal(&mut seq, c, row.first().and_then(|v| v.as_deref()))
                    .map_err(|e| format!("{}: change log: {e}", self.full))?;
            }
            seqs.push(seq);
            let key = self.key_literals(&log, row)?;
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        let rows = self
            .shard(src)?
            .binary(&sql::rows_of_keys(&schema, &table, &cols, &pk, &keys))
            .await?;
        self.write_rows(&rows, &keys).await?;
        self.shard(src)?
            .exec(&format!(
                "DELETE FROM {} WHERE `_idgate_seq` IN ({})",
                sql::qualified(&schema, &log_table(&table)),
                seqs.join(", ")
            ))
            .await?;
        self.job_mut()?.caught_up += keys.len() as u64;
        Ok(log.rows.len())
    }

    /// Catch-up: the logs drained until nearly empty.
    async fn catch_up(&mut self) -> Result<(), String> {
        self.drain_until(CHUNK / 10).await?;
        self.set_phase(Phase::Verify).await
    }

    /// Verify: per primary-key range, each target shard's shadow holds
    /// exactly the source rows that belong there (count and XOR of row
    /// checksums). A mismatch is re-checked after draining the logs; a
    /// persistent one stops the move, naming the range and the shard.
    async fn verify(&mut self) -> Result<(), String> {
        let integer_pk = self.pk.len() == 1 && self.pk[0].1.contains("int");
        // The largest key when the verification begins: the last range ends
        // there, so rows inserted meanwhile above it (new ids, under a
        // load of inserts) do not keep the last range from ever matching;
        // they are the catch-up's, as every change after this point.
        let top = if integer_pk {
            self.largest_key().await?
        } else {
            None
        };
        let mut lo: Option<i128> = None;
        self.job_mut()?.verified_chunks = 0;
        loop {
            let hi = match (integer_pk, top) {
                (true, Some(top)) => Some(self.next_bound(lo).await?.map_or(top, |b| b.min(top))),
                _ => None,
            };
            let mut tries = 0;
            loop {
                let mut bad = self.compare_range(lo, hi, integer_pk).await?;
                if bad.is_empty() {
                    break;
                }
                if integer_pk {
                    let rows = self.unexplained(lo, hi).await?;
                    if rows.is_empty() {
                        break;
                    }
                    bad.extend(rows);
                }
                tries += 1;
                if tries > VERIFY_RETRIES {
                    let range = match (lo, hi) {
                        (None, None) => "the whole table".to_string(),
                        (a, b) => format!(
                            "{} in ({}, {}]",
                            self.pk[0].0,
                            a.map_or("-inf".into(), |v| v.to_string()),
                            b.map_or("+inf".into(), |v| v.to_string())
                        ),
                    };
                    let msg = format!(
                        "verify failed: {}, {range}: {} (the move stopped before the cutover; --abort removes it)",
                        self.full,
                        bad.join("; ")
                    );
                    self.job_mut()?.error = Some(msg.clone());
                    self.job_mut()?.phase = Phase::Failed;
                    self.save().await?;
                    return Err(msg);
                }
                self.drain_until(0).await?;
            }
            self.job_mut()?.verified_chunks += 1;
            let job = self.job()?.clone();
            self.progress.update(&job);
            match hi {
                Some(h) if Some(h) != top => lo = Some(h),
                _ => break,
            }
        }
        self.set_phase(Phase::Cutover).await
    }

    /// The largest primary key over every source (`None`: no row).
    async fn largest_key(&mut self) -> Result<Option<i128>, String> {
        let (schema, table) = (self.schema.clone(), self.table.clone());
        let pk = self.pk[0].0.clone();
        let sources = self.sides()?.0.shards.clone();
        let mut top: Option<i128> = None;
        for s in sources {
            let v = self
                .shard(s)?
                .value(&format!(
                    "SELECT MAX({}) FROM {}",
                    sql::q(&pk),
                    sql::qualified(&schema, &table)
                ))
                .await?
                .and_then(|v| v.parse::<i128>().ok());
            if let Some(v) = v {
                top = Some(top.map_or(v, |t: i128| t.max(v)));
            }
        }
        Ok(top)
    }

    /// The smallest of every source's CHUNK-th key after `lo` (`None`: the
    /// rest of the table is one range).
    async fn next_bound(&mut self, lo: Option<i128>) -> Result<Option<i128>, String> {
        let (schema, table) = (self.schema.clone(), self.table.clone());
        let pk = self.pk[0].0.clone();
        let sources = self.sides()?.0.shards.clone();
        let mut best: Option<i128> = None;
        for s in sources {
            let cond = lo.map_or("1".into(), |v| format!("{} > {v}", sql::q(&pk)));
            let v = self
                .shard(s)?
                .value(&format!(
                    "SELECT {0} FROM {1} WHERE {cond} ORDER BY {0} LIMIT 1 OFFSET {2}",
                    sql::q(&pk),
                    sql::qualified(&schema, &table),
                    CHUNK - 1
                ))
                .await?
                .and_then(|v| v.parse::<i128>().ok());
            if let Some(v) = v {
                best = Some(best.map_or(v, |b: i128| b.min(v)));
            }
        }
        Ok(best)
    }

    /// The condition "integer primary key in (`lo`, `hi`]".
    fn range_cond(&self, lo: Option<i128>, hi: Option<i128>, integer_pk: bool) -> String {
        if !integer_pk {
            return "1".into();
        }
        let c = sql::q(&self.pk[0].0);
        match (lo, hi) {
            (None, None) => "1".to_string(),
            (Some(a), None) => format!("{c} > {a}"),
            (None, Some(b)) => format!("{c} <= {b}"),
            (Some(a), Some(b)) => format!("{c} > {a} AND {c} <= {b}"),
        }
    }

    /// A range whose sums differ, row by row: the rows whose copy differs
    /// from the source (or is missing, or is on the wrong shard) and whose
    /// key is not in a change log. A key in a log is a change committed
    /// and not yet copied (nothing copies while this runs, so a change
    /// made after the source was read is still logged when the logs are
    /// read last): the catch-up, and at the latest the cutover's drain
    /// under the pause, rewrites it from the source. Empty: the range is
    /// right but for pending changes.
    async fn unexplained(
        &mut self,
        lo: Option<i128>,
        hi: Option<i128>,
    ) -> Result<Vec<String>, String> {
        use std::collections::{HashMap, HashSet};
        let (schema, table) = (self.schema.clone(), self.table.clone());
        let cols = self.cols.clone();
        let pk = sql::q(&self.pk[0].0);
        let cond = self.range_cond(lo, hi, true);
        let (f, t) = self.sides()?;
        let (sources, targets, key) = (f.shards.clone(), t.shards.clone(), t.key.clone());
        let int =
            |v: Option<&Option<String>>| v.cloned().flatten().and_then(|v| v.parse::<i128>().ok());
        let mut want: HashMap<(usize, i128), u64> = HashMap::new();
        for s in &sources {
            let rows = self
                .shard(*s)?
                .text(&format!(
                    "SELECT {pk}, {}, {} FROM {} WHERE {cond}",
                    sql::q(&key),
                    sql::row_crc(&cols),
                    sql::qualified(&schema, &table)
                ))
                .await?;
            for r in rows {
                let (Some(id), Some(k)) = (int(r.first()), int(r.get(1))) else {
                    return Err(format!("{}: a row without an integer key", self.full));
                };
                let shard = self.sides()?.1.shard_of(k)?;
                want.insert((shard, id), int(r.get(2)).unwrap_or(0) as u64);
            }
        }
        let mut got: HashMap<(usize, i128), u64> = HashMap::new();
        for t in &targets {
            let rows = self
                .shard(*t)?
                .text(&format!(
                    "SELECT {pk}, {} FROM {} WHERE {cond}",
                    sql::row_crc(&cols),
                    sql::qualified(&schema, &shadow_table(&table))
                ))
                .await?;
            for r in rows {
                if let Some(id) = int(r.first()) {
                    got.insert((*t, id), int(r.get(1)).unwrap_or(0) as u64);
                }
            }
        }
        let mut differ: Vec<(usize, i128)> = want
            .iter()
            .filter(|(k, v)| got.get(k) != Some(v))
            .map(|(k, _)| *k)
            .chain(got.keys().filter(|k| !want.contains_key(k)).copied())
            .collect();
        if differ.is_empty() {
            return Ok(Vec::new());
        }
        let mut pending: HashSet<i128> = HashSet::new();
        for s in &sources {
            let rows = self
                .shard(*s)?
                .text(&format!(
                    "SELECT DISTINCT {pk} FROM {} WHERE {cond}",
                    sql::qualified(&schema, &log_table(&table))
                ))
                .await?;
            pending.extend(rows.iter().filter_map(|r| int(r.first())));
        }
        differ.retain(|(_, id)| !pending.contains(id));
        differ.sort_unstable();
        Ok(differ
            .iter()
            .take(5)
            .map(|(t, id)| {
                format!(
                    "shard {}: row {} = {id} differs from the source",
                    self.names.get(*t).cloned().unwrap_or_default(),
                    self.pk[0].0
                )
            })
            .collect())
    }

    /// The target shards whose shadow does not match the sources in the
    /// range, each with both sides' count and checksum.
    async fn compare_range(
        &mut self,
        lo: Option<i128>,
        hi: Option<i128>,
        integer_pk: bool,
    ) -> Result<Vec<String>, String> {
        let (schema, table) = (self.schema.clone(), self.table.clone());
        let cols = self.cols.clone();
        let cond = self.range_cond(lo, hi, integer_pk);
        let (f, t) = self.sides()?;
        let (sources, targets, key) = (f.shards.clone(), t.shards.clone(), t.key.clone());
        let mut want: Vec<(usize, u64, u64)> = targets.iter().map(|&t| (t, 0, 0)).collect();
        for s in sources {
            let rows = self
                .shard(s)?
                .text(&sql::crc_rows(&schema, &table, &key, &cols, &cond))
                .await?;
            for r in rows {
                let k = r
                    .first()
                    .cloned()
                    .flatten()
                    .and_then(|v| v.parse::<i128>().ok())
                    .ok_or_else(|| format!("{}: a row without an integer shard key", self.full))?;
                let crc = r
                    .get(1)
                    .cloned()
                    .flatten()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                let shard = self.sides()?.1.shard_of(k)?;
                if let Some(w) = want.iter_mut().find(|w| w.0 == shard) {
                    w.1 += 1;
                    w.2 ^= crc;
                }
            }
        }
        let mut bad = Vec::new();
        for (t, count, xor) in want {
            let got = self
                .shard(t)?
                .text(&sql::crc_sum(&schema, &table, &cols, &cond))
                .await?;
            let r = got.into_iter().next().unwrap_or_default();
            let n = r
                .first()
                .cloned()
                .flatten()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            let x = r
                .get(1)
                .cloned()
                .flatten()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            if n != count || x != xor {
                bad.push(format!(
                    "shard {}: {n} rows (checksum {x}) in its copy, {count} rows (checksum {xor}) at the source",
                    self.names.get(t).cloned().unwrap_or_default()
                ));
            }
        }
        Ok(bad)
    }

    /// Publishes pause epoch `current + 1` with `doc`'s fields; returns
    /// the epoch.
    async fn publish_pause(
        &self,
        tables: Vec<String>,
        resume_at_rules: Option<u64>,
    ) -> Result<u64, String> {
        let id = self.job()?.id.clone();
        for _ in 0..50 {
            let cur = self
                .store
                .load(PAUSE)
                .await
                .map_err(|e| format!("reading {PAUSE}: {e}"))?;
            let epoch = cur.map_or(1, |v| v.value + 1);
            let doc = Pause {
                epoch,
                tables: tables.clone(),
                job: id.clone(),
                deadline_ms: now_ms() + PAUSE_DEADLINE.as_millis() as u64,
                resume_at_rules,
            };
            let docs = vec![(PAUSE_DOC.to_string(), doc.encode()?)];
            match self
                .store
                .publish(PAUSE, cur.map(|v| v.version), epoch, &docs)
                .await
            {
                Ok(Some(_)) => return Ok(epoch),
                Ok(None) => continue,
                Err(e) => return Err(format!("publishing the pause: {e}")),
            }
        }
        Err("publishing the pause: the counter kept moving".into())
    }

    /// Whether every live idgate has acted on `epoch`, waiting up to
    /// `budget`. No member at all (idgates without the pause side, or
    /// none running): true.
    async fn acked(&self, epoch: u64, budget: Duration) -> Result<bool, String> {
        let until = Instant::now() + budget;
        loop {
            let m = self
                .store
                .members(MEMBERS, PAUSE)
                .await
                .map_err(|e| format!("reading the members of {MEMBERS}: {e}"))?;
            if m.members.iter().all(|(_, v)| *v >= epoch) {
                return Ok(true);
            }
            if Instant::now() >= until {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Cutover: pause, drain, drop the triggers, swap, publish, release.
    async fn cutover(&mut self) -> Result<(), String> {
        let (schema, table) = (self.schema.clone(), self.table.clone());
        let mut attempt = 0;
        let first_attempt = Instant::now();
        let begun = !self.job()?.swapped.is_empty() || self.job()?.published_version.is_some();
        loop {
            attempt += 1;
            if !begun {
                self.drain_until(CHUNK / 10).await?;
            }
            let started = Instant::now();
            let epoch = self.publish_pause(vec![self.full.clone()], None).await?;
            if !self.acked(epoch, ACK_BUDGET).await? && !begun {
                self.publish_pause(Vec::new(), None).await?;
                let members_expired =
                    first_attempt.elapsed() > self.member_ttl + Duration::from_secs(5);
                if attempt >= CUTOVER_ATTEMPTS && members_expired {
                    return Err(format!(
                        "{}: cutover given up after {attempt} attempts: not every idgate acknowledged the pause within {} ms (see the members of {MEMBERS} in the store)",
                        self.full,
                        ACK_BUDGET.as_millis()
                    ));
                }
                self.progress.note(&format!(
                    "cutover attempt {attempt}: not every idgate paused within {} ms; released, retrying",
                    ACK_BUDGET.as_millis()
                ));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            // Writes are held: the logs drain to empty.
            if self.job()?.swapped.is_empty() {
                self.drain_until(0).await?;
            }
            let sources = self.sides()?.0.shards.clone();
            for s in sources {
                self.with_table_locked(s, &sql::trigger_drops(&schema, &table))
                    .await?;
            }
            for i in self.involved()? {
                let name = self.names.get(i).cloned().unwrap_or_default();
                if self.job()?.swapped.contains(&name) {
                    continue;
                }
                let targets = self.sides()?.1.shards.clone();
                let s = self.shard(i)?;
                let exists = |n: &str| {
                    format!(
                        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = {} AND TABLE_NAME = {}",
                        sql::lit(&schema),
                        sql::lit(n)
                    )
                };
                let has = |v: Option<String>| v.as_deref().is_some_and(|v| v != "0");
                let has_shadow = has(s.value(&exists(&shadow_table(&table))).await?);
                let has_old = has(s.value(&exists(&old_table(&table))).await?);
                let has_table = has(s.value(&exists(&table)).await?);
                // Already swapped before a restart: the shadow is gone and
                // the old table is there (or the table is, on a target).
                let done = !has_shadow && (has_old || !has_table || targets.contains(&i));
                if !done {
                    // On a shard that is only a source, the table goes
                    // away (renamed, dropped by the cleanup).
                    if let Some(q) = sql::swap(&schema, &table, has_table, has_shadow) {
                        s.exec(&q).await?;
                    }
                }
                self.job_mut()?.swapped.push(name);
                self.save().await?;
            }
            let version = match self.job()?.published_version {
                Some(v) => v,
                None => self.publish_rules().await?,
            };
            self.job_mut()?.published_version = Some(version);
            self.save().await?;
            let release = self.publish_pause(Vec::new(), Some(version)).await?;
            let paused = started.elapsed();
            if !self.acked(release, Duration::from_secs(10)).await? {
                self.progress.note(
                    "not every idgate acknowledged the release within 10 s (they resume once they apply the new rules version)",
                );
            }
            self.progress.note(&format!(
                "cutover: writes to {} held for {} ms; rules version {version} published",
                self.full,
                paused.as_millis()
            ));
            return self.set_phase(Phase::Cleanup).await;
        }
    }

    /// Publishes the rules in force with the table's rule edited (unless
    /// this job already did: a restart after the publish).
    async fn publish_rules(&mut self) -> Result<u64, String> {
        let id = self.job()?.id.clone();
        let to = self.job()?.to.clone();
        for _ in 0..20 {
            let cur = self
                .published
                .current()
                .await?
                .ok_or("no rules version is published")?;
            let bundle = self
                .published
                .fetch(cur.0)
                .await?
                .ok_or_else(|| format!("rules version {} is missing", cur.0))?;
            if bundle.meta.reshard_job.as_deref() == Some(id.as_str()) {
                return Ok(cur.0);
            }
            let (files, _) = rule::target(&bundle, &self.full, &to, &self.names)?;
            let change = format!(
                "table {} resharded onto {} ({})",
                self.full,
                to.shards.join(","),
                to.sharding.as_deref().unwrap_or("one shard")
            );
            match self
                .published
                .publish_for(
                    Some(cur),
                    files,
                    vec![change],
                    None,
                    Some(id.clone()),
                    &self.who,
                    now_ms() / 1000,
                )
                .await
            {
                Ok(meta) => return Ok(meta.version),
                Err(crate::publish::PushError::Lost(_)) => continue,
                Err(e) => return Err(format!("publishing the new rules version: {e}")),
            }
        }
        Err("publishing the new rules version: other pushes kept winning".into())
    }

    /// Cleanup: the old tables, logs and any trigger left (DROP: the old
    /// table's rows are gone in one metadata operation, where throttled
    /// DELETEs would rewrite every row through the shard's redo and undo).
    async fn cleanup(&mut self) -> Result<(), String> {
        let table = self.table.clone();
        for i in self.involved()? {
            self.drop_move_parts(i, &[old_table(&table), log_table(&table)])
                .await?;
        }
        self.set_phase(Phase::Done).await
    }

    /// On shard `i`: the move's triggers (under the table's lock), then
    /// `tables` of the move, if they exist.
    async fn drop_move_parts(&mut self, i: usize, tables: &[String]) -> Result<(), String> {
        let (schema, table) = (self.schema.clone(), self.table.clone());
        self.with_table_locked(i, &sql::trigger_drops(&schema, &table))
            .await?;
        let s = self.shard(i)?;
        for n in tables {
            s.exec(&format!(
                "DROP TABLE IF EXISTS {}",
                sql::qualified(&schema, n)
            ))
            .await?;
        }
        Ok(())
    }

    /// `--abort` before the swap: triggers, logs and shadows dropped; the
    /// old placement keeps serving.
    async fn abort(mut self) -> Result<String, String> {
        let job = self.job()?.clone();
        if !job.swapped.is_empty() || job.published_version.is_some() {
            return Err(format!(
                "{}: the cutover has swapped tables (job {}): too late to abort; run the same command without --abort to finish the move",
                job.table, job.id
            ));
        }
        if job.phase == Phase::Cutover {
            // A pause of this job may be in force: released onto the old rules.
            if let Ok(Some(b)) = self.store.load_doc(PAUSE_DOC).await {
                if let Ok(p) = Pause::decode(PAUSE_DOC, &b) {
                    if p.job == job.id && !p.tables.is_empty() {
                        self.publish_pause(Vec::new(), None).await?;
                    }
                }
            }
        }
        let names = self.names.clone();
        let mut all: Vec<usize> = job
            .from
            .shards
            .iter()
            .chain(&job.to.shards)
            .filter_map(|n| names.iter().position(|x| x == n))
            .collect();
        all.sort_unstable();
        all.dedup();
        let table = self.table.clone();
        for i in all {
            self.drop_move_parts(i, &[log_table(&table), shadow_table(&table)])
                .await?;
        }
        self.job_mut()?.phase = Phase::Aborted;
        self.save().await?;
        Ok(format!(
            "{}: move {} aborted; the old placement ({}) serves",
            job.table,
            job.id,
            job.from.shards.join(",")
        ))
    }
}
