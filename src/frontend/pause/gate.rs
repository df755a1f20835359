//! The state of the resharding cutover's pause shared by every session
//! ([`PauseGate`], in `Shared`): which tables are paused, the sessions
//! let run, the epoch acknowledged, the counters operators see. Apart
//! from the session's hold (`mod.rs`) and the follower (`follow.rs`), so
//! that `Shared` holding it depends on nothing that depends on `Shared`.

use crate::frontend::session::registry::Registry;
use crate::reshard::protocol::Job;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Which tables are paused, and what operators see of pauses.
#[derive(Debug)]
pub struct PauseGate {
    /// Some table is paused: the one load on every statement's path.
    active: AtomicBool,
    state: Mutex<State>,
    /// Bumped on every change of `state`: held statements wait on it.
    pub(in crate::frontend) changed: tokio::sync::watch::Sender<u64>,
    /// Statements held now.
    pub(in crate::frontend) held: AtomicU64,
    /// Pauses begun (epochs with tables acted on).
    pauses: AtomicU64,
    /// Time tables were paused, summed over pauses (µs).
    paused_us: AtomicU64,
    /// Held statements failed past a pause's deadline.
    pub(in crate::frontend) deadline_failures: AtomicU64,
    /// The job documents, as last read from the store (`follow.rs`).
    jobs: Mutex<Vec<Job>>,
    /// This idgate's member record in [`crate::reshard::protocol::MEMBERS`].
    pub(in crate::frontend) member: Mutex<Option<crate::idgen::store::NodeLease>>,
    /// Set on clean shutdown: the member record is not joined again.
    pub(in crate::frontend) leaving: AtomicBool,
    /// The fence: this idgate (rules from etcd) lost its member record, so
    /// a mover no longer waits for it and a cutover may run unseen; every
    /// statement naming a rule table waits until it has joined again and
    /// caught up (see [`PauseGate::fence`]).
    fenced: AtomicBool,
}

/// The pause in force.
#[derive(Debug, Clone, Default)]
struct State {
    /// The epoch of the document acted on last.
    epoch: u64,
    /// Paused tables (`schema.table`); empty: nothing paused.
    tables: Vec<String>,
    /// The job that asked (`Job::id`).
    job: String,
    /// Held statements fail after this (Unix ms).
    deadline_ms: u64,
    /// Sessions whose running command or open transaction began before
    /// the pause: their statements run (see the module doc).
    let_run: HashSet<u32>,
    /// When the tables were paused.
    since: Option<Instant>,
    /// The highest epoch acknowledged (the member value).
    acked: u64,
}

/// What `SHOW IDGATE RESHARD` shows of this idgate's pause.
#[derive(Debug, Clone)]
pub struct PauseView {
    pub epoch: u64,
    pub tables: Vec<String>,
    pub job: String,
    pub deadline_ms: u64,
    pub acked: u64,
    pub held: u64,
    pub let_run: usize,
    pub pauses: u64,
    pub paused_secs: f64,
    pub deadline_failures: u64,
}

impl Default for PauseGate {
    fn default() -> Self {
        PauseGate {
            active: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            changed: tokio::sync::watch::channel(0).0,
            held: AtomicU64::new(0),
            pauses: AtomicU64::new(0),
            paused_us: AtomicU64::new(0),
            deadline_failures: AtomicU64::new(0),
            jobs: Mutex::new(Vec::new()),
            member: Mutex::new(None),
            leaving: AtomicBool::new(false),
            fenced: AtomicBool::new(false),
        }
    }
}

/// Now, Unix ms (the deadline's clock: the mover's wall clock).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl PauseGate {
    /// Whether some table is paused (one load, a plain move on x86: the
    /// whole cost on a statement's path when none is). Sequentially
    /// consistent, paired with the session's start of command
    /// (`registry::Control::set_command`) and [`PauseGate::begin`]'s store.
    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::SeqCst) || self.fenced.load(Ordering::SeqCst)
    }

    /// Fences this idgate: its member record is lost (etcd unreachable
    /// for the lease's time, or the record expired), so a mover would run a
    /// cutover without waiting for it, and its rules may already be stale.
    /// Until [`PauseGate::unfence`], statements naming any rule table
    /// wait (`Session::hold_if_paused`). The lease is given up a margin
    /// before etcd expires it, so the fence is up before any mover can
    /// stop counting this idgate.
    pub fn fence(&self) {
        if !self.fenced.swap(true, Ordering::SeqCst) {
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Lifts the fence: joined again, the newest rules version applied and
    /// the newest pause epoch acted on.
    pub fn unfence(&self) {
        if self.fenced.swap(false, Ordering::SeqCst) {
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Whether the fence is up.
    pub fn fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    /// Pauses `tables` for epoch `epoch` of job `job`. The sessions busy
    /// or in a transaction now are let run (see the module doc); returns
    /// the registry time of that snapshot (their commands begun at or
    /// before it started before the pause).
    pub(in crate::frontend) fn begin(
        &self,
        epoch: u64,
        tables: Vec<String>,
        job: String,
        deadline_ms: u64,
        sessions: &Registry,
    ) -> u64 {
        let mut s = self.state.lock();
        if s.since.is_none() {
            s.since = Some(Instant::now());
            self.pauses.fetch_add(1, Ordering::Relaxed);
        }
        s.epoch = epoch;
        s.tables = tables;
        s.job = job;
        s.deadline_ms = deadline_ms;
        // The flag first, then the snapshot: a session that begins a
        // command after the snapshot sees the flag. Both under the lock:
        // a session's check sees the whole let-run set.
        self.active.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        let at = sessions.now_us();
        let busy: HashSet<u32> = sessions
            .activity()
            .into_iter()
            .filter(|a| a.in_command || a.in_txn)
            .map(|a| a.id)
            .collect();
        // Sessions let run by an earlier epoch of this pause stay so.
        s.let_run.extend(busy);
        drop(s);
        self.changed.send_modify(|n| *n += 1);
        at
    }

    /// Releases the held statements (epoch `epoch`): they run on the rules
    /// in force now.
    pub fn release(&self, epoch: u64) {
        let mut s = self.state.lock();
        if let Some(since) = s.since.take() {
            self.paused_us
                .fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
        s.epoch = epoch;
        s.tables.clear();
        s.let_run.clear();
        self.active.store(false, Ordering::SeqCst);
        drop(s);
        self.changed.send_modify(|n| *n += 1);
    }

    /// The let-run sessions still to settle.
    pub(in crate::frontend) fn let_run(&self) -> Vec<u32> {
        self.state.lock().let_run.iter().copied().collect()
    }

    /// Session `id` settled (its command done, outside a transaction): its
    /// statements on paused tables are held from now on.
    pub(in crate::frontend) fn settled(&self, id: u32) {
        self.state.lock().let_run.remove(&id);
    }

    /// Records epoch `epoch` acknowledged (the member value set).
    pub fn acked(&self, epoch: u64) {
        let mut s = self.state.lock();
        s.acked = s.acked.max(epoch);
    }

    /// The highest epoch acknowledged.
    pub fn acked_epoch(&self) -> u64 {
        self.state.lock().acked
    }

    /// The job documents last read (`SHOW IDGATE RESHARD`, metrics).
    pub fn jobs(&self) -> Vec<Job> {
        self.jobs.lock().clone()
    }

    /// Keeps the job documents just read.
    pub fn set_jobs(&self, jobs: Vec<Job>) {
        *self.jobs.lock() = jobs;
    }

    /// This idgate's pause, for operators.
    pub fn view(&self) -> PauseView {
        let s = self.state.lock();
        let running = s.since.map_or(0, |t| t.elapsed().as_micros() as u64);
        PauseView {
            epoch: s.epoch,
            tables: s.tables.clone(),
            job: s.job.clone(),
            deadline_ms: s.deadline_ms,
            acked: s.acked,
            held: self.held.load(Ordering::Relaxed),
            let_run: s.let_run.len(),
            pauses: self.pauses.load(Ordering::Relaxed),
            paused_secs: (self.paused_us.load(Ordering::Relaxed) + running) as f64 / 1e6,
            deadline_failures: self.deadline_failures.load(Ordering::Relaxed),
        }
    }

    /// The paused table `sql` names, if one: (table, job, deadline), and
    /// whether session `id` is let run. `None`: the statement runs.
    pub(in crate::frontend) fn check(
        &self,
        id: u32,
        in_txn: bool,
        names: &dyn Fn(&str) -> bool,
    ) -> Option<Held> {
        let mut s = self.state.lock();
        let table = s
            .tables
            .iter()
            .find(|t| names(t.rsplit('.').next().unwrap_or(t)))?
            .clone();
        if s.let_run.contains(&id) {
            if in_txn {
                return None;
            }
            // Its transaction of before the pause has ended.
            s.let_run.remove(&id);
        }
        Some(Held {
            table,
            job: s.job.clone(),
            deadline_ms: s.deadline_ms,
        })
    }
}

/// A statement held on a paused table.
pub(in crate::frontend) struct Held {
    pub(in crate::frontend) table: String,
    pub(in crate::frontend) job: String,
    pub(in crate::frontend) deadline_ms: u64,
}
