//! One Redis-protocol connection: authentication, grants, commands.
//!
//! The loop reads what the client sent, answers every complete command in
//! it into one output buffer and writes that once: a pipeline of N
//! commands costs one read and one write, as with Redis. A framing error is
//! answered and the connection closed (the stream cannot be
//! resynchronised); any other error is a reply and the connection goes on.
//! Nothing a client sends reaches another connection.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::debug;

use super::command::{shown, Command};
use super::frame::{self, MAX_ARGS};
use super::reply::{self, Proto};
use super::Service;
use crate::idgen::Generator;
use crate::rules::spec::GeneratorKind;

/// Output buffered beyond this is written before more commands are
/// answered (a long pipeline of `IDGATE.NEXT gen 100000`).
const FLUSH_AT: usize = 1 << 20;

/// State of one connection.
struct Conn {
    /// Shared users, allocator, limits.
    svc: Arc<Service>,
    /// Index of the logged-in user in `svc.users`; `None` before AUTH.
    user: Option<usize>,
    /// RESP2 until `HELLO 3`.
    proto: Proto,
    /// `CLIENT SETNAME`.
    name: Option<Vec<u8>>,
    /// `CLIENT ID`.
    id: u64,
    /// Reused buffer for ids.
    ids: Vec<u64>,
    /// The last generator used, by name, with the grant already checked:
    /// a client taking ids from one generator skips the map lookup.
    last: Option<(Vec<u8>, Arc<Generator>)>,
    /// The client's address (failed AUTHs are counted per address).
    peer: Option<std::net::IpAddr>,
}

/// Serves one client until it quits, the connection fails, or `stop` turns true.
/// `permit` (the connection's slot under `max_connections`) is given back
/// before the connection is closed, so a client that saw it close can
/// connect again at once.
pub(super) async fn serve(
    svc: Arc<Service>,
    mut stream: TcpStream,
    peer: std::net::SocketAddr,
    mut stop: watch::Receiver<bool>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let user = svc.default_user.filter(|&i| svc.users[i].secret.is_empty());
    let mut conn = Conn {
        id: svc.next_client_id.fetch_add(1, Ordering::Relaxed),
        svc,
        user,
        proto: Proto::V2,
        name: None,
        ids: Vec::new(),
        last: None,
        peer: Some(peer.ip()),
    };
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut args: Vec<Range<usize>> = Vec::with_capacity(MAX_ARGS);
    loop {
        // Answer every complete command read so far.
        let mut pos = 0;
        let mut close = false;
        while !close {
            match frame::parse(&buf[pos..], &mut args) {
                Ok(Some(n)) => {
                    let cmd = &buf[pos..pos + n];
                    let mut words: [&[u8]; MAX_ARGS] = [&[]; MAX_ARGS];
                    for (w, r) in words.iter_mut().zip(&args) {
                        *w = &cmd[r.clone()];
                    }
                    if !args.is_empty() {
                        close = conn.apply(&words[..args.len()], &mut out).await;
                    }
                    pos += n;
                    if out.len() >= FLUSH_AT {
                        if stream.write_all(&out).await.is_err() {
                            return;
                        }
                        out.clear();
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    reply::error(&mut out, &format!("ERR {e}"));
                    close = true;
                }
            }
        }
        buf.advance(pos);
        if !out.is_empty() {
            if let Err(e) = stream.write_all(&out).await {
                debug!(client = conn.id, "resp: write failed: {e}");
                return;
            }
            out.clear();
            if out.capacity() > FLUSH_AT {
                out.shrink_to(16 * 1024);
            }
        }
        if close || *stop.borrow() {
            // QUIT, a framing error, or shutdown (what was read is answered).
            drop(permit);
            let _ = stream.shutdown().await;
            if close {
                // Closing with unread input would send a reset, which can
                // destroy the reply before the client reads it: read and
                // drop what the client still sends (bounded in time and size).
                let drain = async {
                    let mut sink = [0u8; 4096];
                    let mut total = 0usize;
                    while total < (1 << 20) {
                        match stream.read(&mut sink).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => total += n,
                        }
                    }
                };
                let _ = tokio::time::timeout(std::time::Duration::from_secs(2), drain).await;
            }
            return;
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        tokio::select! {
            r = stream.read_buf(&mut buf) => match r {
                Ok(0) => {
                    if !buf.is_empty() {
                        // The client closed its side mid-command.
                        reply::error(&mut out, "ERR Protocol error: the connection ended in the middle of a command");
                        let _ = stream.write_all(&out).await;
                    }
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    debug!(client = conn.id, "resp: read failed: {e}");
                    return;
                }
            },
            _ = stop.changed() => {}
        }
    }
}

const NOAUTH: &str = "NOAUTH Authentication required.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

impl Conn {
    /// Applies one command, appending its reply to `out`. Returns whether
    /// the connection is to be closed (QUIT).
    async fn apply(&mut self, words: &[&[u8]], out: &mut Vec<u8>) -> bool {
        let cmd = match Command::parse(words) {
            Ok(c) => c,
            Err(e) => {
                reply::error(out, &e);
                return false;
            }
        };
        if self.user.is_none()
            && !matches!(
                cmd,
                Command::Auth { .. } | Command::Hello { .. } | Command::Ping(_) | Command::Quit
            )
        {
            reply::error(out, NOAUTH);
            return false;
        }
        match cmd {
            Command::Incr(g) => self.incr(g, out).await,
            Command::IncrBy(g, n) => self.incr_by(g, n, out).await,
            Command::Next(g, n) => self.next(g, n, out).await,
            Command::Get(g) => match self.generator(g) {
                Ok(gen) => reply::bulk_u64(out, gen.stats().next_id),
                Err(e) => reply::error(out, &e),
            },
            Command::Ping(None) => reply::simple(out, "PONG"),
            Command::Ping(Some(m)) | Command::Echo(m) => reply::bulk(out, m),
            Command::Quit => {
                reply::simple(out, "OK");
                return true;
            }
            Command::Auth { user, password } => match self.login(user, password).await {
                Ok(()) => reply::simple(out, "OK"),
                Err(e) => reply::error(out, &e),
            },
            Command::Hello {
                proto,
                auth,
                setname,
            } => self.hello(proto, auth, setname, out).await,
            Command::Select(0) => reply::simple(out, "OK"),
            Command::Select(_) => reply::error(out, "ERR DB index is out of range"),
            Command::ClientSetName(n) => match self.set_name(n) {
                Ok(()) => reply::simple(out, "OK"),
                Err(e) => reply::error(out, e),
            },
            Command::ClientGetName => match &self.name {
                Some(n) => reply::bulk(out, n),
                None => reply::null(out, self.proto),
            },
            Command::ClientId => reply::int(out, self.id),
            Command::ClientSetInfo => reply::simple(out, "OK"),
            Command::Command => match self.proto {
                Proto::V2 => reply::array(out, 0),
                Proto::V3 => reply::map(out, 0, Proto::V3),
            },
            Command::ConfigGet(p) => {
                let known: [(&[u8], &[u8]); 2] = [(b"save", b""), (b"appendonly", b"no")];
                let hits: Vec<_> = known
                    .iter()
                    .filter(|(k, _)| p == b"*" || p.eq_ignore_ascii_case(k))
                    .collect();
                reply::map(out, hits.len(), self.proto);
                for (k, v) in hits {
                    reply::bulk(out, k);
                    reply::bulk(out, v);
                }
            }
        }
        false
    }

    /// The generator `name`, if it exists and the user has a grant for it.
    ///
    /// Errors: the reply for an unknown generator, or `NOPERM`.
    fn generator(&mut self, name: &[u8]) -> Result<Arc<Generator>, String> {
        if let Some((n, g)) = &self.last {
            if n.as_slice() == name {
                return Ok(g.clone());
            }
        }
        let unknown = || format!("ERR unknown generator '{}'", shown(name));
        let text = std::str::from_utf8(name).map_err(|_| unknown())?;
        let g = self
            .svc
            .allocator
            .as_ref()
            .and_then(|a| a.generator(text))
            .ok_or_else(unknown)?;
        // `apply` lets no generator command through before AUTH.
        let user = &self.svc.users[self.user.unwrap_or_default()];
        if !user.may_use(text) {
            return Err(format!(
                "NOPERM user '{}' has no grant for generator '{text}' ([[users]] generators)",
                user.name
            ));
        }
        self.last = Some((name.to_vec(), g.clone()));
        Ok(g)
    }

    async fn incr(&mut self, name: &[u8], out: &mut Vec<u8>) {
        let g = match self.generator(name) {
            Ok(g) => g,
            Err(e) => return reply::error(out, &e),
        };
        self.ids.clear();
        match g.next(1, &mut self.ids).await {
            Ok(()) => match self.ids.first() {
                Some(&id) => reply::int(out, id),
                None => reply::error(out, "ERR the allocator returned no id"),
            },
            Err(e) => reply::error(out, &format!("ERR {e}")),
        }
    }

    async fn incr_by(&mut self, name: &[u8], n: u64, out: &mut Vec<u8>) {
        let g = match self.generator(name) {
            Ok(g) => g,
            Err(e) => return reply::error(out, &e),
        };
        if g.kind() == GeneratorKind::Snowflake {
            return reply::error(
                out,
                &format!(
                    "ERR generator '{}' is a snowflake generator: its ids are not consecutive, so INCRBY (a block of consecutive ids) needs a sequence; use IDGATE.NEXT {} {n}",
                    g.name(),
                    g.name()
                ),
            );
        }
        match g.next_block(n).await {
            Ok(first) => match (n - 1)
                .checked_mul(g.increment())
                .and_then(|d| first.checked_add(d))
            {
                Some(last) => reply::int(out, last),
                None => reply::error(out, "ERR the block does not fit in 64 bits"),
            },
            Err(e) => reply::error(out, &format!("ERR {e}")),
        }
    }

    async fn next(&mut self, name: &[u8], n: u64, out: &mut Vec<u8>) {
        let g = match self.generator(name) {
            Ok(g) => g,
            Err(e) => return reply::error(out, &e),
        };
        self.ids.clear();
        match g.next(n, &mut self.ids).await {
            Ok(()) => {
                reply::array(out, self.ids.len());
                for &id in &self.ids {
                    reply::int(out, id);
                }
            }
            Err(e) => reply::error(out, &format!("ERR {e}")),
        }
        if self.ids.capacity() > 4096 {
            self.ids = Vec::new();
        }
    }

    /// Logs in as `user` (`None`: the user named `default`). On failure the
    /// connection keeps the user it had.
    /// From an address with repeated failed logins (either listener), it
    /// waits first ([`crate::throttle`]).
    async fn login(&mut self, user: Option<&[u8]>, password: &[u8]) -> Result<(), String> {
        let index = match user {
            Some(u) => self.svc.users.iter().position(|c| c.name.as_bytes() == u),
            None => match self.svc.default_user {
                Some(i) => Some(i),
                None => {
                    return Err("ERR AUTH <password> logs in as the user named 'default', and idgate has none in [[users]]; use AUTH <user> <password>".into())
                }
            },
        };
        if let Some(ip) = self.peer {
            let name = String::from_utf8_lossy(user.unwrap_or(b"default"));
            self.svc.throttle.wait(ip, &name, "resp: AUTH").await;
        }
        let accepted = index.filter(|&i| self.svc.users[i].secret.verify_plain(password));
        if let Some(ip) = self.peer {
            match accepted {
                Some(_) => self.svc.throttle.succeeded(ip),
                None => self.svc.throttle.failed(ip),
            }
        }
        match accepted {
            Some(i) => {
                self.user = Some(i);
                Ok(())
            }
            None => Err(WRONGPASS.into()),
        }
    }

    fn set_name(&mut self, name: &[u8]) -> Result<(), &'static str> {
        if name.iter().any(|&c| !(0x21..=0x7e).contains(&c)) {
            return Err("ERR Client names cannot contain spaces, newlines or special characters.");
        }
        self.name = (!name.is_empty()).then(|| name.to_vec());
        Ok(())
    }

    async fn hello(
        &mut self,
        proto: Option<u8>,
        auth: Option<(&[u8], &[u8])>,
        setname: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) {
        if let Some((u, p)) = auth {
            if let Err(e) = self.login(Some(u), p).await {
                return reply::error(out, &e);
            }
        } else if self.user.is_none() {
            return reply::error(
                out,
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            );
        }
        if let Some(n) = setname {
            if let Err(e) = self.set_name(n) {
                return reply::error(out, e);
            }
        }
        match proto {
            Some(3) => self.proto = Proto::V3,
            Some(_) => self.proto = Proto::V2,
            None => {}
        }
        let p = self.proto;
        reply::map(out, 7, p);
        reply::bulk(out, b"server");
        reply::bulk(out, b"idgate");
        reply::bulk(out, b"version");
        reply::bulk(out, env!("CARGO_PKG_VERSION").as_bytes());
        reply::bulk(out, b"proto");
        reply::int(out, if p == Proto::V3 { 3 } else { 2 });
        reply::bulk(out, b"id");
        reply::int(out, self.id);
        reply::bulk(out, b"mode");
        reply::bulk(out, b"standalone");
        reply::bulk(out, b"role");
        reply::bulk(out, b"master");
        reply::bulk(out, b"modules");
        reply::array(out, 0);
    }
}
