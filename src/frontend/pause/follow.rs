//! The task that takes part in resharding cutovers (see
//! [`crate::reshard::protocol`]): it joins the member scope
//! [`MEMBERS`] (member value 0), follows the pause epoch counter
//! [`PAUSE`], and for each new epoch loads [`PAUSE_DOC`] and acts on it:
//!
//! - tables: pauses them (`PauseGate::begin`), waits until every
//!   let-run session has settled (its command of before the pause done,
//!   outside a transaction: polled in the session registry), then sets the
//!   member value to the epoch;
//! - a release: waits until the rules version it names is in force here
//!   (the rules follower applies it; this task asks for it too), releases
//!   the held statements, and sets the member value.
//!
//! A newer epoch seen meanwhile replaces the one being acted on. A lost
//! member record (lease expired) is joined again. Every few seconds it also
//! reads the job documents, for the metrics.

use crate::frontend::shared::Shared;
use crate::idgen::store::NodeLease;
use crate::idgen::Store;
use crate::reshard::protocol::{Job, Pause, JOB_PREFIX, MEMBERS, PAUSE, PAUSE_DOC};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{info, warn};

/// How often the let-run sessions are looked at while a pause waits for
/// them, and the rules version while a release waits for it.
const POLL: Duration = Duration::from_millis(5);

/// How often the job documents are read for the metrics.
const JOBS_EVERY: Duration = Duration::from_secs(5);

/// Starts the task (`None`: the store serves one process only, so there
/// is no cutover to take part in). It runs as long as the server.
pub fn start(shared: Arc<Shared>) -> Option<tokio::task::JoinHandle<()>> {
    let store = shared.allocator.as_ref()?.store();
    let rx = store.follow(PAUSE)?;
    Some(tokio::spawn(run(shared, store, rx)))
}

/// Leaves the member scope (clean shutdown): the movers stop waiting for
/// this idgate at once instead of at its lease's expiry.
pub async fn leave(shared: &Shared) {
    let Some(store) = shared.allocator.as_ref().map(|a| a.store()) else {
        return;
    };
    shared
        .pause
        .leaving
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let lease = shared.pause.member.lock().take();
    if let Some(lease) = lease {
        if let Err(e) = store.leave(MEMBERS, &lease).await {
            warn!("leaving the resharding members: {e}");
        }
    }
}

async fn run(shared: Arc<Shared>, store: Arc<dyn Store>, mut rx: watch::Receiver<u64>) {
    join(&shared, &store).await;
    let mut backoff = Duration::from_millis(100);
    let mut done = 0u64;
    let mut jobs = tokio::time::interval(JOBS_EVERY);
    loop {
        if shared.pause.fenced() {
            // The record was lost while acknowledging (`ack`).
            done = catch_up_after_fence(&shared, &store, &mut rx, done).await;
        }
        let seen = *rx.borrow_and_update();
        if seen > done {
            match act(&shared, &store, &mut rx).await {
                Ok(epoch) => {
                    done = epoch.max(done);
                    backoff = Duration::from_millis(100);
                }
                Err(e) => {
                    warn!("resharding pause epoch {seen} not acted on yet: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            }
            // A newer epoch came while this one was acted on (its change
            // may have been seen inside `act` already).
            if *rx.borrow() > done {
                continue;
            }
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = jobs.tick() => { refresh_jobs(&shared, &store).await; }
            () = lost(&shared) => {
                // Expired (etcd unreachable for its TTL): a mover would no
                // longer wait for this idgate, so a cutover may run unseen.
                // Fenced until it is back with the epoch acted on, the
                // newest rules and the newest epoch.
                warn!("the resharding member record was lost; joining again");
                *shared.pause.member.lock() = None;
                if follows_etcd_rules(&shared) {
                    shared.pause.fence();
                }
                let acked = shared.pause.acked_epoch();
                ack(&shared, &store, acked).await;
                if shared.pause.fenced() {
                    done = catch_up_after_fence(&shared, &store, &mut rx, done).await;
                }
            }
        }
    }
}

/// Whether this idgate takes its rules from the published versions (the
/// only idgates a cutover's rules version reaches, and so the ones the
/// fence protects; see `PauseGate::fence`).
fn follows_etcd_rules(shared: &Shared) -> bool {
    shared
        .config
        .rules
        .as_ref()
        .is_some_and(|r| r.source == crate::config::RulesSource::Etcd)
}

/// After the member record was joined again: the newest rules version
/// applied (or refused here for good, as without a fence), the newest
/// pause epoch acted on; then the fence is lifted. Tries again until the
/// store answers. Returns the epoch acted on.
async fn catch_up_after_fence(
    shared: &Shared,
    store: &Arc<dyn Store>,
    rx: &mut watch::Receiver<u64>,
    mut done: u64,
) -> u64 {
    let mut backoff = Duration::from_millis(100);
    loop {
        let rules = match shared.catch_up().await {
            Ok(_) => Ok(()),
            Err(r) if !r.transient => Ok(()),
            Err(r) => Err(r.why),
        };
        let epoch = match rules {
            Ok(()) => store
                .load(PAUSE)
                .await
                .map(|v| v.map_or(0, |v| v.value))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        let acted = match epoch {
            Ok(e) if e > done => act(shared, store, rx).await.map(|a| a.max(done)),
            Ok(_) => Ok(done),
            Err(e) => Err(e),
        };
        match acted {
            Ok(a) => {
                done = a;
                shared.pause.unfence();
                info!(
                    epoch = done,
                    "back among the resharding members; fence lifted"
                );
                return done;
            }
            Err(e) => {
                warn!("fenced until the store answers: {e}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Completes when this idgate's member record is lost (never while it
/// has none, or is leaving).
async fn lost(shared: &Shared) {
    let lease = shared.pause.member.lock().clone();
    match lease {
        Some(l) => l.state.wait_lost().await,
        None => std::future::pending().await,
    }
    if shared
        .pause
        .leaving
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        std::future::pending::<()>().await;
    }
}

/// Joins [`MEMBERS`], trying again until the store answers (`None`: the
/// store keeps no members, or idgate is shutting down).
async fn join(shared: &Shared, store: &Arc<dyn Store>) -> Option<NodeLease> {
    let mut backoff = Duration::from_millis(100);
    loop {
        if shared
            .pause
            .leaving
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return None;
        }
        match store.join(MEMBERS).await {
            Ok(lease) => {
                *shared.pause.member.lock() = lease.clone();
                return lease;
            }
            Err(e) => {
                warn!("joining the resharding members: {e}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Acts on the pause document now in the store; returns its epoch once
/// acknowledged (or replaced by a newer one: the caller acts on that).
async fn act(
    shared: &Shared,
    store: &Arc<dyn Store>,
    rx: &mut watch::Receiver<u64>,
) -> Result<u64, String> {
    let Some(raw) = store.load_doc(PAUSE_DOC).await.map_err(|e| e.to_string())? else {
        return Err(format!("{PAUSE} is set but {PAUSE_DOC} is missing"));
    };
    let doc = Pause::decode(PAUSE_DOC, &raw)?;
    let gate = &shared.pause;
    if !doc.tables.is_empty() {
        let at = gate.begin(
            doc.epoch,
            doc.tables.clone(),
            doc.job.clone(),
            doc.deadline_ms,
            &shared.sessions,
        );
        info!(epoch = doc.epoch, tables = ?doc.tables, job = %doc.job, "resharding pause: statements on the tables are held");
        loop {
            for id in gate.let_run() {
                let settled = match shared.sessions.activity_of(id) {
                    None => true,
                    Some(a) => !a.in_txn && (!a.in_command || a.since_us > at),
                };
                if settled {
                    gate.settled(id);
                }
            }
            if gate.let_run().is_empty() {
                break;
            }
            if newer(rx, doc.epoch).await {
                return Ok(doc.epoch);
            }
        }
    } else {
        if let Some(v) = doc.resume_at_rules {
            let etcd_rules = shared
                .config
                .rules
                .as_ref()
                .is_some_and(|r| r.source == crate::config::RulesSource::Etcd);
            let mut polls = 0u32;
            while shared.rules.version() < v {
                // The rules follower applies it too; asking now and then
                // does not depend on its watch alone.
                if etcd_rules && polls % 40 == 0 {
                    let _ = shared.catch_up().await;
                    if shared.rules.version() >= v {
                        break;
                    }
                }
                polls = polls.wrapping_add(1);
                if newer(rx, doc.epoch).await {
                    return Ok(doc.epoch);
                }
            }
        }
        gate.release(doc.epoch);
        info!(epoch = doc.epoch, rules = ?doc.resume_at_rules, "resharding pause released");
    }
    ack(shared, store, doc.epoch).await;
    Ok(doc.epoch)
}

/// Waits one poll interval; true when an epoch newer than `epoch` came.
async fn newer(rx: &mut watch::Receiver<u64>, epoch: u64) -> bool {
    tokio::select! {
        _ = rx.changed() => {}
        _ = tokio::time::sleep(POLL) => {}
    }
    *rx.borrow() > epoch
}

/// Sets the member value to `epoch`, joining again if the record is gone.
async fn ack(shared: &Shared, store: &Arc<dyn Store>, epoch: u64) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let lease = shared.pause.member.lock().clone();
        let lease = match lease {
            Some(l) => Some(l),
            None => join(shared, store).await,
        };
        let Some(lease) = lease else {
            // The store keeps no members: nobody waits for an ack.
            shared.pause.acked(epoch);
            return;
        };
        match store.set_member(MEMBERS, &lease, epoch).await {
            Ok(()) => {
                shared.pause.acked(epoch);
                info!(epoch, "resharding pause epoch acknowledged");
                return;
            }
            Err(e) => {
                warn!("acknowledging resharding pause epoch {epoch}: {e}; joining again");
                *shared.pause.member.lock() = None;
                if follows_etcd_rules(shared) {
                    // The record may be gone: fenced until caught up
                    // (`run` lifts it).
                    shared.pause.fence();
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Reads every job document (kept for the metrics); returns them.
pub async fn refresh_jobs(shared: &Shared, store: &Arc<dyn Store>) -> Vec<Job> {
    match store.list_docs(JOB_PREFIX).await {
        Ok(docs) => {
            let jobs: Vec<Job> = docs
                .into_iter()
                .filter_map(|(k, raw)| match Job::decode(&k, &raw) {
                    Ok(j) => Some(j),
                    Err(e) => {
                        warn!("{e}");
                        None
                    }
                })
                .collect();
            shared.pause.set_jobs(jobs.clone());
            jobs
        }
        Err(e) => {
            warn!("reading the resharding jobs: {e}");
            shared.pause.jobs()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::frontend::session::registry::Peer;
    use crate::idgen::store::memory::Fault;
    use crate::idgen::{Allocator, MemoryStore, SystemClock};
    use std::sync::atomic::Ordering;

    const CONFIG: &str = "[server]\nlisten = \"127.0.0.1:0\"\n\
        [[users]]\nname = \"app\"\npassword = \"x\"\n\
        [backend]\nuser = \"root\"\n\
        [[shards]]\nname = \"s0\"\naddress = \"127.0.0.1:3306\"\n\
        [allocator]\nstore = \"etcd\"\netcd_endpoints = [\"http://127.0.0.1:1\"]\n";

    /// A server state with config `text` on a memory store, its follower
    /// started and joined.
    async fn following(
        text: &str,
    ) -> (
        Arc<MemoryStore>,
        Arc<dyn Store>,
        Allocator,
        Arc<Shared>,
        tokio::task::JoinHandle<()>,
    ) {
        let m = MemoryStore::new();
        let store: Arc<dyn Store> = m.clone();
        let cfg = Config::parse(text, "t.toml").unwrap();
        let allocator = Allocator::with_store(store.clone(), Arc::new(SystemClock::new()), &[])
            .await
            .unwrap();
        let shared = Arc::new(Shared::with_rules(
            cfg,
            Some(Arc::new(crate::rules::RuleSet::default())),
            Some(allocator.clone()),
        ));
        shared.rules.start_at(1, None);
        let task = start(shared.clone()).expect("the memory store follows");
        until("joined", || values(&m) == [0]).await;
        (m, store, allocator, shared, task)
    }

    async fn until(what: &str, f: impl Fn() -> bool) {
        for _ in 0..12_000 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{what} never happened");
    }

    async fn publish(store: &Arc<dyn Store>, doc: Pause) {
        let expected = store.load(PAUSE).await.unwrap().map(|v| v.version);
        let docs = [(PAUSE_DOC.to_string(), doc.encode().unwrap())];
        assert!(store
            .publish(PAUSE, expected, doc.epoch, &docs)
            .await
            .unwrap()
            .is_some());
    }

    fn values(m: &MemoryStore) -> Vec<u64> {
        m.member_records(MEMBERS)
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    /// In memory, with injected faults (the real etcd path is
    /// `tests/reshard_pause.rs`): the ack waits for a session in a
    /// transaction at the pause, which is let run while a session that is
    /// not is held; a member record lost is joined again with the epoch
    /// acted on; a release waits for its rules version.
    #[tokio::test]
    async fn acks_after_let_run_sessions_rejoins_and_releases_at_the_rules_version() {
        let (m, store, allocator, shared, task) = following(CONFIG).await;

        let in_txn = shared
            .sessions
            .register(7, "app", Peer::default(), false, 1);
        in_txn.control.in_txn.store(true, Ordering::Relaxed);
        let idle = shared
            .sessions
            .register(8, "app", Peer::default(), false, 1);
        publish(
            &store,
            Pause {
                epoch: 1,
                tables: vec!["s.orders".into()],
                job: "j".into(),
                deadline_ms: u64::MAX,
                resume_at_rules: None,
            },
        )
        .await;
        until("paused", || shared.pause.active()).await;
        assert_eq!(shared.pause.let_run(), [7]);
        let names = |t: &str| t == "orders";
        assert!(shared.pause.check(7, true, &names).is_none(), "let run");
        assert!(shared.pause.check(8, false, &names).is_some(), "held");
        assert!(shared.pause.check(8, false, &|t| t == "items").is_none());
        assert_eq!(
            values(&m),
            [0],
            "acknowledged with a let-run transaction open"
        );
        in_txn.control.in_txn.store(false, Ordering::Relaxed);
        until("acknowledged", || values(&m) == [1]).await;
        assert!(
            shared.pause.check(7, false, &names).is_some(),
            "held once settled"
        );

        // The member record expires: joined again, with epoch 1.
        let (handle, _) = m.member_records(MEMBERS)[0];
        assert!(m.expire_member(MEMBERS, handle));
        until("joined again with epoch 1", || {
            let r = m.member_records(MEMBERS);
            r.len() == 1 && r[0].0 != handle && r[0].1 == 1
        })
        .await;

        // A release at rules version 5: held until version 5 is in force.
        publish(
            &store,
            Pause {
                epoch: 2,
                tables: vec![],
                job: "j".into(),
                deadline_ms: u64::MAX,
                resume_at_rules: Some(5),
            },
        )
        .await;
        let mut rx = store.follow(PAUSE).unwrap();
        rx.wait_for(|e| *e == 2).await.unwrap();
        assert!(shared.pause.active(), "released before its rules version");
        shared.rules.start_at(5, None);
        until("released", || !shared.pause.active()).await;
        until("release acknowledged", || values(&m) == [2]).await;
        let v = shared.pause.view();
        assert_eq!((v.pauses, v.acked, v.tables.len()), (1, 2, 0));

        // A pause whose let-run transaction never ends, given up by the
        // mover (a release without rules): the release is acted on.
        in_txn.control.in_txn.store(true, Ordering::Relaxed);
        let pause = |epoch, tables: Vec<String>| Pause {
            epoch,
            tables,
            job: "j".into(),
            deadline_ms: u64::MAX,
            resume_at_rules: None,
        };
        publish(&store, pause(3, vec!["s.orders".into()])).await;
        until("paused again", || shared.pause.active()).await;
        assert_eq!(values(&m), [2]);
        publish(&store, pause(4, vec![])).await;
        until("the give-up release acknowledged", || values(&m) == [4]).await;
        assert!(!shared.pause.active());
        drop((in_txn, idle));
        task.abort();
        allocator.shutdown().await;
    }

    /// An idgate following etcd rules whose member record is lost is
    /// fenced (statements on rule tables wait) until the store answers, it
    /// has joined again and caught up; one on a rules directory is not.
    #[tokio::test]
    async fn a_lost_member_record_fences_an_etcd_rules_idgate_until_it_is_back() {
        let text = format!("{CONFIG}[rules]\nsource = \"etcd\"\n");
        let (m, _store, allocator, shared, task) = following(&text).await;
        assert!(!shared.pause.active() && !shared.pause.fenced());

        // etcd stops answering and the record expires: fenced, and it
        // stays so while the store fails.
        m.set_fault(Fault::Fail);
        let (handle, _) = m.member_records(MEMBERS)[0];
        assert!(m.expire_member(MEMBERS, handle));
        until("fenced", || shared.pause.fenced()).await;
        assert!(shared.pause.active(), "every statement looks at the gate");
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert!(shared.pause.fenced(), "lifted while the store fails");
        }
        // The store answers again: joined, caught up, the fence lifted.
        m.set_fault(Fault::None);
        until("fence lifted", || !shared.pause.fenced()).await;
        assert_eq!(m.member_records(MEMBERS).len(), 1);
        assert!(!shared.pause.active());
        task.abort();
        allocator.shutdown().await;
    }
}
