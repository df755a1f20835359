//! TLS on both sides (issue #14, parts 3 and 4), with real clients and the
//! test bed's MariaDB shards (which serve TLS with `scripts/testbed.sh`'s
//! certificates):
//!
//! - towards clients: the `mariadb` CLI, PyMySQL, mysql_async and sqlx
//!   log in over TLS and verify idgate's certificate; `require_tls`
//!   (server-wide and per user) refuses plaintext with 3159; an SSL request
//!   to a listener without a certificate, garbage after an SSL request and
//!   a raw TLS ClientHello to a plain listener end cleanly; SIGHUP reloads
//!   the certificate of a real process without dropping sessions;
//! - towards shards: `[backend] tls` = required / verify_ca (right and
//!   wrong CA) / disabled, the REQUIRE SSL shard account, and a shard that
//!   does not offer TLS (another idgate without a certificate).

mod support;

use idgate::config::Config;
use idgate::protocol::consts::cap;
use idgate::protocol::packet::{frame, PacketConn};
use idgate::protocol::reply;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, SslOpts};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::process::{Idgate, Options};
use support::proxy::{self, Proxy};
use support::Testbed;

/// `[server]` lines for TLS with the test bed's first server certificate.
fn server_tls(tb: &Testbed) -> String {
    format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
        tb.tls_file("server.pem"),
        tb.tls_file("server.key")
    )
}

/// Config text for an in-process idgate: `server_extra` in `[server]`,
/// `backend_extra` in `[backend]`, `users_extra` as more `[[users]]`.
fn config(tb: &Testbed, server_extra: &str, backend_extra: &str, users_extra: &str) -> Config {
    let text = proxy::config_text(tb, "127.0.0.1:0", server_extra).replace(
        "connect_timeout_ms = 60000\n",
        &format!("connect_timeout_ms = 60000\n{backend_extra}\n"),
    ) + users_extra;
    Config::parse(&text, "test").expect("test config is valid")
}

/// mysql_async options for `app` over TLS, verifying the test bed's CA.
fn tls_opts(tb: &Testbed, proxy: &Proxy) -> OptsBuilder {
    proxy
        .opts(None)
        .ssl_opts(Some(SslOpts::default().with_root_certs(vec![
            std::path::PathBuf::from(tb.tls_file("ca.pem")).into(),
        ])))
}

async fn one_value(conn: &mut Conn, sql: &str) -> String {
    let row: Option<(String, String)> = conn.query_first(sql).await.unwrap();
    row.map(|r| r.1).unwrap_or_default()
}

/// The error a client gets logging in with `opts` and running one
/// statement (mysql_async runs statements of its own while logging in, so
/// a shard's failure may come at either point).
async fn first_error(opts: OptsBuilder) -> mysql_async::Error {
    let mut c = match Conn::new(opts).await {
        Ok(c) => c,
        Err(e) => return e,
    };
    let e = c
        .query_drop("SELECT 1")
        .await
        .expect_err("the statement succeeded");
    let _ = c.disconnect().await;
    e
}

async fn server_error_code(r: Result<Conn, mysql_async::Error>) -> u16 {
    match r {
        Ok(_) => panic!("the login succeeded"),
        Err(mysql_async::Error::Server(e)) => e.code,
        Err(e) => panic!("not a server error: {e}"),
    }
}

#[tokio::test]
async fn mysql_async_and_sqlx_log_in_over_tls_and_verify_the_certificate() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start_config(config(&tb, &server_tls(&tb), "", ""), true).await;

    let mut c = Conn::new(tls_opts(&tb, &proxy)).await.expect("TLS login");
    let v: Option<i64> = c.query_first("SELECT 1 + 1").await.unwrap();
    assert_eq!(v, Some(2));
    // Operators see it: the session's Tls column, and the listener's mode.
    let id = c.id().to_string();
    let rows: Vec<mysql_async::Row> = c.query("SHOW IDGATE SESSIONS").await.unwrap();
    let me = rows
        .iter()
        .find(|r| r.get::<String, _>(0).as_deref() == Some(id.as_str()))
        .expect("this session listed");
    assert_eq!(me.get::<String, _>(6).as_deref(), Some("1"), "Tls");
    let rows: Vec<(String, Option<String>)> = c.query("SHOW IDGATE STATUS").await.unwrap();
    let get = |k: &str| {
        rows.iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.clone())
    };
    assert_eq!(get("tls_clients").as_deref(), Some("offered"));
    assert_eq!(get("tls_shards").as_deref(), Some("preferred"));
    c.disconnect().await.unwrap();

    // A plaintext client still gets in (require_tls is off).
    let mut c = Conn::new(proxy.opts(None)).await.expect("plain login");
    let v: Option<i64> = c.query_first("SELECT 3").await.unwrap();
    assert_eq!(v, Some(3));
    c.disconnect().await.unwrap();

    // sqlx with VERIFY_CA.
    use sqlx::{ConnectOptions, Connection, Row};
    let opts = sqlx::mysql::MySqlConnectOptions::new()
        .host("127.0.0.1")
        .port(proxy.addr.port())
        .username(proxy::USER)
        .password(proxy::PASSWORD)
        .ssl_mode(sqlx::mysql::MySqlSslMode::VerifyCa)
        .ssl_ca(tb.tls_file("ca.pem"));
    let mut c = opts.connect().await.expect("sqlx TLS login");
    let row = sqlx::query("SELECT 40 + 2")
        .fetch_one(&mut c)
        .await
        .unwrap();
    assert_eq!(row.get::<i64, _>(0), 42);
    c.close().await.unwrap();

    // A CA that did not sign idgate's certificate: the client refuses.
    let other = proxy
        .opts(None)
        .ssl_opts(Some(SslOpts::default().with_root_certs(vec![
            std::path::PathBuf::from(tb.tls_file("other-ca.pem")).into(),
        ])));
    assert!(
        Conn::new(other).await.is_err(),
        "verified against the wrong CA"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn mariadb_cli_and_pymysql_log_in_over_tls() {
    let Some(tb) = support::testbed() else { return };
    let Some(mariadb) = support::process::tool("mariadb", &["--version"]) else {
        return;
    };
    let Some(python) = support::process::tool("/usr/bin/python3", &["-c", "import pymysql"]) else {
        return;
    };
    let proxy = Proxy::start_config(config(&tb, &server_tls(&tb), "", ""), true).await;
    let port = proxy.addr.port().to_string();
    let ca = tb.tls_file("ca.pem");

    let out = tokio::task::spawn_blocking({
        let (port, ca) = (port.clone(), ca.clone());
        move || {
            Command::new(mariadb)
                .args(["--no-defaults", "-h", "127.0.0.1", "-P", &port])
                .args(["-u", proxy::USER, &format!("-p{}", proxy::PASSWORD)])
                .args(["--ssl", "--ssl-ca", &ca, "--ssl-verify-server-cert"])
                .args(["-e", "status; SELECT 6 * 7 AS answer"])
                .output()
                .expect("run mariadb")
        }
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Cipher in use is"), "{text}");
    assert!(text.contains("42"), "{text}");

    let script = format!(
        "import pymysql, ssl\n\
         c = pymysql.connect(host='127.0.0.1', port={port}, user='{}', password='{}', \
         ssl_ca='{ca}', ssl_verify_cert=True, ssl_verify_identity=True)\n\
         cur = c.cursor(); cur.execute('SELECT 5 + 5'); v = cur.fetchone()[0]\n\
         print(v, isinstance(c._sock, ssl.SSLSocket), c._sock.version())\n",
        proxy::USER,
        proxy::PASSWORD
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args(["-c", &script])
            .output()
            .expect("run python3")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("10 True TLS"), "{text}");
    proxy.stop().await;
}

#[tokio::test]
async fn require_tls_refuses_plaintext_with_3159_server_wide_and_per_user() {
    let Some(tb) = support::testbed() else { return };
    // Server-wide.
    let extra = format!("{}require_tls = true\n", server_tls(&tb));
    let proxy = Proxy::start_config(config(&tb, &extra, "", ""), true).await;
    let code = server_error_code(Conn::new(proxy.opts(None)).await).await;
    assert_eq!(code, 3159);
    let mut c = Conn::new(tls_opts(&tb, &proxy)).await.expect("TLS login");
    let v: Option<i64> = c.query_first("SELECT 1").await.unwrap();
    assert_eq!(v, Some(1));
    c.disconnect().await.unwrap();
    proxy.stop().await;

    // Per user: `secure` must use TLS, `app` need not.
    let users = "[[users]]\nname = \"secure\"\npassword = \"spw\"\nrequire_tls = true\n";
    let proxy = Proxy::start_config(config(&tb, &server_tls(&tb), "", users), true).await;
    let secure = proxy.opts(None).user(Some("secure")).pass(Some("spw"));
    let code = server_error_code(Conn::new(secure.clone()).await).await;
    assert_eq!(code, 3159);
    let with_tls = secure
        .ssl_opts(Some(SslOpts::default().with_root_certs(vec![
            std::path::PathBuf::from(tb.tls_file("ca.pem")).into(),
        ])));
    let mut c = Conn::new(with_tls).await.expect("secure over TLS");
    let v: Option<i64> = c.query_first("SELECT 2").await.unwrap();
    assert_eq!(v, Some(2));
    c.disconnect().await.unwrap();
    let mut c = Conn::new(proxy.opts(None)).await.expect("app in plaintext");
    c.query_drop("DO 1").await.unwrap();
    // COM_CHANGE_USER to the TLS-only user from a plaintext session: 3159.
    let to_secure = mysql_async::ChangeUserOpts::default()
        .with_user(Some("secure".into()))
        .with_pass(Some("spw".into()));
    match c.change_user(to_secure).await {
        Err(mysql_async::Error::Server(e)) => assert_eq!(e.code, 3159, "{e:?}"),
        other => panic!("change_user was not refused: {other:?}"),
    }
    drop(c);
    // A wrong password of a TLS-only user is refused as any (1045).
    let wrong = proxy.opts(None).user(Some("secure")).pass(Some("nope"));
    assert_eq!(server_error_code(Conn::new(wrong).await).await, 1045);
    proxy.stop().await;
}

/// The greeting of a raw connection, and the connection.
async fn greeting(addr: SocketAddr) -> (PacketConn, u32) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut conn = PacketConn::new(stream);
    let (_, _, p) = proxy::read_packet(&mut conn).await.expect("greeting");
    let hs = idgate::protocol::handshake::ServerHandshake::decode(&p).unwrap();
    (conn, hs.capabilities)
}

fn ssl_request() -> Vec<u8> {
    let mut ssl = Vec::new();
    ssl.extend_from_slice(&(proxy::CLIENT_CAPS | cap::SSL).to_le_bytes());
    ssl.extend_from_slice(&(1u32 << 24).to_le_bytes());
    ssl.push(45);
    ssl.extend_from_slice(&[0; 23]);
    let mut out = Vec::new();
    frame(&mut out, 1, &ssl);
    out
}

/// Reads until the peer closes (bounded: a hang fails the test).
async fn read_to_close(conn: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut all = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(60), conn.read_to_end(&mut all)).await;
    assert!(r.is_ok(), "the connection was not closed within 60 s");
    all
}

#[tokio::test]
async fn ssl_request_garbage_and_stray_client_hello_end_cleanly() {
    let Some(tb) = support::testbed() else { return };
    // Without a certificate: SSL is not offered, and an SSL request gets a
    // clear error.
    let plain = Proxy::start(&tb).await;
    let (mut conn, caps) = greeting(plain.addr).await;
    assert_eq!(caps & cap::SSL, 0, "SSL offered without a certificate");
    conn.write_raw(&ssl_request()).await.unwrap();
    let (_, _, p) = proxy::read_packet(&mut conn).await.expect("an error");
    let e = reply::parse_err(&p).unwrap();
    assert_eq!(e.code, 1043, "{e}");
    assert!(e.message.contains("TLS is not configured"), "{e}");
    assert!(proxy::read_packet(&mut conn).await.is_none());

    // A TLS ClientHello sent straight to the MySQL listener: the TLS
    // client fails (it reads a MySQL greeting), idgate answers with an
    // error and closes.
    let connector = tokio_rustls::TlsConnector::from(Arc::new(any_cert_client(Default::default())));
    let tcp = tokio::net::TcpStream::connect(plain.addr).await.unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        connector.connect("localhost".try_into().unwrap(), tcp),
    )
    .await
    .expect("the TLS handshake ends within 60 s");
    assert!(r.is_err(), "TLS handshake with a plain listener succeeded");
    let mut tcp = tokio::net::TcpStream::connect(plain.addr).await.unwrap();
    {
        use tokio::io::AsyncWriteExt;
        // The start of a TLS 1.2 ClientHello record.
        tcp.write_all(&[
            0x16, 0x03, 0x01, 0x01, 0x00, 0x01, 0x00, 0x00, 0xfc, 0x03, 0x03,
        ])
        .await
        .unwrap();
    }
    let all = read_to_close(&mut tcp).await;
    let s = String::from_utf8_lossy(&all);
    assert!(s.contains("without an SSL request"), "{s}");

    // With a certificate: garbage after the SSL request closes the
    // connection, and the server goes on serving.
    let tls = Proxy::start_config(config(&tb, &server_tls(&tb), "", ""), true).await;
    let (conn, caps) = greeting(tls.addr).await;
    assert_ne!(caps & cap::SSL, 0, "SSL not offered with a certificate");
    drop(conn);
    let mut tcp = tokio::net::TcpStream::connect(tls.addr).await.unwrap();
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut head = [0u8; 4];
        tcp.read_exact(&mut head).await.unwrap();
        let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
        let mut body = vec![0u8; len];
        tcp.read_exact(&mut body).await.unwrap();
        tcp.write_all(&ssl_request()).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        tcp.write_all(&[0xff; 300]).await.unwrap();
    }
    read_to_close(&mut tcp).await;
    for p in [&plain, &tls] {
        let mut c = Conn::new(p.opts(None)).await.expect("still serving");
        c.query_drop("DO 1").await.unwrap();
        c.disconnect().await.unwrap();
    }
    plain.stop().await;
    tls.stop().await;
}

/// A rustls client config that accepts any certificate and records the
/// leaf it was shown.
fn any_cert_client(seen: Arc<Mutex<Vec<u8>>>) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Recorder(seen)))
        .with_no_client_auth()
}

#[derive(Debug)]
struct Recorder(Arc<Mutex<Vec<u8>>>);

impl rustls::client::danger::ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &rustls_pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        *self.0.lock().unwrap() = end_entity.to_vec();
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The certificate idgate at `addr` presents to a client that asks for TLS
/// (DER of the leaf).
async fn presented_certificate(addr: SocketAddr) -> Vec<u8> {
    // The greeting read exactly, then the SSL request and the handshake.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = [0u8; 4];
    tcp.read_exact(&mut head).await.unwrap();
    let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
    let mut body = vec![0u8; len];
    tcp.read_exact(&mut body).await.unwrap();
    tcp.write_all(&ssl_request()).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let connector = tokio_rustls::TlsConnector::from(Arc::new(any_cert_client(seen.clone())));
    let tls = tokio::time::timeout(
        Duration::from_secs(60),
        connector.connect("localhost".try_into().unwrap(), tcp),
    )
    .await
    .expect("TLS handshake within 60 s")
    .expect("TLS handshake");
    drop(tls);
    let der = seen.lock().unwrap().clone();
    der
}

fn der_of(path: &str) -> Vec<u8> {
    CertificateDer::from_pem_file(path).unwrap().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_certificate_and_sessions_stay() {
    let Some(tb) = support::testbed() else { return };
    let certs = tempfile::tempdir().unwrap();
    let cert = certs.path().join("idgate.pem");
    let key = certs.path().join("idgate.key");
    std::fs::copy(tb.tls_file("server.pem"), &cert).unwrap();
    std::fs::copy(tb.tls_file("server.key"), &key).unwrap();
    let opts = Options {
        etcd_prefix: format!("/{}", support::unique("tlsreload")),
        server_extra: format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
            cert.display(),
            key.display()
        ),
        ..Options::default()
    };
    let idgate = tokio::task::spawn_blocking({
        let tb = tb.clone();
        move || Idgate::start(&tb, &opts)
    })
    .await
    .unwrap();
    let ca = std::path::PathBuf::from(tb.tls_file("ca.pem"));
    let opts = OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(idgate.mysql.port())
        .user(Some("app"))
        .pass(Some("secret"))
        .prefer_socket(false)
        .ssl_opts(Some(SslOpts::default().with_root_certs(vec![ca.into()])));
    // A session over TLS before the reload (also proves the SIGHUP handler
    // is in place: it is registered before the first client is accepted).
    let mut session = Conn::new(opts.clone()).await.expect("TLS login");
    let v: Option<i64> = session.query_first("SELECT 1").await.unwrap();
    assert_eq!(v, Some(1));
    let first = der_of(&tb.tls_file("server.pem"));
    let second = der_of(&tb.tls_file("server2.pem"));
    assert_eq!(presented_certificate(idgate.mysql).await, first);

    std::fs::copy(tb.tls_file("server2.pem"), &cert).unwrap();
    std::fs::copy(tb.tls_file("server2.key"), &key).unwrap();
    let st = Command::new("kill")
        .args(["-HUP", &idgate.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if presented_certificate(idgate.mysql).await == second {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served within 60 s:\n{}",
            idgate.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The session opened before the reload still works, and new ones
    // verify the new certificate against the same CA.
    let v: Option<i64> = session.query_first("SELECT 2").await.unwrap();
    assert_eq!(v, Some(2));
    let mut fresh = Conn::new(opts).await.expect("TLS login after reload");
    let v: Option<i64> = fresh.query_first("SELECT 3").await.unwrap();
    assert_eq!(v, Some(3));
    fresh.disconnect().await.unwrap();
    session.disconnect().await.unwrap();

    // A bad file on the next SIGHUP keeps the certificate in use.
    std::fs::write(&cert, "not a certificate").unwrap();
    Command::new("kill")
        .args(["-HUP", &idgate.child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !idgate.log().contains("not reloaded") {
        assert!(Instant::now() < deadline, "{}", idgate.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(presented_certificate(idgate.mysql).await, second);
    assert!(idgate.log().contains("TLS certificate reloaded"));
}

#[tokio::test]
async fn shard_connections_use_tls_as_configured() {
    let Some(tb) = support::testbed() else { return };
    // required: the shard reports the connection encrypted.
    let proxy = Proxy::start_config(config(&tb, "", "tls = \"required\"", ""), true).await;
    let mut c = Conn::new(proxy.opts(None)).await.unwrap();
    assert_ne!(one_value(&mut c, "SHOW STATUS LIKE 'Ssl_cipher'").await, "");
    c.disconnect().await.unwrap();
    proxy.stop().await;

    // disabled: in clear text.
    let proxy = Proxy::start_config(config(&tb, "", "tls = \"disabled\"", ""), true).await;
    let mut c = Conn::new(proxy.opts(None)).await.unwrap();
    assert_eq!(one_value(&mut c, "SHOW STATUS LIKE 'Ssl_cipher'").await, "");
    c.disconnect().await.unwrap();
    proxy.stop().await;

    // verify_ca with the CA that signed the shards' certificates.
    let right = format!(
        "tls = \"verify_ca\"\ntls_ca = \"{}\"",
        tb.tls_file("ca.pem")
    );
    let proxy = Proxy::start_config(config(&tb, "", &right, ""), true).await;
    let mut c = Conn::new(proxy.opts(None)).await.unwrap();
    assert_ne!(one_value(&mut c, "SHOW STATUS LIKE 'Ssl_cipher'").await, "");
    c.disconnect().await.unwrap();
    proxy.stop().await;

    // verify_ca with another CA: a clear error naming the shard.
    let wrong = format!(
        "tls = \"verify_ca\"\ntls_ca = \"{}\"",
        tb.tls_file("other-ca.pem")
    );
    let proxy = Proxy::start_config(config(&tb, "", &wrong, ""), false).await;
    let e = first_error(proxy.opts(None)).await.to_string();
    assert!(e.contains("shard s0") && e.contains("TLS"), "{e}");
    assert!(e.contains("certificate"), "{e}");
    let e = proxy
        .shared
        .probe_default_shard()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("shard s0") && e.contains("TLS"), "{e}");
    proxy.stop().await;
}

#[tokio::test]
async fn require_ssl_shard_account_needs_shard_tls() {
    let Some(tb) = support::testbed() else { return };
    let account = |mode: &str| {
        let mut cfg = config(&tb, "", &format!("tls = \"{mode}\""), "");
        cfg.backend.user = tb.tls_user.clone();
        cfg.backend.password = tb.tls_password.clone();
        cfg
    };
    // The default (preferred) and required get in over TLS.
    for mode in ["preferred", "required"] {
        let proxy = Proxy::start_config(account(mode), true).await;
        let mut c = Conn::new(proxy.opts(None)).await.unwrap();
        let user: Option<String> = c.query_first("SELECT CURRENT_USER()").await.unwrap();
        assert!(user.unwrap_or_default().starts_with(&tb.tls_user), "{mode}");
        c.disconnect().await.unwrap();
        proxy.stop().await;
    }
    // Without TLS MariaDB refuses the account: its own 1045 reaches the client.
    let proxy = Proxy::start_config(account("disabled"), false).await;
    match first_error(proxy.opts(None)).await {
        mysql_async::Error::Server(e) => assert_eq!(e.code, 1045, "{e:?}"),
        other => panic!("not refused by the shard: {other:?}"),
    }
    proxy.stop().await;
}

#[tokio::test]
async fn shard_without_tls_is_refused_when_required_and_used_plain_when_preferred() {
    let Some(tb) = support::testbed() else { return };
    // The "shard" is another idgate: without a certificate it does not
    // offer TLS; with one it does (idgate's client side against its own
    // server side).
    let plain_shard = Proxy::start(&tb).await;
    let tls_shard = Proxy::start_config(config(&tb, &server_tls(&tb), "", ""), true).await;
    let chained = |shard: &Proxy, backend_extra: &str| {
        let mut cfg = config(&tb, "", backend_extra, "");
        cfg.shards.truncate(1);
        cfg.shards[0].address = shard.addr.to_string();
        cfg.backend.user = proxy::USER.into();
        cfg.backend.password = proxy::PASSWORD.into();
        cfg
    };

    let front = Proxy::start_config(chained(&plain_shard, "tls = \"required\""), false).await;
    let e = first_error(front.opts(None)).await.to_string();
    assert!(
        e.contains("shard s0") && e.contains("does not offer TLS"),
        "{e}"
    );
    front.stop().await;

    let front = Proxy::start_config(chained(&plain_shard, "tls = \"preferred\""), true).await;
    let mut c = Conn::new(front.opts(None)).await.unwrap();
    let v: Option<i64> = c.query_first("SELECT 7").await.unwrap();
    assert_eq!(v, Some(7));
    c.disconnect().await.unwrap();
    front.stop().await;

    let ca = format!(
        "tls = \"verify_ca\"\ntls_ca = \"{}\"",
        tb.tls_file("ca.pem")
    );
    let front = Proxy::start_config(chained(&tls_shard, &ca), true).await;
    let mut c = Conn::new(front.opts(None)).await.unwrap();
    let v: Option<i64> = c.query_first("SELECT 8").await.unwrap();
    assert_eq!(v, Some(8));
    c.disconnect().await.unwrap();
    front.stop().await;
    plain_shard.stop().await;
    tls_shard.stop().await;
}
