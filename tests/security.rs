//! Issue #14, parts 2, 6 and 7 against the real test bed: per-user shard
//! accounts (the shard's GRANTs and its own refusals reach the client),
//! passwords given as a hash, a file or an environment variable (and the
//! refusal of world-readable files holding one), `idgate hash-password`,
//! `[[users]] max_connections`, the delay after repeated failed logins, and
//! the bound on what a client may send before it has authenticated.

mod support;

use idgate::config::Config;
use idgate::frontend::Shared;
use idgate::idgen::FakeClock;
use idgate::protocol::handshake::ServerHandshake;
use idgate::protocol::packet::PacketConn;
use idgate::protocol::reply;
use idgate::throttle::LoginThrottle;
use mysql_async::prelude::Queryable;
use mysql_async::{ChangeUserOpts, Conn};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::proxy::{self, LoginOutcome, LoginSpec, Proxy, RawClient, CLIENT_CAPS};
use support::Testbed;

/// The `*HEX` hash of "hpw", as MariaDB's `PASSWORD('hpw')` prints it.
fn hash_of(pw: &str) -> String {
    idgate::config::native_hash_text(pw.as_bytes())
}

/// The test bed's config with `extra` (more `[[users]]` tables) appended.
fn config_with(tb: &Testbed, extra: &str) -> Config {
    let text = format!("{}\n{extra}\n", proxy::config_text(tb, "127.0.0.1:0", ""));
    Config::parse(&text, "test").unwrap_or_else(|e| panic!("test config: {e}"))
}

/// Creates MariaDB account `user` (password `pw`) on shards 0 and 1, with `grants`
/// (statements with `{u}` for the account) run after it.
async fn create_account(tb: &Testbed, user: &str, pw: &str, grants: &[String]) {
    for shard in 0..2 {
        let mut sql = vec![
            format!("DROP USER IF EXISTS '{user}'@'%'"),
            format!("CREATE USER '{user}'@'%' IDENTIFIED BY '{pw}'"),
        ];
        sql.extend(
            grants
                .iter()
                .map(|g| g.replace("{u}", &format!("'{user}'@'%'"))),
        );
        let refs: Vec<&str> = sql.iter().map(String::as_str).collect();
        proxy::admin(tb, shard, &refs).await;
    }
}

async fn drop_account(tb: &Testbed, user: &str) {
    for shard in 0..2 {
        proxy::admin(tb, shard, &[&format!("DROP USER IF EXISTS '{user}'@'%'")]).await;
    }
}

fn opts(p: &Proxy, user: &str, pw: &str, db: Option<&str>) -> mysql_async::OptsBuilder {
    p.opts(db).user(Some(user)).pass(Some(pw))
}

fn server_err(e: mysql_async::Error) -> (u16, String, String) {
    match e {
        mysql_async::Error::Server(e) => (e.code, e.state, e.message),
        other => panic!("expected a server error, got {other:?}"),
    }
}

#[tokio::test]
async fn per_user_shard_account_gets_the_shards_grants_and_errors() {
    let Some(tb) = support::testbed() else { return };
    let acct = support::unique("sec_acct");
    let open = support::unique("sec_open");
    let closed = support::unique("sec_closed");
    for shard in 0..2 {
        proxy::admin(
            &tb,
            shard,
            &[
                &format!("CREATE DATABASE `{open}`"),
                &format!("CREATE DATABASE `{closed}`"),
                &format!("CREATE TABLE `{open}`.t (k INT PRIMARY KEY)"),
                &format!("CREATE TABLE `{closed}`.t (k INT PRIMARY KEY)"),
                &format!("INSERT INTO `{open}`.t VALUES (1)"),
            ],
        )
        .await;
    }
    create_account(
        &tb,
        &acct,
        "apw",
        &[format!("GRANT SELECT, INSERT ON `{open}`.* TO {{u}}")],
    )
    .await;
    let cfg = config_with(
        &tb,
        &format!(
            "[[users]]\nname = \"shop\"\npassword = \"spw\"\nbackend_user = \"{acct}\"\nbackend_password = \"apw\"\n\
             [[users]]\nname = \"badacct\"\npassword = \"bpw\"\nbackend_user = \"{acct}\"\nbackend_password = \"wrong\"\n"
        ),
    );
    let p = Proxy::start_config(cfg, true).await;

    let mut c = Conn::new(opts(&p, "shop", "spw", None)).await.unwrap();
    let who: Option<String> = c.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(
        who,
        Some(format!("{acct}@%")),
        "the user's own shard account"
    );
    // A grant: works.
    let n: Option<i64> = c
        .query_first(format!("SELECT COUNT(*) FROM `{open}`.t"))
        .await
        .unwrap();
    assert_eq!(n, Some(1));
    c.query_drop(format!("INSERT INTO `{open}`.t VALUES (2)"))
        .await
        .unwrap();
    // No grant: the shard's own error, code and message.
    let (code, state, msg) = server_err(
        c.query_drop(format!("SELECT * FROM `{closed}`.t"))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, state.as_str()), (1142, "42000"), "{msg}");
    assert!(
        msg.contains("SELECT command denied") && msg.contains(&acct),
        "{msg}"
    );
    let (code, _, msg) = server_err(
        c.query_drop(format!("DELETE FROM `{open}`.t"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 1142, "{msg}");
    let (code, _, msg) = server_err(c.query_drop(format!("USE `{closed}`")).await.unwrap_err());
    assert_eq!(code, 1044, "{msg}");
    assert!(msg.contains(&acct) && msg.contains(&closed), "{msg}");
    // The session goes on.
    let one: Option<i64> = c.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));

    // A login naming a schema the account may not use: 1044 at login.
    let e = Conn::new(opts(&p, "shop", "spw", Some(&closed)))
        .await
        .unwrap_err();
    assert_eq!(server_err(e).0, 1044);

    // The [backend] account (user "app") reads what "shop" may not.
    let mut admin = Conn::new(p.opts(None)).await.unwrap();
    let n: Option<i64> = admin
        .query_first(format!("SELECT COUNT(*) FROM `{closed}`.t"))
        .await
        .unwrap();
    assert_eq!(n, Some(0));
    // COM_CHANGE_USER switches the shard account too, and back.
    admin
        .change_user(
            ChangeUserOpts::default()
                .with_user(Some("shop".into()))
                .with_pass(Some("spw".into())),
        )
        .await
        .unwrap();
    let who: Option<String> = admin.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(who, Some(format!("{acct}@%")));
    let (code, _, _) = server_err(
        admin
            .query_drop(format!("SELECT * FROM `{closed}`.t"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 1142);
    admin
        .change_user(
            ChangeUserOpts::default()
                .with_user(Some(proxy::USER.into()))
                .with_pass(Some(proxy::PASSWORD.into())),
        )
        .await
        .unwrap();
    let who: Option<String> = admin.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert!(who.is_some_and(|w| w.starts_with(&format!("{}@", tb.user))));

    // A shard account with a wrong password: the shard's 1045 reaches the
    // client (logging in to idgate itself succeeded).
    let mut bad = RawClient::connect(p.addr, &LoginSpec::new("badacct", "bpw").caps(CLIENT_CAPS))
        .await
        .expect_ok();
    let e = proxy::err_of(&bad.query("SELECT 1").await).expect("an error");
    assert_eq!((e.code, e.state.as_str()), (1045, "28000"), "{e}");
    assert!(e.message.contains(&acct), "{e}");
    // mysql_async's own queries at connect get it the same way.
    let e = Conn::new(opts(&p, "badacct", "bpw", None))
        .await
        .unwrap_err();
    assert_eq!(server_err(e).0, 1045);

    drop((c, admin, bad));
    p.stop().await;
    drop_account(&tb, &acct).await;
    for shard in 0..2 {
        proxy::admin(
            &tb,
            shard,
            &[
                &format!("DROP DATABASE `{open}`"),
                &format!("DROP DATABASE `{closed}`"),
            ],
        )
        .await;
    }
}

#[tokio::test]
async fn password_hash_logs_in_with_drivers_and_refuses_a_wrong_password() {
    let Some(tb) = support::testbed() else { return };
    let cfg = config_with(
        &tb,
        &format!(
            "[[users]]\nname = \"hashed\"\npassword_hash = \"{}\"\n",
            hash_of("hpw")
        ),
    );
    let p = Proxy::start_config(cfg, true).await;
    let mut c = Conn::new(opts(&p, "hashed", "hpw", None)).await.unwrap();
    let one: Option<i64> = c.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    drop(c);
    let e = Conn::new(opts(&p, "hashed", "nope", None))
        .await
        .unwrap_err();
    let (code, state, msg) = server_err(e);
    assert_eq!((code, state.as_str()), (1045, "28000"), "{msg}");
    // Through the auth switch (a client starting with caching_sha2_password).
    let ok = RawClient::connect(
        p.addr,
        &LoginSpec::new("hashed", "hpw").plugin("caching_sha2_password"),
    )
    .await;
    assert!(matches!(ok, LoginOutcome::Ok(_)), "{ok:?}");

    // PyMySQL.
    let script = format!(
        "import pymysql\n\
         c = pymysql.connect(host='127.0.0.1', port={port}, user='hashed', password='hpw')\n\
         cur = c.cursor(); cur.execute('SELECT 41 + 1'); print(cur.fetchone()[0])\n\
         try:\n    pymysql.connect(host='127.0.0.1', port={port}, user='hashed', password='bad')\n    print('accepted')\n\
         except pymysql.err.OperationalError as e:\n    print(e.args[0])\n",
        port = p.addr.port()
    );
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(script)
            .output()
    })
    .await
    .unwrap()
    .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "42\n1045");
    p.stop().await;
}

fn write_mode(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn idgate(args: &[&str], stdin: &str) -> (bool, String, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_idgate"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run idgate");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait idgate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn password_file_and_env_and_world_readable_files_are_refused() {
    let Some(tb) = support::testbed() else { return };
    let dir = tempfile::tempdir().unwrap();
    let pwfile = dir.path().join("app.pw");
    write_mode(&pwfile, "filepw\n", 0o600);
    let bfile = dir.path().join("backend.pw");
    write_mode(&bfile, &format!("{}\n", tb.password), 0o600);
    // A variable every process has: setting one here would race with
    // other tests' threads reading the environment.
    let var = "PATH";
    let envpw = std::env::var(var).expect("PATH is set");
    let mut shards = String::new();
    for (i, s) in tb.shards.iter().enumerate() {
        shards.push_str(&format!("[[shards]]\nname = \"s{i}\"\naddress = \"{s}\"\n"));
    }
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [[users]]\nname = \"fromfile\"\npassword_file = \"app.pw\"\n\
         [[users]]\nname = \"fromenv\"\npassword_env = \"{var}\"\n\
         [backend]\nuser = \"{}\"\npassword_file = \"backend.pw\"\nconnect_timeout_ms = 60000\n{shards}",
        tb.user
    );
    let path = dir.path().join("idgate.toml");
    // No plaintext password in it: it may be world-readable.
    write_mode(&path, &text, 0o644);
    let cfg_arg = path.display().to_string();
    let (ok, out, err) = idgate(&["check", "--config", &cfg_arg], "");
    assert!(ok, "{out}{err}");

    let p = Proxy::start_config(Config::load(&path).unwrap(), true).await;
    for (user, pw) in [("fromfile", "filepw"), ("fromenv", envpw.as_str())] {
        let mut c = Conn::new(opts(&p, user, pw, None)).await.unwrap();
        let one: Option<i64> = c.query_first("SELECT 1").await.unwrap();
        assert_eq!(one, Some(1), "{user}");
        let e = Conn::new(opts(&p, user, "x", None)).await.unwrap_err();
        assert_eq!(server_err(e).0, 1045, "{user}");
    }
    p.stop().await;

    // A world-readable password file: refused, naming it.
    std::fs::set_permissions(&pwfile, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, _, err) = idgate(&["check", "--config", &cfg_arg], "");
    assert!(!ok);
    assert!(
        err.contains(&pwfile.display().to_string()) && err.contains("chmod 600"),
        "{err}"
    );
    std::fs::set_permissions(&pwfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A world-readable config holding a plaintext password: refused too.
    let plain = text.replace("password_file = \"app.pw\"", "password = \"filepw\"");
    write_mode(&path, &plain, 0o644);
    let (ok, _, err) = idgate(&["check", "--config", &cfg_arg], "");
    assert!(!ok);
    assert!(
        err.contains(&cfg_arg) && err.contains("plaintext password") && err.contains("chmod 600"),
        "{err}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (ok, out, err) = idgate(&["check", "--config", &cfg_arg], "");
    assert!(ok, "{out}{err}");
    // Two sources for one account: refused, naming the user and keys.
    let two = text.replace(
        "password_file = \"app.pw\"",
        "password_file = \"app.pw\"\npassword_hash = \"*B69027D44F6E5EDC07F1AEAD1477967B16F28227\"",
    );
    write_mode(&path, &two, 0o600);
    let (ok, _, err) = idgate(&["check", "--config", &cfg_arg], "");
    assert!(!ok);
    assert!(
        err.contains("\"fromfile\"") && err.contains("password_hash and password_file"),
        "{err}"
    );
}

#[tokio::test]
async fn hash_password_prints_what_mariadb_password_prints() {
    let Some(tb) = support::testbed() else { return };
    let mut c = Conn::new(proxy::direct_opts(&tb, 0, None)).await.unwrap();
    for pw in ["x", "app-secret", "pässwörd with spaces & 'quotes'"] {
        let want: Option<String> = c.exec_first("SELECT PASSWORD(?)", (pw,)).await.unwrap();
        let (ok, out, err) = idgate(&["hash-password"], &format!("{pw}\n"));
        assert!(ok, "{err}");
        assert_eq!(Some(out.trim_end().to_string()), want, "{pw}");
        assert_eq!(hash_of(pw), want.unwrap());
    }
    let (ok, _, err) = idgate(&["hash-password"], "\n");
    assert!(!ok && err.contains("empty password"), "{err}");
    drop(c);
}

/// Waits (up to 60 s) until `cond` holds.
async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "not within 60 s: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn max_connections_per_user() {
    let Some(tb) = support::testbed() else { return };
    let cfg = config_with(
        &tb,
        "[[users]]\nname = \"lim\"\npassword = \"lpw\"\nmax_connections = 2\n",
    );
    let p = Proxy::start_config(cfg, true).await;
    let (lim, _) = p.shared.user(b"lim").unwrap();
    let a = Conn::new(opts(&p, "lim", "lpw", None)).await.unwrap();
    let mut b = Conn::new(opts(&p, "lim", "lpw", None)).await.unwrap();
    let e = Conn::new(opts(&p, "lim", "lpw", None)).await.unwrap_err();
    let (code, state, msg) = server_err(e);
    assert_eq!((code, state.as_str()), (1203, "42000"));
    assert_eq!(
        msg,
        "User 'lim' has exceeded the 'max_user_connections' resource (current value: 2)"
    );
    // Other users are not counted against it.
    let mut other = Conn::new(p.opts(None)).await.unwrap();
    // Nor can another session switch to the full user.
    let e = other
        .change_user(
            ChangeUserOpts::default()
                .with_user(Some("lim".into()))
                .with_pass(Some("lpw".into())),
        )
        .await
        .unwrap_err();
    assert_eq!(server_err(e).0, 1203);
    // A session that ends gives its slot back.
    a.disconnect().await.unwrap();
    wait_for("the ended session's slot is free", || {
        p.shared.user_slots.open(lim) < 2
    })
    .await;
    let c = Conn::new(opts(&p, "lim", "lpw", None)).await.unwrap();
    // So does one cut without a goodbye (the client's socket closes).
    let one: Option<i64> = b.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    drop(b);
    wait_for("the dropped session's slot is free", || {
        p.shared.user_slots.open(lim) < 2
    })
    .await;
    let mut d = Conn::new(opts(&p, "lim", "lpw", None)).await.unwrap();
    let one: Option<i64> = d.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    drop((c, d));
    p.stop().await;
}

/// Logs in to `addr` as `user` with `pw`; the error code if refused.
async fn try_login(addr: std::net::SocketAddr, user: &str, pw: &str) -> Option<u16> {
    match RawClient::connect(addr, &LoginSpec::new(user, pw).caps(CLIENT_CAPS)).await {
        LoginOutcome::Ok(_) => None,
        LoginOutcome::Refused(e) => Some(e.code),
    }
}

#[tokio::test]
async fn repeated_failed_logins_are_delayed_per_address() {
    let Some(tb) = support::testbed() else { return };
    let cfg = config_with(&tb, "");
    let clock = Arc::new(FakeClock::new(1_000_000));
    let mut shared = Shared::new(cfg);
    shared.login_throttle = Arc::new(LoginThrottle::new(clock.clone(), 1000));
    let p = Proxy::start_shared(Arc::new(shared), true).await;
    let t = &p.shared.login_throttle;
    let delayed = || {
        (
            t.delayed.load(Ordering::Relaxed),
            t.delayed_ms.load(Ordering::Relaxed),
        )
    };
    // Three failures are free.
    for _ in 0..3 {
        assert_eq!(try_login(p.addr, proxy::USER, "bad").await, Some(1045));
    }
    assert_eq!(delayed(), (0, 0));
    // Then 100 ms, 200 ms, ...: computed by the server, and waited at least.
    let started = Instant::now();
    assert_eq!(try_login(p.addr, proxy::USER, "bad").await, Some(1045));
    assert_eq!(delayed(), (1, 100));
    assert_eq!(try_login(p.addr, proxy::USER, "bad").await, Some(1045));
    assert_eq!(delayed(), (2, 300));
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The right password still gets in (after its own delay), and starts afresh.
    assert_eq!(try_login(p.addr, proxy::USER, proxy::PASSWORD).await, None);
    assert_eq!(delayed(), (3, 700));
    for _ in 0..3 {
        assert_eq!(try_login(p.addr, proxy::USER, "bad").await, Some(1045));
    }
    assert_eq!(delayed(), (3, 700));
    // A quiet period (on the injected clock) starts afresh too.
    assert_eq!(try_login(p.addr, proxy::USER, "bad").await, Some(1045));
    assert_eq!(delayed(), (4, 800));
    clock.advance(idgate::frontend::session::limits::QUIET_PERIOD.as_millis() as u64);
    assert_eq!(try_login(p.addr, proxy::USER, "bad").await, Some(1045));
    assert_eq!(delayed(), (4, 800));

    // Another address is not delayed by this one's failures, even while a
    // login from this one waits (the wait holds only its own connection).
    let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    for _ in 0..20 {
        t.failed(lo);
    }
    let addr = p.addr;
    let waiting = tokio::spawn(async move { try_login(addr, proxy::USER, "bad").await });
    wait_for("the login from 127.0.0.1 is delayed", || delayed().0 == 5).await;
    assert_eq!(delayed().1, 800 + 10_000, "the delay is capped at 10 s");
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let stream = sock.connect(p.addr).await.unwrap();
    let r = RawClient::login_on(
        stream,
        &LoginSpec::new(proxy::USER, proxy::PASSWORD).caps(CLIENT_CAPS),
    )
    .await;
    assert!(matches!(r, LoginOutcome::Ok(_)), "{r:?}");
    assert_eq!(delayed().0, 5, "127.0.0.2 was not delayed");
    waiting.abort();
    p.stop().await;
}

#[tokio::test]
async fn failed_login_delay_is_logged_with_address_and_user() {
    let Some(tb) = support::testbed() else { return };
    let mut p = proxy::ProxyProcess::spawn(&tb, "").await;
    for _ in 0..4 {
        assert_eq!(try_login(p.addr, "intruder", "guess").await, Some(1045));
    }
    p.sigterm();
    let out = tokio::task::spawn_blocking(move || {
        let _ = p.child.wait();
        let mut log = String::new();
        if let Some(mut e) = p.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut log);
        }
        log
    })
    .await
    .unwrap();
    let line = out
        .lines()
        .find(|l| l.contains("login delayed"))
        .unwrap_or_else(|| panic!("no delay logged:\n{out}"));
    assert!(
        line.contains("peer=127.0.0.1")
            && line.contains("user=intruder")
            && line.contains("delay_ms=100"),
        "{line}"
    );
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn oversized_pre_auth_packets_are_refused_without_growing() {
    let Some(tb) = support::testbed() else { return };
    let p = proxy::ProxyProcess::spawn(&tb, "").await;
    let pid = p.child.id();
    let before = rss_kib(pid);
    // 64 clients each announce a handshake response bigger than idgate
    // reads before authentication (20 KiB: under the old 1 MiB bound; and
    // 16 MiB): refused at the header, before any of it is read.
    let mut tasks = Vec::new();
    for i in 0..64 {
        let addr = p.addr;
        tasks.push(tokio::spawn(async move {
            let s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut conn = PacketConn::new(s);
            let (_, _, g) = proxy::read_packet(&mut conn).await.expect("greeting");
            ServerHandshake::decode(&g).expect("handshake");
            let len: u32 = if i % 2 == 0 { 20 << 10 } else { (1 << 24) - 1 };
            let mut header = len.to_le_bytes();
            header[3] = 1;
            conn.write_raw(&header).await.unwrap();
            proxy::read_packet(&mut conn).await
        }));
    }
    for t in tasks {
        let (_, _, payload) = t.await.unwrap().expect("an error packet before the close");
        let e = reply::parse_err(&payload).expect("ERR packet");
        assert_eq!(e.code, 1153, "{e}");
        assert!(e.message.contains("before authentication"), "{e}");
    }
    let after = rss_kib(pid);
    assert!(
        after < before + 64 * 1024,
        "idgate grew from {before} KiB to {after} KiB"
    );
    // It still serves.
    assert_eq!(try_login(p.addr, proxy::USER, proxy::PASSWORD).await, None);
}

#[test]
fn redis_auth_checks_a_password_hash() {
    let Some(tb) = support::testbed() else { return };
    let p = support::process::Idgate::start(
        &tb,
        &support::process::Options {
            rules: "[[generator]]\nname = \"orders\"\nkind = \"sequence\"\n".into(),
            etcd_prefix: format!("/{}", support::unique("sec_resp")),
            ..Default::default()
        },
    );
    let mut c = support::process::Raw::connect(p.resp);
    assert!(c.cmd("AUTH hashed nope").starts_with("-WRONGPASS"));
    assert!(c.cmd("AUTH hashed ").starts_with("-"));
    assert_eq!(c.cmd("AUTH hashed hpw"), "+OK");
    assert!(c.cmd("INCR orders").starts_with(':'));
    // The MySQL listener takes the same hash.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mysql = p.mysql;
    assert_eq!(rt.block_on(try_login(mysql, "hashed", "hpw")), None);
    assert_eq!(rt.block_on(try_login(mysql, "hashed", "x")), Some(1045));

    // Repeated failed AUTHs are delayed like MySQL logins, in the same
    // table: 1 failure above, 2 more are free, the 4th waits 100 ms.
    let metric = |name: &str| -> String {
        let body = p.http_get("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{body}"))
            .to_string()
    };
    assert_eq!(metric("idgate_login_delays_total"), "0");
    let mut g = support::process::Raw::connect(p.resp);
    for _ in 0..2 {
        assert!(g.cmd("AUTH hashed guess").starts_with("-WRONGPASS"));
    }
    assert_eq!(metric("idgate_login_delays_total"), "0");
    assert!(g.cmd("AUTH hashed guess").starts_with("-WRONGPASS"));
    assert_eq!(metric("idgate_login_delays_total"), "1");
    assert_eq!(metric("idgate_login_delay_seconds_total"), "0.1");
    // The MySQL listener shares the table: its next login waits 200 ms.
    assert_eq!(rt.block_on(try_login(mysql, "hashed", "x")), Some(1045));
    assert_eq!(metric("idgate_login_delays_total"), "2");
    assert_eq!(metric("idgate_login_delay_seconds_total"), "0.3");
    let log = p.log();
    let line = log
        .lines()
        .find(|l| l.contains("AUTH delayed"))
        .unwrap_or_else(|| panic!("no delay logged:\n{log}"));
    assert!(
        line.contains("peer=127.0.0.1")
            && line.contains("user=hashed")
            && line.contains("delay_ms=100"),
        "{line}"
    );
}

#[tokio::test]
async fn a_client_that_never_logs_in_is_closed_and_frees_its_slot() {
    let Some(tb) = support::testbed() else { return };
    let text = proxy::config_text(&tb, "127.0.0.1:0", "max_connections = 1");
    let mut shared = Shared::new(Config::parse(&text, "test").unwrap());
    shared.login_timeout = Duration::from_millis(300);
    let p = Proxy::start_shared(Arc::new(shared), true).await;
    let s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let mut conn = PacketConn::new(s);
    let (_, _, g) = proxy::read_packet(&mut conn).await.expect("greeting");
    ServerHandshake::decode(&g).expect("handshake");
    // Nothing sent: idgate closes the connection (without a reply).
    assert!(proxy::read_packet(&mut conn).await.is_none());
    // Its only slot is free again (once idgate has seen it go).
    let deadline = Instant::now() + Duration::from_secs(60);
    while try_login(p.addr, proxy::USER, proxy::PASSWORD)
        .await
        .is_some()
    {
        assert!(Instant::now() < deadline, "the slot was not given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    p.stop().await;
}
