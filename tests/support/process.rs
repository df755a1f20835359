//! The real `idgate` binary with rules, an etcd-backed allocator and the
//! Redis-protocol listener, for tests that drive it with real Redis clients
//! (redis-cli, redis-py) or kill it (-9) and start it again, possibly under
//! libfaketime.
#![allow(dead_code)]

use super::Testbed;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The allocator bounds of every test process: far above any delay a
/// loaded CI machine puts on an etcd call (an fsync) or a request, so no
/// statement fails by chance (production: 2 s, 3 s and a 10 s lease).
pub const TEST_ALLOCATOR_BOUNDS: &str =
    "lease_ttl_secs = 60\nstore_timeout_ms = 20000\nrequest_timeout_ms = 30000\n";

/// Accounts of the test processes: `app`/`secret` (all generators),
/// `limited`/`lpw` (grant for `orders` only), `default`/`dpw`, `dba`/`dbapw`
/// with the admin privilege, and `hashed`, whose password "hpw" is given as
/// its `password_hash`.
pub const USERS: &str = "[[users]]\nname = \"app\"\npassword = \"secret\"\n\
[[users]]\nname = \"limited\"\npassword = \"lpw\"\ngenerators = [\"orders\"]\n\
[[users]]\nname = \"default\"\npassword = \"dpw\"\n\
[[users]]\nname = \"dba\"\npassword = \"dbapw\"\nadmin = true\n\
[[users]]\nname = \"hashed\"\npassword_hash = \"*0D1A4BC3689C270B9251B2A4704D402DA1F5CC0C\"\n";

/// A free TCP port on 127.0.0.1 (bound and released: another process may
/// take it in between; [`Idgate::start`] then starts again on new ports).
pub fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` distinct free ports, none handed out before in this process: all
/// bound at once (the kernel may give a port just released again: three
/// ports taken one after the other once came back as two equal ones).
pub fn free_ports<const N: usize>() -> [u16; N] {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let held: Vec<std::net::TcpListener> = (0..N)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let mut ports = [0u16; N];
        for (p, l) in ports.iter_mut().zip(&held) {
            *p = l.local_addr().expect("addr").port();
        }
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if ports.iter().all(|p| !given.contains(p)) {
            given.extend_from_slice(&ports);
            return ports;
        }
    }
}

/// An external tool a test needs (`redis-cli`, `faketime`, `python3` with
/// a module), or `None` outside CI when it is missing; under `CI=true` a
/// missing tool fails the test (scripts/test.sh installs them).
pub fn tool(path: &str, probe: &[&str]) -> Option<PathBuf> {
    let ok = Command::new(path)
        .args(probe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        return Some(PathBuf::from(path));
    }
    let msg = format!(
        "{path} {} does not run; scripts/test.sh installs it",
        probe.join(" ")
    );
    if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// How to start one idgate process.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Text of `rules/test.toml`.
    pub rules: String,
    /// etcd key prefix (shared by processes that must share generators).
    pub etcd_prefix: String,
    /// Added to `[server]`.
    pub server_extra: String,
    /// Command and arguments the binary is run under (e.g. `faketime`).
    pub wrapper: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// MySQL and RESP ports to reuse (a restart); `None`: fresh ones.
    pub ports: Option<(u16, u16)>,
    /// The `[rules]` table's keys; `None`: `dir = "rules"`.
    pub rules_section: Option<String>,
    /// etcd endpoint instead of the test bed's (a test's private etcd).
    pub etcd: Option<String>,
}

/// A running `idgate serve`, killed (-9) when dropped.
pub struct Idgate {
    pub child: Child,
    /// MySQL listener.
    pub mysql: SocketAddr,
    /// Redis-protocol listener.
    pub resp: SocketAddr,
    /// Admin HTTP listener.
    pub admin: SocketAddr,
    pub dir: tempfile::TempDir,
}

impl Idgate {
    /// Starts idgate with `opts` and waits (up to 60 s) until its RESP
    /// listener answers PING.
    pub fn start(tb: &Testbed, opts: &Options) -> Idgate {
        // Ports chosen here may be taken by another process before idgate
        // binds them: then idgate exits at once, and starts again on new
        // ones (not with ports the test chose).
        for _ in 0..3 {
            let mut p = Idgate::spawn(tb, opts);
            match p.wait_serving() {
                Ok(()) => return p,
                Err(log) if opts.ports.is_none() && log.contains("Address already in use") => {}
                Err(log) => panic!("idgate exited at start:\n{log}"),
            }
        }
        let mut p = Idgate::spawn(tb, opts);
        p.wait_ready();
        p
    }

    /// Starts idgate with `opts` and returns once it serves (`Ok`) or has
    /// exited (`Err`: its log), waiting up to 120 s.
    pub fn try_start(tb: &Testbed, opts: &Options) -> Result<Idgate, String> {
        let mut p = Idgate::spawn(tb, opts);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(st)) = p.child.try_wait() {
                return Err(format!("exited ({st}):\n{}", p.log()));
            }
            if p.ping() {
                return Ok(p);
            }
            assert!(
                Instant::now() < deadline,
                "idgate neither served nor exited within 120 s:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn spawn(tb: &Testbed, opts: &Options) -> Idgate {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("rules")).expect("rules dir");
        std::fs::write(dir.path().join("rules/test.toml"), &opts.rules).expect("rules");
        let [mp, rp, ap] = match opts.ports {
            Some((mp, rp)) => [mp, rp, free_port()],
            None => free_ports::<3>(),
        };
        let mysql: SocketAddr = format!("127.0.0.1:{mp}").parse().expect("addr");
        let resp: SocketAddr = format!("127.0.0.1:{rp}").parse().expect("addr");
        let admin: SocketAddr = format!("127.0.0.1:{ap}").parse().expect("addr");
        let mut shards = String::new();
        for (i, s) in tb.shards.iter().enumerate() {
            shards.push_str(&format!("[[shards]]\nname = \"s{i}\"\naddress = \"{s}\"\n"));
        }
        let config = format!(
            "[server]\nlisten = \"{mysql}\"\nresp_listen = \"{resp}\"\nadmin_listen = \"{admin}\"\n{}\n{}{USERS}\
             [backend]\nuser = \"{}\"\npassword = \"{}\"\n{}{shards}\
             [allocator]\nstore = \"etcd\"\netcd_endpoints = [\"{}\"]\netcd_prefix = \"{}\"\n\
             {TEST_ALLOCATOR_BOUNDS}\
             [rules]\n{}\n",
            opts.server_extra,
            super::server_extra(),
            tb.user,
            tb.password,
            super::backend_extra(),
            opts.etcd.as_deref().unwrap_or(&tb.etcd),
            opts.etcd_prefix,
            opts.rules_section.as_deref().unwrap_or("dir = \"rules\"")
        );
        let path = dir.path().join("idgate.toml");
        super::write_private(&path, &config);
        let log = std::fs::File::create(dir.path().join("idgate.log")).expect("log file");
        let bin = env!("CARGO_BIN_EXE_idgate");
        let mut cmd = match opts.wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.arg("serve")
            .arg("--config")
            .arg(&path)
            .env("IDGATE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        // Its own process group: a wrapper such as faketime forks idgate as
        // its child, and killing only the wrapper would leave idgate running.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().expect("start idgate");
        Idgate {
            child,
            mysql,
            resp,
            admin,
            dir,
        }
    }

    /// Whether the RESP listener answers PING.
    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(self.resp) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let mut out = Vec::new();
        s.write_all(b"PING\r\nQUIT\r\n").is_ok()
            && s.read_to_end(&mut out).is_ok()
            && out == b"+PONG\r\n+OK\r\n"
    }

    /// The path of its config file (for the `idgate rules` commands).
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("idgate.toml")
    }

    fn wait_ready(&mut self) {
        if let Err(log) = self.wait_serving() {
            panic!("idgate exited at start:\n{log}");
        }
    }

    /// Waits until idgate answers on its RESP port (`Ok`) or has exited
    /// (`Err`: its exit status and log); more than 60 s fails the test.
    fn wait_serving(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(format!("({st}) {}", self.log()));
            }
            if let Ok(mut s) = TcpStream::connect(self.resp) {
                // PING, then QUIT and read to the end: the server gives the
                // probe's connection slot back before it closes, so a test
                // that counts slots (max_connections) starts with all free.
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut out = Vec::new();
                if s.write_all(b"PING\r\nQUIT\r\n").is_ok()
                    && s.read_to_end(&mut out).is_ok()
                    && out == b"+PONG\r\n+OK\r\n"
                {
                    return Ok(());
                }
            }
            assert!(
                Instant::now() < deadline,
                "idgate did not answer on {} within 60 s:\n{}",
                self.resp,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("idgate.log")).unwrap_or_default()
    }

    /// The directory holding the config and log.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// kill -9, and waits for the process to be gone.
    pub fn kill9(&mut self) {
        self.kill_group();
        let _ = self.child.wait();
    }

    /// SIGKILL to the process and everything it started (its group).
    fn kill_group(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) with a negative pid signals the process group
        // `pid` leads (made by `process_group(0)` at spawn); no memory is
        // involved.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }

    /// SIGTERM, then waits (up to 60 s) for a clean exit; returns its status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let st = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "idgate did not stop after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One GET of the admin listener: the body.
    pub fn http_get(&self, path: &str) -> String {
        let mut s = TcpStream::connect(self.admin).expect("admin listener");
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("response");
        out
    }
}

impl Drop for Idgate {
    fn drop(&mut self) {
        // The whole group, also when the wrapper has exited already and
        // left idgate behind.
        self.kill_group();
        let _ = self.child.wait();
    }
}

/// A blocking RESP client on a raw socket, for bytes real clients never send.
pub struct Raw {
    pub s: TcpStream,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).ok();
        Raw { s }
    }

    pub fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("send");
    }

    /// Reads one reply line (`+`, `-`, `:`, or a `$`/`*` header) without CRLF.
    pub fn line(&mut self) -> String {
        let mut out = Vec::new();
        let mut b = [0u8; 1];
        while let Ok(1) = self.s.read(&mut b) {
            if b[0] == b'\n' {
                break;
            }
            out.push(b[0]);
        }
        if out.last() == Some(&b'\r') {
            out.pop();
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Sends `cmd` (an inline command) and reads one reply line.
    pub fn cmd(&mut self, cmd: &str) -> String {
        self.send(format!("{cmd}\r\n").as_bytes());
        self.line()
    }

    /// Whether the server closed the connection (reads to EOF).
    pub fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        self.s.read_to_end(&mut rest).is_ok()
    }
}

/// Runs the `mariadb` client (no option files, over TCP) against `addr` as
/// `user` on `db`, with `args`, feeding it `stdin`.
pub async fn mariadb_cli(
    addr: &str,
    user: &str,
    password: &str,
    db: &str,
    args: &[&str],
    stdin: &str,
) -> std::process::Output {
    use tokio::io::AsyncWriteExt;
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let mut child = tokio::process::Command::new("mariadb")
        .arg("--no-defaults")
        .arg("--protocol=TCP")
        .arg(format!("--host={host}"))
        .arg(format!("--port={port}"))
        .arg(format!("--user={user}"))
        .arg(format!("--password={password}"))
        .arg(format!("--database={db}"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the mariadb client is installed (scripts/testbed.sh installs mariadb-client)");
    let mut input = child.stdin.take().expect("piped stdin");
    input
        .write_all(stdin.as_bytes())
        .await
        .expect("write the client's input");
    drop(input);
    child
        .wait_with_output()
        .await
        .expect("the mariadb client ran")
}
