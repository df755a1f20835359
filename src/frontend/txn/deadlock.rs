//! The distributed deadlock detector.
//!
//! A lock cycle across shards (session A holds a row on s0 and waits for one
//! on s1 that B holds, while B waits for A's row on s0) is not a deadlock
//! any one MariaDB can see: without help both wait out
//! `innodb_lock_wait_timeout`. This task keeps a global wait-for graph over
//! idgate's sessions, as distributed databases do:
//!
//! 1. Every `server.deadlock_check_ms` it reads the registry (`watch.rs`),
//!    and does nothing more unless a registered session has had a round
//!    trip under way longer than one interval.
//! 2. Then, on every shard where a registered session has a round trip
//!    under way, it reads who waits for whom over its own side connection:
//!    `information_schema.INNODB_LOCK_WAITS` joined with `INNODB_TRX`
//!    (MariaDB thread ids). Each (shard, thread id) is mapped to the idgate
//!    session that owns the connection; a thread idgate does not know (an
//!    autocommit statement, another client) stays a node of its own.
//! 3. It looks for cycles in that graph. A cycle whose waits are all on one
//!    shard is InnoDB's business (it detects and breaks those itself); a
//!    cycle that spans several shards is broken here: the victim is the
//!    youngest transaction of the cycle (the latest to register), and each
//!    of its statements that waits, in the same round trip, in two
//!    consecutive looks is killed with `KILL QUERY <thread>` on its shard,
//!    after the round trip was claimed and the victim flag set (see
//!    `watch.rs` for why the KILL cannot hit a later statement, and
//!    `Detector::resolve` for why two looks).
//! 4. The victim's session rolls its whole transaction back and answers
//!    1213, MariaDB's deadlock error; the others' statements go on. Each
//!    broken cycle is logged at info level and counted in
//!    `Shared::deadlocks_resolved`; looks that read the shards are counted in
//!    `Shared::deadlock_scans`.
//!
//! InnoDB refreshes the tables read here only after 100 ms without readers
//! (they are a cache), so the interval is at least 150 ms. The `[backend]`
//! account needs the PROCESS privilege to read them (it kills only its own
//! connections). Cycles through another idgate process's sessions are not
//! seen (their threads are unknown here).

use crate::backend::{BackendConn, BackendError};
use crate::frontend::shared::Shared;
use crate::frontend::txn::watchlist::{state, state_of, SessionView};
use crate::protocol::response::Expect;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// Who waits for whom on one shard (MariaDB thread ids).
const LOCK_WAITS: &str = "SELECT r.trx_mysql_thread_id, b.trx_mysql_thread_id \
     FROM information_schema.INNODB_LOCK_WAITS w \
     JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id \
     JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id";

/// Steps the cycle search may take per scan (the graph is small; this only
/// bounds a pathological one).
const SEARCH_BUDGET: usize = 100_000;

/// On shard `shard`, thread `waiting` waits for a lock thread `holding` has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub shard: usize,
    pub waiting: u32,
    pub holding: u32,
}

/// A node of the wait-for graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Node {
    /// A registered session (index into the snapshot).
    Session(usize),
    /// A thread no registered session owns: (shard, thread id).
    Thread(usize, u32),
}

/// `from` waits on `shard` (its thread `thread` there) for `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: Node,
    pub to: Node,
    pub shard: usize,
    pub thread: u32,
}

/// The wait-for graph of `waits` over the sessions of `views`: one edge per
/// (waiter, holder, shard), self-waits dropped.
pub fn graph(views: &[SessionView], waits: &[Wait]) -> Vec<Edge> {
    let mut owner: HashMap<(usize, u32), usize> = HashMap::new();
    for (i, v) in views.iter().enumerate() {
        for (shard, s) in v.slots.iter().enumerate() {
            if s.conn != 0 {
                owner.insert((shard, s.conn), i);
            }
        }
    }
    let node = |shard: usize, thread: u32| match owner.get(&(shard, thread)) {
        Some(&i) => Node::Session(i),
        None => Node::Thread(shard, thread),
    };
    let edges: BTreeSet<Edge> = waits
        .iter()
        .map(|w| Edge {
            from: node(w.shard, w.waiting),
            to: node(w.shard, w.holding),
            shard: w.shard,
            thread: w.waiting,
        })
        .filter(|e| e.from != e.to)
        .collect();
    edges.into_iter().collect()
}

/// A cycle of `edges` whose waits are on more than one shard (the indices of
/// its edges, in order), or `None`.
pub fn cross_shard_cycle(edges: &[Edge]) -> Option<Vec<usize>> {
    let mut nodes: Vec<Node> = edges.iter().flat_map(|e| [e.from, e.to]).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let index = |n: &Node| nodes.binary_search(n).ok();
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, e) in edges.iter().enumerate() {
        if let Some(f) = index(&e.from) {
            out[f].push(i);
        }
    }
    let mut budget = SEARCH_BUDGET;
    // Every simple cycle is found from its smallest node, visiting only
    // larger ones.
    for start in 0..nodes.len() {
        let mut path: Vec<usize> = Vec::new();
        let mut on_path = vec![false; nodes.len()];
        // (node, next outgoing edge to try)
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        on_path[start] = true;
        while let Some(&mut (n, ref mut next)) = stack.last_mut() {
            if budget == 0 {
                return None;
            }
            budget -= 1;
            let Some(&e) = out[n].get(*next) else {
                on_path[n] = false;
                stack.pop();
                path.pop();
                continue;
            };
            *next += 1;
            let Some(to) = index(&edges[e].to) else {
                continue;
            };
            if to == start {
                let first = edges[path.first().copied().unwrap_or(e)].shard;
                let spans = path
                    .iter()
                    .chain(std::iter::once(&e))
                    .any(|&p| edges[p].shard != first);
                if spans {
                    let mut cycle = path.clone();
                    cycle.push(e);
                    return Some(cycle);
                }
            } else if to > start && !on_path[to] {
                on_path[to] = true;
                path.push(e);
                stack.push((to, 0));
            }
        }
    }
    None
}

/// The victim of a cycle: its youngest registered session (latest start;
/// the higher session id on a tie).
pub fn victim(views: &[SessionView], edges: &[Edge], cycle: &[usize]) -> Option<usize> {
    cycle
        .iter()
        .filter_map(|&e| match edges[e].from {
            Node::Session(i) => Some(i),
            Node::Thread(..) => None,
        })
        .max_by_key(|&i| (views[i].started, views[i].session))
}

/// A waiting statement of a chosen victim: (session, shard, round trip word).
type Target = (u32, usize, u64);

/// The detector's state: one side connection per shard, opened when needed.
struct Detector {
    shared: Arc<Shared>,
    side: Vec<Option<BackendConn>>,
    /// The last failure reported per shard (not repeated every scan).
    failing: Vec<Option<String>>,
    /// Victims' waiting round trips the previous scan chose: killed when
    /// this scan chooses them again.
    chosen: HashSet<Target>,
}

/// Runs the detector until the task is dropped.
pub async fn run(shared: Arc<Shared>) {
    let every = Duration::from_millis(shared.config.server.deadlock_check_ms.max(1));
    let shards = shared.config.shards.len();
    let mut d = Detector {
        shared,
        side: (0..shards).map(|_| None).collect(),
        failing: vec![None; shards],
        chosen: HashSet::new(),
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        d.check(every).await;
    }
}

impl Detector {
    /// One look: nothing unless a registered round trip is older than
    /// `every`; then read the lock waits and break cross-shard cycles.
    async fn check(&mut self, every: Duration) {
        let chosen = std::mem::take(&mut self.chosen);
        if self.shared.watch.is_empty() {
            return;
        }
        let views = self.shared.watch.snapshot();
        let now = self.shared.watch.now_ms();
        let every_ms = every.as_millis() as u64;
        let running =
            |s: &crate::frontend::txn::watchlist::SlotView| state_of(s.word) == state::RUNNING;
        let stalled = views.iter().any(|v| {
            v.slots
                .iter()
                .any(|s| running(s) && now.saturating_sub(s.since_ms) >= every_ms)
        });
        if !stalled {
            return;
        }
        self.shared.deadlock_scans.fetch_add(1, Ordering::Relaxed);
        let mut waits = Vec::new();
        for shard in 0..self.side.len() {
            if !views
                .iter()
                .any(|v| v.slots.get(shard).is_some_and(running))
            {
                continue;
            }
            match self.lock_waits(shard).await {
                Ok(w) => waits.extend(w),
                Err(e) => self.report(shard, e),
            }
        }
        if waits.is_empty() {
            return;
        }
        let mut edges = graph(&views, &waits);
        while let Some(cycle) = cross_shard_cycle(&edges) {
            let Some(v) = victim(&views, &edges, &cycle) else {
                // Only threads idgate does not own: nothing to choose.
                break;
            };
            self.resolve(&views, &edges, &cycle, v, &chosen).await;
            edges.retain(|e| e.from != Node::Session(v));
        }
    }

    /// Kills every waiting statement of victim `v` of `cycle` that the
    /// previous scan chose too, still in the same round trip.
    ///
    /// Why two scans: InnoDB serves these tables from a cache it refreshes
    /// only after 100 ms without readers, so one read may show a wait from
    /// up to 100 ms before the registry was read, when the thread may have
    /// been in an earlier round trip. A second read at least one interval
    /// (>= 150 ms) later shows waits from after the first registry read; a
    /// round trip that was under way then and still is now, and waits in
    /// both, is the one seen waiting.
    async fn resolve(
        &mut self,
        views: &[SessionView],
        edges: &[Edge],
        cycle: &[usize],
        v: usize,
        chosen: &HashSet<Target>,
    ) {
        let view = &views[v];
        let describe = |n: Node| match n {
            Node::Session(i) => format!("session {}", views[i].session),
            Node::Thread(shard, t) => format!(
                "thread {t} on shard {} (not an idgate transaction)",
                self.shard_name(shard)
            ),
        };
        let path = cycle
            .iter()
            .map(|&e| {
                format!(
                    "{} waits on shard {} for {}",
                    describe(edges[e].from),
                    self.shard_name(edges[e].shard),
                    describe(edges[e].to)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        // Every wait of the victim, on any shard (one (shard, thread) each).
        let mut targets: Vec<(usize, u32)> = edges
            .iter()
            .filter(|e| e.from == Node::Session(v))
            .map(|e| (e.shard, e.thread))
            .collect();
        targets.sort_unstable();
        targets.dedup();
        let mut killed = Vec::new();
        for (shard, thread) in targets {
            let Some(slot) = view.slots.get(shard) else {
                continue;
            };
            if slot.conn != thread || state_of(slot.word) != state::RUNNING {
                continue;
            }
            let target = (view.session, shard, slot.word);
            if !chosen.contains(&target) {
                // Seen once: confirmed (or not) by the next scan.
                self.chosen.insert(target);
                continue;
            }
            if !view.entry.claim(shard, slot.word) {
                // That round trip is over since the registry was read.
                debug!(
                    victim = view.session,
                    shard = %self.shard_name(shard),
                    "deadlock victim's statement finished before the kill"
                );
                continue;
            }
            view.entry.mark_victim();
            let done = self.kill(shard, thread).await;
            view.entry.release(shard, slot.word);
            match done {
                Ok(()) => killed.push(format!(
                    "thread {thread} on shard {}",
                    self.shard_name(shard)
                )),
                Err(e) => self.report(shard, e),
            }
        }
        if killed.is_empty() {
            return;
        }
        self.shared
            .deadlocks_resolved
            .fetch_add(1, Ordering::Relaxed);
        let sessions: BTreeSet<u32> = cycle
            .iter()
            .filter_map(|&e| match edges[e].from {
                Node::Session(i) => Some(views[i].session),
                Node::Thread(..) => None,
            })
            .collect();
        let shards: BTreeSet<&str> = cycle
            .iter()
            .map(|&e| self.shard_name(edges[e].shard))
            .collect();
        info!(
            victim = view.session,
            sessions = ?sessions,
            shards = ?shards,
            killed = %killed.join(", "),
            "deadlock across shards resolved: {path}; session {} (the youngest transaction) is rolled back",
            view.session
        );
    }

    fn shard_name(&self, shard: usize) -> &str {
        self.shared
            .config
            .shards
            .get(shard)
            .map_or("?", |s| s.name.as_str())
    }

    /// Logs a shard's failure once (until it changes or clears).
    fn report(&mut self, shard: usize, e: BackendError) {
        let text = e.to_string();
        if self.failing[shard].as_deref() != Some(text.as_str()) {
            warn!("deadlock detector: {text}");
            self.failing[shard] = Some(text);
        }
    }

    /// The side connection to `shard`, opened if needed.
    async fn side(&mut self, shard: usize) -> Result<&mut BackendConn, BackendError> {
        if self.side[shard].is_none() {
            let s = &self.shared.config.shards[shard];
            let conn = self.shared.side_connection(shard).await?;
            debug!(shard = %s.name, thread = conn.connection_id, "deadlock detector connected");
            self.side[shard] = Some(conn);
        }
        self.side[shard].as_mut().ok_or_else(|| BackendError::Lost {
            shard: String::new(),
            source: std::io::Error::other("no connection"),
        })
    }

    /// Runs `f` on the side connection to `shard` within the connect timeout.
    async fn timed<T>(
        &mut self,
        shard: usize,
        what: impl AsyncFnOnce(&mut BackendConn) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        let limit = self.shared.connect_timeout();
        let name = self.shard_name(shard).to_string();
        let address = self.shared.config.shards[shard].address.clone();
        let work = async {
            let conn = self.side(shard).await?;
            what(conn).await
        };
        let r = match tokio::time::timeout(limit, work).await {
            Ok(r) => r,
            Err(_) => Err(BackendError::Timeout {
                shard: name,
                address,
                timeout_ms: limit.as_millis() as u64,
            }),
        };
        match &r {
            Ok(_) => self.failing[shard] = None,
            // The shard refused the statement: the connection itself is fine.
            Err(BackendError::Server { .. }) => {}
            Err(_) => self.side[shard] = None,
        }
        r
    }

    /// The lock waits on `shard`.
    async fn lock_waits(&mut self, shard: usize) -> Result<Vec<Wait>, BackendError> {
        let rows = self
            .timed(shard, async |c: &mut BackendConn| {
                c.query_rows(LOCK_WAITS).await
            })
            .await?;
        let id = |v: &Option<String>| v.as_deref().and_then(|s| s.parse::<u32>().ok());
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some(Wait {
                    shard,
                    waiting: id(r.first()?)?,
                    holding: id(r.get(1)?)?,
                })
            })
            .collect())
    }

    /// `KILL QUERY thread` on `shard`. An unknown thread (1094) has ended
    /// already: that is no failure.
    async fn kill(&mut self, shard: usize, thread: u32) -> Result<(), BackendError> {
        let sql = format!("\x03KILL QUERY {thread}");
        match self
            .timed(shard, async |c: &mut BackendConn| {
                c.run(sql.as_bytes(), Expect::Results).await
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(BackendError::Server { err, .. }) if err.code == 1094 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::txn::watchlist::{SlotView, Watched};

    /// Sessions with ids 1.. started in this order; `conns[i][shard]` is
    /// session i's thread on that shard.
    fn views(conns: &[[u32; 2]]) -> Vec<SessionView> {
        conns
            .iter()
            .enumerate()
            .map(|(i, c)| SessionView {
                entry: Arc::new(Watched::new(i as u32 + 1, 2)),
                session: i as u32 + 1,
                started: i as u64 + 1,
                slots: c
                    .iter()
                    .map(|&conn| SlotView {
                        conn,
                        word: state::RUNNING,
                        since_ms: 0,
                    })
                    .collect(),
            })
            .collect()
    }

    fn wait(shard: usize, waiting: u32, holding: u32) -> Wait {
        Wait {
            shard,
            waiting,
            holding,
        }
    }

    #[test]
    fn a_cycle_across_two_shards_is_found_and_the_youngest_is_the_victim() {
        // Session 1 (threads 10 on s0, 20 on s1), session 2 (11, 21).
        let v = views(&[[10, 20], [11, 21]]);
        // 1 waits on s1 for 2; 2 waits on s0 for 1.
        let edges = graph(&v, &[wait(1, 20, 21), wait(0, 11, 10)]);
        let cycle = cross_shard_cycle(&edges).expect("a cycle");
        assert_eq!(cycle.len(), 2);
        assert_eq!(victim(&v, &edges, &cycle), Some(1), "session 2 is younger");
    }

    #[test]
    fn a_cycle_on_one_shard_is_left_to_innodb() {
        let v = views(&[[10, 20], [11, 21]]);
        let edges = graph(&v, &[wait(0, 10, 11), wait(0, 11, 10)]);
        assert_eq!(edges.len(), 2);
        assert_eq!(cross_shard_cycle(&edges), None);
    }

    #[test]
    fn plain_waits_are_no_cycle() {
        let v = views(&[[10, 20], [11, 21], [12, 22]]);
        let edges = graph(
            &v,
            &[
                wait(0, 10, 11),
                wait(1, 21, 22),
                wait(0, 12, 99),
                wait(1, 20, 21),
            ],
        );
        assert_eq!(cross_shard_cycle(&edges), None);
    }

    #[test]
    fn unknown_threads_are_nodes_of_their_own_but_never_victims() {
        // 1 waits on s0 for thread 77 (an autocommit statement), which waits
        // on s0 for 2; 2 waits on s1 for 1.
        let v = views(&[[10, 20], [11, 21]]);
        let edges = graph(&v, &[wait(0, 10, 77), wait(0, 77, 11), wait(1, 21, 20)]);
        let cycle = cross_shard_cycle(&edges).expect("a cycle through thread 77");
        assert_eq!(cycle.len(), 3);
        assert_eq!(victim(&v, &edges, &cycle), Some(1));
        // Threads are told apart by shard: without sessions nothing links
        // the shards.
        let only_unknown = graph(&[], &[wait(0, 1, 2), wait(1, 2, 1)]);
        assert_eq!(cross_shard_cycle(&only_unknown), None);
    }

    #[test]
    fn two_cycles_sharing_a_node_joined_on_one_shard_each_are_not_cross_shard() {
        // 1 <-> 2 on s0, 1 <-> 3 on s1: two single-shard cycles.
        let v = views(&[[10, 20], [11, 21], [12, 22]]);
        let edges = graph(
            &v,
            &[
                wait(0, 10, 11),
                wait(0, 11, 10),
                wait(1, 20, 22),
                wait(1, 22, 20),
            ],
        );
        assert_eq!(cross_shard_cycle(&edges), None);
    }

    #[test]
    fn a_longer_cycle_and_duplicates() {
        // 1 -s0-> 2 -s0-> 3 -s1-> 1, with a repeated wait.
        let v = views(&[[10, 20], [11, 21], [12, 22]]);
        let edges = graph(
            &v,
            &[
                wait(0, 10, 11),
                wait(0, 10, 11),
                wait(0, 11, 12),
                wait(1, 22, 20),
            ],
        );
        assert_eq!(edges.len(), 3, "duplicates merged");
        let cycle = cross_shard_cycle(&edges).expect("a cycle");
        assert_eq!(cycle.len(), 3);
        assert_eq!(victim(&v, &edges, &cycle), Some(2));
    }
}
