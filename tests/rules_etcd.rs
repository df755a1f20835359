//! Rules published through etcd (issue 15 part 4): `idgate rules push`,
//! `history`, `show`, `rollback`, idgate processes with `[rules] source =
//! "etcd"` following the published version, and the cache file they start
//! from while etcd is down. Real idgate processes, the test bed's MariaDB
//! and etcd (and, for the outage, a private etcd this test starts and
//! stops).
//!
//! Each test has its own schema and etcd prefix.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;
use support::process::{free_port, Idgate, Options};
use support::proxy;

fn orders_rule(schema: &str, batch: u64) -> String {
    format!(
        "[[generator]]\nname = \"orders\"\nkind = \"sequence\"\nbatch = {batch}\n\n\
         [[table]]\nname = \"{schema}.orders\"\ncolumn = \"id\"\ngenerator = \"orders\"\n"
    )
}

fn notes_rule(schema: &str) -> String {
    format!(
        "[[generator]]\nname = \"notes\"\nkind = \"sequence\"\nstart = 5000\n\n\
         [[table]]\nname = \"{schema}.notes\"\ncolumn = \"id\"\ngenerator = \"notes\"\n"
    )
}

/// `idgate ARGS`: its output.
fn idgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idgate"))
        .args(args)
        .env("USER", "dba-test")
        .stdin(Stdio::null())
        .output()
        .expect("run idgate")
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `idgate rules push DIR --config CFG`, which must succeed: its stdout.
fn push(dir: &Path, cfg: &Path) -> String {
    let o = idgate(&[
        "rules",
        "push",
        &dir.display().to_string(),
        "--config",
        &cfg.display().to_string(),
    ]);
    assert!(o.status.success(), "push failed: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn rules_cmd(cfg: &Path, args: &[&str]) -> Output {
    let mut all: Vec<&str> = vec!["rules"];
    all.extend_from_slice(args);
    let c = cfg.display().to_string();
    all.extend_from_slice(&["--config", &c]);
    idgate(&all)
}

fn write(dir: &Path, file: &str, body: &str) {
    std::fs::write(dir.join(file), body).expect("write rule file");
}

/// The schema every test inserts into: `orders` and `notes`, whose ids
/// have no default (an INSERT without one works only when idgate fills it).
async fn schema(tb: &support::Testbed, tag: &str) -> String {
    let schema = support::unique(tag);
    proxy::admin(
        tb,
        0,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &format!(
                "CREATE TABLE `{schema}`.orders (id BIGINT UNSIGNED PRIMARY KEY, v INT NOT NULL)"
            ),
            &format!(
                "CREATE TABLE `{schema}`.notes (id BIGINT UNSIGNED PRIMARY KEY, v INT NOT NULL)"
            ),
        ],
    )
    .await;
    schema
}

async fn drop_schema(tb: &support::Testbed, schema: &str) {
    proxy::admin(tb, 0, &[&format!("DROP DATABASE IF EXISTS `{schema}`")]).await;
}

fn etcd_options(prefix: &str, etcd: Option<String>, cache: &Path) -> Options {
    Options {
        etcd_prefix: prefix.to_string(),
        etcd,
        rules_section: Some(format!(
            "source = \"etcd\"\ncache_file = \"{}\"",
            cache.display()
        )),
        ..Options::default()
    }
}

async fn login(p: &Idgate, user: &str, pw: &str, schema: &str) -> Conn {
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(p.mysql.port())
        .user(Some(user))
        .pass(Some(pw))
        .db_name(Some(schema.to_string()))
        .prefer_socket(false);
    Conn::new(opts).await.expect("login")
}

async fn status(c: &mut Conn, name: &str) -> Option<String> {
    let rows: Vec<Row> = c.query("SHOW IDGATE STATUS").await.expect("status");
    rows.into_iter()
        .find(|r| r.get::<Option<String>, _>(0).flatten().as_deref() == Some(name))
        .and_then(|r| r.get::<Option<String>, _>(1).flatten())
}

fn code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

async fn insert(c: &mut Conn, table: &str, v: u32) -> Result<u64, mysql_async::Error> {
    c.query_drop(format!("INSERT INTO {table} (v) VALUES ({v})"))
        .await?;
    Ok(c.last_insert_id().unwrap_or(0))
}

/// Polls (up to 120 s) until an INSERT into `notes` gets an id from the
/// `notes` generator; the INSERTs refused before (no rule yet: no id,
/// error 1364) leave no row.
async fn until_notes_ruled(c: &mut Conn, log: impl Fn() -> String) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        match insert(c, "notes", 1).await {
            Ok(id) => return id,
            Err(e) => assert!(
                tokio::time::Instant::now() < deadline && code(&e) == Some(1364),
                "notes never got its rule: {e}\n{}",
                log()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls (up to 120 s) until `SHOW IDGATE STATUS` says `name` = `want`.
async fn until_status(c: &mut Conn, name: &str, want: &str, log: impl Fn() -> String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let got = status(c, name).await;
        if got.as_deref() == Some(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} stayed {got:?}, not {want}\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two idgates on one etcd converge on each pushed version; history,
/// show and rollback; the cache file follows the version applied.
#[test]
fn two_idgates_converge_on_pushed_versions() {
    let Some(tb) = support::testbed() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = rt.block_on(schema(&tb, "re_conv"));
    let prefix = support::unique("/re-conv");
    let work = tempfile::tempdir().unwrap();
    let rules = work.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    write(&rules, "orders.toml", &orders_rule(&schema, 10));
    let (ca, cb) = (work.path().join("a.cache"), work.path().join("b.cache"));
    let a = Idgate::start(&tb, &etcd_options(&prefix, None, &ca));
    // Nothing published yet: it relays, and says version 0.
    let out = push(&rules, &a.config());
    assert!(
        out.starts_with(
            "published rules version 1 (first version: 1 generator(s), 1 table rule(s))"
        ),
        "{out}"
    );
    let b = Idgate::start(&tb, &etcd_options(&prefix, None, &cb));
    rt.block_on(async {
        let mut ca_conn = login(&a, "app", "secret", &schema).await;
        let mut cb_conn = login(&b, "app", "secret", &schema).await;
        // a applies version 1 from the watch, b started with it.
        until_status(&mut ca_conn, "rules_version", "1", || a.log()).await;
        assert_eq!(
            status(&mut cb_conn, "rules_version").await.as_deref(),
            Some("1")
        );
        assert_eq!(
            status(&mut cb_conn, "rules_source").await,
            Some(format!("etcd {prefix}/rules/"))
        );
        assert!(insert(&mut ca_conn, "orders", 1).await.unwrap() > 0);
        assert!(insert(&mut cb_conn, "orders", 2).await.unwrap() > 0);
        // Version 2 adds notes: both take it, sessions stay open.
        write(&rules, "notes.toml", &notes_rule(&schema));
        let out = push(&rules, &a.config());
        assert!(
            out.contains("version 2") && out.contains("table added"),
            "{out}"
        );
        let pushed = std::time::Instant::now();
        let ia = until_notes_ruled(&mut ca_conn, || a.log()).await;
        let ib = until_notes_ruled(&mut cb_conn, || b.log()).await;
        // A figure, not an assertion: how long after the push returned
        // both served the new rule (polling every 50 ms).
        eprintln!(
            "version 2 in force on both {:?} after the push",
            pushed.elapsed()
        );
        assert!(ia >= 5000 && ib >= 5000 && ia != ib, "{ia} {ib}");
        until_status(&mut cb_conn, "rules_version", "2", || b.log()).await;
        // SHOW IDGATE RULES names the published file and line.
        let rows: Vec<Row> = cb_conn.query("SHOW IDGATE RULES").await.unwrap();
        let origins: Vec<String> = rows
            .iter()
            .filter_map(|r| r.get::<Option<String>, _>(6).flatten())
            .collect();
        assert!(
            origins.iter().any(|o| o == "v2/notes.toml:7"),
            "{origins:?}"
        );
        // The cache file holds version 2 (written after it applied).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&ca)
            .unwrap_or_default()
            .contains("version = 2")
        {
            assert!(std::time::Instant::now() < deadline, "{}", a.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&ca).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);

        // Pushing the same files again publishes nothing.
        let out = push(&rules, &a.config());
        assert!(out.starts_with("nothing to publish: version 2"), "{out}");

        // History: number, time, who, what changed; show prints a version.
        let h = rules_cmd(&a.config(), &["history"]);
        assert!(h.status.success(), "{}", text(&h));
        let h = String::from_utf8_lossy(&h.stdout).into_owned();
        let lines: Vec<&str> = h.lines().collect();
        assert_eq!(lines.len(), 2, "{h}");
        assert!(
            lines[0].contains("dba-test@") && lines[0].contains("first version"),
            "{h}"
        );
        assert!(
            lines[1].starts_with('*') && lines[1].contains(&format!("table added {schema}.notes")),
            "{h}"
        );
        let shown = rules_cmd(&a.config(), &["show", "2"]);
        assert!(shown.status.success(), "{}", text(&shown));
        let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
        assert!(
            shown.contains("# ---- notes.toml ----") && shown.contains(&notes_rule(&schema)),
            "{shown}"
        );
        let missing = rules_cmd(&a.config(), &["show", "9"]);
        assert!(!missing.status.success());
        assert!(
            text(&missing).contains("there is no rules version 9"),
            "{}",
            text(&missing)
        );

        // Rollback to version 1: published as version 3, notes loses its
        // rule on both (an INSERT without id fails again, 1364).
        let rb = rules_cmd(&a.config(), &["rollback", "1"]);
        assert!(rb.status.success(), "{}", text(&rb));
        let rb = String::from_utf8_lossy(&rb.stdout).into_owned();
        assert!(
            rb.contains("version 3 (rollback to version 1: ") && rb.contains("table removed"),
            "{rb}"
        );
        until_status(&mut ca_conn, "rules_version", "3", || a.log()).await;
        until_status(&mut cb_conn, "rules_version", "3", || b.log()).await;
        let e = insert(&mut cb_conn, "notes", 3).await.unwrap_err();
        assert_eq!(code(&e), Some(1364), "{e}");
        assert!(insert(&mut cb_conn, "orders", 3).await.unwrap() > 0);
        let h = String::from_utf8_lossy(&rules_cmd(&a.config(), &["history"]).stdout).into_owned();
        assert!(
            h.lines()
                .nth(2)
                .is_some_and(|l| l.contains("rollback to version 1")),
            "{h}"
        );
        let _ = ca_conn.disconnect().await;
        let _ = cb_conn.disconnect().await;
    });
    drop((a, b));
    rt.block_on(drop_schema(&tb, &schema));
}

/// Refused pushes publish nothing: a broken file (file:line), a change a
/// reload refuses (file:line), and a push that lost the compare-and-swap
/// to another (told which version won, by whom).
#[test]
fn refused_pushes_publish_nothing() {
    let Some(tb) = support::testbed() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = rt.block_on(schema(&tb, "re_refuse"));
    let prefix = support::unique("/re-refuse");
    let work = tempfile::tempdir().unwrap();
    let rules = work.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    write(&rules, "orders.toml", &orders_rule(&schema, 10));
    let a = Idgate::start(&tb, &etcd_options(&prefix, None, &work.path().join("c")));
    push(&rules, &a.config());
    // A broken file.
    write(
        &rules,
        "broken.toml",
        "[[table]]\nname = \"x.y\"\ncolumn = 3\n",
    );
    let o = idgate(&[
        "rules",
        "push",
        &rules.display().to_string(),
        "--config",
        &a.config().display().to_string(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains("refused, nothing was published") && err.contains("broken.toml:3:"),
        "{err}"
    );
    std::fs::remove_file(rules.join("broken.toml")).unwrap();
    // A change a reload refuses: a generator's start.
    write(
        &rules,
        "orders.toml",
        &orders_rule(&schema, 10).replace("batch = 10", "batch = 10\nstart = 7"),
    );
    let o = rules_cmd(
        &a.config(),
        &["check", &rules.display().to_string(), "--against-store"],
    );
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("orders.toml:2:") && t.contains("start"), "{t}");
    let o = idgate(&[
        "rules",
        "push",
        &rules.display().to_string(),
        "--config",
        &a.config().display().to_string(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("orders.toml:2:"), "{}", text(&o));
    // `check --against-store` of an allowed change lists it.
    write(&rules, "orders.toml", &orders_rule(&schema, 25));
    let o = rules_cmd(
        &a.config(),
        &["check", &rules.display().to_string(), "--against-store"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let t = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        t.contains("OK as a change of published version 1")
            && t.contains("generator changed orders (batch)"),
        "{t}"
    );
    // Nothing was published by the refused pushes.
    let h = String::from_utf8_lossy(&rules_cmd(&a.config(), &["history"]).stdout).into_owned();
    assert_eq!(h.lines().count(), 1, "{h}");
    // The compare-and-swap against the real etcd: a pusher that read
    // version 1 loses to one that published version 2 meanwhile.
    rt.block_on(async {
        let cfg = idgate::config::Config::load(&a.config()).unwrap();
        let store = idgate::idgen::Allocator::open_store(&cfg.allocator)
            .await
            .unwrap();
        let published = idgate::publish::Published::new(store, support::ETCD_CALL_TIMEOUT);
        let read = published.current().await.unwrap();
        assert_eq!(read.map(|r| r.0), Some(1));
        push(&rules, &a.config()); // version 2, batch 25
        let who = idgate::publish::Who {
            user: "late".into(),
            host: "h".into(),
        };
        let e = published
            .publish(read, vec![], vec![], None, &who, 0)
            .await
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("version 2 was published by dba-test@")
                && msg.contains("nothing was published"),
            "{msg}"
        );
        assert_eq!(published.current().await.unwrap().map(|r| r.0), Some(2));
        assert_eq!(published.history().await.unwrap().len(), 2);
        let mut c = login(&a, "app", "secret", &schema).await;
        until_status(&mut c, "rules_version", "2", || a.log()).await;
        let _ = c.disconnect().await;
    });
    drop(a);
    rt.block_on(drop_schema(&tb, &schema));
}

/// A private etcd (its own data directory and ports), so a test can stop
/// it and start it again. Killed when dropped.
struct PrivateEtcd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
    peer: u16,
}

impl PrivateEtcd {
    fn start() -> Option<PrivateEtcd> {
        support::process::tool("etcd", &["--version"])?;
        let mut e = PrivateEtcd {
            child: None,
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
            peer: free_port(),
        };
        e.up();
        Some(e)
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn up(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).unwrap();
        let (client, peer) = (
            format!("http://127.0.0.1:{}", self.port),
            format!("http://127.0.0.1:{}", self.peer),
        );
        let child = Command::new("etcd")
            .args(["--name", "private", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("private={peer}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let addr = format!("127.0.0.1:{}", self.port);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "private etcd did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        self.down();
    }
}

/// With etcd down, idgate starts only from its cache file, says so, fails
/// INSERTs that need ids with 1467 meanwhile, and catches up once etcd is
/// back: its generators start and a version pushed then is applied.
#[test]
fn an_idgate_started_while_etcd_is_down_uses_its_cache_file() {
    let Some(tb) = support::testbed() else { return };
    let Some(mut etcd) = PrivateEtcd::start() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = rt.block_on(schema(&tb, "re_cache"));
    let prefix = support::unique("/re-cache");
    let work = tempfile::tempdir().unwrap();
    let rules = work.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    write(&rules, "orders.toml", &orders_rule(&schema, 10));
    let cache = work.path().join("rules.cache");
    let opts = etcd_options(&prefix, Some(etcd.endpoint()), &cache);
    let first = Idgate::start(&tb, &opts);
    push(&rules, &first.config());
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !cache.exists() {
        assert!(std::time::Instant::now() < deadline, "{}", first.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let config_copy = work.path().join("idgate.toml");
    std::fs::copy(first.config(), &config_copy).unwrap();
    drop(first);
    // Version 2 (notes gets a rule) is published after that idgate's last
    // look: its cache file stays at version 1.
    write(&rules, "notes.toml", &notes_rule(&schema));
    push(&rules, &config_copy);
    etcd.down();

    // Without a cache file: refused, saying why.
    let no_cache = etcd_options(&prefix, Some(etcd.endpoint()), &work.path().join("none"));
    let err = match Idgate::try_start(&tb, &no_cache) {
        Ok(_) => panic!("started without etcd and without a cache file"),
        Err(log) => log,
    };
    assert!(err.contains("does not exist"), "{err}");

    // With it: starts, says so, relays, refuses ids with 1467.
    let p = Idgate::try_start(&tb, &opts).expect("starts from the cache file");
    assert!(p.log().contains("rules from the cache file"), "{}", p.log());
    rt.block_on(async {
        let mut c = login(&p, "app", "secret", &schema).await;
        assert_eq!(status(&mut c, "rules_version").await.as_deref(), Some("1"));
        let from = status(&mut c, "rules_started_from")
            .await
            .unwrap_or_default();
        assert!(from.starts_with("cache file "), "{from}");
        let n: Option<u64> = c.query_first("SELECT COUNT(*) FROM orders").await.unwrap();
        assert_eq!(n, Some(0));
        let e = insert(&mut c, "orders", 1).await.unwrap_err();
        assert_eq!(code(&e), Some(1467), "{e}");
        let e = c
            .query_drop("INSERT INTO orders (id, v) VALUES (77, 1)")
            .await
            .unwrap_err();
        assert_eq!(
            code(&e),
            Some(1467),
            "an explicit id waits for its generator too: {e}"
        );
        let metrics = p.http_get("/metrics");
        assert!(metrics.contains("idgate_rules_from_cache 1"), "{metrics}");

        // Serving version 1 from the cache: notes has no rule.
        let e = insert(&mut c, "notes", 1).await.unwrap_err();
        assert_eq!(code(&e), Some(1364), "{e}");
        // etcd is back: the generators start, and the watch, made again,
        // reads the version published meanwhile (no new push) and applies it.
        etcd.up();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            match insert(&mut c, "orders", 2).await {
                Ok(id) => {
                    assert!(id > 0);
                    break;
                }
                Err(e) => assert!(
                    tokio::time::Instant::now() < deadline && code(&e) == Some(1467),
                    "{e}\n{}",
                    p.log()
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        until_notes_ruled(&mut c, || p.log()).await;
        until_status(&mut c, "rules_version", "2", || p.log()).await;
        // And it follows what is pushed from now on.
        write(&rules, "orders.toml", &orders_rule(&schema, 20));
        push(&rules, &config_copy);
        until_status(&mut c, "rules_version", "3", || p.log()).await;
        let _ = c.disconnect().await;
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&cache)
        .unwrap_or_default()
        .contains("version = 3")
    {
        assert!(std::time::Instant::now() < deadline, "{}", p.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(p);
    rt.block_on(drop_schema(&tb, &schema));
}

/// Writers insert through both idgates while versions are pushed: no
/// statement fails, every id is unique, both end on the last version.
#[test]
fn pushes_under_an_insert_load_fail_no_statement() {
    let Some(tb) = support::testbed() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = rt.block_on(schema(&tb, "re_load"));
    let prefix = support::unique("/re-load");
    let work = tempfile::tempdir().unwrap();
    let rules = work.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    write(&rules, "orders.toml", &orders_rule(&schema, 10));
    let a = Idgate::start(&tb, &etcd_options(&prefix, None, &work.path().join("a")));
    push(&rules, &a.config());
    let b = Idgate::start(&tb, &etcd_options(&prefix, None, &work.path().join("b")));
    let ports = [a.mysql.port(), b.mysql.port()];
    let versions = 6u64;
    rt.block_on(async {
        for p in [&a, &b] {
            let mut c = login(p, "app", "secret", &schema).await;
            until_status(&mut c, "rules_version", "1", || p.log()).await;
            let _ = c.disconnect().await;
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..4u32 {
            let port = ports[w as usize % 2];
            let opts = mysql_async::OptsBuilder::default()
                .ip_or_hostname("127.0.0.1")
                .tcp_port(port)
                .user(Some("app"))
                .pass(Some("secret"))
                .db_name(Some(schema.clone()))
                .prefer_socket(false);
            writers.push(proxy::insert_writer(opts, w, stop.clone()));
        }
        for v in 2..=versions {
            // Alternately add and remove notes; retune orders every time.
            if v % 2 == 0 {
                write(&rules, "notes.toml", &notes_rule(&schema));
            } else {
                let _ = std::fs::remove_file(rules.join("notes.toml"));
            }
            write(&rules, "orders.toml", &orders_rule(&schema, 10 + v));
            let cfg = a.config();
            let rules = rules.clone();
            let out = tokio::task::spawn_blocking(move || push(&rules, &cfg))
                .await
                .unwrap();
            assert!(
                out.starts_with(&format!("published rules version {v} ")),
                "{out}"
            );
        }
        let want = versions.to_string();
        for p in [&a, &b] {
            let mut c = login(p, "app", "secret", &schema).await;
            until_status(&mut c, "rules_version", &want, || p.log()).await;
            let _ = c.disconnect().await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut all = Vec::new();
        for w in writers {
            all.extend(w.await.expect("no writer failed"));
        }
        let unique: HashSet<u64> = all.iter().copied().collect();
        assert_eq!(unique.len(), all.len(), "an id was issued twice");
        let mut c = login(&a, "app", "secret", &schema).await;
        let n: Option<u64> = c.query_first("SELECT COUNT(*) FROM orders").await.unwrap();
        assert_eq!(n, Some(all.len() as u64));
        assert_eq!(
            status(&mut c, "rules_failed_reloads").await.as_deref(),
            Some("0")
        );
        let _ = c.disconnect().await;
    });
    drop((a, b));
    rt.block_on(drop_schema(&tb, &schema));
}

/// A version an idgate cannot apply: it keeps the rules in force and says
/// why (STATUS, metrics, log). Here the first version shards a table,
/// which an idgate that started without routing cannot take live; one
/// started afterwards takes it.
#[test]
fn an_idgate_that_cannot_apply_a_version_keeps_its_rules_and_says_why() {
    let Some(tb) = support::testbed() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = rt.block_on(schema(&tb, "re_fail"));
    // The sharded table lives on both shards.
    rt.block_on(proxy::admin(
        &tb,
        1,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &format!(
                "CREATE TABLE `{schema}`.orders (id BIGINT UNSIGNED PRIMARY KEY, v INT NOT NULL)"
            ),
        ],
    ));
    let prefix = support::unique("/re-fail");
    let work = tempfile::tempdir().unwrap();
    let rules = work.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    write(
        &rules,
        "orders.toml",
        &(orders_rule(&schema, 10)
            + "shard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n"),
    );
    let a = Idgate::start(&tb, &etcd_options(&prefix, None, &work.path().join("a")));
    push(&rules, &a.config());
    rt.block_on(async {
        let mut c = login(&a, "app", "secret", &schema).await;
        until_status(&mut c, "rules_failed_version", "1", || a.log()).await;
        assert_eq!(status(&mut c, "rules_version").await.as_deref(), Some("0"));
        let why = status(&mut c, "rules_last_error").await.unwrap_or_default();
        assert!(
            why.starts_with("version 1: v1/orders.toml:") && why.contains("routing on"),
            "{why}"
        );
        let m = a.http_get("/metrics");
        assert!(
            m.contains("idgate_rules_failed_version 1")
                && m.contains("idgate_rules_failed_reloads_total 1"),
            "{m}"
        );
        assert!(
            a.log().contains("published rules version 1 not applied"),
            "{}",
            a.log()
        );
        // Still serving: the table has no rule here, so no id is filled.
        let e = insert(&mut c, "orders", 1).await.unwrap_err();
        assert_eq!(code(&e), Some(1364), "{e}");
        let _ = c.disconnect().await;
    });
    let b = Idgate::start(&tb, &etcd_options(&prefix, None, &work.path().join("b")));
    rt.block_on(async {
        let mut c = login(&b, "app", "secret", &schema).await;
        assert_eq!(status(&mut c, "rules_version").await.as_deref(), Some("1"));
        assert!(insert(&mut c, "orders", 1).await.unwrap() > 0);
        let _ = c.disconnect().await;
    });
    drop((a, b));
    rt.block_on(drop_schema(&tb, &schema));
    rt.block_on(proxy::admin(
        &tb,
        1,
        &[&format!("DROP DATABASE IF EXISTS `{schema}`")],
    ));
}

/// `sysbench oltp_insert` (4 threads, text INSERTs with `id = 0`) into a
/// rule table through an idgate following etcd while the DBA pushes
/// changed rules again and again: sysbench stops at the first failed
/// statement, so a clean run of all its events means none failed; every
/// row has a unique generated id; idgate ends on the last version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sysbench_inserts_run_through_pushes() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("re_sb");
    proxy::create_sbtest(&tb, &schema).await;
    let rule = |batch: u64| {
        format!(
            "[[generator]]\nname = \"sb\"\nkind = \"sequence\"\nbatch = {batch}\n\n\
             [[table]]\nname = \"{schema}.sbtest1\"\ncolumn = \"id\"\ngenerator = \"sb\"\n"
        )
    };
    let work = tempfile::tempdir().unwrap();
    let rules = work.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    write(&rules, "sb.toml", &rule(100));
    let prefix = support::unique("/re-sb");
    let opts = etcd_options(&prefix, None, &work.path().join("cache"));
    let tb_start = tb.clone();
    let p = tokio::task::spawn_blocking(move || Idgate::start(&tb_start, &opts))
        .await
        .unwrap();
    let cfg = p.config();
    {
        let (r, c) = (rules.clone(), cfg.clone());
        tokio::task::spawn_blocking(move || push(&r, &c))
            .await
            .unwrap();
    }
    let mut c = login(&p, "app", "secret", &schema).await;
    until_status(&mut c, "rules_version", "1", || p.log()).await;
    let args = [
        "--auto-inc=on",
        "--tables=1",
        "--table-size=10000",
        "--threads=4",
        "--events=20000",
        "--time=600",
    ];
    let (addr, db) = (p.mysql, schema.clone());
    let run =
        tokio::spawn(async move { proxy::sysbench(addr, &db, "oltp_insert", &args, "run").await });
    let mut version = 1u64;
    while !run.is_finished() || version < 4 {
        version += 1;
        write(&rules, "sb.toml", &rule(100 + version));
        if version % 2 == 0 {
            write(&rules, "other.toml", &notes_rule(&schema));
        } else {
            let _ = std::fs::remove_file(rules.join("other.toml"));
        }
        let (r, cf) = (rules.clone(), cfg.clone());
        let out = tokio::task::spawn_blocking(move || push(&r, &cf))
            .await
            .unwrap();
        assert!(
            out.starts_with(&format!("published rules version {version} ")),
            "{out}"
        );
    }
    let out = run.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sysbench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    until_status(&mut c, "rules_version", &version.to_string(), || p.log()).await;
    let (n, distinct, zeros): (u64, u64, u64) = c
        .query_first("SELECT COUNT(*), COUNT(DISTINCT id), SUM(id = 0) FROM sbtest1")
        .await
        .unwrap()
        .unwrap();
    eprintln!("sysbench through {} pushes: {n} rows", version - 1);
    assert_eq!(n, 20_000, "{stdout}");
    assert_eq!(distinct, n, "ids are unique");
    assert_eq!(zeros, 0);
    assert_eq!(
        status(&mut c, "rules_failed_reloads").await.as_deref(),
        Some("0")
    );
    let _ = c.disconnect().await;
    drop(p);
    drop_schema(&tb, &schema).await;
}
