//! idgate under test: started in-process on `127.0.0.1:0` (or as the real
//! binary), plus a small hand-written protocol client for raw-packet tests.
//!
//! - [`Proxy`]: `idgate::server::run` on a spawned task, with a shutdown trigger.
//! - [`ProxyProcess`]: the `idgate` binary with a temporary config file.
//! - [`RawClient`]: logs in and exchanges packets with idgate's own
//!   `protocol` module, so tests can send what real drivers never send.
#![allow(dead_code)]

use super::Testbed;
use idgate::config::Config;
use idgate::frontend::Shared;
use idgate::idgen::Allocator;
use idgate::protocol::consts::cap;
use idgate::protocol::handshake::{
    native_token, ClientHandshake, ServerHandshake, NATIVE_PASSWORD,
};
use idgate::protocol::packet::{frame, PacketConn};
use idgate::protocol::reply::{self, ErrPacket};
use idgate::protocol::response::{Expect, Kind, Tracker};
use idgate::protocol::sha2;
use idgate::rules::RuleSet;
use mysql_async::OptsBuilder;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The account tests log in to idgate with.
pub const USER: &str = "app";
pub const PASSWORD: &str = "secret";
/// A second idgate account (COM_CHANGE_USER tests).
pub const USER2: &str = "other";
pub const PASSWORD2: &str = "pw2";
/// The account with idgate's admin privilege (`admin = true`).
pub const ADMIN: &str = "dba";
pub const ADMIN_PASSWORD: &str = "dbapw";

/// Config text for idgate in front of the test bed; `server_extra` is
/// appended to the `[server]` table (e.g. `max_connections = 2`).
///
/// Logging in to a shard may take up to 60 s (production: 5 s): a login
/// that MariaDB answers slowly on a loaded machine must not fail a test
/// (a shard that is down refuses the connection at once).
pub fn config_text(tb: &Testbed, listen: &str, server_extra: &str) -> String {
    let mut shards = String::new();
    for (i, s) in tb.shards.iter().enumerate() {
        shards.push_str(&format!("[[shards]]\nname = \"s{i}\"\naddress = \"{s}\"\n"));
    }
    format!(
        "[server]\nlisten = \"{listen}\"\n{server_extra}\n{}\
         [[users]]\nname = \"{USER}\"\npassword = \"{PASSWORD}\"\n\
         [[users]]\nname = \"{USER2}\"\npassword = \"{PASSWORD2}\"\n\
         [[users]]\nname = \"{ADMIN}\"\npassword = \"{ADMIN_PASSWORD}\"\nadmin = true\n\
         [backend]\nuser = \"{}\"\npassword = \"{}\"\nconnect_timeout_ms = 60000\n{}{shards}",
        super::server_extra(),
        tb.user,
        tb.password,
        super::backend_extra()
    )
}

/// idgate running in this process.
pub struct Proxy {
    pub addr: SocketAddr,
    pub shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    /// The id allocator of a proxy started with rules (shut down at stop).
    allocator: Option<Allocator>,
}

/// One test rule file's text, loaded against `cfg`'s shards.
fn test_rules(cfg: &Config, text: &str) -> RuleSet {
    let shards: Vec<&str> = cfg.shards.iter().map(|s| s.name.as_str()).collect();
    RuleSet::from_toml(
        std::path::Path::new("test-rules.toml"),
        text,
        &shards,
        &idgate::idgen::validate,
    )
    .unwrap_or_else(|e| panic!("test rules are valid: {e}"))
}

/// Config text for idgate in front of the test bed with its allocator in the
/// test bed's etcd under `etcd_prefix` (use [`super::unique`] for it).
pub fn config_text_etcd(tb: &Testbed, etcd_prefix: &str) -> String {
    format!(
        "{}[allocator]\nstore = \"etcd\"\netcd_endpoints = [\"{}\"]\netcd_prefix = \"{etcd_prefix}\"\n",
        config_text(tb, "127.0.0.1:0", ""),
        tb.etcd
    )
}

impl Proxy {
    /// idgate with the default `[server]` settings.
    pub async fn start(tb: &Testbed) -> Proxy {
        Self::start_with(tb, "").await
    }

    /// idgate with `server_extra` added to `[server]`.
    pub async fn start_with(tb: &Testbed, server_extra: &str) -> Proxy {
        let text = config_text(tb, "127.0.0.1:0", server_extra);
        let cfg = Config::parse(&text, "test").expect("test config is valid");
        Self::start_config(cfg, true).await
    }

    /// idgate with `cfg`; `probe` logs in to the default shard first so the
    /// version string clients see is the shard's.
    pub async fn start_config(cfg: Config, probe: bool) -> Proxy {
        Self::start_shared(Arc::new(Shared::new(cfg)), probe).await
    }

    /// idgate filling ids by `rules` (the text of one rule file), with its
    /// allocator in the test bed's etcd under `etcd_prefix`: loads the rules
    /// and opens the allocator as `idgate serve` does (with the test bounds
    /// of [`Proxy::start_config_rules`]).
    pub async fn start_rules(tb: &Testbed, rules: &str, etcd_prefix: &str) -> Proxy {
        let cfg = Config::parse(&config_text_etcd(tb, etcd_prefix), "test")
            .expect("test config is valid");
        Self::start_config_rules(cfg, rules).await
    }

    /// idgate with `cfg` filling ids by `rules` (the text of one rule file),
    /// with the allocator `cfg.allocator` describes, opened with bounds far
    /// above production's ([`super::open_allocator`]): a slow etcd write on
    /// a loaded machine must not fail a statement that has to succeed.
    pub async fn start_config_rules(cfg: Config, rules: &str) -> Proxy {
        let clock = Arc::new(idgate::idgen::SystemClock::new());
        Self::start_config_rules_clock(cfg, rules, clock, super::ALLOCATOR_TIMEOUT).await
    }

    /// Like [`Proxy::start_rules`], with the allocator's own timeout (how
    /// long a request waits for the store or for other processes) set to
    /// `timeout`: for a test that needs a request to give up.
    pub async fn start_rules_timeout(
        tb: &Testbed,
        rules: &str,
        etcd_prefix: &str,
        timeout: Duration,
    ) -> Proxy {
        let cfg = Config::parse(&config_text_etcd(tb, etcd_prefix), "test")
            .expect("test config is valid");
        let clock = Arc::new(idgate::idgen::SystemClock::new());
        Self::start_config_rules_clock(cfg, rules, clock, timeout).await
    }

    async fn start_config_rules_clock(
        cfg: Config,
        rules: &str,
        clock: Arc<dyn idgate::idgen::Clock>,
        timeout: Duration,
    ) -> Proxy {
        let rules = test_rules(&cfg, rules);
        let allocator =
            super::open_allocator_with(&cfg.allocator, rules.generators(), clock, timeout)
                .await
                .unwrap_or_else(|e| panic!("allocator opens: {e}"));
        Self::start_allocator(cfg, rules, allocator).await
    }

    /// idgate filling ids by `rules` from an allocator (and XA commit log)
    /// on `store`: a memory store for fault injection.
    pub async fn start_store_rules(
        tb: &Testbed,
        rules: &str,
        store: Arc<dyn idgate::idgen::Store>,
    ) -> Proxy {
        let cfg = Config::parse(&config_text(tb, "127.0.0.1:0", ""), "test")
            .expect("test config is valid");
        let rules = test_rules(&cfg, rules);
        let clock = Arc::new(idgate::idgen::SystemClock::new());
        let options = idgate::idgen::AllocatorOptions {
            timeout: super::ALLOCATOR_TIMEOUT,
        };
        let allocator = Allocator::with_options(store, clock, rules.generators(), options)
            .await
            .unwrap_or_else(|e| panic!("allocator opens: {e}"));
        Self::start_allocator(cfg, rules, allocator).await
    }

    /// Like [`Proxy::start_rules`] (its own allocator in the test bed's
    /// etcd under `etcd_prefix`) with the allocator reading `clock`.
    pub async fn start_rules_clock(
        tb: &Testbed,
        rules: &str,
        etcd_prefix: &str,
        clock: Arc<dyn idgate::idgen::Clock>,
    ) -> Proxy {
        let cfg = Config::parse(&config_text_etcd(tb, etcd_prefix), "test")
            .expect("test config is valid");
        Self::start_config_rules_clock(cfg, rules, clock, super::ALLOCATOR_TIMEOUT).await
    }

    async fn start_allocator(cfg: Config, rules: RuleSet, allocator: Allocator) -> Proxy {
        let shared = Arc::new(Shared::with_rules(
            cfg,
            Some(Arc::new(rules)),
            Some(allocator.clone()),
        ));
        let mut p = Self::start_shared(shared, true).await;
        p.allocator = Some(allocator);
        p
    }

    /// idgate filling ids by the rule files of `dir` (which a test may
    /// edit and reload: `[rules] dir` names it), with its allocator in the
    /// test bed's etcd under `etcd_prefix` (test bounds as
    /// [`Proxy::start_config_rules`]).
    pub async fn start_rules_dir(tb: &Testbed, dir: &std::path::Path, etcd_prefix: &str) -> Proxy {
        let text = format!(
            "{}[rules]\ndir = \"{}\"\n",
            config_text_etcd(tb, etcd_prefix),
            dir.display()
        );
        let cfg = Config::parse(&text, "test").expect("test config is valid");
        let shards: Vec<&str> = cfg.shards.iter().map(|s| s.name.as_str()).collect();
        let rules = RuleSet::load_dir(dir, &shards, &idgate::idgen::validate)
            .unwrap_or_else(|e| panic!("test rules are valid: {e}"));
        let clock = Arc::new(idgate::idgen::SystemClock::new());
        let allocator = super::open_allocator_with(
            &cfg.allocator,
            rules.generators(),
            clock,
            super::ALLOCATOR_TIMEOUT,
        )
        .await
        .unwrap_or_else(|e| panic!("allocator opens: {e}"));
        Self::start_allocator(cfg, rules, allocator).await
    }

    /// Options to log in as `user`.
    pub fn opts_as(&self, user: &str, password: &str, db: Option<&str>) -> OptsBuilder {
        self.opts(db).user(Some(user)).pass(Some(password))
    }

    /// idgate serving `shared`.
    pub async fn start_shared(shared: Arc<Shared>, probe: bool) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        if probe {
            shared
                .probe_default_shard()
                .await
                .expect("default shard answers");
        }
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(idgate::server::run(listener, shared.clone(), async move {
            let _ = rx.await;
        }));
        Proxy {
            addr,
            shared,
            stop: Some(tx),
            task: Some(task),
            allocator: None,
        }
    }

    /// The generator `name` of a proxy started with rules.
    /// Connections opened to each shard so far.
    pub fn shard_connects(&self) -> Vec<u64> {
        self.shared
            .shard_connects
            .iter()
            .map(|n| n.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }

    pub fn generator(&self, name: &str) -> Arc<idgate::idgen::Generator> {
        self.shared
            .generator(name)
            .unwrap_or_else(|| panic!("generator {name} is loaded"))
    }

    /// mysql_async options for logging in to idgate as `app`.
    pub fn opts(&self, db: Option<&str>) -> OptsBuilder {
        OptsBuilder::default()
            .ip_or_hostname(self.addr.ip().to_string())
            .tcp_port(self.addr.port())
            .user(Some(USER))
            .pass(Some(PASSWORD))
            .db_name(db)
            .prefer_socket(false)
            .wait_timeout(None)
    }

    /// Starts the graceful shutdown (as SIGTERM does for the binary).
    pub fn trigger_shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Whether `server::run` has returned.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Waits up to `limit` for `server::run` to return; `true` if it did.
    pub async fn wait(&mut self, limit: Duration) -> bool {
        let Some(task) = self.task.as_mut() else {
            return true;
        };
        match tokio::time::timeout(limit, task).await {
            Ok(r) => {
                r.expect("server task did not panic");
                self.task = None;
                true
            }
            Err(_) => false,
        }
    }

    /// Triggers shutdown and waits for the server to stop (then shuts the
    /// allocator down, as `idgate serve` does). A session still inside a
    /// transaction holds it for up to the drain timeout (default 30 s);
    /// the wait is far above that.
    pub async fn stop(mut self) {
        self.trigger_shutdown();
        assert!(
            self.wait(Duration::from_secs(120)).await,
            "idgate did not stop"
        );
        if let Some(a) = self.allocator.take() {
            a.shutdown().await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// mysql_async options for a direct connection to shard `i` of the test bed.
pub fn direct_opts(tb: &Testbed, shard: usize, db: Option<&str>) -> OptsBuilder {
    let (host, port) = tb.shards[shard].rsplit_once(':').expect("host:port");
    OptsBuilder::default()
        .ip_or_hostname(host)
        .tcp_port(port.parse().expect("port"))
        .user(Some(tb.user.clone()))
        .pass(Some(tb.password.clone()))
        .db_name(db)
        .prefer_socket(false)
        .wait_timeout(None)
}

/// Runs `sql` on shard `shard` over a side connection (schema set-up, KILL).
pub async fn admin(tb: &Testbed, shard: usize, sql: &[&str]) {
    use mysql_async::prelude::Queryable;
    let mut c = mysql_async::Conn::new(direct_opts(tb, shard, None))
        .await
        .expect("side connection to the shard");
    for s in sql {
        c.query_drop(*s)
            .await
            .unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    let _ = c.disconnect().await;
}

/// Whether shard `shard` still has a connection (thread) with id `thread`.
pub async fn shard_has_connection(tb: &Testbed, shard: usize, thread: u64) -> bool {
    use mysql_async::prelude::Queryable;
    let mut c = mysql_async::Conn::new(direct_opts(tb, shard, None))
        .await
        .expect("side connection to the shard");
    let n: Option<u64> = c
        .query_first(format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {thread}"
        ))
        .await
        .expect("read the process list");
    let _ = c.disconnect().await;
    n == Some(1)
}

/// Kills connection `thread` on shard `shard` and waits until the shard
/// has closed it (MariaDB lists a killed thread until it has closed its
/// socket; a loaded machine may take a while), so that idgate can see it
/// closed from then on.
pub async fn kill_and_wait_closed(tb: &Testbed, shard: usize, thread: u64) {
    admin(tb, shard, &[&format!("KILL {thread}")]).await;
    wait_closed(tb, shard, thread).await;
}

/// Waits (up to 60 s) until shard `shard` no longer lists connection
/// `thread` (it has closed its socket).
pub async fn wait_closed(tb: &Testbed, shard: usize, thread: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while shard_has_connection(tb, shard, thread).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "shard {shard} still has connection {thread} 60 s after KILL"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A writer for the "no statement fails under load" tests: inserts into
/// `orders (v)` with `v = w`, prepared and text alternately, until `stop`
/// is set and at least 20 rows went in; panics on the first failure;
/// returns the ids the client was told.
pub fn insert_writer(
    opts: OptsBuilder,
    w: u32,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<u64>> {
    use mysql_async::prelude::Queryable;
    tokio::spawn(async move {
        let mut c = mysql_async::Conn::new(opts).await.expect("writer logs in");
        let stmt = c.prep("INSERT INTO orders (v) VALUES (?)").await.unwrap();
        let mut ids = Vec::new();
        let mut n = 0u32;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 20 {
            if n % 2 == 0 {
                c.exec_drop(&stmt, (w,)).await.expect("prepared insert");
            } else {
                c.query_drop(format!("INSERT INTO orders (v) VALUES ({w})"))
                    .await
                    .expect("insert");
            }
            ids.push(c.last_insert_id().expect("an id"));
            n += 1;
        }
        ids
    })
}

/// Creates `schema` directly on both test bed shards (one logical database).
pub async fn create_schema(tb: &Testbed, schema: &str) {
    for shard in 0..2 {
        admin(tb, shard, &[&format!("CREATE DATABASE `{schema}`")]).await;
    }
}

/// Stops `p`, then drops `schema` on both shards.
pub async fn teardown(tb: &Testbed, p: Proxy, schema: &str) {
    p.stop().await;
    for shard in 0..2 {
        admin(tb, shard, &[&format!("DROP DATABASE IF EXISTS `{schema}`")]).await;
    }
}

/// The real `idgate` binary serving a temporary config file.
pub struct ProxyProcess {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl ProxyProcess {
    /// Starts `idgate serve` on a free port and waits until it answers with a handshake.
    pub async fn spawn(tb: &Testbed, server_extra: &str) -> ProxyProcess {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("idgate.toml");
        super::write_private(&path, &config_text(tb, &addr.to_string(), server_extra));
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_idgate"))
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .env("IDGATE_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start idgate");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(s) = TcpStream::connect(addr).await {
                let mut c = PacketConn::new(s);
                let mut buf = Vec::new();
                if let Ok(Ok(Some(_))) =
                    tokio::time::timeout(Duration::from_secs(2), c.read_packet(&mut buf, 1 << 20))
                        .await
                {
                    if ServerHandshake::decode(&buf).is_ok() {
                        break;
                    }
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "idgate binary did not start listening on {addr}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ProxyProcess {
            child,
            addr,
            _dir: dir,
        }
    }

    /// Sends SIGTERM (by pid).
    pub fn sigterm(&self) {
        let st = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -TERM failed");
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Capabilities a typical modern client announces (no DEPRECATE_EOF; add it
/// where a test wants it).
pub const CLIENT_CAPS: u32 = cap::LONG_PASSWORD
    | cap::LONG_FLAG
    | cap::PROTOCOL_41
    | cap::TRANSACTIONS
    | cap::SECURE_CONNECTION
    | cap::MULTI_STATEMENTS
    | cap::MULTI_RESULTS
    | cap::PS_MULTI_RESULTS
    | cap::PLUGIN_AUTH
    | cap::PLUGIN_AUTH_LENENC_CLIENT_DATA;

/// What a login attempt ended with.
#[derive(Debug)]
pub enum LoginOutcome {
    /// Boxed: a client is much larger than an error.
    Ok(Box<RawClient>),
    /// The server answered with an ERR packet.
    Refused(ErrPacket),
}

/// A minimal MySQL client speaking raw packets.
pub struct RawClient {
    pub conn: PacketConn,
    /// The server's greeting.
    pub greeting: ServerHandshake,
    /// Capabilities in force: what this client announced and the server offered.
    pub caps: u32,
    /// Packets seen during login after the handshake response (auth switch, OK).
    pub login_packets: Vec<Vec<u8>>,
}

impl std::fmt::Debug for RawClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawClient")
            .field("connection_id", &self.greeting.connection_id)
            .finish()
    }
}

/// How a [`RawClient`] logs in.
#[derive(Debug, Clone)]
pub struct LoginSpec {
    pub user: String,
    pub password: String,
    pub db: Option<String>,
    pub caps: u32,
    /// The plugin named in the handshake response (and the token computed for it).
    pub plugin: String,
}

impl LoginSpec {
    pub fn new(user: &str, password: &str) -> Self {
        LoginSpec {
            user: user.into(),
            password: password.into(),
            db: None,
            caps: CLIENT_CAPS,
            plugin: "caching_sha2_password".into(),
        }
    }
    pub fn db(mut self, db: &str) -> Self {
        self.db = Some(db.into());
        self
    }
    pub fn caps(mut self, caps: u32) -> Self {
        self.caps = caps;
        self
    }
    pub fn plugin(mut self, plugin: &str) -> Self {
        self.plugin = plugin.into();
        self
    }
}

/// The first token `plugin` makes for `password` (a plugin idgate does not
/// speak gets something no plugin accepts: 32 bytes of 0x5a).
pub fn token_for(plugin: &[u8], nonce: &[u8], password: &str) -> Vec<u8> {
    if plugin == NATIVE_PASSWORD {
        native_token(nonce, password.as_bytes())
    } else if plugin == sha2::CACHING_SHA2 {
        sha2::scramble(nonce, password.as_bytes())
    } else {
        vec![0x5a; 32]
    }
}

/// Reads one logical packet with a timeout (far above any reply's delay:
/// it only turns a hang into a failure); `None` when the peer closed.
pub async fn read_packet(conn: &mut PacketConn) -> Option<(u8, u8, Vec<u8>)> {
    let mut buf = Vec::new();
    match tokio::time::timeout(Duration::from_secs(60), conn.read_packet(&mut buf, 1 << 30)).await {
        Ok(Ok(Some((first, last)))) => Some((first, last, buf)),
        Ok(Ok(None)) | Ok(Err(_)) => None,
        Err(_) => panic!("no packet within 60 s"),
    }
}

impl RawClient {
    /// Logs in as idgate's test user.
    pub async fn app(addr: SocketAddr, caps: u32) -> RawClient {
        Self::connect(addr, &LoginSpec::new(USER, PASSWORD).caps(caps))
            .await
            .expect_ok()
    }

    /// Logs in directly to a test-bed shard with its account.
    pub async fn direct(tb: &Testbed, shard: usize, caps: u32) -> RawClient {
        let addr = tb.shards[shard].parse().expect("shard address");
        Self::connect(addr, &LoginSpec::new(&tb.user, &tb.password).caps(caps))
            .await
            .expect_ok()
    }

    /// Connects and logs in, following an auth switch to mysql_native_password.
    pub async fn connect(addr: SocketAddr, spec: &LoginSpec) -> LoginOutcome {
        let stream = TcpStream::connect(addr).await.expect("connect");
        Self::login_on(stream, spec).await
    }

    /// [`RawClient::connect`] on a connected `stream` (e.g. from a chosen
    /// local address).
    pub async fn login_on(stream: TcpStream, spec: &LoginSpec) -> LoginOutcome {
        let mut conn = PacketConn::new(stream);
        let (_, _, greeting) = read_packet(&mut conn).await.expect("greeting");
        if greeting.first() == Some(&reply::ERR) {
            return LoginOutcome::Refused(reply::parse_err(&greeting).expect("ERR packet"));
        }
        let greeting = ServerHandshake::decode(&greeting).expect("server handshake");
        let token = token_for(spec.plugin.as_bytes(), &greeting.scramble, &spec.password);
        let mut caps = spec.caps;
        if spec.db.is_some() {
            caps |= cap::CONNECT_WITH_DB;
        }
        let hs = ClientHandshake {
            capabilities: caps,
            ext_capabilities: 0,
            max_packet: 1 << 30,
            charset: 45,
            user: spec.user.as_bytes().to_vec(),
            auth_response: token,
            database: spec.db.as_ref().map(|d| d.as_bytes().to_vec()),
            auth_plugin: Some(spec.plugin.as_bytes().to_vec()),
            attrs: None,
        };
        let mut out = Vec::new();
        frame(&mut out, 1, &hs.encode());
        conn.write_raw(&out).await.expect("send handshake response");
        let mut login_packets = Vec::new();
        let mut nonce = greeting.scramble.clone();
        loop {
            let (_, seq, p) = read_packet(&mut conn).await.expect("login reply");
            login_packets.push(p.clone());
            match p.first() {
                Some(&reply::OK) => {
                    return LoginOutcome::Ok(Box::new(RawClient {
                        conn,
                        caps: caps & greeting.capabilities,
                        greeting,
                        login_packets,
                    }))
                }
                Some(&reply::ERR) => {
                    return LoginOutcome::Refused(reply::parse_err(&p).expect("ERR packet"))
                }
                Some(&0xfe) => {
                    let (plugin, switched) =
                        idgate::protocol::handshake::parse_auth_switch(&p).expect("auth switch");
                    assert!(
                        plugin == NATIVE_PASSWORD || plugin == sha2::CACHING_SHA2,
                        "switch to a plugin idgate speaks: {plugin:?}"
                    );
                    nonce = switched;
                    let t = token_for(&plugin, &nonce, &spec.password);
                    let mut out = Vec::new();
                    frame(&mut out, seq.wrapping_add(1), &t);
                    conn.write_raw(&out)
                        .await
                        .expect("send auth switch response");
                }
                Some(&sha2::MORE_DATA) if p.as_slice() == sha2::FAST_AUTH_OK => {}
                Some(&sha2::MORE_DATA) if p.as_slice() == sha2::PERFORM_FULL_AUTH => {
                    // Without TLS: ask for the public key, send the
                    // password encrypted with it.
                    let mut out = Vec::new();
                    frame(&mut out, seq.wrapping_add(1), &[sha2::REQUEST_PUBLIC_KEY]);
                    conn.write_raw(&out).await.expect("request public key");
                    let (_, seq, key) = read_packet(&mut conn).await.expect("public key");
                    login_packets.push(key.clone());
                    if key.first() == Some(&reply::ERR) {
                        return LoginOutcome::Refused(reply::parse_err(&key).expect("ERR packet"));
                    }
                    let cipher =
                        sha2::encrypt_password(&key[1..], &nonce, spec.password.as_bytes())
                            .expect("encrypt with the server's key");
                    let mut out = Vec::new();
                    frame(&mut out, seq.wrapping_add(1), &cipher);
                    conn.write_raw(&out).await.expect("send encrypted password");
                }
                _ => panic!("unexpected login packet {p:?}"),
            }
        }
    }

    pub fn deprecate_eof(&self) -> bool {
        self.caps & cap::DEPRECATE_EOF != 0
    }

    /// Sends a command starting at sequence id 0.
    pub async fn send(&mut self, payload: &[u8]) {
        let mut out = Vec::new();
        frame(&mut out, 0, payload);
        self.conn.write_raw(&out).await.expect("send command");
    }

    /// Sends raw bytes (a test's own framing).
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.conn.write_raw(bytes).await.expect("send raw bytes");
    }

    /// Reads the next logical packet (first sequence id, payload); `None`
    /// when the server closed the connection.
    pub async fn read(&mut self) -> Option<(u8, Vec<u8>)> {
        read_packet(&mut self.conn)
            .await
            .map(|(first, _, p)| (first, p))
    }

    /// Reads a whole reply to a command whose last packet had sequence id
    /// `last_sent`; checks that sequence ids go on without a gap.
    pub async fn reply_after(&mut self, expect: Expect, last_sent: u8) -> Vec<Vec<u8>> {
        let mut t = Tracker::new(expect, self.deprecate_eof(), 0);
        let mut out = Vec::new();
        let mut seq = last_sent;
        while !t.is_done() {
            let (first, last, p) = read_packet(&mut self.conn)
                .await
                .expect("reply packet before close");
            assert_eq!(first, seq.wrapping_add(1), "reply sequence ids");
            seq = last;
            // The tracker follows physical packets: a logical packet of 16 MiB
            // or more is a full first packet and (here) an empty continuation.
            let kind = if p.len() >= 0xff_ffff {
                let k = t.feed(0xff_ffff, &p).expect("well-formed reply");
                t.feed(0, &[]).expect("continuation");
                k
            } else {
                t.feed(p.len(), &p).expect("well-formed reply")
            };
            out.push(p);
            if kind == Kind::Err {
                break;
            }
        }
        out
    }

    /// Reads a whole reply to a one-packet command.
    pub async fn reply(&mut self, expect: Expect) -> Vec<Vec<u8>> {
        self.reply_after(expect, 0).await
    }

    /// Sends a command and returns the reply's payloads.
    pub async fn command(&mut self, payload: &[u8], expect: Expect) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let last = frame(&mut out, 0, payload);
        self.conn.write_raw(&out).await.expect("send command");
        self.reply_after(expect, last).await
    }

    /// COM_QUERY; the reply's payloads.
    pub async fn query(&mut self, sql: &str) -> Vec<Vec<u8>> {
        let mut p = vec![idgate::protocol::consts::cmd::QUERY];
        p.extend_from_slice(sql.as_bytes());
        self.command(&p, Expect::Results).await
    }

    /// COM_QUERY that must succeed without a result set.
    pub async fn exec_ok(&mut self, sql: &str) {
        let r = self.query(sql).await;
        assert!(
            r.iter().all(|p| p.first() != Some(&reply::ERR)),
            "{sql}: {:?}",
            r.last().map(|p| reply::parse_err(p))
        );
    }

    /// Whether the server has closed the connection (reads until EOF or
    /// 60 s: only a connection the server keeps open waits that long).
    pub async fn is_closed(&mut self) -> bool {
        let mut buf = Vec::new();
        matches!(
            tokio::time::timeout(
                Duration::from_secs(60),
                self.conn.read_packet(&mut buf, 1 << 30)
            )
            .await,
            Ok(Ok(None)) | Ok(Err(_))
        )
    }
}

impl LoginOutcome {
    pub fn expect_ok(self) -> RawClient {
        match self {
            LoginOutcome::Ok(c) => *c,
            LoginOutcome::Refused(e) => panic!("login refused: {e}"),
        }
    }
    pub fn expect_refused(self) -> ErrPacket {
        match self {
            LoginOutcome::Ok(_) => panic!("login unexpectedly accepted"),
            LoginOutcome::Refused(e) => e,
        }
    }
}

/// The ERR packet of a reply, if it ended with one.
pub fn err_of(reply: &[Vec<u8>]) -> Option<ErrPacket> {
    reply
        .last()
        .filter(|p| p.first() == Some(&reply::ERR))
        .map(|p| reply::parse_err(p).expect("ERR packet"))
}

// ---------------------------------------------------------------------------
// Differential recording: what a client sees of a statement, comparable
// between a direct connection and one through idgate.

/// One column definition, every field a client can see.
#[derive(Debug, Clone, PartialEq)]
pub struct ColMeta {
    pub name: String,
    pub org_name: String,
    pub table: String,
    pub org_table: String,
    pub schema: String,
    pub charset: u16,
    pub length: u32,
    pub column_type: u8,
    pub flags: u16,
    pub decimals: u8,
}

/// What a statement produced, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Columns(Vec<ColMeta>),
    Rows(Vec<Vec<mysql_async::Value>>),
    Ok {
        affected_rows: u64,
        last_insert_id: Option<u64>,
        warnings: u16,
        info: String,
    },
    /// The connection's last OK packet once the statement is done.
    Final {
        affected_rows: u64,
        last_insert_id: Option<u64>,
        warnings: u16,
        info: String,
    },
    Err {
        code: u16,
        state: String,
        message: String,
    },
}

/// Replaces the schema name (which differs between the two copies) everywhere.
pub fn norm(s: &str, schema: &str) -> String {
    s.replace(schema, "<schema>")
}

fn norm_value(v: mysql_async::Value, schema: &str) -> mysql_async::Value {
    match v {
        mysql_async::Value::Bytes(b) => match String::from_utf8(b) {
            Ok(s) => mysql_async::Value::Bytes(norm(&s, schema).into_bytes()),
            Err(e) => mysql_async::Value::Bytes(e.into_bytes()),
        },
        other => other,
    }
}

/// A server error as an event; panics on any other error (a broken
/// connection is never an expected outcome of a differential statement).
pub fn error_event(e: mysql_async::Error, schema: &str) -> Event {
    match e {
        mysql_async::Error::Server(se) => Event::Err {
            code: se.code,
            state: se.state,
            message: norm(&se.message, schema),
        },
        other => panic!("not a server error: {other}"),
    }
}

pub fn columns(cols: &[mysql_async::Column], schema: &str) -> Vec<ColMeta> {
    cols.iter()
        .map(|c| ColMeta {
            name: c.name_str().into_owned(),
            org_name: c.org_name_str().into_owned(),
            table: c.table_str().into_owned(),
            org_table: c.org_table_str().into_owned(),
            schema: norm(&c.schema_str(), schema),
            charset: c.character_set(),
            length: c.column_length(),
            column_type: c.column_type() as u8,
            flags: c.flags().bits(),
            decimals: c.decimals(),
        })
        .collect()
}

/// Records every result of `qr`. Returns the events and whether the
/// statement completed without error (then the caller adds [`Event::Final`]).
async fn record<P: mysql_async::prelude::Protocol>(
    mut qr: mysql_async::QueryResult<'_, '_, P>,
    schema: &str,
) -> (Vec<Event>, bool) {
    let mut ev = Vec::new();
    loop {
        let cols = qr.columns_ref().to_vec();
        let ok = Event::Ok {
            affected_rows: qr.affected_rows(),
            last_insert_id: qr.last_insert_id(),
            warnings: qr.warnings(),
            info: norm(&qr.info(), schema),
        };
        if !cols.is_empty() {
            ev.push(Event::Columns(columns(&cols, schema)));
        }
        match qr.collect::<mysql_async::Row>().await {
            Ok(rows) if cols.is_empty() => {
                assert!(rows.is_empty());
                ev.push(ok);
            }
            Ok(rows) => ev.push(Event::Rows(
                rows.into_iter()
                    .map(|r| {
                        r.unwrap()
                            .into_iter()
                            .map(|v| norm_value(v, schema))
                            .collect()
                    })
                    .collect(),
            )),
            Err(e) => {
                ev.push(error_event(e, schema));
                return (ev, false);
            }
        }
        if qr.is_empty() {
            // An error in a later statement is kept pending by the driver.
            if let Err(e) = qr.drop_result().await {
                ev.push(error_event(e, schema));
                return (ev, false);
            }
            return (ev, true);
        }
    }
}

fn final_event(conn: &mysql_async::Conn, schema: &str) -> Event {
    Event::Final {
        affected_rows: conn.affected_rows(),
        last_insert_id: conn.last_insert_id(),
        warnings: conn.get_warnings(),
        info: norm(&conn.info(), schema),
    }
}

/// Runs one (possibly multi-) statement with the text protocol and records every result.
pub async fn run_text(conn: &mut mysql_async::Conn, sql: &str, schema: &str) -> Vec<Event> {
    use mysql_async::prelude::Queryable;
    let (mut ev, done) = match conn.query_iter(sql).await {
        Ok(qr) => record(qr, schema).await,
        Err(e) => return vec![error_event(e, schema)],
    };
    if done {
        ev.push(final_event(conn, schema));
    }
    ev
}

/// Executes a prepared statement and records every result.
pub async fn run_exec(
    conn: &mut mysql_async::Conn,
    stmt: &mysql_async::Statement,
    params: mysql_async::Params,
    schema: &str,
) -> Vec<Event> {
    use mysql_async::prelude::Queryable;
    let (mut ev, done) = match conn.exec_iter(stmt, params).await {
        Ok(qr) => record(qr, schema).await,
        Err(e) => return vec![error_event(e, schema)],
    };
    if done {
        ev.push(final_event(conn, schema));
    }
    ev
}

/// Runs `sysbench <workload> ... <cmd>` against idgate at `addr`, logged in
/// as the test user, on schema `db`; `args` are the workload's own options.
/// Creates `schema` with sysbench's `sbtest1` table as `oltp_insert`
/// writes it, without AUTO_INCREMENT (a rule fills `id`).
pub async fn create_sbtest(tb: &Testbed, schema: &str) {
    admin(
        tb,
        0,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &format!(
                "CREATE TABLE `{schema}`.sbtest1 (id INTEGER NOT NULL, k INTEGER DEFAULT '0' NOT NULL, \
                 c CHAR(120) DEFAULT '' NOT NULL, pad CHAR(60) DEFAULT '' NOT NULL, PRIMARY KEY (id), KEY k_1 (k))"
            ),
        ],
    )
    .await;
}

pub async fn sysbench(
    addr: SocketAddr,
    db: &str,
    workload: &str,
    args: &[&str],
    cmd: &str,
) -> std::process::Output {
    tokio::process::Command::new("sysbench")
        .arg(workload)
        .arg("--db-driver=mysql")
        .arg(format!("--mysql-host={}", addr.ip()))
        .arg(format!("--mysql-port={}", addr.port()))
        .arg(format!("--mysql-user={USER}"))
        .arg(format!("--mysql-password={PASSWORD}"))
        .arg(format!("--mysql-db={db}"))
        .arg("--mysql-ssl=off")
        .arg("--report-interval=0")
        .args(args)
        .arg(cmd)
        .output()
        .await
        .expect("sysbench is installed")
}
