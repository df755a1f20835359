//! caching_sha2_password (issue #14 part 5) with real clients and
//! servers: the `mariadb` CLI (libmariadb's plugin), PyMySQL (RSA with
//! `cryptography`), mysql-connector-python, mysql_async and sqlx log in to
//! idgate over the fast path, the full authentication over TLS and by RSA
//! without TLS; a wrong password is refused with 1045 over every path and
//! counts for the login delay; mysql_native_password users still log in
//! (auth switch); COM_CHANGE_USER between plugins; and idgate's own
//! client side against a server that speaks caching_sha2_password: a
//! second idgate (client -> idgate A -> idgate B -> MariaDB).
//!
//! Which path a login took is read from the server's counters
//! (`Shared::sha2`), so each test proves the path it names.

mod support;

use idgate::config::Config;
use idgate::protocol::sha2::Sha2Hash;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, SslOpts};
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use support::proxy::{self, LoginSpec, Proxy, RawClient};
use support::Testbed;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// `[[users]]` of these tests beside the support ones (`app`/`secret`,
/// plaintext, so caching_sha2_password with the fast path at once):
/// `sha`, `sha_b`, `sha_c` with salted `$idgate-sha2$` hashes (fast path
/// only after a full authentication), `nat` on mysql_native_password.
fn users() -> String {
    let mut out = String::new();
    for (name, pw) in [("sha", "shapw"), ("sha_b", "shabpw"), ("sha_c", "shacpw")] {
        let hash = Sha2Hash::new(pw.as_bytes()).to_text();
        out.push_str(&format!(
            "[[users]]\nname = \"{name}\"\npassword_hash = \"{hash}\"\n"
        ));
    }
    out.push_str(
        "[[users]]\nname = \"nat\"\npassword = \"natpw\"\nauth = \"mysql_native_password\"\n",
    );
    out
}

/// `[server]` lines: the test bed's RSA key, and TLS with its certificate when `tls`.
fn server_extra(tb: &Testbed, tls: bool) -> String {
    let mut s = format!("rsa_key = \"{}\"\n", tb.tls_file("rsa.key"));
    if tls {
        s.push_str(&format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
            tb.tls_file("server.pem"),
            tb.tls_file("server.key")
        ));
    }
    s
}

fn config(tb: &Testbed, server_extra: &str, backend_extra: &str) -> Config {
    let text = proxy::config_text(tb, "127.0.0.1:0", server_extra).replace(
        "connect_timeout_ms = 60000\n",
        &format!("connect_timeout_ms = 60000\n{backend_extra}\n"),
    ) + &users();
    Config::parse(&text, "test").expect("test config is valid")
}

/// (fast, full over TLS, full by RSA, public keys sent) so far.
fn counts(p: &Proxy) -> [u64; 4] {
    p.shared.sha2.counts()
}

/// Failed logins counted against 127.0.0.1.
fn failures(p: &Proxy) -> u32 {
    p.shared.login_throttle.delay(LOCAL).1
}

async fn select(opts: OptsBuilder) -> Result<i64, mysql_async::Error> {
    let mut c = Conn::new(opts).await?;
    let v: Option<i64> = c.query_first("SELECT 40 + 2").await?;
    c.disconnect().await?;
    Ok(v.unwrap_or_default())
}

fn code_of(r: Result<i64, mysql_async::Error>) -> u16 {
    match r {
        Ok(_) => panic!("the login succeeded"),
        Err(mysql_async::Error::Server(e)) => e.code,
        Err(e) => panic!("not a server error: {e}"),
    }
}

fn tls_opts(tb: &Testbed, o: OptsBuilder) -> OptsBuilder {
    o.ssl_opts(Some(SslOpts::default().with_root_certs(vec![
        std::path::PathBuf::from(tb.tls_file("ca.pem")).into(),
    ])))
}

#[tokio::test]
async fn greeting_offers_caching_sha2_and_the_fast_path_needs_no_switch() {
    let Some(tb) = support::testbed() else { return };
    let p = Proxy::start_config(config(&tb, &server_extra(&tb, false), ""), true).await;
    let c = RawClient::connect(p.addr, &LoginSpec::new(proxy::USER, proxy::PASSWORD))
        .await
        .expect_ok();
    assert_eq!(c.greeting.auth_plugin, b"caching_sha2_password");
    assert_eq!(c.login_packets.len(), 2, "fast auth success, then OK");
    assert_eq!(c.login_packets[0], [1, 3]);
    assert_eq!(counts(&p), [1, 0, 0, 0]);
    // A wrong scramble against a known hash: 1045, counted.
    let e = RawClient::connect(p.addr, &LoginSpec::new(proxy::USER, "wrong"))
        .await
        .expect_refused();
    assert_eq!((e.code, e.state.as_str()), (1045, "28000"), "{e}");
    assert_eq!(failures(&p), 1);
    // A native user from a client that started with caching_sha2: switched.
    let c = RawClient::connect(p.addr, &LoginSpec::new("nat", "natpw"))
        .await
        .expect_ok();
    assert_eq!(c.login_packets[0][0], 0xfe);
    let (plugin, _) = idgate::protocol::handshake::parse_auth_switch(&c.login_packets[0]).unwrap();
    assert_eq!(plugin, b"mysql_native_password");
    assert_eq!(failures(&p), 0, "a success starts the address afresh");
    let e = RawClient::connect(p.addr, &LoginSpec::new("nat", "natpwx"))
        .await
        .expect_refused();
    assert_eq!(e.code, 1045);
    assert_eq!(failures(&p), 1);
    p.stop().await;
}

#[tokio::test]
async fn raw_rsa_full_path_then_fast_path_and_refusals() {
    let Some(tb) = support::testbed() else { return };
    let p = Proxy::start_config(config(&tb, &server_extra(&tb, false), ""), true).await;
    // A hash alone cannot check a scramble: full authentication by RSA.
    let c = RawClient::connect(p.addr, &LoginSpec::new("sha", "shapw"))
        .await
        .expect_ok();
    assert_eq!(c.login_packets[0], [1, 4], "perform full authentication");
    assert!(
        c.login_packets[1].starts_with(b"\x01-----BEGIN PUBLIC KEY-----"),
        "public key sent"
    );
    assert_eq!(counts(&p), [0, 0, 1, 1]);
    drop(c);
    // Then the fast path from the cache.
    let c = RawClient::connect(p.addr, &LoginSpec::new("sha", "shapw"))
        .await
        .expect_ok();
    assert_eq!(c.login_packets[0], [1, 3]);
    assert_eq!(counts(&p), [1, 0, 1, 1]);
    drop(c);
    // A wrong password by RSA (nothing cached for sha_b), and garbage
    // where the encrypted password should be: 1045 both, counted.
    let e = RawClient::connect(p.addr, &LoginSpec::new("sha_b", "nope"))
        .await
        .expect_refused();
    assert_eq!((e.code, e.state.as_str()), (1045, "28000"), "{e}");
    assert_eq!(failures(&p), 1);
    assert!(e.message.contains("'sha_b'") && e.message.contains("using password: YES"));
    let garbage = garbage_after_full_auth(&p, "sha_b").await;
    assert_eq!(garbage, 1045);
    assert_eq!(failures(&p), 2);
    // The cache holds only what a full authentication proved.
    assert_eq!(counts(&p), [1, 0, 1, 2], "the garbage asked for no key");
    // An unknown user is refused alike.
    let e = RawClient::connect(p.addr, &LoginSpec::new("nobody", "x"))
        .await
        .expect_refused();
    assert_eq!(e.code, 1045);
    p.stop().await;
}

/// Logs in as `user` and sends 256 bytes of garbage as the RSA block:
/// the error code idgate answers with.
async fn garbage_after_full_auth(p: &Proxy, user: &str) -> u16 {
    use idgate::protocol::handshake::{ClientHandshake, ServerHandshake};
    use idgate::protocol::packet::{frame, PacketConn};
    let stream = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let mut conn = PacketConn::new(stream);
    let (_, _, g) = proxy::read_packet(&mut conn).await.unwrap();
    let g = ServerHandshake::decode(&g).unwrap();
    let hs = ClientHandshake {
        capabilities: proxy::CLIENT_CAPS,
        max_packet: 1 << 24,
        charset: 45,
        user: user.as_bytes().to_vec(),
        auth_response: proxy::token_for(b"caching_sha2_password", &g.scramble, "whatever"),
        auth_plugin: Some(b"caching_sha2_password".to_vec()),
        ..Default::default()
    };
    let mut out = Vec::new();
    frame(&mut out, 1, &hs.encode());
    conn.write_raw(&out).await.unwrap();
    let (seq, _, p1) = proxy::read_packet(&mut conn).await.unwrap();
    assert_eq!((seq, p1.as_slice()), (2, &[1u8, 4][..]));
    out.clear();
    frame(&mut out, 3, &[0x5a; 256]);
    conn.write_raw(&out).await.unwrap();
    let (seq, _, e) = proxy::read_packet(&mut conn).await.unwrap();
    assert_eq!(seq, 4);
    idgate::protocol::reply::parse_err(&e).unwrap().code
}

#[tokio::test]
async fn mysql_async_and_sqlx_over_every_path() {
    let Some(tb) = support::testbed() else { return };
    let p = Proxy::start_config(config(&tb, &server_extra(&tb, true), ""), true).await;
    // mysql_async without TLS: RSA, then the fast path.
    assert_eq!(select(p.opts_as("sha", "shapw", None)).await.unwrap(), 42);
    assert_eq!(counts(&p), [0, 0, 1, 1]);
    assert_eq!(select(p.opts_as("sha", "shapw", None)).await.unwrap(), 42);
    assert_eq!(counts(&p), [1, 0, 1, 1]);
    assert_eq!(code_of(select(p.opts_as("sha", "bad", None)).await), 1045);
    assert_eq!(failures(&p), 1);
    // Over TLS: the password in clear inside TLS.
    assert_eq!(
        select(tls_opts(&tb, p.opts_as("sha_b", "shabpw", None)))
            .await
            .unwrap(),
        42
    );
    assert_eq!(counts(&p), [1, 1, 1, 1]);
    assert_eq!(failures(&p), 0);
    assert_eq!(
        code_of(select(tls_opts(&tb, p.opts_as("sha_c", "bad", None))).await),
        1045,
        "wrong password over TLS (full path)"
    );
    assert_eq!(failures(&p), 1);
    assert_eq!(
        code_of(select(p.opts_as("sha_c", "bad", None)).await),
        1045,
        "wrong password by RSA"
    );
    assert_eq!(failures(&p), 2);
    // Native user: switch from caching_sha2.
    assert_eq!(select(p.opts_as("nat", "natpw", None)).await.unwrap(), 42);
    assert_eq!(code_of(select(p.opts_as("nat", "x", None)).await), 1045);

    // sqlx: plaintext user (fast path), hashed user over TLS (full) and
    // again (fast path from the cache).
    use sqlx::{ConnectOptions, Connection, Row};
    let sqlx_opts = |user: &str, pw: &str, tls: bool| {
        let o = sqlx::mysql::MySqlConnectOptions::new()
            .host("127.0.0.1")
            .port(p.addr.port())
            .username(user)
            .password(pw);
        if tls {
            o.ssl_mode(sqlx::mysql::MySqlSslMode::VerifyCa)
                .ssl_ca(tb.tls_file("ca.pem"))
        } else {
            o.ssl_mode(sqlx::mysql::MySqlSslMode::Disabled)
        }
    };
    let before = counts(&p);
    for (user, pw, tls) in [
        (proxy::USER, proxy::PASSWORD, false),
        ("sha_c", "shacpw", true),
        ("sha_c", "shacpw", false),
    ] {
        let mut c = sqlx_opts(user, pw, tls)
            .connect()
            .await
            .unwrap_or_else(|e| panic!("sqlx {user} tls={tls}: {e}"));
        let row = sqlx::query("SELECT 6 * 7").fetch_one(&mut c).await.unwrap();
        assert_eq!(row.get::<i64, _>(0), 42);
        c.close().await.unwrap();
    }
    let after = counts(&p);
    assert_eq!(after[0] - before[0], 2, "two fast paths");
    assert_eq!(after[1] - before[1], 1, "one full path over TLS");
    match sqlx_opts("sha_c", "bad", false).connect().await {
        Err(sqlx::Error::Database(e)) => assert_eq!(e.code().as_deref(), Some("28000"), "{e}"),
        other => panic!("sqlx wrong password: {other:?}"),
    }
    p.stop().await;
}

#[tokio::test]
async fn generated_rsa_key_serves_the_full_path() {
    let Some(tb) = support::testbed() else { return };
    // No rsa_key: a key is generated when the first client asks for one.
    let p = Proxy::start_config(config(&tb, "", ""), true).await;
    assert_eq!(select(p.opts_as("sha", "shapw", None)).await.unwrap(), 42);
    assert_eq!(counts(&p), [0, 0, 1, 1]);
    let c = RawClient::connect(p.addr, &LoginSpec::new("sha_b", "shabpw"))
        .await
        .expect_ok();
    assert_eq!(counts(&p), [0, 0, 2, 2], "the same key again");
    drop(c);
    p.stop().await;
}

/// Runs a Python script with `python`; its stdout.
async fn python(python: std::path::PathBuf, script: String) -> String {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args(["-c", &script])
            .output()
            .expect("run python")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[tokio::test]
async fn pymysql_and_mysql_connector_python() {
    let Some(tb) = support::testbed() else { return };
    let Some(py) =
        support::process::tool("/usr/bin/python3", &["-c", "import pymysql, cryptography"])
    else {
        return;
    };
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/target/pyvenv/bin/python");
    let Some(venv) = support::process::tool(venv, &["-c", "import mysql.connector"]) else {
        return;
    };
    let p = Proxy::start_config(config(&tb, &server_extra(&tb, true), ""), true).await;
    let port = p.addr.port();
    let ca = tb.tls_file("ca.pem");
    // PyMySQL: login(user, password, tls) prints 42 or the error code.
    let script = format!(
        "import pymysql\n\
         def login(u, pw, tls):\n\
         \x20   ssl = {{'ca': '{ca}'}} if tls else None\n\
         \x20   try:\n\
         \x20       c = pymysql.connect(host='127.0.0.1', port={port}, user=u, password=pw, ssl=ssl)\n\
         \x20       cur = c.cursor(); cur.execute('SELECT 40 + 2'); print(cur.fetchone()[0])\n\
         \x20   except pymysql.err.OperationalError as e:\n\
         \x20       print(e.args[0])\n\
         login('sha', 'shapw', False)\n\
         login('sha', 'shapw', False)\n\
         login('sha', 'bad', False)\n\
         login('sha_b', 'bad', False)\n\
         login('sha_b', 'shabpw', True)\n\
         login('sha_c', 'bad', True)\n\
         login('app', 'secret', False)\n\
         login('nat', 'natpw', False)\n\
         login('nat', 'bad', False)\n"
    );
    let out = python(py, script).await;
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["42", "42", "1045", "1045", "42", "1045", "42", "42", "1045"],
        "{out}"
    );
    // sha: RSA then fast; sha_b: RSA (refused) then TLS; app: fast.
    assert_eq!(counts(&p), [2, 1, 1, 2]);

    // mysql-connector-python (pure Python): it sends the password in clear
    // when asked for the full authentication, which idgate takes only over
    // TLS; over plain TCP that is refused (as MySQL does), the fast path works.
    let script = format!(
        "import mysql.connector\n\
         def login(u, pw, tls):\n\
         \x20   kw = dict(ssl_ca='{ca}', ssl_verify_cert=True) if tls else dict(ssl_disabled=True)\n\
         \x20   try:\n\
         \x20       c = mysql.connector.connect(host='127.0.0.1', port={port}, user=u, password=pw, use_pure=True, **kw)\n\
         \x20       cur = c.cursor(); cur.execute('SELECT 40 + 2'); print(cur.fetchone()[0]); c.close()\n\
         \x20   except mysql.connector.Error as e:\n\
         \x20       print(e.errno)\n\
         login('sha_c', 'shacpw', False)\n\
         login('sha_c', 'shacpw', True)\n\
         login('sha_c', 'shacpw', False)\n\
         login('sha_c', 'bad', False)\n\
         login('app', 'secret', False)\n\
         login('nat', 'natpw', False)\n"
    );
    let before = counts(&p);
    let out = python(venv, script).await;
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["1045", "42", "42", "1045", "42", "42"],
        "{out}"
    );
    let after = counts(&p);
    assert_eq!(after[0] - before[0], 2, "fast paths: sha_c cached, app");
    assert_eq!(after[1] - before[1], 1, "full path over TLS");
    p.stop().await;
}

#[tokio::test]
async fn mariadb_cli_fast_rsa_and_tls() {
    let Some(tb) = support::testbed() else { return };
    let Some(mariadb) = support::process::tool("mariadb", &["--version"]) else {
        return;
    };
    let p = Proxy::start_config(config(&tb, &server_extra(&tb, true), ""), true).await;
    let port = p.addr.port().to_string();
    let ca = tb.tls_file("ca.pem");
    // The CLI runs off the runtime's thread (the proxy runs on it).
    let run = |user: &str, pw: &str, tls: bool| {
        let mut cmd = Command::new(&mariadb);
        cmd.args(["--no-defaults", "-h", "127.0.0.1", "-P", &port])
            .args(["-u", user, &format!("-p{pw}"), "-N", "-B"]);
        if tls {
            cmd.args(["--ssl", "--ssl-ca", &ca, "--ssl-verify-server-cert"]);
        } else {
            cmd.arg("--skip-ssl");
        }
        cmd.args(["-e", "SELECT 6 * 7"]);
        async move {
            let out = tokio::task::spawn_blocking(move || cmd.output().expect("run mariadb"))
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            (out.status.success(), text, err)
        }
    };
    let (ok, out, err) = run(proxy::USER, proxy::PASSWORD, false).await;
    assert!(ok && out == "42", "{out} {err}");
    assert_eq!(counts(&p), [1, 0, 0, 0]);
    let (ok, out, err) = run("sha", "shapw", false).await;
    assert!(ok && out == "42", "RSA: {out} {err}");
    assert_eq!(counts(&p), [1, 0, 1, 1]);
    let (ok, out, err) = run("sha", "shapw", false).await;
    assert!(ok && out == "42", "fast: {out} {err}");
    assert_eq!(counts(&p), [2, 0, 1, 1]);
    let (ok, out, err) = run("sha_b", "shabpw", true).await;
    assert!(ok && out == "42", "TLS: {out} {err}");
    assert_eq!(counts(&p), [2, 1, 1, 1]);
    for (user, tls) in [
        ("sha", false),
        ("sha_c", false),
        ("sha_c", true),
        ("nat", false),
    ] {
        let (ok, _, err) = run(user, "wrong", tls).await;
        assert!(!ok && err.contains("1045"), "{user} tls={tls}: {err}");
    }
    let (ok, out, err) = run("nat", "natpw", false).await;
    assert!(ok && out == "42", "native: {out} {err}");
    p.stop().await;
}

#[tokio::test]
async fn change_user_between_plugins() {
    let Some(tb) = support::testbed() else { return };
    let p = Proxy::start_config(config(&tb, &server_extra(&tb, false), ""), true).await;
    let mut c = Conn::new(p.opts(None)).await.unwrap();
    // To a native user, to a hashed one (full path by RSA inside
    // COM_CHANGE_USER), to it again (fast path), back to app.
    for (user, pw) in [
        ("nat", "natpw"),
        ("sha", "shapw"),
        ("sha", "shapw"),
        (proxy::USER, proxy::PASSWORD),
    ] {
        c.change_user(
            mysql_async::ChangeUserOpts::default()
                .with_user(Some(user.into()))
                .with_pass(Some(pw.into())),
        )
        .await
        .unwrap_or_else(|e| panic!("change_user to {user}: {e}"));
        let v: Option<i64> = c.query_first("SELECT 7").await.unwrap();
        assert_eq!(v, Some(7));
        // idgate's own view of the session's user.
        let id = c.id().to_string();
        let rows: Vec<mysql_async::Row> = c.query("SHOW IDGATE SESSIONS").await.unwrap();
        let me = rows
            .iter()
            .find(|r| r.get::<String, _>(0).as_deref() == Some(id.as_str()))
            .expect("this session listed");
        assert_eq!(me.get::<String, _>(1).as_deref(), Some(user));
    }
    assert_eq!(counts(&p)[2], 1, "one full path by RSA");
    // A wrong password: 1045 and the session ends.
    let e = c
        .change_user(
            mysql_async::ChangeUserOpts::default()
                .with_user(Some("sha_b".into()))
                .with_pass(Some("bad".into())),
        )
        .await
        .expect_err("wrong password");
    match e {
        mysql_async::Error::Server(e) => assert_eq!(e.code, 1045),
        e => panic!("{e}"),
    }
    assert_eq!(failures(&p), 1);
    p.stop().await;
}

/// A client of A gets B's 1045 (A could not log in to B).
async fn assert_b_refuses_a(a: &Proxy) {
    let e = match Conn::new(a.opts(None)).await {
        Ok(mut c) => c.query_drop("SELECT 1").await.expect_err("B refuses A"),
        Err(e) => e,
    };
    match e {
        mysql_async::Error::Server(e) => assert_eq!(e.code, 1045, "{e}"),
        e => panic!("{e}"),
    }
}

/// idgate A in front of idgate B (whose users are on
/// caching_sha2_password with salted hashes), B in front of MariaDB: A's
/// `[backend]` account is B's user `sha`.
async fn chain(tb: &Testbed, b_tls: bool, a_backend: &str) -> (Proxy, Proxy) {
    let b = Proxy::start_config(config(tb, &server_extra(tb, b_tls), ""), true).await;
    let mut cfg = config(tb, "", a_backend);
    cfg.shards.truncate(1);
    cfg.shards[0].address = b.addr.to_string();
    cfg.backend.user = "sha".into();
    cfg.backend.password = "shapw".into();
    let a = Proxy::start_config(cfg, true).await;
    (a, b)
}

#[tokio::test]
async fn chained_idgate_logs_in_to_a_caching_sha2_server() {
    let Some(tb) = support::testbed() else { return };
    // Without TLS between A and B: the full path by RSA (A asks B for its
    // public key), then the fast path for every later connection.
    let (a, b) = chain(&tb, false, "tls = \"disabled\"").await;
    assert_eq!(counts(&b), [0, 0, 1, 1], "A's probe: full path by RSA");
    assert_eq!(select(a.opts(None)).await.unwrap(), 42);
    assert_eq!(
        counts(&b),
        [1, 0, 1, 1],
        "the session's connection: fast path"
    );
    let mut c = Conn::new(a.opts(None)).await.unwrap();
    let v: Option<String> = c.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert!(
        v.is_some_and(|u| u.starts_with(&tb.user)),
        "MariaDB sees B's account"
    );
    c.disconnect().await.unwrap();
    a.stop().await;
    b.stop().await;

    // With TLS (verified): the password in clear inside TLS, then fast.
    let ca = format!(
        "tls = \"verify_ca\"\ntls_ca = \"{}\"",
        tb.tls_file("ca.pem")
    );
    let (a, b) = chain(&tb, true, &ca).await;
    assert_eq!(counts(&b), [0, 1, 0, 0], "A's probe: full path over TLS");
    assert_eq!(select(a.opts(None)).await.unwrap(), 42);
    assert_eq!(counts(&b), [1, 1, 0, 0]);
    a.stop().await;
    b.stop().await;

    // A wrong password for B's account: B's 1045 reaches A's client.
    let b = Proxy::start_config(config(&tb, &server_extra(&tb, false), ""), true).await;
    let mut cfg = config(&tb, "", "tls = \"disabled\"");
    cfg.shards.truncate(1);
    cfg.shards[0].address = b.addr.to_string();
    cfg.backend.user = "sha".into();
    cfg.backend.password = "wrong".into();
    let a = Proxy::start_config(cfg, false).await;
    assert_b_refuses_a(&a).await;
    assert_eq!(counts(&b)[..3], [0, 0, 0]);
    a.stop().await;
    b.stop().await;
}

/// A's `[[shards]] public_key` pinned to B's key: the full path by RSA
/// without asking B for its key (B sends none); a pinned key that is not
/// B's makes B refuse A's login (1045 to A's client); a file that holds no
/// public key is refused when the config is read, naming the shard's key.
#[tokio::test]
async fn pinned_shard_public_key_is_used_instead_of_asking() {
    let Some(tb) = support::testbed() else { return };
    let dir = tempfile::tempdir().unwrap();
    let b_key = idgate::config::read_rsa_key(std::path::Path::new(&tb.tls_file("rsa.key")))
        .expect("the test bed's RSA key");
    let other = tokio::task::spawn_blocking(idgate::protocol::sha2::RsaKeys::generate)
        .await
        .unwrap()
        .unwrap();
    let (right, wrong) = (dir.path().join("b.pub"), dir.path().join("other.pub"));
    std::fs::write(&right, &b_key.public_pem).unwrap();
    std::fs::write(&wrong, &other.public_pem).unwrap();
    let a_config = |b: &Proxy, key: &std::path::Path, password: &str| {
        let text = proxy::config_text(&tb, "127.0.0.1:0", "").replace(
            "connect_timeout_ms = 60000\n",
            "connect_timeout_ms = 60000\ntls = \"disabled\"\n",
        );
        let mut cfg = Config::parse(
            &format!(
                "{text}[[shards]]\nname = \"b\"\naddress = \"{}\"\npublic_key = \"{}\"\n",
                b.addr,
                key.display()
            ),
            "test",
        )
        .expect("test config is valid");
        cfg.shards.drain(..cfg.shards.len() - 1);
        cfg.backend.user = "sha".into();
        cfg.backend.password = password.into();
        cfg
    };

    let b = Proxy::start_config(config(&tb, &server_extra(&tb, false), ""), true).await;
    let a = Proxy::start_config(a_config(&b, &right, "shapw"), true).await;
    assert_eq!(
        counts(&b),
        [0, 0, 1, 0],
        "A's probe: RSA with the pinned key, none sent"
    );
    assert_eq!(select(a.opts(None)).await.unwrap(), 42);
    a.stop().await;
    b.stop().await;

    let b = Proxy::start_config(config(&tb, &server_extra(&tb, false), ""), true).await;
    let a = Proxy::start_config(a_config(&b, &wrong, "shapw"), false).await;
    assert_b_refuses_a(&a).await;
    assert_eq!(counts(&b), [0, 0, 0, 0], "nothing succeeded, no key sent");
    a.stop().await;
    b.stop().await;

    let garbage = dir.path().join("garbage.pub");
    std::fs::write(&garbage, "not a key\n").unwrap();
    let text = format!(
        "{}[[shards]]\nname = \"b\"\naddress = \"127.0.0.1:1\"\npublic_key = \"{}\"\n",
        proxy::config_text(&tb, "127.0.0.1:0", ""),
        garbage.display()
    );
    let e = Config::parse(&text, "test").expect_err("no public key in the file");
    let e = e.to_string();
    assert!(
        e.contains(".public_key") && e.contains("garbage.pub"),
        "{e}"
    );
}

/// A user without `auth` whose password idgate holds in plain text takes
/// a token of either plugin as the client made it: a client answering the
/// caching_sha2_password greeting with mysql_native_password (a driver
/// that knows no other, as it would answer MariaDB) logs in without a
/// switch. Users with `auth`, and hashed passwords (which check one plugin
/// only), are still switched to their own.
#[tokio::test]
async fn a_plaintext_user_without_auth_is_checked_with_the_clients_plugin() {
    let Some(tb) = support::testbed() else { return };
    let p = Proxy::start_config(config(&tb, &server_extra(&tb, false), ""), true).await;
    let as_native = |user: &str, pw: &str| LoginSpec::new(user, pw).plugin("mysql_native_password");
    let c = RawClient::connect(p.addr, &as_native(proxy::USER, proxy::PASSWORD))
        .await
        .expect_ok();
    assert_eq!(c.greeting.auth_plugin, b"caching_sha2_password");
    assert_eq!(c.login_packets.len(), 1, "the OK at once, no switch");
    assert_eq!(c.login_packets[0][0], 0, "an OK packet");
    assert_eq!(counts(&p), [0, 0, 0, 0], "no caching_sha2_password login");
    let e = RawClient::connect(p.addr, &as_native(proxy::USER, "wrong"))
        .await
        .expect_refused();
    assert_eq!((e.code, e.state.as_str()), (1045, "28000"), "{e}");
    assert_eq!(failures(&p), 1, "a wrong native token counts as a failure");
    // The same user answering caching_sha2_password: its fast path.
    let c = RawClient::connect(p.addr, &LoginSpec::new(proxy::USER, proxy::PASSWORD))
        .await
        .expect_ok();
    assert_eq!(c.login_packets[0], [1, 3], "fast auth success");
    assert_eq!(counts(&p), [1, 0, 0, 0]);
    // A salted caching_sha2 hash cannot check a native token: switched,
    // then its full authentication (by RSA: no TLS here).
    let c = RawClient::connect(p.addr, &as_native("sha", "shapw"))
        .await
        .expect_ok();
    let (plugin, _) = idgate::protocol::handshake::parse_auth_switch(&c.login_packets[0]).unwrap();
    assert_eq!(plugin, b"caching_sha2_password");
    assert_eq!(counts(&p)[2], 1, "full authentication by RSA");
    // `auth = "mysql_native_password"`: a client that starts with
    // caching_sha2_password is switched (the test above), and one that
    // starts with its plugin is not.
    let c = RawClient::connect(p.addr, &as_native("nat", "natpw"))
        .await
        .expect_ok();
    assert_eq!(c.login_packets.len(), 1, "the OK at once");
    // An unknown user answering with mysql_native_password is refused as
    // a known one with a wrong password is: at once.
    let e = RawClient::connect(p.addr, &as_native("nobody", "x"))
        .await
        .expect_refused();
    assert_eq!((e.code, e.state.as_str()), (1045, "28000"), "{e}");
    p.stop().await;
}

/// `server.default_auth = "mysql_native_password"`: the greeting names it,
/// users without `auth` log in with it in one round (no switch, no
/// caching_sha2_password fast path), and a `$idgate-sha2$` user is
/// switched to caching_sha2_password.
#[tokio::test]
async fn default_auth_native_greets_and_logs_in_without_a_switch() {
    let Some(tb) = support::testbed() else { return };
    let extra = format!(
        "{}default_auth = \"mysql_native_password\"\n",
        server_extra(&tb, false)
    );
    let p = Proxy::start_config(config(&tb, &extra, ""), true).await;
    let native = |user: &str, pw: &str| {
        let mut spec = LoginSpec::new(user, pw);
        spec.plugin = "mysql_native_password".into();
        spec
    };
    let c = RawClient::connect(p.addr, &native(proxy::USER, proxy::PASSWORD))
        .await
        .expect_ok();
    assert_eq!(c.greeting.auth_plugin, b"mysql_native_password");
    assert_eq!(c.login_packets.len(), 1, "the OK at once");
    assert_eq!(c.login_packets[0][0], 0, "an OK packet");
    assert_eq!(counts(&p), [0, 0, 0, 0], "no caching_sha2_password login");
    let e = RawClient::connect(p.addr, &native(proxy::USER, "wrong"))
        .await
        .expect_refused();
    assert_eq!((e.code, e.state.as_str()), (1045, "28000"), "{e}");
    // Real clients: mysql_async answers the greeting's plugin.
    let opts = |user: &str, pw: &str| {
        OptsBuilder::default()
            .ip_or_hostname(p.addr.ip().to_string())
            .tcp_port(p.addr.port())
            .user(Some(user))
            .pass(Some(pw))
    };
    assert_eq!(
        select(opts(proxy::USER, proxy::PASSWORD)).await.unwrap(),
        42
    );
    assert_eq!(counts(&p), [0, 0, 0, 0], "no caching_sha2_password login");
    // A salted caching_sha2 hash cannot check a native scramble: the
    // client is switched to caching_sha2_password, whose first login is
    // the full authentication (by RSA here, without TLS).
    assert_eq!(select(opts("sha", "shapw")).await.unwrap(), 42);
    assert_eq!(counts(&p)[2], 1, "full authentication by RSA");
    p.stop().await;
    // The config: users without `auth` follow it, hashes keep theirs.
    let c = config(&tb, &extra, "");
    let plugin = |name: &str| c.users.iter().find(|u| u.name == name).unwrap().plugin;
    use idgate::config::AuthPlugin::*;
    assert_eq!(plugin(proxy::USER), MysqlNativePassword);
    assert_eq!(plugin("sha"), CachingSha2Password);
}

#[tokio::test]
async fn config_auth_defaults_and_refusals() {
    let Some(tb) = support::testbed() else { return };
    let c = config(&tb, "", "");
    let plugin = |name: &str| c.users.iter().find(|u| u.name == name).unwrap().plugin;
    use idgate::config::AuthPlugin::*;
    assert_eq!(plugin(proxy::USER), CachingSha2Password);
    assert_eq!(plugin("sha"), CachingSha2Password);
    assert_eq!(plugin("nat"), MysqlNativePassword);
    let text = proxy::config_text(&tb, "127.0.0.1:0", "")
        + "[[users]]\nname = \"h\"\npassword_hash = \"*0D1A4BC3689C270B9251B2A4704D402DA1F5CC0C\"\n";
    let c = Config::parse(&text, "t").unwrap();
    assert_eq!(
        c.users.last().unwrap().plugin,
        MysqlNativePassword,
        "a native hash"
    );
    let text = proxy::config_text(&tb, "127.0.0.1:0", "")
        + &format!(
            "[[users]]\nname = \"h\"\nauth = \"mysql_native_password\"\npassword_hash = \"{}\"\n",
            Sha2Hash::new(b"x").to_text()
        );
    let e = Config::parse(&text, "t").unwrap_err().to_string();
    assert!(
        e.contains("users[3].auth") && e.contains("caching_sha2_password"),
        "{e}"
    );
    // rsa_key is read when the config is loaded: a missing file or one
    // that is no RSA key is named.
    let dir = tempfile::tempdir().unwrap();
    for (key, want) in [
        ("/nonexistent/rsa.key".to_string(), "/nonexistent/rsa.key"),
        (tb.tls_file("ca.pem"), "not a PEM RSA private key"),
    ] {
        let path = dir.path().join("idgate.toml");
        let text = proxy::config_text(&tb, "127.0.0.1:0", &format!("rsa_key = \"{key}\""));
        support::write_private(&path, &text);
        let e = Config::load(&path).unwrap_err().to_string();
        assert!(e.contains("server.rsa_key") && e.contains(want), "{e}");
    }
    let path = dir.path().join("idgate.toml");
    let text = proxy::config_text(&tb, "127.0.0.1:0", &server_extra(&tb, false));
    support::write_private(&path, &text);
    assert_eq!(
        Config::load(&path).unwrap().server.rsa_key.as_deref(),
        Some(std::path::Path::new(&tb.tls_file("rsa.key")))
    );
}

/// Runs the idgate binary with `args` and `stdin`: (success, stdout, stderr).
fn idgate_cli(args: &[&str], stdin: &str) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_idgate"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run idgate");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn hash_password_cli_makes_a_caching_sha2_hash_that_logs_in() {
    let Some(tb) = support::testbed() else { return };
    let (ok, out, err) = idgate_cli(
        &["hash-password", "--plugin", "caching_sha2_password"],
        "cli-pw\n",
    );
    assert!(ok, "{err}");
    let hash = out.trim_end().to_string();
    assert!(hash.starts_with("$idgate-sha2$10000$"), "{hash}");
    let (_, again, _) = idgate_cli(
        &["hash-password", "--plugin", "caching_sha2_password"],
        "cli-pw\n",
    );
    assert_ne!(again.trim_end(), hash, "a fresh salt each time");
    let (ok, _, err) = idgate_cli(&["hash-password", "--plugin", "sha256_password"], "x\n");
    assert!(!ok && err.contains("--plugin"), "{err}");

    let text = proxy::config_text(&tb, "127.0.0.1:0", &server_extra(&tb, false))
        + &format!("[[users]]\nname = \"cli\"\npassword_hash = \"{hash}\"\n");
    let p = Proxy::start_config(Config::parse(&text, "t").unwrap(), true).await;
    assert_eq!(select(p.opts_as("cli", "cli-pw", None)).await.unwrap(), 42);
    assert_eq!(
        code_of(select(p.opts_as("cli", "cli-px", None)).await),
        1045
    );
    assert_eq!(
        counts(&p),
        [0, 0, 1, 1],
        "one login by RSA; the refusal came from the fast path (the cached hash), which counts accepted logins only"
    );
    p.stop().await;
}
