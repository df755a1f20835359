//! `idgate reshard` (issue 18): a table moved onto other shards while
//! applications write through idgate. Real MariaDB shards and etcd from the
//! test bed, a real `idgate serve` following rules published in etcd, the
//! real `idgate reshard` process (killed with -9 and resumed in one test).
//!
//! Each test: a schema and an etcd prefix of its own; concurrent workers
//! insert, update and delete rows through idgate, each recording what it
//! wrote, so the final content is known; afterwards the content read
//! through idgate equals it row by row, every row is on the shard its new
//! rule gives and on no other (each shard read directly), ids are unique,
//! no application statement failed, and nothing of the move is left on the
//! shards.
//!
//! The load runs through the whole move, the cutover included: every
//! idgate pauses the table's statements (they wait, they do not fail), the
//! tables are swapped, the new rules version is published and applied, and
//! the waiting statements run on the new placement. The longest statement
//! of the load is printed (a figure, not asserted: timing goes in
//! benchmarks). The rules always hold a second, sharded table, so statement
//! routing is on from the start: a move that would turn it on is refused
//! at plan, as the running idgates could not apply it live.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idgate::reshard::protocol::{job_key, Job, Phase};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};
use support::process::{free_port, TEST_ALLOCATOR_BOUNDS};
use support::Testbed;

/// Rows each test starts with.
const SEED: u64 = 3000;

/// Concurrent application workers.
const WORKERS: u64 = 4;

/// One row's application columns.
type Content = BTreeMap<u64, (i64, String)>;

/// A test's files (config, rules) and its `idgate serve`.
struct Setup {
    dir: tempfile::TempDir,
    schema: String,
    prefix: String,
    mysql: SocketAddr,
    serve: Option<Child>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Setup {
    fn new(tb: &Testbed, tag: &str) -> Setup {
        let schema = support::unique(tag);
        let prefix = format!("/{schema}/");
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("rules")).expect("rules dir");
        let port = free_port();
        let mysql: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let mut shards = String::new();
        for (i, s) in tb.shards.iter().chain([&tb.third]).enumerate() {
            shards.push_str(&format!("[[shards]]\nname = \"s{i}\"\naddress = \"{s}\"\n"));
        }
        let config = format!(
            "[server]\nlisten = \"{mysql}\"\n\
             [[users]]\nname = \"app\"\npassword = \"secret\"\n\
             [backend]\nuser = \"{}\"\npassword = \"{}\"\n{shards}\
             [allocator]\nstore = \"etcd\"\netcd_endpoints = [\"{}\"]\netcd_prefix = \"{prefix}\"\n\
             {TEST_ALLOCATOR_BOUNDS}\
             [rules]\nsource = \"etcd\"\ncache_file = \"{}\"\n",
            tb.user,
            tb.password,
            tb.etcd,
            dir.path().join("rules.cache").display()
        );
        support::write_private(&dir.path().join("idgate.toml"), &config);
        Setup {
            dir,
            schema,
            prefix,
            mysql,
            serve: None,
        }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("idgate.toml")
    }

    fn table(&self) -> String {
        format!("{}.orders", self.schema)
    }

    /// Publishes the rules with the table's placement keys `placement`.
    fn push_rules(&self, placement: &str) {
        let text = format!(
            "[[generator]]\nname = \"orders\"\nkind = \"sequence\"\nbatch = 50\n\n\
             [[table]]\nname = \"{}\"\ncolumn = \"id\"\ngenerator = \"orders\"\n{placement}\n\
             [[table]]\nname = \"{}.others\"\ncolumn = \"id\"\ngenerator = \"orders\"\n\
             shard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n",
            self.table(),
            self.schema
        );
        std::fs::write(self.dir.path().join("rules/r.toml"), text).expect("rules");
        let o = idgate(&[
            "rules",
            "push",
            &self.dir.path().join("rules").display().to_string(),
            "--config",
            &self.config().display().to_string(),
        ]);
        assert!(o.status.success(), "push: {}", text_of(&o));
    }

    /// Starts (or restarts) `idgate serve` and waits until it takes logins.
    async fn start(&mut self) {
        self.stop();
        let log = std::fs::File::create(self.dir.path().join("idgate.log")).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_idgate"))
            .arg("serve")
            .arg("--config")
            .arg(self.config())
            .env("IDGATE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start idgate");
        self.serve = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(c) = Conn::new(self.opts().db_name(None::<String>)).await {
                let _ = c.disconnect().await;
                return;
            }
            if let Some(Ok(Some(st))) = self.serve.as_mut().map(Child::try_wait) {
                panic!("idgate exited ({st}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "idgate did not take logins within 60 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.serve.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The last 40 lines idgate logged.
    fn log(&self) -> String {
        let all = std::fs::read_to_string(self.dir.path().join("idgate.log")).unwrap_or_default();
        let lines: Vec<&str> = all.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn opts(&self) -> OptsBuilder {
        OptsBuilder::default()
            .ip_or_hostname(self.mysql.ip().to_string())
            .tcp_port(self.mysql.port())
            .user(Some("app"))
            .pass(Some("secret"))
            .db_name(Some(self.schema.clone()))
            .prefer_socket(false)
    }

    /// `idgate reshard --config C --table T ARGS`.
    /// Waits (up to 120 s) until the move is in its copy phase with some
    /// rows checkpointed, not all (a kill or a cut lands mid-copy).
    async fn until_copying(&self, tb: &Testbed) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(j) = self.job(tb).await {
                assert!(j.phase <= Phase::Copy, "the copy ended first: {j:?}");
                if j.phase == Phase::Copy && j.copied() > 0 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the copy did not begin within 120 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn reshard_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_idgate"));
        c.args(["reshard", "--config"])
            .arg(self.config())
            .args(["--table", &self.table()])
            .args(args)
            .env("USER", "reshard-test")
            .stdin(Stdio::null());
        c
    }

    fn reshard(&self, args: &[&str]) -> Output {
        self.reshard_cmd(args).output().expect("run idgate reshard")
    }

    /// The job document in the store.
    async fn job(&self, tb: &Testbed) -> Option<Job> {
        let store = store(tb, &self.prefix).await;
        let key = job_key(&self.table());
        store
            .load_doc(&key)
            .await
            .expect("read the job")
            .map(|b| Job::decode(&key, &b).expect("a job"))
    }
}

async fn store(tb: &Testbed, prefix: &str) -> Arc<dyn idgate::idgen::Store> {
    let cfg = idgate::config::AllocatorConfig {
        store: idgate::config::StoreKind::Etcd,
        etcd_endpoints: vec![tb.etcd.clone()],
        etcd_prefix: prefix.to_string(),
        ..Default::default()
    };
    idgate::idgen::Allocator::open_store(&cfg)
        .await
        .expect("open the store")
}

fn idgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idgate"))
        .args(args)
        .env("USER", "reshard-test")
        .stdin(Stdio::null())
        .output()
        .expect("run idgate")
}

fn text_of(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Creates the table on `shards` (test-bed indices) and `SEED` rows with
/// ids 1..=SEED through idgate (explicit ids: the generator is raised past
/// them); returns the content.
async fn seed(tb: &Testbed, s: &Setup, shards: &[usize]) -> Content {
    for &i in shards {
        let mut c = direct(tb, i).await;
        c.query_drop(format!("CREATE DATABASE IF NOT EXISTS `{}`", s.schema))
            .await
            .expect("create database");
        c.query_drop(format!(
            "CREATE TABLE `{}`.orders (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, v INT NOT NULL, note VARCHAR(40) NULL, at DATETIME(6) NULL, f DOUBLE NULL)",
            s.schema
        ))
        .await
        .expect("create table");
    }
    let mut c = Conn::new(s.opts()).await.expect("login");
    let mut content = Content::new();
    for start in (1..=SEED).step_by(500) {
        let mut values = Vec::new();
        for id in start..(start + 500).min(SEED + 1) {
            let note = format!("seed 'n' {id}");
            values.push(format!(
                "({id}, {}, '{}', NOW(6), {id}.25)",
                id as i64 * 3,
                note.replace('\'', "''")
            ));
            content.insert(id, (id as i64 * 3, note));
        }
        c.query_drop(format!(
            "INSERT INTO orders (id, v, note, at, f) VALUES {}",
            values.join(", ")
        ))
        .await
        .expect("seed");
    }
    c.disconnect().await.expect("disconnect");
    content
}

async fn direct(tb: &Testbed, i: usize) -> Conn {
    let addr = if i < 2 { &tb.shards[i] } else { &tb.third };
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let opts = OptsBuilder::default()
        .ip_or_hostname(host)
        .tcp_port(port.parse().expect("port"))
        .user(Some(tb.user.clone()))
        .pass(Some(tb.password.clone()))
        .prefer_socket(false);
    Conn::new(opts).await.expect("direct login")
}

/// What one worker did: its rows' final content (`None`: deleted), and
/// every statement that failed.
#[derive(Default)]
struct Outcome {
    rows: BTreeMap<u64, Option<(i64, String)>>,
    inserted: Vec<u64>,
    failed: Vec<String>,
    statements: u64,
    /// The longest statement (ms).
    longest_ms: u128,
}

/// One worker: until `stop`, inserts rows (recording the id idgate gave),
/// updates and deletes rows of its own (seeded ids with `id % WORKERS ==
/// w`, and those it inserted).
async fn worker(opts: OptsBuilder, w: u64, stop: Arc<AtomicBool>) -> Outcome {
    let mut out = Outcome::default();
    let mut c = match Conn::new(opts).await {
        Ok(c) => c,
        Err(e) => {
            out.failed.push(format!("login: {e}"));
            return out;
        }
    };
    let mut mine: Vec<u64> = (1..=SEED).filter(|id| id % WORKERS == w).collect();
    let mut step: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        step += 1;
        out.statements += 1;
        let began = Instant::now();
        let pick = mine
            .get((step as usize * 7919) % mine.len().max(1))
            .copied()
            .unwrap_or(0);
        let r: Result<(), mysql_async::Error> = match step % 4 {
            0 | 1 => {
                let note = format!("w{w} insert {step} 'q'");
                let v = (w * 1_000_000 + step) as i64;
                match c
                    .exec_drop(
                        "INSERT INTO orders (v, note, at, f) VALUES (?, ?, NOW(6), RAND())",
                        (v, note.clone()),
                    )
                    .await
                {
                    Ok(()) => {
                        // The OK's id is the stored one, triggers or not.
                        let id = c.last_insert_id().unwrap_or(0);
                        let sel = c
                            .query_first::<u64, _>("SELECT LAST_INSERT_ID()")
                            .await
                            .ok()
                            .flatten()
                            .unwrap_or(0);
                        if id != sel || id == 0 {
                            out.failed.push(format!(
                                "worker {w} step {step}: the OK says id {id}, LAST_INSERT_ID() {sel}"
                            ));
                            break;
                        }
                        out.inserted.push(id);
                        out.rows.insert(id, Some((v, note)));
                        mine.push(id);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            2 => {
                let note = format!("w{w} update {step}");
                let v = -(step as i64);
                let r = c
                    .exec_drop(
                        "UPDATE orders SET v = ?, note = ?, at = NOW(6) WHERE id = ?",
                        (v, note.clone(), pick),
                    )
                    .await;
                if r.is_ok() && out.rows.get(&pick) != Some(&None) {
                    out.rows.insert(pick, Some((v, note)));
                }
                r
            }
            _ => {
                let r = c
                    .exec_drop("DELETE FROM orders WHERE id = ?", (pick,))
                    .await;
                if r.is_ok() {
                    out.rows.insert(pick, None);
                    mine.retain(|&id| id != pick);
                }
                r
            }
        };
        out.longest_ms = out.longest_ms.max(began.elapsed().as_millis());
        if let Err(e) = r {
            // One failure fails the test; the worker stops there.
            out.failed.push(format!("worker {w} step {step}: {e}"));
            break;
        }
    }
    let _ = c.disconnect().await;
    out
}

/// The load: `WORKERS` workers until the returned flag is set.
fn start_load(s: &Setup) -> (Arc<AtomicBool>, Vec<tokio::task::JoinHandle<Outcome>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = (0..WORKERS)
        .map(|w| tokio::spawn(worker(s.opts(), w, stop.clone())))
        .collect();
    (stop, handles)
}

/// Stops the load and applies what the workers did to `content`; checks
/// that no statement failed and that inserted ids are unique.
async fn stop_load(
    log: &str,
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<Outcome>>,
    content: &mut Content,
) -> u64 {
    stop.store(true, Ordering::Relaxed);
    let mut statements = 0;
    let mut longest = 0;
    let mut ids = std::collections::HashSet::new();
    for h in handles {
        let o = h.await.expect("worker");
        longest = longest.max(o.longest_ms);
        assert!(
            o.failed.is_empty(),
            "application statements failed: {:#?}\nidgate log:\n{log}",
            o.failed
        );
        statements += o.statements;
        for id in o.inserted {
            assert!(id > SEED, "a generated id {id} collides with a seeded one");
            assert!(ids.insert(id), "id {id} was given twice");
        }
        for (id, row) in o.rows {
            match row {
                Some(r) => {
                    content.insert(id, r);
                }
                None => {
                    content.remove(&id);
                }
            }
        }
    }
    eprintln!("load: {statements} statements, the longest {longest} ms");
    statements
}

/// The content read through idgate equals `want`; each shard holds exactly
/// the rows its rule gives it (`place(id)`: the index among `on`), no other
/// shard has the table, and nothing of the move is left.
async fn check_placement(tb: &Testbed, s: &Setup, want: &Content, on: &[usize]) {
    let mut c = Conn::new(s.opts()).await.expect("login");
    let rows: Vec<(u64, i64, Option<String>)> = c
        .query("SELECT id, v, note FROM orders ORDER BY id")
        .await
        .expect("read through idgate");
    c.disconnect().await.expect("disconnect");
    let got: Content = rows
        .iter()
        .map(|(id, v, n)| (*id, (*v, n.clone().unwrap_or_default())))
        .collect();
    assert_eq!(got.len(), rows.len(), "an id read twice through idgate");
    if got != *want {
        let missing: Vec<_> = want
            .keys()
            .filter(|k| !got.contains_key(k))
            .take(10)
            .collect();
        let extra: Vec<_> = got
            .keys()
            .filter(|k| !want.contains_key(k))
            .take(10)
            .collect();
        let differ: Vec<_> = want
            .iter()
            .filter(|(k, v)| got.get(k).is_some_and(|g| g != *v))
            .take(5)
            .collect();
        panic!(
            "content through idgate differs: {} rows, {} expected; missing {missing:?}, extra {extra:?}, differing {differ:?}",
            got.len(),
            want.len()
        );
    }
    let mut seen = 0usize;
    for i in 0..3 {
        let mut d = direct(tb, i).await;
        let tables: Vec<String> = d
            .query(format!(
                "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{}'",
                s.schema
            ))
            .await
            .expect("tables");
        let triggers: Vec<String> = d
            .query(format!(
                "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = '{}'",
                s.schema
            ))
            .await
            .expect("triggers");
        assert!(
            triggers.is_empty(),
            "shard s{i}: triggers left: {triggers:?}"
        );
        match on.iter().position(|&x| x == i) {
            None => assert!(
                tables.is_empty(),
                "shard s{i} is not in the placement but has {tables:?}"
            ),
            Some(k) => {
                assert_eq!(tables, vec!["orders".to_string()], "shard s{i}");
                let ids: Vec<u64> = d
                    .query(format!("SELECT id FROM `{}`.orders", s.schema))
                    .await
                    .expect("ids");
                for id in &ids {
                    assert_eq!(
                        (*id % on.len() as u64) as usize,
                        k,
                        "row {id} is on shard s{i}, its rule places it elsewhere"
                    );
                    assert!(want.contains_key(id), "row {id} on s{i} is not expected");
                }
                seen += ids.len();
            }
        }
        d.disconnect().await.expect("disconnect");
    }
    assert_eq!(seen, want.len(), "rows on the shards, all told");
}

/// The whole move under load: `from` (rule keys and the shards holding
/// the table) onto `to_shards` (mod on the id); with `kill`, the reshard
/// process is killed (-9) in its copy phase and started again.
async fn move_under_load(tag: &str, from: &str, from_shards: &[usize], to: &[usize], kill: bool) {
    let Some(tb) = support::testbed() else { return };
    let mut s = Setup::new(&tb, tag);
    s.push_rules(from);
    s.start().await;
    let mut content = seed(&tb, &s, from_shards).await;
    let (stop, handles) = start_load(&s);
    let list: Vec<String> = to.iter().map(|i| format!("s{i}")).collect();
    let shards = list.join(",");
    // A slow copy (1,000 rows/s): the load runs through all of it.
    let args = ["--shards", &shards, "--max-rows-per-second", "1000"];
    if kill {
        let mut child = s
            .reshard_cmd(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start idgate reshard");
        // Killed once the copy has checkpointed some rows, not all.
        s.until_copying(&tb).await;
        child.kill().expect("kill -9");
        let _ = child.wait();
        let j = s.job(&tb).await.expect("job");
        assert_eq!(j.phase, Phase::Copy, "{j:?}");
        assert!(j.copied() < SEED, "killed after the copy: {j:?}");
    }
    // The whole move, its cutover under the load.
    let o = s.reshard(&args);
    assert!(o.status.success(), "reshard: {}", text_of(&o));
    let j = s.job(&tb).await.expect("job");
    assert_eq!(j.phase, Phase::Done, "{j:?}");
    assert!(j.published_version.is_some(), "{j:?}");
    // Each source's copy ended at the key that was largest when it began
    // (rows written later are the catch-up's): a copy throttled below the
    // load's insert rate would otherwise chase new rows for ever.
    for src in &j.sources {
        assert!(!src.end_key.is_empty() && src.done, "{src:?}");
    }
    // Statements after the cutover, on the new placement.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let statements = stop_load(&s.log(), stop, handles, &mut content).await;
    assert!(statements > 0, "the load ran no statement");
    check_placement(&tb, &s, &content, to).await;
    // The new placement takes new rows where it says.
    let mut c = Conn::new(s.opts()).await.expect("login");
    c.query_drop("INSERT INTO orders (v, note) VALUES (7, 'after')")
        .await
        .expect("insert after the move");
    let id = c.last_insert_id().expect("id");
    content.insert(id, (7, "after".into()));
    c.disconnect().await.expect("disconnect");
    check_placement(&tb, &s, &content, to).await;
    drop_schema(&tb, &s.schema).await;
}

async fn drop_schema(tb: &Testbed, schema: &str) {
    for i in 0..3 {
        let mut d = direct(tb, i).await;
        d.query_drop(format!("DROP DATABASE IF EXISTS `{schema}`"))
            .await
            .expect("drop");
        d.disconnect().await.expect("disconnect");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unsharded_to_two_shards_under_load() {
    move_under_load("rs_u2", "", &[0], &[0, 1], false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_to_three_shards_under_load() {
    move_under_load(
        "rs_23",
        "shard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n",
        &[0, 1],
        &[0, 1, 2],
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_to_three_shards_with_the_mover_killed_in_the_copy() {
    move_under_load(
        "rs_k23",
        "shard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n",
        &[0, 1],
        &[0, 1, 2],
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unsharded_to_two_shards_with_the_mover_killed_in_the_copy() {
    move_under_load("rs_ku2", "", &[0], &[0, 1], true).await;
}

/// `--abort` before the cutover: the old placement serves, nothing of the
/// move is left; a different `--shards` while a job is in progress is
/// refused naming the job; a config without etcd rules is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abort_leaves_the_old_placement() {
    let Some(tb) = support::testbed() else { return };
    let mut s = Setup::new(&tb, "rs_ab");
    s.push_rules("shard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n");
    s.start().await;
    let content = seed(&tb, &s, &[0, 1]).await;
    let o = s.reshard(&["--shards", "s0,s1,s2", "--no-cutover"]);
    assert!(o.status.success(), "reshard: {}", text_of(&o));
    let job = s.job(&tb).await.expect("job");
    // The shadow on s2 holds its rows, the triggers are in place.
    let mut d = direct(&tb, 2).await;
    let n: Option<u64> = d
        .query_first(format!(
            "SELECT COUNT(*) FROM `{}`._idgate_new_orders",
            s.schema
        ))
        .await
        .expect("shadow");
    assert_eq!(n, Some(SEED / 3));
    d.disconnect().await.expect("disconnect");
    let o = s.reshard(&["--shards", "s0,s2"]);
    assert!(!o.status.success(), "{}", text_of(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&job.id) && err.contains("in progress") && err.contains("s0,s1,s2"),
        "{err}"
    );
    let o = s.reshard(&["--shards", "s0,s1,s2", "--abort"]);
    assert!(o.status.success(), "abort: {}", text_of(&o));
    assert_eq!(s.job(&tb).await.expect("job").phase, Phase::Aborted);
    // Rules unchanged: the old placement, the same idgate, every row.
    check_placement(&tb, &s, &content, &[0, 1]).await;
    let o = s.reshard(&["--shards", "s0,s1,s2", "--abort"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("nothing to abort"),
        "{}",
        text_of(&o)
    );
    // A config whose rules are a directory: refused, saying why.
    let text = std::fs::read_to_string(s.config()).expect("config");
    let dir_cfg = s.dir.path().join("dir.toml");
    let rules_dir = s.dir.path().join("rules").display().to_string();
    let cut = text.find("[rules]").expect("rules section");
    support::write_private(
        &dir_cfg,
        &format!("{}[rules]\ndir = \"{rules_dir}\"\n", &text[..cut]),
    );
    let o = idgate(&[
        "reshard",
        "--config",
        &dir_cfg.display().to_string(),
        "--table",
        &s.table(),
        "--shards",
        "s0",
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("[rules] source = \"etcd\""),
        "{}",
        text_of(&o)
    );
    drop_schema(&tb, &s.schema).await;
}

/// A TCP forwarder to one shard that a test can cut (connections
/// dropped, new ones refused) and open again on the same port.
struct Forwarder {
    port: u16,
    upstream: String,
    tasks: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Forwarder {
    async fn start(upstream: &str) -> Forwarder {
        let f = Forwarder {
            port: free_port(),
            upstream: upstream.to_string(),
            tasks: Arc::new(std::sync::Mutex::new(Vec::new())),
        };
        f.open().await;
        f
    }

    async fn open(&self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("bind the forwarder");
        let up = self.upstream.clone();
        let tasks = self.tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                let up = up.clone();
                let h = tokio::spawn(async move {
                    if let Ok(mut u) = tokio::net::TcpStream::connect(up).await {
                        let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
                    }
                });
                tasks.lock().expect("tasks").push(h);
            }
        });
        self.tasks.lock().expect("tasks").push(accept);
    }

    /// Drops every connection and the listener.
    fn cut(&self) {
        for h in self.tasks.lock().expect("tasks").drain(..) {
            h.abort();
        }
    }
}

/// A target shard unreachable during the copy pauses the move: the
/// mover records the error, waits, and once the shard answers again goes
/// on from its checkpoint to the end; every row ends where its rule says.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shard_down_during_the_copy_pauses_the_move() {
    let Some(tb) = support::testbed() else { return };
    let mut s = Setup::new(&tb, "rs_down");
    s.push_rules("");
    s.start().await;
    let content = seed(&tb, &s, &[0]).await;
    // The mover reaches s1 through the forwarder; idgate directly.
    let fwd = Forwarder::start(&tb.shards[1]).await;
    let text = std::fs::read_to_string(s.config()).expect("config");
    let via = text.replace(
        &format!("address = \"{}\"", tb.shards[1]),
        &format!("address = \"127.0.0.1:{}\"", fwd.port),
    );
    assert_ne!(via, text);
    let cfg = s.dir.path().join("mover.toml");
    support::write_private(&cfg, &via);
    let mut child = Command::new(env!("CARGO_BIN_EXE_idgate"))
        .args(["reshard", "--config"])
        .arg(&cfg)
        .args([
            "--table",
            &s.table(),
            "--shards",
            "s0,s1",
            "--max-rows-per-second",
            "1000",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start idgate reshard");
    s.until_copying(&tb).await;
    fwd.cut();
    // The mover notices, records why, and waits (it does not exit).
    let deadline = Instant::now() + Duration::from_secs(120);
    let copied = loop {
        let j = s.job(&tb).await.expect("job");
        if let Some(e) = &j.error {
            assert!(e.contains("s1"), "{e}");
            break j.copied();
        }
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the mover exited while the shard was down"
        );
        assert!(
            Instant::now() < deadline,
            "the outage was not noticed within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(copied < SEED, "the copy finished before the cut");
    assert!(
        child.try_wait().expect("wait").is_none(),
        "the mover exited"
    );
    fwd.open().await;
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("mover");
    assert!(
        out.status.success(),
        "mover after the outage: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("retrying in"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = s.job(&tb).await.expect("job");
    assert_eq!(j.phase, Phase::Done, "{j:?}");
    fwd.cut();
    s.start().await;
    check_placement(&tb, &s, &content, &[0, 1]).await;
    drop_schema(&tb, &s.schema).await;
}

/// A copy that differs from its source stops the move before the
/// cutover, naming the table, the key range and the shard; `--abort` then
/// leaves the old placement.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_corrupted_copy_stops_the_move_before_the_cutover() {
    let Some(tb) = support::testbed() else { return };
    let mut s = Setup::new(&tb, "rs_bad");
    s.push_rules("shard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n");
    s.start().await;
    let content = seed(&tb, &s, &[0, 1]).await;
    let args = [
        "--shards",
        "s0,s1,s2",
        "--max-rows-per-second",
        "1000",
        "--no-cutover",
    ];
    let mut child = s
        .reshard_cmd(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start idgate reshard");
    s.until_copying(&tb).await;
    child.kill().expect("kill -9");
    let _ = child.wait();
    // Row 2 (the first rows are copied first) is on s2 in the new
    // placement; its copy is changed behind the mover's back.
    let mut d = direct(&tb, 2).await;
    d.query_drop(format!(
        "UPDATE `{}`._idgate_new_orders SET v = v + 1 WHERE id = 2",
        s.schema
    ))
    .await
    .expect("corrupt the copy");
    let changed: Option<u64> = d
        .query_first(format!(
            "SELECT COUNT(*) FROM `{}`._idgate_new_orders WHERE id = 2",
            s.schema
        ))
        .await
        .expect("count");
    d.disconnect().await.expect("disconnect");
    assert_eq!(changed, Some(1), "row 2 was not copied before the kill");
    let o = s.reshard(&args);
    assert!(!o.status.success(), "{}", text_of(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("verify failed: {}, id in (-inf, ", s.table()))
            && err.contains("shard s2: row id = 2 differs from the source"),
        "{err}"
    );
    let j = s.job(&tb).await.expect("job");
    assert_eq!(j.phase, Phase::Failed, "{j:?}");
    assert!(
        j.published_version.is_none() && j.swapped.is_empty(),
        "{j:?}"
    );
    let o = s.reshard(&["--shards", "s0,s1,s2", "--abort"]);
    assert!(o.status.success(), "abort: {}", text_of(&o));
    check_placement(&tb, &s, &content, &[0, 1]).await;
    drop_schema(&tb, &s.schema).await;
}

/// An idgate killed (-9) during the copy and started again: the move goes
/// on (the mover works on the shards, not through idgate), waits at the
/// cutover until the dead process's member record has expired and the new
/// process has acknowledged, and the restarted idgate serves the new
/// placement with every row in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idgate_killed_during_the_move_comes_back_on_the_new_placement() {
    let Some(tb) = support::testbed() else { return };
    let mut s = Setup::new(&tb, "rs_ki");
    s.push_rules("shard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n");
    s.start().await;
    let content = seed(&tb, &s, &[0, 1]).await;
    let mover = s
        .reshard_cmd(&["--shards", "s0,s1,s2", "--max-rows-per-second", "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start idgate reshard");
    s.until_copying(&tb).await;
    s.stop(); // kill -9 of idgate serve
    s.start().await;
    let out = tokio::task::spawn_blocking(move || mover.wait_with_output())
        .await
        .expect("join")
        .expect("the mover ends");
    assert!(
        out.status.success(),
        "reshard: {}\nidgate log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.log()
    );
    let j = s.job(&tb).await.expect("job");
    assert_eq!(j.phase, Phase::Done, "{j:?}");
    check_placement(&tb, &s, &content, &[0, 1, 2]).await;
    drop_schema(&tb, &s.schema).await;
}
