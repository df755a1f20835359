//! The resharding cutover's pause, idgate's side (#18): real idgate
//! processes, the test bed's MariaDB shards and etcd. The test plays the
//! mover (`idgate reshard`) by writing the `reshard::protocol` documents
//! itself: pause epochs, job documents, the cutover's rules version, and
//! the table swap on the shards (RENAME).
//!
//! Each test has its own schema and etcd prefix.

mod support;

use idgate::idgen::{EtcdOptions, EtcdStore, Store};
use idgate::reshard::protocol::{
    job_key, old_table, shadow_table, Job, Pause, Phase, Placement, SourceProgress, MEMBERS, PAUSE,
    PAUSE_DOC,
};
use idgate::rules::bundle::{Bundle, BundleFile, Meta};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use std::time::Duration;
use support::process::{Idgate, Options};
use support::proxy;

/// Polls every 20 ms, up to 120 s, until `$cond` (an expression that may
/// `.await`) holds; `$what` and `$log` name the failure.
macro_rules! until {
    ($what:expr, $log:expr, $cond:expr) => {{
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            if $cond {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: not within 120 s\n{}",
                $what,
                $log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }};
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The mover's side of the store, as the test plays it.
struct Mover {
    store: EtcdStore,
    etcd: etcd_client::Client,
    prefix: String,
}

impl Mover {
    async fn new(tb: &support::Testbed, prefix: &str) -> Mover {
        let endpoints = vec![tb.etcd.clone()];
        let options = EtcdOptions {
            timeout: support::ETCD_CALL_TIMEOUT,
            lease_ttl: support::MIN_LEASE_TTL,
        };
        Mover {
            store: EtcdStore::connect(&endpoints, prefix, options)
                .await
                .expect("etcd"),
            etcd: etcd_client::Client::connect(&endpoints, None)
                .await
                .expect("etcd client"),
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    /// Publishes pause epoch `doc.epoch` (the counter and its document in
    /// one transaction, as the mover does).
    async fn publish_pause(&self, doc: &Pause) {
        let expected = self.store.load(PAUSE).await.unwrap().map(|v| v.version);
        let docs = vec![(PAUSE_DOC.to_string(), doc.encode().unwrap())];
        let r = self
            .store
            .publish(PAUSE, expected, doc.epoch, &docs)
            .await
            .unwrap();
        assert!(r.is_some(), "pause epoch {} not published", doc.epoch);
    }

    async fn pause(&self, epoch: u64, table: &str, deadline_ms: u64) {
        self.publish_pause(&Pause {
            epoch,
            tables: vec![table.to_string()],
            job: "job-1".into(),
            deadline_ms,
            resume_at_rules: None,
        })
        .await;
    }

    async fn release(&self, epoch: u64, resume_at_rules: Option<u64>) {
        self.publish_pause(&Pause {
            epoch,
            tables: vec![],
            job: "job-1".into(),
            deadline_ms: now_ms() + 120_000,
            resume_at_rules,
        })
        .await;
    }

    /// The member values (one per live idgate).
    async fn members(&self) -> Vec<u64> {
        let m = self.store.members(MEMBERS, PAUSE).await.unwrap();
        let mut v: Vec<u64> = m.members.into_iter().map(|(_, v)| v).collect();
        v.sort_unstable();
        v
    }

    async fn put_job(&self, job: &Job) {
        let key = format!("{}/{}", self.prefix, job_key(&job.table));
        self.etcd
            .clone()
            .put(key, job.encode().unwrap(), None)
            .await
            .expect("put job");
    }

    /// Publishes `files` as the next rules version, naming `reshard_job`.
    async fn publish_rules(&self, files: &str, reshard_job: Option<&str>) -> u64 {
        let cur = self.store.load(idgate::publish::CURRENT).await.unwrap();
        let next = cur.map_or(1, |v| v.value + 1);
        let meta = Meta {
            version: next,
            published_at: now_ms() / 1000,
            user: "mover-test".into(),
            host: "test".into(),
            changes: vec![],
            rollback_of: None,
            nonce: format!("n{next}"),
            reshard_job: reshard_job.map(str::to_string),
        };
        let bundle = Bundle {
            meta: meta.clone(),
            files: vec![BundleFile {
                name: "rules.toml".into(),
                text: files.to_string(),
            }],
        };
        let docs = vec![
            (
                idgate::publish::version_key(next),
                bundle.encode().unwrap().into_bytes(),
            ),
            (
                idgate::publish::meta_key(next),
                toml::to_string(&meta).unwrap().into_bytes(),
            ),
        ];
        let r = self
            .store
            .publish(
                idgate::publish::CURRENT,
                cur.map(|v| v.version),
                next,
                &docs,
            )
            .await
            .unwrap();
        assert!(r.is_some(), "rules version {next} not published");
        next
    }
}

/// `orders` unsharded on s0 (the table moved), `items` sharded over both
/// shards (so statements are routed from the start), `notes` unsharded.
fn rules(schema: &str, orders_placement: &str) -> String {
    format!(
        "[[generator]]\nname = \"orders\"\nkind = \"sequence\"\nbatch = 10\n\n\
         [[generator]]\nname = \"notes\"\nkind = \"sequence\"\nstart = 5000\n\n\
         [[table]]\nname = \"{schema}.orders\"\ncolumn = \"id\"\ngenerator = \"orders\"\n{orders_placement}\n\
         [[table]]\nname = \"{schema}.items\"\ncolumn = \"id\"\ngenerator = \"orders\"\nshard_key = \"id\"\nsharding = \"mod\"\n\n\
         [[table]]\nname = \"{schema}.notes\"\ncolumn = \"id\"\ngenerator = \"notes\"\n"
    )
}

const TABLE: &str = "(id BIGINT UNSIGNED PRIMARY KEY, v INT NOT NULL)";

async fn schema(tb: &support::Testbed, tag: &str) -> String {
    let schema = support::unique(tag);
    for shard in 0..2 {
        proxy::admin(
            tb,
            shard,
            &[
                &format!("CREATE DATABASE `{schema}`"),
                &format!("CREATE TABLE `{schema}`.items {TABLE}"),
            ],
        )
        .await;
    }
    proxy::admin(
        tb,
        0,
        &[
            &format!("CREATE TABLE `{schema}`.orders {TABLE}"),
            &format!("CREATE TABLE `{schema}`.notes {TABLE}"),
        ],
    )
    .await;
    schema
}

async fn drop_schema(tb: &support::Testbed, schema: &str) {
    for shard in 0..2 {
        proxy::admin(tb, shard, &[&format!("DROP DATABASE IF EXISTS `{schema}`")]).await;
    }
}

async fn login(p: &Idgate, schema: &str) -> Conn {
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(p.mysql.port())
        .user(Some("app"))
        .pass(Some("secret"))
        .db_name(Some(schema.to_string()))
        .prefer_socket(false);
    Conn::new(opts).await.expect("login")
}

async fn direct(tb: &support::Testbed, shard: usize, schema: &str) -> Conn {
    Conn::new(proxy::direct_opts(tb, shard, Some(schema)))
        .await
        .expect("direct login")
}

/// `SHOW IDGATE RESHARD`'s rows, by column name.
async fn reshard_rows(c: &mut Conn) -> Vec<std::collections::HashMap<String, Option<String>>> {
    let rows: Vec<Row> = c.query("SHOW IDGATE RESHARD").await.expect("show reshard");
    rows.into_iter()
        .map(|r| {
            let names: Vec<String> = r
                .columns_ref()
                .iter()
                .map(|c| c.name_str().into_owned())
                .collect();
            names
                .into_iter()
                .enumerate()
                .map(|(i, n)| (n, r.get::<Option<String>, _>(i).flatten()))
                .collect()
        })
        .collect()
}

/// `Held` of the row of `table` in `SHOW IDGATE RESHARD` (0: no row).
async fn held(c: &mut Conn, table: &str) -> u64 {
    reshard_rows(c)
        .await
        .iter()
        .find(|r| r.get("Table").cloned().flatten().as_deref() == Some(table))
        .and_then(|r| r.get("Held").cloned().flatten())
        .and_then(|h| h.parse().ok())
        .unwrap_or(0)
}

fn code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A pause holds statements naming the table until the release (they then
/// run); statements on other tables run meanwhile; an idgate acknowledges
/// only once a statement on the table that was running has finished, and
/// both idgates acknowledge. Past the deadline a held statement fails with
/// 1205 naming the table; a client gone while held leaves nothing behind.
/// `SHOW IDGATE RESHARD` and the metrics show it.
#[test]
fn a_pause_holds_the_table_and_is_acknowledged_after_running_statements() {
    let Some(tb) = support::testbed() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = rt.block_on(schema(&tb, "rp_hold"));
    let table = format!("{schema}.orders");
    let prefix = support::unique("/rp-hold");
    let opts = Options {
        rules: rules(&schema, ""),
        etcd_prefix: prefix.clone(),
        ..Options::default()
    };
    let a = Idgate::start(&tb, &opts);
    let mut b = Idgate::start(&tb, &opts);
    let log = || format!("--- a:\n{}\n--- b:\n{}", a.log(), b.log());
    rt.block_on(async {
        let mover = Mover::new(&tb, &prefix).await;
        until!("both idgates joined", log, mover.members().await == [0, 0]);
        let mut c1 = login(&a, &schema).await;
        c1.query_drop("INSERT INTO orders (v) VALUES (1)").await.unwrap();
        let id1 = c1.last_insert_id().unwrap();

        // A statement on the table running when the pause comes: an UPDATE
        // waiting for a row lock taken directly on the shard.
        let mut locker = direct(&tb, 0, &schema).await;
        locker.query_drop("BEGIN").await.unwrap();
        locker
            .query_drop(format!("SELECT * FROM orders WHERE id = {id1} FOR UPDATE"))
            .await
            .unwrap();
        let running = tokio::spawn(async move {
            c1.query_drop(format!("UPDATE orders SET v = 2 WHERE id = {id1}"))
                .await
                .map(|_| c1)
        });
        let mut admin = login(&a, &schema).await;
        let mut watcher = direct(&tb, 0, &schema).await;
        until!(
            "the UPDATE runs on the shard",
            log,
            watcher
                .query_first::<u64, _>(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%UPDATE orders SET v = 2%' AND INFO NOT LIKE '%PROCESSLIST%'",
                )
                .await
                .unwrap()
                == Some(1)
        );

        mover.pause(1, &table, now_ms() + 600_000).await;
        // b has no session on the table: it acknowledges; a waits for the
        // UPDATE.
        until!("b acknowledges epoch 1", log, mover.members().await == [0, 1]);
        let rows = reshard_rows(&mut admin).await;
        let row = rows
            .iter()
            .find(|r| r.get("Table").cloned().flatten().as_deref() == Some(table.as_str()))
            .unwrap_or_else(|| panic!("no row for {table}: {rows:?}"));
        assert_eq!(row["Paused_here"].as_deref(), Some("yes"), "{rows:?}");
        assert_eq!(row["Pause_epoch"].as_deref(), Some("1"), "{rows:?}");
        assert_eq!(row["Epoch_acked"].as_deref(), Some("0"), "{rows:?}");

        // A new statement on the table is held; other tables run.
        let mut c2 = login(&a, &schema).await;
        let held_insert = tokio::spawn(async move {
            c2.query_drop("INSERT INTO orders (v) VALUES (3)")
                .await
                .map(|_| (c2.last_insert_id(), c2))
        });
        until!("the INSERT is held", log, held(&mut admin, &table).await == 1);
        let mut c3 = login(&b, &schema).await;
        c3.query_drop("INSERT INTO notes (v) VALUES (4)").await.unwrap();
        let n: Option<u64> = c3.query_first("SELECT COUNT(*) FROM items").await.unwrap();
        assert_eq!(n, Some(0));
        // A prepared statement on the table is held too (on b).
        let mut c4 = login(&b, &schema).await;
        let held_exec = tokio::spawn(async move {
            let st = c4
                .prep("SELECT v FROM orders WHERE id = ?")
                .await
                .unwrap();
            c4.exec_first::<i32, _, _>(&st, (id1,)).await.map(|n| (n, c4))
        });
        let mut admin_b = login(&b, &schema).await;
        until!("the prepared execute is held on b", log, held(&mut admin_b, &table).await == 1);
        assert_eq!(mover.members().await, [0, 1], "a acknowledged early");

        // The UPDATE finishes: a acknowledges; the held ones stay held.
        locker.query_drop("COMMIT").await.unwrap();
        let c1 = running.await.unwrap().expect("the running UPDATE");
        until!("a acknowledges epoch 1", log, mover.members().await == [1, 1]);
        assert_eq!(held(&mut admin, &table).await, 1);
        assert!(!held_insert.is_finished() && !held_exec.is_finished());
        let m = a.http_get("/metrics");
        assert_eq!(metric(&m, "idgate_reshard_held_statements"), Some(1.0), "{m}");
        assert_eq!(metric(&m, "idgate_reshard_pauses_total"), Some(1.0), "{m}");
        assert_eq!(metric(&m, "idgate_reshard_epoch_acked"), Some(1.0), "{m}");

        // The release: the held statements run, both acknowledge.
        mover.release(2, None).await;
        let (id3, _c2) = held_insert.await.unwrap().expect("the held INSERT");
        let id3 = id3.expect("an id");
        let (v, _c4) = held_exec.await.unwrap().expect("the held execute");
        assert_eq!(v, Some(2), "the UPDATE that ran through the pause");
        until!("both acknowledge the release", log, mover.members().await == [2, 2]);
        let mut d0 = direct(&tb, 0, &schema).await;
        let v: Option<i32> = d0
            .query_first(format!("SELECT v FROM orders WHERE id = {id3}"))
            .await
            .unwrap();
        assert_eq!(v, Some(3));

        // A client gone while held: its statement never runs, nothing
        // stays held, its session is gone.
        mover.pause(3, &table, now_ms() + 600_000).await;
        until!("a acknowledges epoch 3", log, mover.members().await == [3, 3]);
        let sessions = |rows: Vec<Row>| rows.len();
        let before = sessions(admin.query("SHOW IDGATE SESSIONS").await.unwrap());
        let mut c5 = login(&a, &schema).await;
        let gone = tokio::spawn(async move {
            let _ = c5.query_drop("INSERT INTO orders (v) VALUES (55)").await;
        });
        until!("the INSERT of the leaving client is held", log, held(&mut admin, &table).await == 1);
        gone.abort();
        let _ = gone.await;
        until!("the left client's statement is not held", log, held(&mut admin, &table).await == 0);
        until!(
            "the left client's session is gone",
            log,
            sessions(admin.query("SHOW IDGATE SESSIONS").await.unwrap()) == before
        );

        // Past the deadline: 1205 naming the table; no other session
        // notices (admin, on the same idgate, runs).
        mover.pause(4, &table, now_ms() + 1_000).await;
        let mut c6 = login(&a, &schema).await;
        let e = c6
            .query_drop("INSERT INTO orders (v) VALUES (66)")
            .await
            .unwrap_err();
        assert_eq!(code(&e), Some(1205), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&table) && msg.contains("being resharded"),
            "{msg}"
        );
        admin.query_drop("SELECT 1").await.unwrap();
        let m = a.http_get("/metrics");
        assert_eq!(
            metric(&m, "idgate_reshard_deadline_failures_total"),
            Some(1.0),
            "{m}"
        );
        mover.release(5, None).await;
        until!("both acknowledge the last release", log, mover.members().await == [5, 5]);
        let n: Option<u64> = d0
            .query_first("SELECT COUNT(*) FROM orders WHERE v IN (55, 66)")
            .await
            .unwrap();
        assert_eq!(n, Some(0), "a statement that was not run left a row");
        c6.query_drop("INSERT INTO orders (v) VALUES (7)").await.unwrap();
        drop(c1);
    });
    // A clean shutdown leaves the members at once (not at the lease's
    // expiry): the mover stops waiting for b.
    let st = b.terminate();
    assert!(st.success(), "{}", b.log());
    rt.block_on(async {
        let mover = Mover::new(&tb, &prefix).await;
        until!(
            "b left the members",
            || a.log(),
            mover.members().await == [5]
        );
    });
    drop((a, b));
    rt.block_on(drop_schema(&tb, &schema));
}

/// The cutover: the table swapped on the shards by hand, a rules version
/// naming a job in phase cutover moves `orders` from s0 alone to s0+s1 by
/// `id % 2`; the held statements run on the new placement after the
/// release. A version changing the placement without the job is refused.
#[test]
fn a_release_onto_the_cutover_version_runs_held_statements_on_the_new_placement() {
    let Some(tb) = support::testbed() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = rt.block_on(schema(&tb, "rp_cut"));
    let table = format!("{schema}.orders");
    let prefix = support::unique("/rp-cut");
    let work = tempfile::tempdir().unwrap();
    let opts = Options {
        etcd_prefix: prefix.clone(),
        rules_section: Some(format!(
            "source = \"etcd\"\ncache_file = \"{}\"",
            work.path().join("cache").display()
        )),
        ..Options::default()
    };
    let moved = "shard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n";
    rt.block_on(async {
        let mover = Mover::new(&tb, &prefix).await;
        mover.publish_rules(&rules(&schema, ""), None).await;
    });
    let a = Idgate::start(&tb, &opts);
    let log = || a.log();
    rt.block_on(async {
        let mover = Mover::new(&tb, &prefix).await;
        until!("a joined", log, mover.members().await == [0]);
        let mut c = login(&a, &schema).await;
        let mut ids = Vec::new();
        for v in 0..6 {
            c.query_drop(format!("INSERT INTO orders (v) VALUES ({v})"))
                .await
                .unwrap();
            ids.push(c.last_insert_id().unwrap());
        }
        // The mover's copy, by hand: the shadow tables on both shards with
        // each row where `id % 2` puts it.
        let shadow = shadow_table("orders");
        let mut d0 = direct(&tb, 0, &schema).await;
        let mut d1 = direct(&tb, 1, &schema).await;
        d0.query_drop(format!("CREATE TABLE {shadow} {TABLE}"))
            .await
            .unwrap();
        d1.query_drop(format!("CREATE TABLE {shadow} {TABLE}"))
            .await
            .unwrap();
        d0.query_drop(format!(
            "INSERT INTO {shadow} SELECT * FROM orders WHERE id % 2 = 0"
        ))
        .await
        .unwrap();
        let odd: Vec<(u64, i32)> = d0
            .query("SELECT id, v FROM orders WHERE id % 2 = 1")
            .await
            .unwrap();
        for (id, v) in &odd {
            d1.query_drop(format!("INSERT INTO {shadow} VALUES ({id}, {v})"))
                .await
                .unwrap();
        }
        let job = Job {
            table: table.clone(),
            id: "job-1".into(),
            from: Placement {
                shards: vec!["s0".into()],
                sharding: None,
                shard_key: None,
            },
            to: Placement {
                shards: vec!["s0".into(), "s1".into()],
                sharding: Some("mod".into()),
                shard_key: None,
            },
            phase: Phase::Cutover,
            rules_version: 1,
            published_version: None,
            swapped: vec![],
            rows_total: 6,
            sources: vec![SourceProgress {
                shard: "s0".into(),
                last_key: vec![ids[5].to_string()],
                end_key: vec![ids[5].to_string()],
                copied: 6,
                done: true,
            }],
            caught_up: 0,
            verified_chunks: 1,
            rate: 6,
            max_rows_per_second: 1000,
            started_ms: now_ms() - 5_000,
            updated_ms: now_ms(),
            error: None,
        };
        mover.put_job(&job).await;

        // SHOW IDGATE RESHARD shows the job document.
        let rows = reshard_rows(&mut c).await;
        let row = rows
            .iter()
            .find(|r| r.get("Table").cloned().flatten().as_deref() == Some(table.as_str()))
            .unwrap_or_else(|| panic!("no row for {table}: {rows:?}"));
        assert_eq!(row["Phase"].as_deref(), Some("cutover"), "{rows:?}");
        assert_eq!(row["From"].as_deref(), Some("s0"), "{rows:?}");
        assert_eq!(
            row["To"].as_deref(),
            Some("s0,s1 mod (id column)"),
            "{rows:?}"
        );
        assert_eq!(row["Rows_copied"].as_deref(), Some("6"), "{rows:?}");
        assert_eq!(row["Rows_total"].as_deref(), Some("6"), "{rows:?}");
        assert_eq!(row["Job"].as_deref(), Some("job-1"), "{rows:?}");
        assert_eq!(row["Paused_here"].as_deref(), Some("no"), "{rows:?}");

        // A version changing the placement without naming the job: refused.
        let v2 = mover.publish_rules(&rules(&schema, moved), None).await;
        until!("version 2 refused", log, {
            let rows: Vec<Row> = c.query("SHOW IDGATE STATUS").await.unwrap();
            rows.iter().any(|r| {
                r.get::<Option<String>, _>(0).flatten().as_deref() == Some("rules_failed_version")
                    && r.get::<Option<String>, _>(1).flatten() == Some(v2.to_string())
            })
        });
        let rows: Vec<Row> = c.query("SHOW IDGATE STATUS").await.unwrap();
        let err = rows
            .iter()
            .find(|r| {
                r.get::<Option<String>, _>(0).flatten().as_deref() == Some("rules_last_error")
            })
            .and_then(|r| r.get::<Option<String>, _>(1).flatten())
            .unwrap_or_default();
        assert!(err.contains("resharding"), "{err}");

        // The pause; a held INSERT.
        mover.pause(1, &table, now_ms() + 600_000).await;
        until!("a acknowledges epoch 1", log, mover.members().await == [1]);
        let mut c2 = login(&a, &schema).await;
        let held_insert = tokio::spawn(async move {
            c2.query_drop("INSERT INTO orders (v) VALUES (100)")
                .await
                .map(|_| (c2.last_insert_id(), c2))
        });
        until!("the INSERT is held", log, held(&mut c, &table).await == 1);

        // The swap on the shards, the cutover's version, the release.
        let old = old_table("orders");
        d0.query_drop(format!("RENAME TABLE orders TO {old}, {shadow} TO orders"))
            .await
            .unwrap();
        d1.query_drop(format!("RENAME TABLE {shadow} TO orders"))
            .await
            .unwrap();
        let v3 = mover
            .publish_rules(&rules(&schema, moved), Some("job-1"))
            .await;
        mover.release(2, Some(v3)).await;
        let (id, _c2) = held_insert.await.unwrap().expect("the held INSERT");
        let id = id.expect("an id");
        until!(
            "a acknowledges the release",
            log,
            mover.members().await == [2]
        );
        // Rows now land by id % 2: the held one and new ones.
        let mut placed = vec![id];
        for v in 200..204 {
            c.query_drop(format!("INSERT INTO orders (v) VALUES ({v})"))
                .await
                .unwrap();
            placed.push(c.last_insert_id().unwrap());
        }
        for id in placed.iter().chain(&ids) {
            let on0: Option<u64> = d0
                .query_first(format!("SELECT COUNT(*) FROM orders WHERE id = {id}"))
                .await
                .unwrap();
            let on1: Option<u64> = d1
                .query_first(format!("SELECT COUNT(*) FROM orders WHERE id = {id}"))
                .await
                .unwrap();
            let want = if id % 2 == 0 { (1, 0) } else { (0, 1) };
            assert_eq!((on0.unwrap(), on1.unwrap()), want, "row {id}");
        }
        // Read through idgate: every row once, over both shards.
        let n: Option<u64> = c.query_first("SELECT COUNT(*) FROM orders").await.unwrap();
        assert_eq!(n, Some(11));
        let st: Vec<Row> = c.query("SHOW IDGATE STATUS").await.unwrap();
        let version = st
            .iter()
            .find(|r| r.get::<Option<String>, _>(0).flatten().as_deref() == Some("rules_version"))
            .and_then(|r| r.get::<Option<String>, _>(1).flatten());
        assert_eq!(version, Some(v3.to_string()));
        let m = a.http_get("/metrics");
        let phase = format!("idgate_reshard_phase{{table=\"{table}\"}}");
        until!(
            "the job's metrics",
            log,
            metric(&a.http_get("/metrics"), &phase) == Some(4.0)
        );
        assert!(m.contains("# TYPE idgate_reshard_rows_copied gauge"), "{m}");
    });
    drop(a);
    rt.block_on(drop_schema(&tb, &schema));
}

/// A transaction open when the pause comes (it used the table already) is
/// let run: its next statements on the table run on the old placement,
/// and this idgate acknowledges only once it has ended. A transaction
/// begun after the pause is held like any statement.
#[test]
fn a_transaction_open_at_the_pause_is_let_run_and_delays_the_ack() {
    let Some(tb) = support::testbed() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = rt.block_on(schema(&tb, "rp_txn"));
    let table = format!("{schema}.orders");
    let prefix = support::unique("/rp-txn");
    let opts = Options {
        rules: rules(&schema, ""),
        etcd_prefix: prefix.clone(),
        ..Options::default()
    };
    let a = Idgate::start(&tb, &opts);
    let log = || a.log();
    rt.block_on(async {
        let mover = Mover::new(&tb, &prefix).await;
        until!("a joined", log, mover.members().await == [0]);
        let mut t = login(&a, &schema).await;
        t.query_drop("BEGIN").await.unwrap();
        t.query_drop("INSERT INTO orders (v) VALUES (1)")
            .await
            .unwrap();
        mover.pause(1, &table, now_ms() + 600_000).await;
        let mut admin = login(&a, &schema).await;
        until!(
            "the pause seen",
            log,
            reshard_rows(&mut admin).await.iter().any(|r| r
                .get("Paused_here")
                .cloned()
                .flatten()
                .as_deref()
                == Some("yes"))
        );
        // Let run: it used the table before the pause.
        t.query_drop("INSERT INTO orders (v) VALUES (2)")
            .await
            .unwrap();
        let n: Option<u64> = t.query_first("SELECT COUNT(*) FROM orders").await.unwrap();
        assert_eq!(n, Some(2));
        // A transaction begun after the pause is held.
        let mut late = login(&a, &schema).await;
        late.query_drop("BEGIN").await.unwrap();
        let held_late = tokio::spawn(async move {
            late.query_drop("INSERT INTO orders (v) VALUES (3)")
                .await
                .map(|_| late)
        });
        until!(
            "the late INSERT is held",
            log,
            held(&mut admin, &table).await == 1
        );
        assert_eq!(
            mover.members().await,
            [0],
            "acknowledged with a let-run transaction open"
        );
        t.query_drop("COMMIT").await.unwrap();
        until!(
            "a acknowledges after the COMMIT",
            log,
            mover.members().await == [1]
        );
        // Its transaction ended: the session's next statement is held.
        let held_t = tokio::spawn(async move {
            t.query_drop("INSERT INTO orders (v) VALUES (4)")
                .await
                .map(|_| t)
        });
        until!("both are held", log, held(&mut admin, &table).await == 2);
        mover.release(2, None).await;
        let mut late = held_late.await.unwrap().expect("the late INSERT");
        late.query_drop("COMMIT").await.unwrap();
        held_t.await.unwrap().expect("the INSERT after the COMMIT");
        until!(
            "a acknowledges the release",
            log,
            mover.members().await == [2]
        );
        let mut d0 = direct(&tb, 0, &schema).await;
        let n: Option<u64> = d0.query_first("SELECT COUNT(*) FROM orders").await.unwrap();
        assert_eq!(n, Some(4));
    });
    drop(a);
    rt.block_on(drop_schema(&tb, &schema));
}
