//! The connection phase with a client: handshake and authentication.

use crate::frontend::session::auth::{self, Attempt, AuthError};
use crate::frontend::shared::Shared;
use crate::protocol::codes::{self, ErrorCode};
use crate::protocol::consts::{cap, status};
use crate::protocol::handshake::{ClientHandshake, ServerHandshake, SSL_REQUEST_LEN};
use crate::protocol::packet::PacketConn;
use crate::protocol::reply;
use rand::RngExt;

/// Who logged in, and how.
#[derive(Debug, Clone)]
pub struct Login {
    pub user: String,
    /// Capabilities both sides have.
    pub capabilities: u32,
    /// MariaDB extended capabilities both sides have.
    pub ext_capabilities: u32,
    pub charset: u8,
    pub database: Option<String>,
    pub attrs: Option<Vec<u8>>,
    /// The nonce of this connection (COM_CHANGE_USER is checked against it too).
    pub scramble: Vec<u8>,
    /// Sequence id of the packet that completes the login (OK, or an error
    /// when the client's database does not exist): the caller sends it.
    pub reply_seq: u8,
}

/// Why a client was not let in. The client has been sent the error already.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("client connection lost during login: {0}")]
    Io(#[from] std::io::Error),
    #[error("{message}")]
    Refused { code: ErrorCode, message: String },
    /// The TLS handshake after the client's SSL request failed (nothing can
    /// be sent: the client reads TLS records now).
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
}

impl From<AuthError> for LoginError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Io(e) => LoginError::Io(e),
            AuthError::Refused { code, message } => LoginError::Refused { code, message },
        }
    }
}

/// Largest packet a client may send before it has authenticated
/// ([`auth::MAX_AUTH_PACKET`]).
pub const MAX_PRE_AUTH_PACKET: usize = auth::MAX_AUTH_PACKET;

/// A client that asked for TLS and stalls in the handshake gives its
/// connection slot back after this long.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// MySQL's message for error 3159.
pub(in crate::frontend) const INSECURE_REFUSED: &str =
    "Connections using insecure transport are prohibited while --require_secure_transport=ON.";

/// A fresh 20-byte nonce of printable characters (no NUL: it is sent NUL-terminated).
pub fn new_scramble() -> Vec<u8> {
    let mut rng = rand::rng();
    (0..20).map(|_| rng.random_range(33u8..127)).collect()
}

/// Runs the handshake with a newly accepted client, up to (not including)
/// the final OK packet.
pub async fn login(
    client: &mut PacketConn,
    shared: &Shared,
    connection_id: u32,
) -> Result<Login, LoginError> {
    let info = shared.shard_info.read().clone();
    let scramble = new_scramble();
    // LONG_PASSWORD only if the shard offers it: MariaDB leaves it out and
    // uses the extended capabilities instead; idgate mirrors that.
    let tls = shared.client_tls.as_ref().map(|t| t.acceptor());
    let offered = (cap::SUPPORTED & info.capabilities)
        | cap::REQUIRED
        | cap::PLUGIN_AUTH
        | if tls.is_some() { cap::SSL } else { 0 };
    let offered_ext = if offered & cap::LONG_PASSWORD == 0 {
        info.ext_capabilities & cap::EXT_SUPPORTED
    } else {
        0
    };
    let greeting = ServerHandshake {
        server_version: info.server_version.clone(),
        connection_id,
        scramble: scramble.clone(),
        capabilities: offered,
        ext_capabilities: offered_ext,
        charset: info.charset,
        status: status::AUTOCOMMIT,
        auth_plugin: shared.config.server.default_auth.wire_name().to_vec(),
    };
    client.write_packet(0, &greeting.encode()).await?;

    let mut buf = Vec::new();
    // Without TLS nothing after the first packet can be a TLS handshake's:
    // it is read with as few reads as the bytes arrive in.
    let greedy = tls.is_none();
    let first = tokio::time::timeout(shared.login_timeout, read_first(client, &mut buf, greedy));
    let Ok(first) = first.await else {
        return Err(LoginError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client sent nothing to log in with in time",
        )));
    };
    let mut seq = first?;
    if buf.len() == SSL_REQUEST_LEN {
        let Some(acceptor) = tls else {
            return refuse(
                client,
                seq + 1,
                codes::ER_HANDSHAKE_ERROR,
                "TLS is not configured on idgate (no [server] tls_cert); connect without SSL"
                    .into(),
            )
            .await;
        };
        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, client.accept_tls(&acceptor)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(LoginError::Tls(e)),
            Err(_) => {
                return Err(LoginError::Tls(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client did not finish the TLS handshake within 30 s",
                )))
            }
        }
        seq = read(client, shared, &mut buf, seq + 1).await?;
    } else if shared.config.server.require_tls {
        return refuse(
            client,
            seq + 1,
            codes::ER_SECURE_TRANSPORT_REQUIRED,
            INSECURE_REFUSED.into(),
        )
        .await;
    }
    let hs = match ClientHandshake::decode(&buf) {
        Ok(hs) => hs,
        Err(e) => {
            return refuse(
                client,
                seq + 1,
                codes::ER_HANDSHAKE_ERROR,
                format!("Bad handshake: {}", e.0),
            )
            .await
        }
    };
    let user = String::from_utf8_lossy(&hs.user).into_owned();
    let peer_ip = client.peer_ip();
    if let Some(ip) = peer_ip {
        // After repeated failures from this address, every login from it
        // waits before its password is checked (this connection only).
        shared.login_throttle.wait(ip, &user, "login").await;
    }
    let attempt = Attempt {
        user: &hs.user,
        plugin: hs.auth_plugin.as_deref().unwrap_or_default(),
        token: hs.auth_response.clone(),
        nonce: &scramble,
        seq: seq + 1,
    };
    let verdict = match auth::authenticate(client, shared, attempt).await {
        Ok(v) => v,
        Err(e) => {
            if let Some(ip) = peer_ip {
                // An exchange left half-way counts as a failure.
                shared.login_throttle.failed(ip);
            }
            return Err(e.into());
        }
    };
    let (accepted, seq) = (verdict.accepted, verdict.seq);
    if let Some(ip) = peer_ip {
        if accepted {
            shared.login_throttle.succeeded(ip);
        } else {
            shared.login_throttle.failed(ip);
        }
    }
    if !accepted {
        let using = if verdict.used_password { "YES" } else { "NO" };
        let peer = peer_ip.map(|a| a.to_string()).unwrap_or_default();
        return refuse(
            client,
            seq,
            codes::ER_ACCESS_DENIED_ERROR,
            format!("Access denied for user '{user}'@'{peer}' (using password: {using})"),
        )
        .await;
    }
    // Checked once the password is: the refusal tells nothing about
    // which accounts exist.
    if !client.is_tls() && shared.user_requires_tls(&hs.user) {
        return refuse(
            client,
            seq,
            codes::ER_SECURE_TRANSPORT_REQUIRED,
            format!("{INSECURE_REFUSED} (user '{user}' requires TLS)"),
        )
        .await;
    }
    Ok(Login {
        reply_seq: seq,
        user,
        capabilities: hs.capabilities & offered,
        ext_capabilities: hs.ext_capabilities & offered_ext,
        charset: if hs.charset == 0 {
            info.charset
        } else {
            hs.charset
        },
        database: hs
            .database
            .map(|d| String::from_utf8_lossy(&d).into_owned()),
        attrs: hs.attrs,
        scramble,
    })
}

/// Reads the client's first packet (its handshake response or an SSL
/// request) without reading past it: after an SSL request the next bytes
/// are the TLS handshake's. `greedy` (no TLS offered): whatever has
/// arrived is read at once, the header and the rest in one read.
async fn read_first(
    client: &mut PacketConn,
    buf: &mut Vec<u8>,
    greedy: bool,
) -> Result<u8, LoginError> {
    if greedy {
        client.fill_to(4).await?;
    } else {
        client.fill_exact(4).await?;
    }
    let head = client.buffered();
    if head.first() == Some(&0x16) && head.get(1) == Some(&0x03) {
        // A TLS record (a ClientHello) instead of a MySQL packet.
        return refuse(
            client,
            1,
            codes::ER_HANDSHAKE_ERROR,
            "Bad handshake: a TLS handshake arrived without an SSL request (MySQL clients switch to TLS inside the protocol)".into(),
        )
        .await;
    }
    let Some(h) = client.header_at(0) else {
        return Err(LoginError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    };
    if h.seq != 1 {
        return refuse(
            client,
            1,
            codes::ER_NET_PACKETS_OUT_OF_ORDER,
            "Got packets out of order".into(),
        )
        .await;
    }
    if h.len > MAX_PRE_AUTH_PACKET {
        return refuse(
            client,
            2,
            codes::ER_NET_PACKET_TOO_LARGE,
            format!(
                "Got a packet bigger than {MAX_PRE_AUTH_PACKET} bytes before authentication ({} bytes)",
                h.len
            ),
        )
        .await;
    }
    if greedy {
        client.fill_to(4 + h.len).await?;
    } else {
        client.fill_exact(4 + h.len).await?;
    }
    buf.clear();
    buf.extend_from_slice(client.buffered().get(4..4 + h.len).unwrap_or_default());
    client.consume(4 + h.len);
    Ok(h.seq)
}

/// The client's next login packet (see [`auth::read_login_packet`]).
async fn read(
    client: &mut PacketConn,
    shared: &Shared,
    buf: &mut Vec<u8>,
    expected_seq: u8,
) -> Result<u8, LoginError> {
    auth::read_login_packet(
        client,
        shared,
        buf,
        expected_seq,
        (
            "before authentication",
            "the client sent nothing to log in with in time",
        ),
    )
    .await
    .map_err(LoginError::from)
}

async fn refuse<T>(
    client: &mut PacketConn,
    seq: u8,
    code: ErrorCode,
    message: String,
) -> Result<T, LoginError> {
    let _ = client
        .write_packet(seq, &reply::err_packet(&code, &message))
        .await;
    Err(LoginError::Refused { code, message })
}
