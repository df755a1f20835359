//! One connection from idgate to a shard, logged in with the `[backend]`
//! account (or the user's own): mysql_native_password or
//! caching_sha2_password, whichever the shard asks for (the latter's fast
//! path, full authentication over TLS in clear, or by RSA with the
//! shard's public key: pinned in the config (`[[shards]] public_key`), or
//! else asked for on the connection).

use crate::protocol::consts::{cap, cmd};
use crate::protocol::handshake::{
    self, ClientHandshake, ServerHandshake, NATIVE_PASSWORD, SSL_REQUEST_LEN,
};
use crate::protocol::packet::{frame, PacketConn, ReadError};
use crate::protocol::reply::{self, ErrPacket};
use crate::protocol::response::{Expect, Kind, Tracker};
use crate::protocol::sha2::{self, CACHING_SHA2};
use crate::protocol::{consts, Malformed};
use crate::tls::ShardTls;
use std::time::Duration;
use tokio::net::TcpStream;

/// Why talking to a shard failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("cannot connect to shard {shard} ({address}): {source}")]
    Connect {
        shard: String,
        address: String,
        source: std::io::Error,
    },
    #[error("shard {shard} ({address}) did not answer within {timeout_ms} ms")]
    Timeout {
        shard: String,
        address: String,
        timeout_ms: u64,
    },
    /// The shard refused the login or the command (its own error).
    #[error("shard {shard}: {err}")]
    Server { shard: String, err: ErrPacket },
    #[error("shard {shard}: authentication plugin {plugin} is not supported (idgate logs in with mysql_native_password or caching_sha2_password)")]
    Plugin { shard: String, plugin: String },
    #[error("shard {shard}: {source}")]
    Protocol { shard: String, source: Malformed },
    /// TLS to the shard could not be had as `[backend] tls` asks.
    #[error("shard {shard} ({address}): TLS: {reason}")]
    Tls {
        shard: String,
        address: String,
        reason: String,
    },
    /// A reopened connection could not be given the session's state back.
    #[error("shard {shard}: the connection was reopened, but the session's state could not be restored: {reason}")]
    StateLost { shard: String, reason: String },
    /// The shard's pool was full for `[backend] pool_wait_timeout_ms`
    /// (`pool.rs`); the client gets error 1040.
    #[error("Too many connections: the pool of shard {shard} is full (pool_max = {max}); waited {waited_ms} ms for a connection")]
    PoolFull {
        shard: String,
        max: usize,
        waited_ms: u64,
    },
    /// The connection broke while a command was under way.
    #[error("lost connection to shard {shard}: {source}")]
    Lost {
        shard: String,
        source: std::io::Error,
    },
}

impl BackendError {
    /// Whether the connection is gone or out of step (not the shard's
    /// answer to a command): it cannot be used again.
    pub fn broke(&self) -> bool {
        matches!(
            self,
            BackendError::Lost { .. }
                | BackendError::Protocol { .. }
                | BackendError::Timeout { .. }
        )
    }

    /// The shard's ERR packet `payload` as an error (a malformed one as a
    /// protocol error), naming `shard`.
    pub fn from_err_packet(shard: &str, payload: &[u8]) -> BackendError {
        match reply::parse_err(payload) {
            Ok(err) => BackendError::Server {
                shard: shard.to_string(),
                err,
            },
            Err(source) => BackendError::Protocol {
                shard: shard.to_string(),
                source,
            },
        }
    }
}

/// What a session asks of a new shard connection.
#[derive(Debug, Clone)]
pub struct ConnectParams<'a> {
    pub shard: &'a str,
    pub address: &'a str,
    /// Whether and how the connection is encrypted (`[backend] tls`).
    pub tls: &'a ShardTls,
    /// The shard's pinned RSA public key (`[[shards]] public_key`), used
    /// instead of asking the shard for it.
    pub public_key: Option<&'a [u8]>,
    pub user: &'a str,
    pub password: &'a str,
    /// The client's current schema.
    pub database: Option<&'a str>,
    /// The client's character set (collation id from its handshake).
    pub charset: u8,
    /// Capabilities the client negotiated with idgate; the shard connection
    /// uses the same ones, so replies can be relayed byte for byte.
    pub capabilities: u32,
    /// MariaDB extended capabilities the client negotiated (when it cleared
    /// `LONG_PASSWORD`).
    pub ext_capabilities: u32,
    /// The client's connection attributes, passed on.
    pub attrs: Option<&'a [u8]>,
    pub timeout: Duration,
}

/// A logged-in connection to a shard.
#[derive(Debug)]
pub struct BackendConn {
    pub conn: PacketConn,
    /// Shard name, for error messages.
    pub shard: String,
    /// Capabilities in force on this connection.
    pub capabilities: u32,
    /// The shard's own connection id.
    pub connection_id: u32,
    /// Server status from the last reply (transaction state).
    pub status: u16,
    /// What `SHOW WARNINGS` would list after the last reply relayed or
    /// read (warnings, plus one for an error): a multiplexed session keeps
    /// a connection whose diagnostics the client may still ask for.
    pub diagnostics: u16,
    /// The last insert id of the last reply's OK packet.
    pub insert_id: u64,
    /// The OK packet that completed the login (with the shard's session
    /// state changes, for a client that logs in with a database).
    pub login_ok: Vec<u8>,
    /// Reused for framing commands.
    wbuf: Vec<u8>,
    /// Replies still to come to commands of idgate's own sent without
    /// waiting ([`BackendConn::send_detached`]).
    detached: u32,
    /// A session's `LAST_INSERT_ID()` this connection holds unread
    /// (multiplexing, `lidclaim.rs`): read before the connection is used
    /// by another session or closed.
    pub lid_claim: Option<crate::backend::lidclaim::LidClaim>,
    /// The `sql_mode` flags read on this connection, with the session
    /// state tag it had then (`frontend/session/replay.rs`): true while
    /// the connection keeps that state, so the next session to take it
    /// need not read them again. COM_RESET_CONNECTION and COM_CHANGE_USER
    /// (sent through [`BackendConn::send`]) forget them: the server's
    /// defaults may have changed since.
    pub sql_modes: Option<(u64, crate::sql::SqlModes)>,
}

impl BackendConn {
    /// Connects and logs in. Returns the connection and the shard's handshake
    /// (its version string and capabilities are what idgate shows clients).
    pub async fn connect(
        p: &ConnectParams<'_>,
    ) -> Result<(BackendConn, ServerHandshake), BackendError> {
        // Boxed: a login's future is large, and every statement's future
        // that may open a connection would otherwise hold one.
        match tokio::time::timeout(p.timeout, Box::pin(Self::connect_inner(p))).await {
            Ok(r) => r,
            Err(_) => Err(BackendError::Timeout {
                shard: p.shard.to_string(),
                address: p.address.to_string(),
                timeout_ms: p.timeout.as_millis() as u64,
            }),
        }
    }

    async fn connect_inner(
        p: &ConnectParams<'_>,
    ) -> Result<(BackendConn, ServerHandshake), BackendError> {
        let shard = p.shard.to_string();
        let stream =
            TcpStream::connect(p.address)
                .await
                .map_err(|source| BackendError::Connect {
                    shard: shard.clone(),
                    address: p.address.to_string(),
                    source,
                })?;
        let mut conn = PacketConn::new(stream);
        let lost = |source: std::io::Error| BackendError::Lost {
            shard: shard.clone(),
            source,
        };
        let proto = |source: Malformed| BackendError::Protocol {
            shard: shard.clone(),
            source,
        };
        let mut buf = Vec::new();
        let (_, seq) = read(&mut conn, &mut buf, &shard).await?;
        if buf.first() == Some(&reply::ERR) {
            return Err(server_err(&shard, &buf));
        }
        let hs = ServerHandshake::decode(&buf).map_err(proto)?;
        let mut caps = (p.capabilities & consts::cap::SUPPORTED & hs.capabilities)
            | cap::PROTOCOL_41
            | cap::SECURE_CONNECTION
            | (p.capabilities & cap::LONG_PASSWORD)
            | (hs.capabilities & cap::PLUGIN_AUTH);
        let ext_caps =
            if caps & cap::LONG_PASSWORD == 0 && hs.capabilities & cap::LONG_PASSWORD == 0 {
                p.ext_capabilities & hs.ext_capabilities & cap::EXT_SUPPORTED
            } else {
                caps |= cap::LONG_PASSWORD;
                0
            };
        caps &= !(cap::CONNECT_WITH_DB | cap::CONNECT_ATTRS);
        if p.database.is_some() {
            caps |= cap::CONNECT_WITH_DB;
        }
        if (p.capabilities ^ caps) & cap::DEPRECATE_EOF != 0 {
            // Replies are relayed as they are: both sides must end result sets alike.
            return Err(proto(Malformed(
                "the shard does not support CLIENT_DEPRECATE_EOF, which the client negotiated",
            )));
        }
        if p.attrs.is_some() && hs.capabilities & cap::CONNECT_ATTRS != 0 {
            caps |= cap::CONNECT_ATTRS;
        }
        let tls_err = |reason: String| BackendError::Tls {
            shard: shard.clone(),
            address: p.address.to_string(),
            reason,
        };
        let connector = match p.tls.connector().map_err(tls_err)? {
            Some(c) if hs.capabilities & cap::SSL != 0 => Some(c),
            _ if p.tls.required() => {
                return Err(tls_err(format!(
                    "the shard does not offer TLS, and [backend] tls = \"{}\" requires it",
                    match p.tls.mode {
                        crate::tls::ShardTlsMode::VerifyCa => "verify_ca",
                        _ => "required",
                    }
                )))
            }
            _ => None,
        };
        if connector.is_some() {
            caps |= cap::SSL;
        }
        // Answer with the shard's own plugin when idgate speaks it (no
        // switch); otherwise native, and the shard says what it wants.
        let mut plugin = if hs.auth_plugin == CACHING_SHA2 {
            CACHING_SHA2
        } else {
            NATIVE_PASSWORD
        };
        let mut nonce = hs.scramble.clone();
        let response = ClientHandshake {
            capabilities: caps,
            ext_capabilities: ext_caps,
            max_packet: 1 << 30,
            charset: p.charset,
            user: p.user.as_bytes().to_vec(),
            auth_response: auth_token(plugin, &nonce, p.password.as_bytes()),
            database: p.database.map(|d| d.as_bytes().to_vec()),
            auth_plugin: Some(plugin.to_vec()),
            attrs: p.attrs.map(<[u8]>::to_vec),
        };
        let encoded = response.encode();
        let mut out = Vec::new();
        let mut seq = seq;
        if let Some(connector) = connector {
            // The SSL request is the start of the handshake response.
            frame(
                &mut out,
                seq.wrapping_add(1),
                encoded.get(..SSL_REQUEST_LEN).unwrap_or_default(),
            );
            conn.write_raw(&out).await.map_err(lost)?;
            out.clear();
            conn.connect_tls(connector, crate::tls::server_name(p.address))
                .await
                .map_err(|e| tls_err(format!("handshake failed: {e}")))?;
            seq = seq.wrapping_add(1);
        }
        frame(&mut out, seq.wrapping_add(1), &encoded);
        conn.write_raw(&out).await.map_err(lost)?;
        loop {
            let (_, seq) = read(&mut conn, &mut buf, &shard).await?;
            match buf.first() {
                Some(&reply::OK) => {
                    let ok = reply::parse_ok(&buf).map_err(proto)?;
                    return Ok((
                        BackendConn {
                            conn,
                            shard,
                            capabilities: caps & !cap::SSL,
                            connection_id: hs.connection_id,
                            status: ok.status,
                            diagnostics: 0,
                            insert_id: 0,
                            login_ok: std::mem::take(&mut buf),
                            wbuf: Vec::new(),
                            detached: 0,
                            lid_claim: None,
                            sql_modes: None,
                        },
                        hs,
                    ));
                }
                Some(&reply::ERR) => return Err(server_err(&shard, &buf)),
                Some(&0xfe) => {
                    let (asked, new_nonce) = handshake::parse_auth_switch(&buf).map_err(proto)?;
                    plugin = if asked == NATIVE_PASSWORD {
                        NATIVE_PASSWORD
                    } else if asked == CACHING_SHA2 {
                        CACHING_SHA2
                    } else {
                        return Err(BackendError::Plugin {
                            shard,
                            plugin: String::from_utf8_lossy(&asked).into_owned(),
                        });
                    };
                    nonce = new_nonce;
                    let token = auth_token(plugin, &nonce, p.password.as_bytes());
                    out.clear();
                    frame(&mut out, seq.wrapping_add(1), &token);
                    conn.write_raw(&out).await.map_err(lost)?;
                }
                Some(&sha2::MORE_DATA) if plugin == CACHING_SHA2 => {
                    if buf.as_slice() == sha2::FAST_AUTH_OK {
                        continue; // the OK follows
                    }
                    if buf.as_slice() != sha2::PERFORM_FULL_AUTH {
                        return Err(proto(Malformed(
                            "unexpected caching_sha2_password packet from the shard",
                        )));
                    }
                    let reply = if conn.is_tls() {
                        // Inside TLS the password goes in clear, NUL-terminated.
                        let mut pw = p.password.as_bytes().to_vec();
                        pw.push(0);
                        pw
                    } else if let Some(pem) = p.public_key {
                        // The pinned key: nothing asked, nothing to trust
                        // from the wire.
                        sha2::encrypt_password(pem, &nonce, p.password.as_bytes()).map_err(
                            |reason| BackendError::Plugin {
                                shard: shard.clone(),
                                plugin: format!("caching_sha2_password (pinned key: {reason})"),
                            },
                        )?
                    } else {
                        // Ask for the shard's public key, then send the
                        // password encrypted with it.
                        out.clear();
                        frame(&mut out, seq.wrapping_add(1), &[sha2::REQUEST_PUBLIC_KEY]);
                        conn.write_raw(&out).await.map_err(lost)?;
                        let (_, key_seq) = read(&mut conn, &mut buf, &shard).await?;
                        match buf.split_first() {
                            Some((&sha2::MORE_DATA, pem)) => {
                                let cipher =
                                    sha2::encrypt_password(pem, &nonce, p.password.as_bytes())
                                        .map_err(|reason| BackendError::Plugin {
                                            shard: shard.clone(),
                                            plugin: format!(
                                                "caching_sha2_password (RSA: {reason})"
                                            ),
                                        })?;
                                out.clear();
                                frame(&mut out, key_seq.wrapping_add(1), &cipher);
                                conn.write_raw(&out).await.map_err(lost)?;
                                continue;
                            }
                            Some((&reply::ERR, _)) => return Err(server_err(&shard, &buf)),
                            _ => return Err(proto(Malformed(
                                "the shard did not send its public key for caching_sha2_password",
                            ))),
                        }
                    };
                    out.clear();
                    frame(&mut out, seq.wrapping_add(1), &reply);
                    conn.write_raw(&out).await.map_err(lost)?;
                }
                _ => {
                    return Err(BackendError::Plugin {
                        shard,
                        plugin: "(extra authentication data requested)".into(),
                    })
                }
            }
        }
    }

    /// Whether replies on this connection end result sets with OK instead of EOF.
    pub fn deprecate_eof(&self) -> bool {
        self.capabilities & cap::DEPRECATE_EOF != 0
    }

    /// Sends a command (sequence ids from 0); returns the last sequence id
    /// used. The replies to detached commands are read first.
    pub async fn send(&mut self, payload: &[u8]) -> Result<u8, BackendError> {
        if self.detached > 0 {
            self.drain().await?;
        }
        if matches!(
            payload.first(),
            Some(&cmd::RESET_CONNECTION | &cmd::CHANGE_USER)
        ) {
            self.sql_modes = None;
        }
        let mut out = std::mem::take(&mut self.wbuf);
        out.clear();
        let last = frame(&mut out, 0, payload);
        let written = self.conn.write_raw(&out).await;
        if out.capacity() <= 64 * 1024 {
            self.wbuf = out;
        }
        written.map_err(|source| BackendError::Lost {
            shard: self.shard.clone(),
            source,
        })?;
        Ok(last)
    }

    /// Sends a command of idgate's own whose reply is only read before the
    /// next command (a `DO` that cannot fail: nobody waits for it, and the
    /// shard runs it before anything sent later).
    pub async fn send_detached(&mut self, payload: &[u8]) -> Result<(), BackendError> {
        self.send(payload).await?;
        self.detached += 1;
        Ok(())
    }

    /// Replies to detached commands not read yet.
    pub fn detached(&self) -> u32 {
        self.detached
    }

    /// Reads (and drops) the replies to detached commands; an error reply
    /// is dropped too, only a broken connection is an error.
    pub async fn drain(&mut self) -> Result<(), BackendError> {
        while self.detached > 0 {
            self.detached -= 1;
            match self.read_reply(Expect::Results).await {
                Ok(_) | Err(BackendError::Server { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Runs a command of idgate's own and collects the whole reply (for small
    /// replies: metadata queries, re-preparing a statement). An ERR reply is
    /// returned as [`BackendError::Server`].
    pub async fn run(
        &mut self,
        payload: &[u8],
        expect: Expect,
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        self.send(payload).await?;
        self.read_reply(expect).await
    }

    /// Reads the whole reply to a command already sent (see [`BackendConn::run`]).
    pub async fn read_reply(&mut self, expect: Expect) -> Result<Vec<Vec<u8>>, BackendError> {
        let mut tracker = Tracker::new(expect, self.deprecate_eof(), self.status);
        let mut packets = Vec::new();
        let mut buf = Vec::new();
        while !tracker.is_done() {
            read(&mut self.conn, &mut buf, &self.shard).await?;
            let kind = tracker
                .feed(buf.len().min(consts::MAX_PAYLOAD - 1), &buf)
                .map_err(|source| BackendError::Protocol {
                    shard: self.shard.clone(),
                    source,
                })?;
            match kind {
                Kind::Err => {
                    self.diagnostics = tracker.diagnostics();
                    return Err(server_err(&self.shard, &buf));
                }
                Kind::LocalInfile => {
                    // Never asked for by idgate's own queries; answer "no data".
                    self.conn.write_raw(&[0, 0, 0, 2]).await.map_err(|source| {
                        BackendError::Lost {
                            shard: self.shard.clone(),
                            source,
                        }
                    })?;
                    tracker.resume_after_infile();
                }
                _ => packets.push(std::mem::take(&mut buf)),
            }
        }
        self.status = tracker.status();
        self.diagnostics = tracker.diagnostics();
        self.insert_id = tracker.insert_id();
        Ok(packets)
    }

    /// Runs a text query of idgate's own and returns its rows as strings
    /// (NULL as `None`).
    pub async fn query_rows(
        &mut self,
        sql: &str,
    ) -> Result<Vec<Vec<Option<String>>>, BackendError> {
        Ok(self.query_typed_rows(sql).await?.1)
    }

    /// [`Self::query_rows`], with each column's type (its column
    /// definition's type byte and unsigned flag, as a bound parameter's
    /// type is written).
    pub async fn query_typed_rows(
        &mut self,
        sql: &str,
    ) -> Result<(Vec<[u8; 2]>, Vec<Vec<Option<String>>>), BackendError> {
        let mut payload = Vec::with_capacity(sql.len() + 1);
        payload.push(consts::cmd::QUERY);
        payload.extend_from_slice(sql.as_bytes());
        let packets = self.run(&payload, Expect::Results).await?;
        let proto = |source| BackendError::Protocol {
            shard: self.shard.clone(),
            source,
        };
        let Some(first) = packets.first() else {
            return Ok((Vec::new(), Vec::new()));
        };
        if first.first() == Some(&reply::OK) {
            return Ok((Vec::new(), Vec::new()));
        }
        let columns = crate::protocol::wire::Cursor::new(first)
            .lenenc()
            .map_err(proto)? as usize;
        let mut types = Vec::with_capacity(columns.min(4096));
        for p in packets.iter().skip(1).take(columns) {
            let def = crate::protocol::column::ColumnDef::decode(p).map_err(proto)?;
            let unsigned = if def.is_unsigned() { 0x80 } else { 0 };
            types.push([def.column_type, unsigned]);
        }
        let skip = 1 + columns + usize::from(!self.deprecate_eof());
        let mut rows = Vec::new();
        for p in packets.iter().skip(skip) {
            if p.first() == Some(&reply::EOF) && p.len() < consts::MAX_PAYLOAD {
                break;
            }
            let mut c = crate::protocol::wire::Cursor::new(p);
            let mut row = Vec::with_capacity(columns);
            for _ in 0..columns {
                if p.get(c.pos()) == Some(&0xfb) {
                    c.u8().map_err(proto)?;
                    row.push(None);
                } else {
                    let v = c.lenenc_bytes().map_err(proto)?;
                    row.push(Some(String::from_utf8_lossy(v).into_owned()));
                }
            }
            rows.push(row);
        }
        Ok((types, rows))
    }
}

async fn read(
    conn: &mut PacketConn,
    buf: &mut Vec<u8>,
    shard: &str,
) -> Result<(u8, u8), BackendError> {
    match conn.read_packet(buf, 1 << 30).await {
        Ok(Some(seqs)) => Ok(seqs),
        Ok(None) => Err(BackendError::Lost {
            shard: shard.to_string(),
            source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"),
        }),
        Err(ReadError::Io(source)) => Err(BackendError::Lost {
            shard: shard.to_string(),
            source,
        }),
        Err(e) => Err(BackendError::Protocol {
            shard: shard.to_string(),
            source: Malformed(match e {
                ReadError::TooLarge(_) => "reply too large",
                _ => "reply packets out of order",
            }),
        }),
    }
}

/// The first token of `plugin` (one of the two idgate speaks).
fn auth_token(plugin: &[u8], nonce: &[u8], password: &[u8]) -> Vec<u8> {
    if plugin == CACHING_SHA2 {
        sha2::scramble(nonce, password)
    } else {
        handshake::native_token(nonce, password)
    }
}

fn server_err(shard: &str, payload: &[u8]) -> BackendError {
    BackendError::from_err_packet(shard, payload)
}
