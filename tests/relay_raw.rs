//! Raw-protocol tests with a hand-written client: login (auth switch, wrong
//! password, unknown user, TLS request), malformed packets after login,
//! cursors, COM_FIELD_LIST / STATISTICS / PING / SET_OPTION / INIT_DB, and
//! reply bytes compared with the shard's own for clients with and without
//! CLIENT_DEPRECATE_EOF.

mod support;

use idgate::protocol::consts::{cap, cmd, status};
use idgate::protocol::handshake::ServerHandshake;
use idgate::protocol::packet::{frame, PacketConn};
use idgate::protocol::reply;
use idgate::protocol::response::Expect;
use idgate::protocol::stmt::{encode_execute, types, ParamType};
use support::proxy::{self, LoginSpec, Proxy, RawClient};
use support::Testbed;

fn with_db(spec: LoginSpec, db: &str) -> LoginSpec {
    spec.db(db)
}

/// A direct and a through-idgate client, both logged in to `db` with `caps`.
async fn pair(tb: &Testbed, proxy: &Proxy, caps: u32, db: &str) -> (RawClient, RawClient) {
    let d = RawClient::connect(
        tb.shards[0].parse().unwrap(),
        &with_db(LoginSpec::new(&tb.user, &tb.password).caps(caps), db),
    )
    .await
    .expect_ok();
    let g = RawClient::connect(
        proxy.addr,
        &with_db(LoginSpec::new(proxy::USER, proxy::PASSWORD).caps(caps), db),
    )
    .await
    .expect_ok();
    (d, g)
}

/// A schema with a small table both clients can read.
async fn fixture(tb: &Testbed) -> String {
    let db = support::unique("rr");
    proxy::admin(
        tb,
        0,
        &[
            &format!("CREATE DATABASE {db}"),
            &format!(
                "CREATE TABLE {db}.t (id INT PRIMARY KEY, name VARCHAR(10) NOT NULL, \
                 d DECIMAL(6,2), dt DATETIME(3), b BLOB, j JSON)"
            ),
            &format!(
                "INSERT INTO {db}.t SELECT seq, CONCAT('n', seq), seq / 7, \
                 '2024-05-06 07:08:09.123' + INTERVAL seq SECOND, \
                 IF(seq % 3 = 0, NULL, UNHEX(HEX(seq))), JSON_OBJECT('k', seq) \
                 FROM {db}.seq_1_to_50"
            ),
        ],
    )
    .await;
    db
}

async fn drop_db(tb: &Testbed, db: &str) {
    proxy::admin(tb, 0, &[&format!("DROP DATABASE {db}")]).await;
}

#[tokio::test]
async fn greeting_shows_the_shards_version_and_unique_connection_ids() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let d = RawClient::direct(&tb, 0, proxy::CLIENT_CAPS).await;
    let g1 = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    let g2 = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    assert_eq!(g1.greeting.server_version, d.greeting.server_version);
    assert_ne!(g1.greeting.connection_id, g2.greeting.connection_id);
    assert_ne!(g1.greeting.scramble, g2.greeting.scramble);
    assert_eq!(g1.greeting.scramble.len(), 20);
    assert_eq!(g1.greeting.auth_plugin, b"caching_sha2_password");
    assert_eq!(g1.greeting.capabilities & cap::COMPRESS, 0);
    assert_eq!(g1.greeting.capabilities & cap::SSL, 0);
    for c in [
        cap::PROTOCOL_41,
        cap::SECURE_CONNECTION,
        cap::PLUGIN_AUTH,
        cap::PLUGIN_AUTH_LENENC_CLIENT_DATA,
        cap::CONNECT_WITH_DB,
        cap::TRANSACTIONS,
        cap::MULTI_STATEMENTS,
        cap::MULTI_RESULTS,
        cap::PS_MULTI_RESULTS,
        cap::DEPRECATE_EOF,
    ] {
        assert_ne!(g1.greeting.capabilities & c, 0, "capability {c:#x} offered");
    }
    proxy.stop().await;
}

#[tokio::test]
async fn login_auth_switch_wrong_password_unknown_user_and_tls() {
    let Some(tb) = support::testbed() else { return };
    // `strict` must log in with caching_sha2_password (its `auth`).
    let text = proxy::config_text(&tb, "127.0.0.1:0", "")
        + "[[users]]\nname = \"strict\"\npassword = \"strictpw\"\nauth = \"caching_sha2_password\"\n";
    let cfg = idgate::config::Config::parse(&text, "test").expect("test config is valid");
    let proxy = Proxy::start_config(cfg, true).await;

    // A user without `auth` and a plaintext password: a client that
    // starts with mysql_native_password although the greeting named
    // caching_sha2_password is checked as it came, without a switch (as
    // MariaDB itself would take it: drivers that know only that plugin
    // log in).
    let mut c = RawClient::connect(
        proxy.addr,
        &LoginSpec::new(proxy::USER, proxy::PASSWORD).plugin("mysql_native_password"),
    )
    .await
    .expect_ok();
    assert_eq!(c.greeting.auth_plugin, b"caching_sha2_password");
    assert_eq!(c.login_packets.len(), 1, "the OK at once");
    assert_eq!(c.login_packets[0][0], reply::OK);
    let r = c.query("SELECT 1").await;
    assert!(proxy::err_of(&r).is_none());
    let e = RawClient::connect(
        proxy.addr,
        &LoginSpec::new(proxy::USER, "nope").plugin("mysql_native_password"),
    )
    .await
    .expect_refused();
    assert_eq!((e.code, e.state.as_str()), (1045, "28000"));

    // A user with `auth = "caching_sha2_password"`: the client that
    // starts with mysql_native_password is switched to it, and its fast
    // path takes it.
    let mut c = RawClient::connect(
        proxy.addr,
        &LoginSpec::new("strict", "strictpw").plugin("mysql_native_password"),
    )
    .await
    .expect_ok();
    assert_eq!(c.login_packets.len(), 3, "auth switch, fast auth, then OK");
    assert_eq!(c.login_packets[0][0], 0xfe);
    let (plugin, nonce) =
        idgate::protocol::handshake::parse_auth_switch(&c.login_packets[0]).unwrap();
    assert_eq!(plugin, b"caching_sha2_password");
    assert_eq!(nonce, c.greeting.scramble, "the switch repeats the nonce");
    assert_eq!(c.login_packets[1], [1, 3], "fast auth success");
    assert_eq!(c.login_packets[2][0], reply::OK);
    let r = c.query("SELECT 1").await;
    assert!(proxy::err_of(&r).is_none());

    // The same through an auth switch with the wrong password.
    let e = RawClient::connect(
        proxy.addr,
        &LoginSpec::new("strict", "nope").plugin("mysql_native_password"),
    )
    .await
    .expect_refused();
    assert_eq!((e.code, e.state.as_str()), (1045, "28000"));

    // Wrong password, unknown user, empty password: 1045, then closed.
    for spec in [
        LoginSpec::new(proxy::USER, "wrong"),
        LoginSpec::new("nobody", proxy::PASSWORD),
        LoginSpec::new(proxy::USER, ""),
    ] {
        let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
        let mut conn = PacketConn::new(stream);
        let (_, _, g) = proxy::read_packet(&mut conn).await.unwrap();
        let g = ServerHandshake::decode(&g).unwrap();
        let hs = idgate::protocol::handshake::ClientHandshake {
            capabilities: spec.caps,
            ext_capabilities: 0,
            max_packet: 1 << 24,
            charset: 45,
            user: spec.user.as_bytes().to_vec(),
            auth_response: proxy::token_for(b"caching_sha2_password", &g.scramble, &spec.password),
            database: None,
            auth_plugin: Some(b"caching_sha2_password".to_vec()),
            attrs: None,
        };
        let mut out = Vec::new();
        frame(&mut out, 1, &hs.encode());
        conn.write_raw(&out).await.unwrap();
        let (mut seq, _, mut p) = proxy::read_packet(&mut conn).await.unwrap();
        let mut expected_seq = 2;
        if spec.user == "nobody" {
            // An unknown user is asked for its password like a user whose
            // hash is not cached, then refused.
            assert_eq!((seq, p.as_slice()), (2, &[1u8, 4][..]));
            let mut out = Vec::new();
            frame(&mut out, 3, &[0x5a; 256]);
            conn.write_raw(&out).await.unwrap();
            (seq, _, p) = proxy::read_packet(&mut conn).await.unwrap();
            expected_seq = 4;
        }
        assert_eq!(seq, expected_seq);
        let e = reply::parse_err(&p).unwrap();
        assert_eq!((e.code, e.state.as_str()), (1045, "28000"), "{e}");
        assert!(
            e.message.contains(&format!("'{}'", spec.user)),
            "{}",
            e.message
        );
        let using = if spec.password.is_empty() {
            "NO"
        } else {
            "YES"
        };
        assert!(e.message.contains(&format!("using password: {using}")));
        assert!(
            proxy::read_packet(&mut conn).await.is_none(),
            "closed after 1045"
        );
    }

    // A TLS request (idgate does not offer SSL): an error, then closed.
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let mut conn = PacketConn::new(stream);
    proxy::read_packet(&mut conn).await.unwrap();
    let mut ssl = Vec::new();
    ssl.extend_from_slice(&(proxy::CLIENT_CAPS | cap::SSL).to_le_bytes());
    ssl.extend_from_slice(&(1u32 << 24).to_le_bytes());
    ssl.push(45);
    ssl.extend_from_slice(&[0; 23]);
    assert_eq!(ssl.len(), 32);
    let mut out = Vec::new();
    frame(&mut out, 1, &ssl);
    conn.write_raw(&out).await.unwrap();
    let (_, _, p) = proxy::read_packet(&mut conn).await.unwrap();
    let e = reply::parse_err(&p).unwrap();
    assert_eq!(e.code, 1043, "{e}");
    assert!(e.message.contains("TLS"), "{e}");
    assert!(proxy::read_packet(&mut conn).await.is_none());

    // A login naming a database that does not exist: the shard's own 1049.
    let missing = support::unique("nodb");
    let want = RawClient::connect(
        tb.shards[0].parse().unwrap(),
        &LoginSpec::new(&tb.user, &tb.password).db(&missing),
    )
    .await
    .expect_refused();
    let got = RawClient::connect(
        proxy.addr,
        &LoginSpec::new(proxy::USER, proxy::PASSWORD).db(&missing),
    )
    .await
    .expect_refused();
    assert_eq!(
        (got.code, &got.state, &got.message),
        (want.code, &want.state, &want.message)
    );
    assert_eq!(got.code, 1049);
    proxy.stop().await;
}

#[tokio::test]
async fn malformed_packets_after_login() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;

    // Unknown command byte: 1047, and the session still works.
    let mut d = RawClient::direct(&tb, 0, proxy::CLIENT_CAPS).await;
    let mut g = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    for byte in [0x99u8, 0x20, 0xff, cmd::SLEEP, cmd::CONNECT] {
        let want = d.command(&[byte, 1, 2, 3], Expect::Single).await;
        let got = g.command(&[byte, 1, 2, 3], Expect::Single).await;
        let (we, ge) = (proxy::err_of(&want).unwrap(), proxy::err_of(&got).unwrap());
        assert_eq!(ge.code, 1047, "{ge}");
        assert_eq!(
            (we.code, &we.state),
            (ge.code, &ge.state),
            "command {byte:#x}"
        );
        assert_eq!(g.query("SELECT 1").await, d.query("SELECT 1").await);
    }
    // Replication is not relayed: refused the same way, the session goes on.
    let got = g
        .command(&[cmd::BINLOG_DUMP, 4, 0, 0, 0], Expect::Single)
        .await;
    assert_eq!(proxy::err_of(&got).map(|e| e.code), Some(1047));
    assert_eq!(g.query("SELECT 1").await, d.query("SELECT 1").await);

    // A truncated COM_STMT_EXECUTE: 1835, and the session goes on.
    for payload in [
        vec![cmd::STMT_EXECUTE, 1, 0],
        vec![cmd::STMT_FETCH, 1],
        vec![cmd::STMT_RESET],
    ] {
        let got = g.command(&payload, Expect::Single).await;
        let e = proxy::err_of(&got).expect("an error");
        assert_eq!(e.code, 1835, "{payload:?}: {e}");
        assert_eq!(g.query("SELECT 1").await, d.query("SELECT 1").await);
    }
    // Truncated parameters of a statement that exists.
    let mut prep = vec![cmd::STMT_PREPARE];
    prep.extend_from_slice(b"SELECT ?, ?");
    let r = g.command(&prep, Expect::Prepare).await;
    let id = u32::from_le_bytes([r[0][1], r[0][2], r[0][3], r[0][4]]);
    let mut exec = vec![cmd::STMT_EXECUTE];
    exec.extend_from_slice(&id.to_le_bytes());
    exec.extend_from_slice(&[0, 1, 0, 0, 0, 0, 1, types::LONGLONG]);
    let got = g.command(&exec, Expect::Results).await;
    assert_eq!(proxy::err_of(&got).map(|e| e.code), Some(1835));
    // Types bound but a value cut short: relayed, so the shard decides
    // (MariaDB reads the short string as it is); the same as direct.
    let rd = d.command(&prep, Expect::Prepare).await;
    let idd = u32::from_le_bytes([rd[0][1], rd[0][2], rd[0][3], rd[0][4]]);
    let short = |id| {
        let mut exec = vec![cmd::STMT_EXECUTE];
        encode_execute(
            id,
            0,
            1,
            &[
                ([types::LONGLONG, 0], Some(&[1u8; 8][..])),
                ([0xfd, 0], Some(&b"abcdef"[..])),
            ],
            &mut exec,
        );
        exec.truncate(exec.len() - 3);
        exec
    };
    let want = d.command(&short(idd), Expect::Results).await;
    let got = g.command(&short(id), Expect::Results).await;
    assert_eq!(want, got, "execute with a value cut short");
    assert_eq!(g.query("SELECT 2").await, d.query("SELECT 2").await);

    // A command packet with a bad sequence id: 1156, then closed.
    let mut out = Vec::new();
    frame(&mut out, 5, b"\x03SELECT 1");
    g.send_raw(&out).await;
    let (_, p) = g.read().await.expect("an error packet");
    let e = reply::parse_err(&p).unwrap();
    assert_eq!((e.code, e.state.as_str()), (1156, "08S01"), "{e}");
    assert!(g.is_closed().await, "closed after a bad sequence id");

    // Other sessions are unaffected.
    let mut g2 = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    assert_eq!(g2.query("SELECT 1").await, d.query("SELECT 1").await);
    proxy.stop().await;
}

/// An empty command payload: MariaDB treats it as COM_SLEEP and answers
/// "Unknown command" (1047), keeping the connection.
#[tokio::test]
async fn empty_command_packet_is_answered_like_the_shard_does() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let mut d = RawClient::direct(&tb, 0, proxy::CLIENT_CAPS).await;
    let mut g = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    let want = d.command(&[], Expect::Single).await;
    let got = g.command(&[], Expect::Single).await;
    let (we, ge) = (proxy::err_of(&want).unwrap(), proxy::err_of(&got).unwrap());
    assert_eq!(we.code, ge.code, "direct: {we}; idgate: {ge}");
    assert_eq!(g.query("SELECT 1").await, d.query("SELECT 1").await);
    proxy.stop().await;
}

/// COM_STMT_EXECUTE with CURSOR_TYPE_READ_ONLY, then COM_STMT_FETCH twice.
#[tokio::test]
async fn cursor_fetch_matches_direct() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let db = fixture(&tb).await;
    for caps in [proxy::CLIENT_CAPS, proxy::CLIENT_CAPS | cap::DEPRECATE_EOF] {
        let (mut d, mut g) = pair(&tb, &proxy, caps, &db).await;
        let sql = "SELECT * FROM t WHERE id > ? ORDER BY id";
        let mut prep = vec![cmd::STMT_PREPARE];
        prep.extend_from_slice(sql.as_bytes());
        let rd = d.command(&prep, Expect::Prepare).await;
        let rg = g.command(&prep, Expect::Prepare).await;
        let idd = u32::from_le_bytes(rd[0][1..5].try_into().unwrap());
        let idg = u32::from_le_bytes(rg[0][1..5].try_into().unwrap());
        let ten = 10i64.to_le_bytes();
        let p: [(ParamType, Option<&[u8]>); 1] = [([types::LONGLONG, 0], Some(&ten[..]))];
        let exec = |id| {
            let mut e = vec![cmd::STMT_EXECUTE];
            encode_execute(id, 1, 1, &p, &mut e);
            e
        };
        let want = d.command(&exec(idd), Expect::Results).await;
        let got = g.command(&exec(idg), Expect::Results).await;
        assert_eq!(
            want,
            got,
            "cursor open (deprecate_eof: {})",
            d.deprecate_eof()
        );
        let last = got.last().unwrap();
        let st = if last.len() >= 5 && last.len() < 9 {
            u16::from_le_bytes([last[3], last[4]])
        } else {
            reply::parse_ok(last).unwrap().status
        };
        assert_ne!(st & status::CURSOR_EXISTS, 0, "a cursor was opened");
        let fetch = |id: u32, n: u32| {
            let mut f = vec![cmd::STMT_FETCH];
            f.extend_from_slice(&id.to_le_bytes());
            f.extend_from_slice(&n.to_le_bytes());
            f
        };
        for round in 0..3 {
            let want = d.command(&fetch(idd, 15), Expect::Rows).await;
            let got = g.command(&fetch(idg, 15), Expect::Rows).await;
            assert_eq!(want, got, "fetch round {round}");
            let rows = got.len() - 1;
            assert_eq!(rows, [15, 15, 10][round], "rows in round {round}");
        }
        // Past the end of the cursor: the same error, except that the
        // message names the shard's statement id, not the client's.
        let want = d.command(&fetch(idd, 5), Expect::Rows).await;
        let got = g.command(&fetch(idg, 5), Expect::Rows).await;
        let (we, ge) = (proxy::err_of(&want).unwrap(), proxy::err_of(&got).unwrap());
        assert_eq!(
            (we.code, &we.state),
            (ge.code, &ge.state),
            "fetch past the end"
        );
        // The session goes on.
        assert_eq!(
            d.query("SELECT COUNT(*) FROM t").await,
            g.query("SELECT COUNT(*) FROM t").await
        );
    }
    drop_db(&tb, &db).await;
    proxy.stop().await;
}

#[tokio::test]
async fn utility_commands_match_direct() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let db = fixture(&tb).await;
    for caps in [proxy::CLIENT_CAPS, proxy::CLIENT_CAPS | cap::DEPRECATE_EOF] {
        // COM_PING before the session has a shard connection (idgate answers)
        // and after (the shard answers).
        let mut d = RawClient::direct(&tb, 0, caps).await;
        let mut g = RawClient::app(proxy.addr, caps).await;
        let want = d.command(&[cmd::PING], Expect::Single).await;
        let got = g.command(&[cmd::PING], Expect::Single).await;
        assert_eq!(want, got, "ping without a shard connection");
        g.query("SELECT 1").await;
        d.query("SELECT 1").await;
        let got = g.command(&[cmd::PING], Expect::Single).await;
        assert_eq!(want, got, "ping with a shard connection");

        // COM_INIT_DB: a schema that exists, and one that does not.
        let mut init = vec![cmd::INIT_DB];
        init.extend_from_slice(db.as_bytes());
        assert_eq!(
            d.command(&init, Expect::Single).await,
            g.command(&init, Expect::Single).await
        );
        let mut bad = vec![cmd::INIT_DB];
        bad.extend_from_slice(b"no_such_schema_here");
        let (we, ge) = (
            d.command(&bad, Expect::Single).await,
            g.command(&bad, Expect::Single).await,
        );
        assert_eq!(we, ge);
        assert_eq!(proxy::err_of(&ge).map(|e| e.code), Some(1049));

        // COM_FIELD_LIST: all columns, a wildcard, an unknown table.
        for args in [&b"t\0"[..], b"t\0n%", b"nosuch\0"] {
            let mut fl = vec![cmd::FIELD_LIST];
            fl.extend_from_slice(args);
            let want = d.command(&fl, Expect::FieldList).await;
            let got = g.command(&fl, Expect::FieldList).await;
            assert_eq!(want, got, "COM_FIELD_LIST {args:?}");
        }

        // COM_SET_OPTION: multi-statements off, then on again.
        for opt in [1u16, 0] {
            let mut so = vec![cmd::SET_OPTION];
            so.extend_from_slice(&opt.to_le_bytes());
            let want = d.command(&so, Expect::Single).await;
            let got = g.command(&so, Expect::Single).await;
            assert_eq!(want, got, "COM_SET_OPTION {opt}");
            let want = d.query("SELECT 1; SELECT 2").await;
            let got = g.query("SELECT 1; SELECT 2").await;
            assert_eq!(want, got, "multi-statement with option {opt}");
            assert_eq!(proxy::err_of(&got).is_some(), opt == 1);
        }

        // COM_STATISTICS: one string packet (its numbers change over time).
        let got = g.command(&[cmd::STATISTICS], Expect::Single).await;
        assert_eq!(got.len(), 1);
        let text = String::from_utf8_lossy(&got[0]);
        assert!(
            text.starts_with("Uptime: ") && text.contains("Threads: "),
            "{text}"
        );
    }
    drop_db(&tb, &db).await;
    proxy.stop().await;
}

/// Queries whose reply bytes do not depend on the connection.
const BYTE_EQUAL_QUERIES: &[&str] = &[
    "SELECT 1",
    "SELECT * FROM t ORDER BY id",
    "SELECT * FROM t WHERE id < 0",
    "SELECT id, name AS alias, d, dt, b, j FROM t AS x WHERE id IN (1, 3, 6) ORDER BY id",
    "SELECT NULL, 1.5, -7, 'ü', X'00FF', CAST('2020-01-01' AS DATE), 1e10",
    "SELECT CAST('abc' AS SIGNED)",
    "SHOW WARNINGS",
    "SELECT * FROM no_such_table",
    "SELEC 1",
    "SELECT 1; SELECT 'a', 'b'; DO 1; SELECT * FROM t WHERE id = 2",
    "SELECT 1; SELECT * FROM no_such_table; SELECT 2",
    "SET @x = 5",
    "SELECT @x",
    "BEGIN",
    "SELECT COUNT(*) FROM t LOCK IN SHARE MODE",
    "COMMIT",
    "SET autocommit = 0",
    "SELECT 1",
    "SET autocommit = 1",
    "SET NAMES utf8mb4",
    "SHOW COLUMNS FROM t",
    "SELECT REPEAT('z', 100000)",
];

#[tokio::test]
async fn reply_bytes_equal_direct_with_and_without_deprecate_eof() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let db = fixture(&tb).await;
    for caps in [
        proxy::CLIENT_CAPS,
        proxy::CLIENT_CAPS | cap::DEPRECATE_EOF,
        proxy::CLIENT_CAPS | cap::DEPRECATE_EOF | cap::SESSION_TRACK,
        proxy::CLIENT_CAPS | cap::SESSION_TRACK,
    ] {
        let (mut d, mut g) = pair(&tb, &proxy, caps, &db).await;
        // The login OK packets are equal too (see
        // login_ok_with_session_track_and_a_database_matches_direct for SESSION_TRACK).
        if caps & cap::SESSION_TRACK == 0 {
            assert_eq!(
                d.login_packets.last(),
                g.login_packets.last(),
                "login OK (caps {caps:#x})"
            );
        }
        for sql in BYTE_EQUAL_QUERIES {
            let want = d.query(sql).await;
            let got = g.query(sql).await;
            assert!(
                want == got,
                "{sql} (caps {caps:#x})\n  direct: {:?}\n  idgate: {:?}",
                want.iter()
                    .map(|p| String::from_utf8_lossy(p))
                    .collect::<Vec<_>>(),
                got.iter()
                    .map(|p| String::from_utf8_lossy(p))
                    .collect::<Vec<_>>()
            );
        }
        let mut use_db = String::from("USE ");
        use_db.push_str(&db);
        assert_eq!(
            d.query(&use_db).await,
            g.query(&use_db).await,
            "USE (caps {caps:#x})"
        );
    }
    drop_db(&tb, &db).await;
    proxy.stop().await;
}

/// With CLIENT_SESSION_TRACK and a database in the handshake, MariaDB's
/// login OK packet carries SERVER_SESSION_STATE_CHANGED and a schema entry.
#[tokio::test]
async fn login_ok_with_session_track_and_a_database_matches_direct() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let db = fixture(&tb).await;
    let (d, g) = pair(&tb, &proxy, proxy::CLIENT_CAPS | cap::SESSION_TRACK, &db).await;
    let want = d.login_packets.last().unwrap();
    let got = g.login_packets.last().unwrap();
    let st = reply::parse_ok(want).unwrap().status;
    assert_ne!(st & status::SESSION_STATE_CHANGED, 0, "direct login OK");
    assert_eq!(want, got);
    drop_db(&tb, &db).await;
    proxy.stop().await;
}
