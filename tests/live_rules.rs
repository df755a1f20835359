//! Rules a DBA changes while idgate runs (issue 15), and the admin
//! privilege idgate's statements that change state need (issue 14 part 1),
//! against the test bed's MariaDB and etcd.
//!
//! Each test has its own schema, rules directory and etcd prefix. A
//! reload is `IDGATE RELOAD RULES` from the `dba` account (in process) or
//! `kill -HUP` (the binary).

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;
use support::proxy::{self, Proxy, ADMIN, ADMIN_PASSWORD};

fn orders_rule(schema: &str) -> String {
    format!(
        "[[generator]]\nname = \"orders\"\nkind = \"sequence\"\nbatch = 10\n\n\
         [[table]]\nname = \"{schema}.orders\"\ncolumn = \"id\"\ngenerator = \"orders\"\n"
    )
}

fn notes_rule(schema: &str, start: u64) -> String {
    format!(
        "[[generator]]\nname = \"notes\"\nkind = \"sequence\"\nstart = {start}\n\n\
         [[table]]\nname = \"{schema}.notes\"\ncolumn = \"id\"\ngenerator = \"notes\"\n"
    )
}

struct Bed {
    tb: support::Testbed,
    schema: String,
    dir: tempfile::TempDir,
    proxy: Proxy,
}

impl Bed {
    /// A schema with `orders` and `notes` (ids without a default, so an
    /// INSERT without one works only when idgate fills it), and idgate
    /// with `orders_rule` in `rules/a.toml`.
    async fn start(tag: &str) -> Option<Bed> {
        let tb = support::testbed()?;
        let schema = support::unique(tag);
        proxy::admin(
            &tb,
            0,
            &[
                &format!("CREATE DATABASE `{schema}`"),
                &format!("CREATE TABLE `{schema}`.orders (id BIGINT UNSIGNED PRIMARY KEY, v INT NOT NULL)"),
                &format!("CREATE TABLE `{schema}`.notes (id BIGINT UNSIGNED PRIMARY KEY, v INT NOT NULL)"),
            ],
        )
        .await;
        let dir = tempfile::tempdir().expect("rules dir");
        write(dir.path(), "a.toml", &orders_rule(&schema));
        let proxy = Proxy::start_rules_dir(&tb, dir.path(), &support::unique("/live")).await;
        Some(Bed {
            tb,
            schema,
            dir,
            proxy,
        })
    }

    async fn app(&self) -> Conn {
        Conn::new(self.proxy.opts(Some(&self.schema)))
            .await
            .expect("app logs in")
    }

    async fn dba(&self) -> Conn {
        Conn::new(
            self.proxy
                .opts_as(ADMIN, ADMIN_PASSWORD, Some(&self.schema)),
        )
        .await
        .expect("dba logs in")
    }

    fn write(&self, file: &str, text: &str) {
        write(self.dir.path(), file, text)
    }

    async fn stop(self) {
        proxy::admin(
            &self.tb,
            0,
            &[&format!("DROP DATABASE IF EXISTS `{}`", self.schema)],
        )
        .await;
        self.proxy.stop().await;
    }
}

fn write(dir: &Path, file: &str, text: &str) {
    std::fs::write(dir.join(file), text).expect("write rule file");
}

fn code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

fn text(row: &Row, i: usize) -> Option<String> {
    row.get_opt::<Option<String>, _>(i)
        .and_then(|r| r.ok())
        .flatten()
}

/// `IDGATE RELOAD RULES` as the DBA: the (change, name, detail) rows.
async fn reload(c: &mut Conn) -> Result<Vec<(String, String, Option<String>)>, mysql_async::Error> {
    let rows: Vec<Row> = c.query("IDGATE RELOAD RULES").await?;
    Ok(rows
        .iter()
        .map(|r| (text(r, 0).unwrap(), text(r, 1).unwrap(), text(r, 2)))
        .collect())
}

async fn status(c: &mut Conn, name: &str) -> Option<String> {
    let rows: Vec<Row> = c.query("SHOW IDGATE STATUS").await.expect("status");
    rows.iter()
        .find(|r| text(r, 0).as_deref() == Some(name))
        .and_then(|r| text(r, 1))
}

async fn insert(c: &mut Conn, table: &str, v: u32) -> Result<u64, mysql_async::Error> {
    c.query_drop(format!("INSERT INTO {table} (v) VALUES ({v})"))
        .await?;
    Ok(c.last_insert_id().unwrap_or(0))
}

#[tokio::test]
async fn statements_that_change_state_need_the_admin_privilege() {
    let Some(bed) = Bed::start("lr_priv").await else {
        return;
    };
    let mut app = bed.app().await;
    for stmt in [
        "IDGATE SET FLOOR orders 1000",
        "IDGATE SET FLOOR orders FROM TABLES",
        "IDGATE RESERVE orders 10",
        "IDGATE RELOAD RULES",
    ] {
        let e = app.query_drop(stmt).await.unwrap_err();
        assert_eq!(code(&e), Some(1227), "{stmt}: {e}");
        let head = stmt.split(' ').take(3).collect::<Vec<_>>().join(" ");
        let head = head.trim_end_matches(" orders");
        assert!(e.to_string().contains(head), "{stmt}: {e}");
        assert!(e.to_string().contains("'app'"), "{stmt}: {e}");
    }
    // Showing is open to every account.
    for stmt in [
        "SHOW IDGATE GENERATORS",
        "SHOW IDGATE RULES",
        "SHOW IDGATE STATUS",
    ] {
        let rows: Vec<Row> = app
            .query(stmt)
            .await
            .unwrap_or_else(|e| panic!("{stmt}: {e}"));
        assert!(!rows.is_empty(), "{stmt}");
    }
    // The floor the app could not set is not set.
    let id = insert(&mut app, "orders", 1).await.unwrap();
    assert!(id < 1000, "{id}");

    let mut dba = bed.dba().await;
    dba.query_drop("IDGATE SET FLOOR orders 1000")
        .await
        .unwrap();
    let id = insert(&mut app, "orders", 2).await.unwrap();
    assert!(id > 1000, "{id}");
    let block: Vec<Row> = dba.query("IDGATE RESERVE orders 10").await.unwrap();
    let first: u64 = text(&block[0], 0).unwrap().parse().unwrap();
    assert!(first > id, "{first} after {id}");

    // A floor that would leave fewer than 1% of the range (the default
    // allocator.floor_headroom) below max is refused, and does nothing.
    let max = i64::MAX as u64;
    let e = dba
        .query_drop(format!("IDGATE SET FLOOR orders {}", max - 10))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(1210), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("orders") && msg.contains("floor_headroom"),
        "{msg}"
    );
    let next = insert(&mut app, "orders", 3).await.unwrap();
    assert!(
        next < 1_000_000,
        "the refused floor moved the generator: {next}"
    );
    let allowed = max - (max - 1) / 100;
    assert!(msg.contains(&allowed.to_string()), "{msg}");
    drop((app, dba));
    bed.stop().await;
}

#[tokio::test]
async fn a_reload_adds_a_table_and_a_generator_while_sessions_stay_open() {
    let Some(bed) = Bed::start("lr_add").await else {
        return;
    };
    let s = bed.schema.clone();
    let mut app = bed.app().await;
    assert!(insert(&mut app, "orders", 1).await.unwrap() > 0);
    // No rule for notes yet: MariaDB refuses a row without an id.
    let e = insert(&mut app, "notes", 1).await.unwrap_err();
    assert_eq!(code(&e), Some(1364), "{e}");

    bed.write("b.toml", &notes_rule(&s, 5000));
    let mut dba = bed.dba().await;
    let changes = reload(&mut dba).await.expect("reload");
    assert!(
        changes.contains(&("generator added".into(), "notes".into(), None)),
        "{changes:?}"
    );
    assert!(
        changes.contains(&("table added".into(), format!("{s}.notes"), None)),
        "{changes:?}"
    );
    assert!(
        changes.contains(&("rules version".into(), "2".into(), None)),
        "{changes:?}"
    );
    // The session that was open all along gets ids for notes now.
    let id = insert(&mut app, "notes", 2)
        .await
        .expect("notes has a rule now");
    assert!(id >= 5000, "{id}");
    let lid: Option<u64> = app.query_first("SELECT LAST_INSERT_ID()").await.unwrap();
    assert_eq!(lid, Some(id));
    // Seen by operators.
    let rules: Vec<Row> = app.query("SHOW IDGATE RULES").await.unwrap();
    let notes = rules
        .iter()
        .find(|r| text(r, 0) == Some(format!("{s}.notes")))
        .expect("notes in SHOW IDGATE RULES");
    assert_eq!(text(notes, 2).as_deref(), Some("notes"));
    assert_eq!(text(notes, 5).as_deref(), Some("2"));
    assert!(
        text(notes, 6).unwrap().ends_with("b.toml:7"),
        "{:?}",
        text(notes, 6)
    );
    assert_eq!(
        status(&mut app, "rules_version").await.as_deref(),
        Some("2")
    );
    assert_eq!(
        status(&mut app, "rules_reloads").await.as_deref(),
        Some("1")
    );
    // The same files again: nothing changes, the version stays.
    let again = reload(&mut dba).await.unwrap();
    assert_eq!(
        again,
        [(
            "rules version".into(),
            "2".into(),
            Some("nothing changed".into())
        )]
    );
    drop((app, dba));
    bed.stop().await;
}

#[tokio::test]
async fn a_prepared_insert_is_planned_again_when_its_table_gets_a_rule() {
    let Some(bed) = Bed::start("lr_prep").await else {
        return;
    };
    let mut app = bed.app().await;
    let stmt = app
        .prep("INSERT INTO notes (v) VALUES (?)")
        .await
        .expect("prepare");
    let e = app.exec_drop(&stmt, (1,)).await.unwrap_err();
    assert_eq!(code(&e), Some(1364), "{e}");

    bed.write("b.toml", &notes_rule(&bed.schema, 7000));
    reload(&mut bed.dba().await).await.expect("reload");
    // Same statement id, same parameter count: now with a generated id.
    app.exec_drop(&stmt, (2,))
        .await
        .expect("execute after the reload");
    let id = app.last_insert_id().unwrap();
    assert!(id >= 7000, "{id}");
    app.exec_drop(&stmt, (3,)).await.unwrap();
    assert!(app.last_insert_id().unwrap() > id);
    let n: Option<u64> = app
        .query_first("SELECT COUNT(*) FROM notes WHERE id >= 7000")
        .await
        .unwrap();
    assert_eq!(n, Some(2));

    // And back: the rule removed, the statement passes through again.
    std::fs::remove_file(bed.dir.path().join("b.toml")).unwrap();
    reload(&mut bed.dba().await).await.expect("reload");
    let e = app.exec_drop(&stmt, (4,)).await.unwrap_err();
    assert_eq!(code(&e), Some(1364), "{e}");
    drop(app);
    bed.stop().await;
}

#[tokio::test]
async fn a_transaction_keeps_the_rules_it_began_with() {
    let Some(bed) = Bed::start("lr_txn").await else {
        return;
    };
    let mut app = bed.app().await;
    app.query_drop("BEGIN").await.unwrap();
    let first = insert(&mut app, "orders", 1).await.unwrap();
    assert!(first > 0);
    // The DBA removes the orders rule meanwhile.
    bed.write("a.toml", "");
    let changes = reload(&mut bed.dba().await).await.expect("reload");
    assert!(
        changes.contains(&(
            "table removed".into(),
            format!("{}.orders", bed.schema),
            None
        )),
        "{changes:?}"
    );
    // Still inside the transaction: still the old rules.
    let second = insert(&mut app, "orders", 2).await.expect("old rules");
    assert!(second > first);
    app.query_drop("COMMIT").await.unwrap();
    // The next statement runs on the new rules: no id is filled.
    let e = insert(&mut app, "orders", 3).await.unwrap_err();
    assert_eq!(code(&e), Some(1364), "{e}");
    drop(app);
    bed.stop().await;
}

/// Under `autocommit = 0` a transaction starts with the first statement
/// and ends with COMMIT: the session keeps its rules inside it, and takes
/// the new ones after it (it is not "in a transaction" forever).
#[tokio::test]
async fn autocommit_off_sessions_take_new_rules_between_transactions() {
    let Some(bed) = Bed::start("lr_ac0").await else {
        return;
    };
    let mut app = bed.app().await;
    app.query_drop("SET autocommit = 0").await.unwrap();
    let first = insert(&mut app, "orders", 1).await.unwrap();
    assert!(first > 0);
    bed.write("a.toml", "");
    reload(&mut bed.dba().await).await.expect("reload");
    let second = insert(&mut app, "orders", 2)
        .await
        .expect("old rules inside");
    assert!(second > first);
    app.query_drop("COMMIT").await.unwrap();
    let e = insert(&mut app, "orders", 3).await.unwrap_err();
    assert_eq!(code(&e), Some(1364), "new rules after COMMIT: {e}");
    app.query_drop("ROLLBACK").await.unwrap();
    drop(app);
    bed.stop().await;
}

#[tokio::test]
async fn refused_reloads_leave_the_rules_in_force_and_say_why() {
    let Some(bed) = Bed::start("lr_refuse").await else {
        return;
    };
    let s = bed.schema.clone();
    let mut app = bed.app().await;
    let mut dba = bed.dba().await;
    let base = orders_rule(&s);
    let refused = |edit: String, file: &'static str| (edit, file);
    let cases = [
        (
            refused(
                base.replace("batch = 10", "batch = 10\nstart = 50"),
                "a.toml:2",
            ),
            "start cannot change",
        ),
        (
            refused(
                base.replace("kind = \"sequence\"\nbatch = 10", "kind = \"snowflake\""),
                "a.toml:2",
            ),
            "kind",
        ),
        (
            refused(
                base.replace(
                    "generator = \"orders\"",
                    "generator = \"orders\"\nshard_key = \"id\"\nsharding = \"mod\"",
                ),
                "a.toml:7",
            ),
            "resharding",
        ),
        (
            refused(base.replace("[[table]]", "[[table]\n"), "a.toml:"),
            "a.toml",
        ),
        (
            refused(
                base.replace("generator = \"orders\"", "generator = \"nope\""),
                "a.toml:",
            ),
            "nope",
        ),
    ];
    let mut failed = 0;
    for ((text, place), why) in cases {
        bed.write("a.toml", &text);
        let e = reload(&mut dba).await.unwrap_err();
        failed += 1;
        let msg = e.to_string();
        assert!(msg.contains("not reloaded"), "{msg}");
        assert!(msg.contains(place), "{place}: {msg}");
        assert!(msg.contains(why), "{why}: {msg}");
        // The old rules serve on.
        assert!(insert(&mut app, "orders", 1).await.expect("old rules") > 0);
        assert_eq!(
            status(&mut app, "rules_version").await.as_deref(),
            Some("1")
        );
        assert_eq!(
            status(&mut app, "rules_failed_reloads").await,
            Some(failed.to_string())
        );
        assert!(status(&mut app, "rules_last_error")
            .await
            .unwrap()
            .contains(why));
    }
    // Tunables do change.
    bed.write(
        "a.toml",
        &base.replace("batch = 10", "batch = 50\nmax = 100000000"),
    );
    let changes = reload(&mut dba).await.expect("tunables");
    assert!(
        changes.contains(&(
            "generator changed".into(),
            "orders".into(),
            Some("batch, max".into())
        )),
        "{changes:?}"
    );
    // The new max is in force: a floor 1% below it is refused now.
    let e = dba
        .query_drop("IDGATE SET FLOOR orders 99500000")
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(1210), "{e}");

    // A move to a generator that could still issue ids below the old
    // one's is refused until its floor is above them.
    let issued = insert(&mut app, "orders", 2).await.unwrap();
    let two = base.replace("batch = 10", "batch = 50\nmax = 100000000")
        + "\n[[generator]]\nname = \"orders2\"\nkind = \"sequence\"\n";
    bed.write("a.toml", &two);
    reload(&mut dba).await.expect("a generator added");
    bed.write(
        "a.toml",
        &two.replace("generator = \"orders\"", "generator = \"orders2\""),
    );
    let e = reload(&mut dba).await.unwrap_err().to_string();
    assert!(
        e.contains("a.toml:8") && e.contains("IDGATE SET FLOOR orders2"),
        "{e}"
    );
    // The hint works: raise the floor, then the move is taken (again if
    // a refill of orders reserved more meanwhile).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut hint = e;
    let changes = loop {
        let floor = hint
            .split("(IDGATE SET FLOOR ")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .unwrap_or_else(|| panic!("no hint in {hint}"))
            .to_string();
        dba.query_drop(format!("IDGATE SET FLOOR {floor}"))
            .await
            .unwrap();
        match reload(&mut dba).await {
            Ok(c) => break c,
            Err(e) => hint = e.to_string(),
        }
        assert!(tokio::time::Instant::now() < deadline, "{hint}");
    };
    assert!(
        changes.contains(&(
            "table changed".into(),
            format!("{s}.orders"),
            Some("generator".into())
        )),
        "{changes:?}"
    );
    let moved = insert(&mut app, "orders", 3).await.unwrap();
    assert!(moved > issued, "{moved} after {issued}");
    drop((app, dba));
    bed.stop().await;
}

/// Sessions keep inserting while the rules are reloaded over and over:
/// no statement fails, no session is closed, no id is issued twice.
#[tokio::test]
async fn reloads_under_an_insert_load_fail_no_statement() {
    let Some(bed) = Bed::start("lr_load").await else {
        return;
    };
    let s = bed.schema.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4u32 {
        writers.push(proxy::insert_writer(
            bed.proxy.opts(Some(&s)),
            w,
            stop.clone(),
        ));
    }
    let mut dba = bed.dba().await;
    for round in 0..10u64 {
        // Alternately add and remove notes, and retune orders.
        if round % 2 == 0 {
            bed.write("b.toml", &notes_rule(&s, 1_000_000));
        } else {
            let _ = std::fs::remove_file(bed.dir.path().join("b.toml"));
        }
        bed.write(
            "a.toml",
            &orders_rule(&s).replace("batch = 10", &format!("batch = {}", 10 + round)),
        );
        reload(&mut dba).await.expect("reload under load");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut all = Vec::new();
    for w in writers {
        all.extend(w.await.expect("no writer failed"));
    }
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "an id was issued twice");
    let n: Option<u64> = dba
        .query_first("SELECT COUNT(*) FROM orders")
        .await
        .unwrap();
    assert_eq!(n, Some(all.len() as u64));
    assert_eq!(
        status(&mut dba, "rules_version").await.as_deref(),
        Some("11")
    );
    drop(dba);
    bed.stop().await;
}

/// `kill -HUP` reloads the binary's rules; a broken file is refused with
/// file:line in the log and the old rules stay.
#[test]
fn sighup_reloads_the_rules_of_the_binary() {
    use support::process::{Idgate, Options};
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("lr_hup");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(proxy::admin(
        &tb,
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
    ));
    let opts = Options {
        rules: orders_rule(&schema),
        etcd_prefix: support::unique("/hup"),
        ..Options::default()
    };
    let p = Idgate::start(&tb, &opts);
    let rules = p.dir.path().join("rules");
    let pid = p.child.id().to_string();
    let hup = || {
        let st = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .expect("kill");
        assert!(st.success());
    };
    rt.block_on(async {
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(p.mysql.port())
            .user(Some("app"))
            .pass(Some("secret"))
            .db_name(Some(schema.clone()))
            .prefer_socket(false);
        let mut app = Conn::new(opts).await.expect("login");
        write(&rules, "b.toml", &notes_rule(&schema, 9000));
        hup();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while status(&mut app, "rules_version").await.as_deref() != Some("2") {
            assert!(tokio::time::Instant::now() < deadline, "{}", p.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let id = insert(&mut app, "notes", 1)
            .await
            .expect("notes after SIGHUP");
        assert!(id >= 9000, "{id}");
        // A broken file: refused, logged with file:line, rules unchanged.
        write(&rules, "c.toml", "[[table]]\nname = \"x.y\"\ncolumn = 3\n");
        hup();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !p.log().contains("rules reload refused") {
            assert!(std::time::Instant::now() < deadline, "{}", p.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(p.log().contains("c.toml:"), "{}", p.log());
        assert_eq!(
            status(&mut app, "rules_version").await.as_deref(),
            Some("2")
        );
        assert!(insert(&mut app, "notes", 2).await.unwrap() > id);
        let _ = app.disconnect().await;
    });
    drop(p);
    rt.block_on(proxy::admin(
        &tb,
        0,
        &[&format!("DROP DATABASE IF EXISTS `{schema}`")],
    ));
}

/// The `SHOW IDGATE SESSIONS` row of session `id` once `ready` holds for
/// it (up to 60 s; it must hold by then).
async fn session_when(c: &mut Conn, id: u32, ready: impl Fn(&Row) -> bool) -> Row {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rows: Vec<Row> = c.query("SHOW IDGATE SESSIONS").await.unwrap();
        let row = rows
            .into_iter()
            .find(|r| text(r, 0) == Some(id.to_string()))
            .unwrap_or_else(|| panic!("session {id} listed"));
        if ready(&row) {
            return row;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "session {id}: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `SHOW IDGATE SESSIONS`: every session of the process, with its user,
/// address, schema, shards, transaction and command.
#[tokio::test]
async fn show_idgate_sessions_lists_idgate_sessions() {
    let Some(bed) = Bed::start("lr_sess").await else {
        return;
    };
    let mut app = bed.app().await;
    app.query_drop("BEGIN").await.unwrap();
    insert(&mut app, "orders", 1).await.unwrap();
    let app_id = app.id();
    let mut dba = bed.dba().await;
    // A session records the end of a command just after its reply has
    // gone out: another session may look in between, so wait for it.
    let a = session_when(&mut dba, app_id, |r| text(r, 7).as_deref() == Some("Sleep")).await;
    assert_eq!(text(&a, 1).as_deref(), Some("app"));
    assert!(
        text(&a, 2).unwrap().starts_with("127.0.0.1:"),
        "{:?}",
        text(&a, 2)
    );
    assert_eq!(text(&a, 3), Some(bed.schema.clone()));
    assert_eq!(text(&a, 4).as_deref(), Some("s0"));
    assert_eq!(text(&a, 5).as_deref(), Some("1"), "in a transaction");
    assert_eq!(text(&a, 6).as_deref(), Some("0"), "plain TCP");
    let dba_id = dba.id();
    let d = session_when(&mut dba, dba_id, |_| true).await;
    assert_eq!(text(&d, 1).as_deref(), Some(ADMIN));
    assert_eq!(text(&d, 7).as_deref(), Some("Query"));
    assert_eq!(text(&d, 5).as_deref(), Some("0"));
    app.query_drop("COMMIT").await.unwrap();
    session_when(&mut dba, app_id, |r| text(r, 5).as_deref() == Some("0")).await;
    drop((app, dba));
    bed.stop().await;
}

/// `sysbench oltp_insert` (4 threads, prepared statements off: text
/// INSERTs with `id = 0`) into a rule table while the DBA reloads changed
/// rules again and again: sysbench stops at the first failed statement,
/// so a clean run of all its events means no statement failed; every row
/// has a unique generated id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sysbench_inserts_run_through_reloads() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("lr_sb");
    proxy::create_sbtest(&tb, &schema).await;
    let rule = |batch: u64| {
        format!(
            "[[generator]]\nname = \"sb\"\nkind = \"sequence\"\nbatch = {batch}\n\n\
             [[table]]\nname = \"{schema}.sbtest1\"\ncolumn = \"id\"\ngenerator = \"sb\"\n"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "sb.toml", &rule(100));
    let proxy = Proxy::start_rules_dir(&tb, dir.path(), &support::unique("/live-sb")).await;
    let events = 20_000u64;
    let args = [
        "--auto-inc=on",
        "--tables=1",
        "--table-size=10000",
        "--threads=4",
        "--events=20000",
        "--time=600",
    ];
    let (addr, db) = (proxy.addr, schema.clone());
    let run =
        tokio::spawn(async move { proxy::sysbench(addr, &db, "oltp_insert", &args, "run").await });
    let mut dba = Conn::new(proxy.opts_as(ADMIN, ADMIN_PASSWORD, Some(&schema)))
        .await
        .unwrap();
    let mut reloads = 0u64;
    while !run.is_finished() || reloads < 3 {
        reloads += 1;
        write(dir.path(), "sb.toml", &rule(100 + reloads));
        if reloads % 2 == 0 {
            write(dir.path(), "other.toml", &notes_rule(&schema, 1));
        } else {
            let _ = std::fs::remove_file(dir.path().join("other.toml"));
        }
        reload(&mut dba).await.expect("reload under sysbench");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let out = run.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sysbench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (n, distinct, zeros): (u64, u64, u64) = dba
        .query_first("SELECT COUNT(*), COUNT(DISTINCT id), SUM(id = 0) FROM sbtest1")
        .await
        .unwrap()
        .unwrap();
    eprintln!("sysbench through {reloads} reloads: {n} rows");
    assert_eq!(n, events, "{stdout}");
    assert_eq!(distinct, n, "ids are unique");
    assert_eq!(zeros, 0);
    assert_eq!(
        status(&mut dba, "rules_version").await,
        Some((reloads + 1).to_string())
    );
    drop(dba);
    proxy.stop().await;
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE IF EXISTS `{schema}`")]).await;
}
