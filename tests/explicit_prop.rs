//! Explicit ids across two idgate processes (issue 12): two proxies, each
//! with its own allocator (its own etcd client and member record) on one
//! etcd prefix, and one sequence with small segments, so explicit ids land
//! inside the segment the *other* process holds. Random sequences of
//! generated inserts and explicit writes in every form (literal, expression,
//! string, `UPDATE ... SET id`, `ON DUPLICATE KEY UPDATE id = ...`),
//! alternating between the processes at random, on an unsharded table and
//! on one sharded by another column:
//!
//! - a generated insert never fails (no 1062), and its id was never used
//!   before (explicit or generated, in either table);
//! - every explicit write succeeds (the id was confirmed before the reply);
//! - no id is on both shards of the sharded table.
//!
//! Explicit values are picked unused (an application writing an id twice
//! is its own duplicate), relative to what the other process would issue
//! next, to what this one would, above both high-water marks, or anywhere
//! below.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use support::proxy::{self, Proxy};

const RULES: &str = "[[generator]]\nname = \"ids\"\nkind = \"sequence\"\nbatch = 20\nmin_batch = 20\nmax_batch = 20\n";

/// How long the process refusing an unacknowledged explicit id waits for
/// the acknowledgement (production: 3 s). Its other store calls keep bounds
/// no loaded machine reaches.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

/// A snowflake generator too (each process leases its own node id).
const SNOW_RULES: &str = "[[generator]]\nname = \"ev\"\nkind = \"snowflake\"\n";

/// The tables: `t` (unsharded, sequence), `s` (sharded by `ck`, sequence),
/// `e` (unsharded, snowflake).
const TABLES: [&str; 3] = ["t", "s", "e"];

/// The generator of each table.
const GENERATORS: [&str; 3] = ["ids", "ids", "ev"];

/// Where an explicit value is taken from.
#[derive(Debug, Clone, Copy)]
enum Pick {
    /// The other process's next id plus this (inside its cache).
    Other(u64),
    /// This process's next id plus this.
    Own(u64),
    /// Above both processes' high-water marks by this.
    Above(u64),
    /// This fraction (per mille) of the highest id used so far.
    Below(u64),
}

/// How an explicit id is written.
#[derive(Debug, Clone, Copy)]
enum Form {
    /// `VALUES (x, ...)`.
    Literal,
    /// `VALUES (x-1+1, ...)`: read back after the statement.
    Expr,
    /// `VALUES (' x', ...)`.
    Str,
    /// `UPDATE ... SET id = x` of an existing row.
    Update,
    /// `INSERT ... (NULL, <existing unique key>) ON DUPLICATE KEY UPDATE id = x`.
    Upsert,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// A generated insert through proxy `p` into `TABLES[table]`.
    Generated { p: usize, table: usize, key: u64 },
    /// An explicit id through proxy `p`.
    Explicit {
        p: usize,
        table: usize,
        pick: Pick,
        form: Form,
        key: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let pick = prop_oneof![
        4 => (0u64..30).prop_map(Pick::Other),
        1 => (0u64..30).prop_map(Pick::Own),
        1 => (0u64..40).prop_map(Pick::Above),
        1 => (0u64..1000).prop_map(Pick::Below),
    ];
    let form = prop_oneof![
        Just(Form::Literal),
        Just(Form::Expr),
        Just(Form::Str),
        Just(Form::Update),
        Just(Form::Upsert),
    ];
    prop_oneof![
        3 => (0usize..2, 0usize..3, 0u64..1000)
            .prop_map(|(p, table, key)| Op::Generated { p, table, key }),
        2 => (0usize..2, 0usize..3, pick, form, 0u64..1000).prop_map(
            |(p, table, pick, form, key)| Op::Explicit { p, table, pick, form, key }
        ),
    ]
}

/// The two proxies, a connection to each, and what was written so far.
struct World {
    tb: support::Testbed,
    schema: String,
    proxies: Vec<Proxy>,
    conns: Vec<Conn>,
    /// Every id used so far, in either table.
    used: HashSet<u64>,
    /// Rows of `t`: (k, id).
    rows_t: Vec<(u64, u64)>,
    /// Rows of `s`: (u, ck, id).
    rows_s: Vec<(u64, u64, u64)>,
    /// Rows of `e`: (k, id).
    rows_e: Vec<(u64, u64)>,
    /// Next unique key value (`t.k`, `s.u`).
    next_key: u64,
    /// Every statement sent, with its proxy and the id it wrote (for
    /// failure messages).
    log: Vec<String>,
}

impl World {
    async fn setup(tb: support::Testbed) -> World {
        let schema = support::unique("xprop");
        for shard in 0..2 {
            proxy::admin(
                &tb,
                shard,
                &[
                    &format!("CREATE DATABASE `{schema}`"),
                    &format!(
                        "CREATE TABLE `{schema}`.t (id BIGINT PRIMARY KEY, k BIGINT NOT NULL UNIQUE)"
                    ),
                    &format!(
                        "CREATE TABLE `{schema}`.s (id BIGINT PRIMARY KEY, ck BIGINT NOT NULL, u BIGINT NOT NULL UNIQUE)"
                    ),
                    &format!(
                        "CREATE TABLE `{schema}`.e (id BIGINT PRIMARY KEY, k BIGINT NOT NULL UNIQUE)"
                    ),
                ],
            )
            .await;
        }
        let rules = format!(
            "{RULES}{SNOW_RULES}[[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"ids\"\n\n\
             [[table]]\nname = \"{schema}.s\"\ncolumn = \"id\"\ngenerator = \"ids\"\nshard_key = \"ck\"\nsharding = \"mod\"\n\n\
             [[table]]\nname = \"{schema}.e\"\ncolumn = \"id\"\ngenerator = \"ev\"\n"
        );
        let prefix = format!("/xprop-{schema}");
        // One clock that does not move, for both: a snowflake's next ids
        // are then exactly predictable (its position counts up, carrying
        // into later ticks), so explicit ids can be aimed at them.
        let clock: Arc<dyn idgate::idgen::Clock> = Arc::new(idgate::idgen::FakeClock::new(
            idgate::idgen::parse_rfc3339_ms("2026-06-01T00:00:00Z").expect("date"),
        ));
        let a = Proxy::start_rules_clock(&tb, &rules, &prefix, clock.clone()).await;
        let b = Proxy::start_rules_clock(&tb, &rules, &prefix, clock).await;
        // Two independent allocators: two generators, two etcd clients, two
        // member records in etcd.
        assert!(!Arc::ptr_eq(&a.generator("ids"), &b.generator("ids")));
        let mut etcd = etcd_client::Client::connect([tb.etcd.as_str()], None)
            .await
            .expect("etcd");
        let members = etcd
            .get(
                format!("{prefix}/seq/ids/member/"),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_keys_only(),
                ),
            )
            .await
            .expect("etcd get");
        assert_eq!(members.kvs().len(), 2, "one member record per allocator");
        let mut conns = Vec::new();
        for p in [&a, &b] {
            conns.push(Conn::new(p.opts(Some(&schema))).await.expect("connect"));
        }
        World {
            tb,
            schema,
            proxies: vec![a, b],
            conns,
            used: HashSet::new(),
            rows_t: Vec::new(),
            rows_s: Vec::new(),
            rows_e: Vec::new(),
            next_key: 1,
            log: Vec::new(),
        }
    }

    fn key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    /// An unused explicit value for `TABLES[table]` as `pick` says.
    fn value(&self, p: usize, table: usize, pick: Pick) -> u64 {
        let generator = GENERATORS[table];
        let snow = generator == "ev";
        let stats = |i: usize| self.proxies[i].generator(generator).stats();
        let max_used = self
            .used
            .iter()
            .copied()
            .filter(|&id| (id >= 1 << 40) == snow)
            .max()
            .unwrap_or(1);
        let mut x = match pick {
            // Snowflake too: with the clock standing still, `next_id + d`
            // is the id the process issues `d` ids later (within a tick).
            Pick::Other(d) => stats(1 - p).next_id + d,
            Pick::Own(d) => stats(p).next_id + d,
            // Snowflake: d ticks ahead of both (its high-water mark is a tick).
            Pick::Above(d) if snow => stats(0).next_id.max(stats(1).next_id) + (d << 22),
            Pick::Above(d) => stats(0).high_water.max(stats(1).high_water) + d,
            Pick::Below(permille) => (max_used / 1000 * permille).max(1),
        };
        while self.used.contains(&x) {
            x += 1;
        }
        x
    }

    async fn apply(&mut self, op: Op) -> Result<(), String> {
        match op {
            Op::Generated { p, table, key } => {
                let u = self.key();
                let sql = match table {
                    1 => format!("INSERT INTO s (ck, u) VALUES ({key}, {u})"),
                    t => format!("INSERT INTO {} (k) VALUES ({u})", TABLES[t]),
                };
                let c = &mut self.conns[p];
                if let Err(e) = c.query_drop(&sql).await {
                    let history: Vec<&String> = self.log.iter().rev().take(12).collect();
                    return Err(format!(
                        "generated insert through {p}: {sql}: {e}; latest first: {history:#?}"
                    ));
                }
                let id = c
                    .last_insert_id()
                    .ok_or_else(|| format!("{sql}: no last insert id"))?;
                self.log.push(format!("{p}: {sql} -> {id}"));
                if !self.used.insert(id) {
                    return Err(format!("{sql} through {p}: id {id} was used before"));
                }
                match table {
                    0 => self.rows_t.push((u, id)),
                    1 => self.rows_s.push((u, key, id)),
                    _ => self.rows_e.push((u, id)),
                }
            }
            Op::Explicit {
                p,
                table,
                pick,
                form,
                key,
            } => {
                let x = self.value(p, table, pick);
                let name = TABLES[table];
                let u = self.key();
                let literal = || {
                    let v = match form {
                        Form::Expr => format!("{}+1", x - 1),
                        Form::Str => format!("' {x}'"),
                        _ => x.to_string(),
                    };
                    if table == 1 {
                        format!("INSERT INTO s (id, ck, u) VALUES ({v}, {key}, {u})")
                    } else {
                        format!("INSERT INTO {name} (id, k) VALUES ({v}, {u})")
                    }
                };
                // An existing row to update, if the form needs one: its
                // index, and the statement.
                let (row, sql) = if table == 1 {
                    let i = (key as usize) % self.rows_s.len().max(1);
                    match (form, self.rows_s.get(i)) {
                        (Form::Update, Some(&(u, ck, _))) => (
                            Some(i),
                            format!("UPDATE s SET id = {x} WHERE ck = {ck} AND u = {u}"),
                        ),
                        (Form::Upsert, Some(&(u, ck, _))) => (
                            Some(i),
                            format!(
                                "INSERT INTO s (id, ck, u) VALUES (NULL, {ck}, {u}) ON DUPLICATE KEY UPDATE id = {x}"
                            ),
                        ),
                        _ => (None, literal()),
                    }
                } else {
                    let rows = if table == 2 {
                        &self.rows_e
                    } else {
                        &self.rows_t
                    };
                    let i = (key as usize) % rows.len().max(1);
                    match (form, rows.get(i)) {
                        (Form::Update, Some(&(k, _))) => (
                            Some(i),
                            format!("UPDATE {name} SET id = {x} WHERE k = {k}"),
                        ),
                        (Form::Upsert, Some(&(k, _))) => (
                            Some(i),
                            format!(
                                "INSERT INTO {name} (id, k) VALUES (NULL, {k}) ON DUPLICATE KEY UPDATE id = {x}"
                            ),
                        ),
                        _ => (None, literal()),
                    }
                };
                self.conns[p]
                    .query_drop(&sql)
                    .await
                    .map_err(|e| format!("explicit write through {p}: {sql}: {e}"))?;
                self.used.insert(x);
                self.log.push(format!("{p}: {sql} ({pick:?})"));
                match (table, row) {
                    (1, Some(i)) => self.rows_s[i].2 = x,
                    (1, None) => self.rows_s.push((u, key, x)),
                    (2, Some(i)) => self.rows_e[i].1 = x,
                    (2, None) => self.rows_e.push((u, x)),
                    (_, Some(i)) => self.rows_t[i].1 = x,
                    (_, None) => self.rows_t.push((u, x)),
                }
            }
        }
        Ok(())
    }

    /// The sharded table's ids on each shard, read directly: disjoint, and
    /// together what was written.
    async fn check_shards(&self) -> Result<(), String> {
        let mut per_shard = Vec::new();
        for shard in 0..2 {
            let mut c = Conn::new(proxy::direct_opts(&self.tb, shard, Some(&self.schema)))
                .await
                .map_err(|e| e.to_string())?;
            let ids: Vec<u64> = c
                .query("SELECT id FROM s")
                .await
                .map_err(|e| e.to_string())?;
            let _ = c.disconnect().await;
            per_shard.push(ids.into_iter().collect::<HashSet<u64>>());
        }
        let both: Vec<&u64> = per_shard[0].intersection(&per_shard[1]).collect();
        if !both.is_empty() {
            return Err(format!("ids on both shards: {both:?}"));
        }
        let stored: HashSet<u64> = per_shard[0].union(&per_shard[1]).copied().collect();
        let model: HashSet<u64> = self.rows_s.iter().map(|r| r.2).collect();
        if stored != model {
            return Err(format!(
                "sharded table holds {} ids, {} written",
                stored.len(),
                model.len()
            ));
        }
        Ok(())
    }

    async fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        for &op in ops {
            self.apply(op).await?;
        }
        self.check_shards().await
    }

    async fn teardown(self) {
        for c in self.conns {
            let _ = c.disconnect().await;
        }
        for p in self.proxies {
            p.stop().await;
        }
        for shard in 0..2 {
            proxy::admin(
                &self.tb,
                shard,
                &[&format!("DROP DATABASE IF EXISTS `{}`", self.schema)],
            )
            .await;
        }
    }
}

/// The property, over one pair of proxies kept for every case (ids and rows
/// accumulate: later cases start where earlier ones left the segments).
#[test]
fn explicit_ids_never_collide_across_two_processes() {
    let Some(tb) = support::testbed() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let world = std::sync::Mutex::new(Some(rt.block_on(World::setup(tb))));
    let mut runner = TestRunner::new(Config {
        cases: 24,
        max_shrink_iters: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..30), |ops| {
        let mut guard = world.lock().unwrap_or_else(|e| e.into_inner());
        let w = guard.as_mut().expect("world");
        rt.block_on(async {
            // A case takes a second or two; the bound only turns a hang
            // into a failure, so no loaded machine comes near it.
            tokio::time::timeout(Duration::from_secs(600), w.run(&ops))
                .await
                .unwrap_or_else(|_| Err("a case did not finish within 600 s".into()))
        })
        .map_err(TestCaseError::fail)
    });
    if let Some(w) = world.lock().unwrap_or_else(|e| e.into_inner()).take() {
        eprintln!(
            "{} ids used, {} rows in t, {} in s, {} in e",
            w.used.len(),
            w.rows_t.len(),
            w.rows_s.len(),
            w.rows_e.len()
        );
        rt.block_on(w.teardown());
    }
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// What the client gets when another idgate process holding the id's
/// segment does not acknowledge (a member record in etcd that never
/// follows the floor: a process cut off from etcd before its lease ran
/// out): error 1467 naming the generator and the id, and nothing written.
/// Once that record is gone (its lease expired or revoked), the same
/// statement succeeds, and the process holding the segment never issues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_explicit_id_is_refused_and_nothing_written() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("xsilent");
    proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &format!("CREATE TABLE `{schema}`.t (id BIGINT PRIMARY KEY, k BIGINT NOT NULL)"),
        ],
    )
    .await;
    let rules =
        format!("{RULES}[[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"ids\"\n");
    let prefix = format!("/xsilent-{schema}");
    // a gives up waiting for acknowledgements after CONFIRM_TIMEOUT (its
    // refusal below takes that long); b, which only generates, never needs
    // to give up.
    let a = Proxy::start_rules_timeout(&tb, &rules, &prefix, CONFIRM_TIMEOUT).await;
    let b = Proxy::start_rules(&tb, &rules, &prefix).await;
    let mut ca = Conn::new(a.opts(Some(&schema))).await.unwrap();
    let mut cb = Conn::new(b.opts(Some(&schema))).await.unwrap();
    cb.query_drop("INSERT INTO t (k) VALUES (1)").await.unwrap();
    let x = cb.last_insert_id().unwrap() + 5; // inside b's segment
                                              // A silent member.
    let mut etcd = etcd_client::Client::connect([tb.etcd.as_str()], None)
        .await
        .unwrap();
    // Alive until revoked below, however slow the machine.
    let lease = etcd.lease_grant(3600, None).await.unwrap().id();
    etcd.put(
        format!("{prefix}/seq/ids/member/{lease:x}"),
        "0",
        Some(etcd_client::PutOptions::new().with_lease(lease)),
    )
    .await
    .unwrap();
    let insert = format!("INSERT INTO t (id, k) VALUES ({x}, 2)");
    // Refused once a's timeout runs out: not a hang (the bound only has to
    // tell the two apart).
    let err = tokio::time::timeout(
        CONFIRM_TIMEOUT + Duration::from_secs(60),
        ca.query_drop(&insert),
    )
    .await
    .expect("hung")
    .expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("1467"), "{msg}");
    assert!(
        msg.contains(&format!(
            "generator ids: explicit id {x} could not be confirmed"
        )),
        "{msg}"
    );
    let n: Option<u64> = ca
        .query_first(format!("SELECT COUNT(*) FROM t WHERE id = {x}"))
        .await
        .unwrap();
    assert_eq!(n, Some(0), "nothing written");
    // The record goes away: confirmed, and b skips it. (b acknowledges
    // within a's timeout unless the machine is slow; a refusal, which
    // writes nothing, is then retried.)
    etcd.lease_revoke(lease).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while let Err(e) = ca.query_drop(&insert).await {
        let refused = matches!(&e, mysql_async::Error::Server(se) if se.code == 1467);
        assert!(
            refused && tokio::time::Instant::now() < deadline,
            "confirmed now: {e}"
        );
    }
    for k in 3..30 {
        cb.query_drop(format!("INSERT INTO t (k) VALUES ({k})"))
            .await
            .expect("generated insert");
        assert!(cb.last_insert_id().unwrap() > x);
    }
    let _ = ca.disconnect().await;
    let _ = cb.disconnect().await;
    a.stop().await;
    b.stop().await;
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE IF EXISTS `{schema}`")]).await;
}
