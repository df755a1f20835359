//! The connection phase with a client: handshake and authentication.

use crate::frontend::shared::Shared;
use crate::protocol::codes::{self, ErrorCode};
use crate::protocol::consts::{cap, status};
use crate::protocol::handshake::{
    self, ClientHandshake, ServerHandshake, NATIVE_PASSWORD, SSL_REQUEST_LEN,
};
use crate::protocol::packet::{PacketConn, ReadError};
use crate::protocol::reply;
use rand::RngExt;
use tracing::warn;

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
}

/// Largest packet a client may send before it has authenticated: a
/// handshake response with a long user name, schema and connection
/// attributes fits many times; nothing bigger is read (or allocated).
pub const MAX_PRE_AUTH_PACKET: usize = 16 << 10;

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
    let offered = (cap::SUPPORTED & info.capabilities) | cap::REQUIRED | cap::PLUGIN_AUTH;
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
        auth_plugin: NATIVE_PASSWORD.to_vec(),
    };
    client.write_packet(0, &greeting.encode()).await?;

    let mut buf = Vec::new();
    let seq = read(client, shared, &mut buf, 1).await?;
    if buf.len() == SSL_REQUEST_LEN {
        return refuse(
            client,
            seq + 1,
            codes::ER_HANDSHAKE_ERROR,
            "TLS is not supported by idgate; connect without SSL".into(),
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
    let mut seq = seq + 1;
    let mut token = hs.auth_response.clone();
    let plugin_ok = match &hs.auth_plugin {
        None => true,
        Some(p) => p.is_empty() || p == NATIVE_PASSWORD,
    };
    if !plugin_ok
        || (hs.capabilities & cap::PLUGIN_AUTH != 0 && token.len() != 20 && !token.is_empty())
    {
        client
            .write_packet(
                seq,
                &handshake::auth_switch_request(NATIVE_PASSWORD, &scramble),
            )
            .await?;
        seq = read(client, shared, &mut buf, seq + 1).await? + 1;
        token = buf.clone();
    }
    let user = String::from_utf8_lossy(&hs.user).into_owned();
    let peer_ip = client.stream().peer_addr().ok().map(|a| a.ip());
    if let Some(ip) = peer_ip {
        // After repeated failures from this address, every login from it
        // waits before its password is checked (this connection only).
        let (delay, failures) = shared.login_throttle.delay(ip);
        if !delay.is_zero() {
            warn!(
                peer = %ip,
                user = %user,
                failures,
                delay_ms = delay.as_millis() as u64,
                "login delayed after repeated failed logins from this address"
            );
            tokio::time::sleep(delay).await;
        }
    }
    let accepted = shared
        .user(&hs.user)
        .is_some_and(|(_, u)| u.secret.verify_native(&scramble, &token));
    if let Some(ip) = peer_ip {
        if accepted {
            shared.login_throttle.succeeded(ip);
        } else {
            shared.login_throttle.failed(ip);
        }
    }
    if !accepted {
        let using = if token.is_empty() { "NO" } else { "YES" };
        let peer = peer_ip.map(|a| a.to_string()).unwrap_or_default();
        return refuse(
            client,
            seq,
            codes::ER_ACCESS_DENIED_ERROR,
            format!("Access denied for user '{user}'@'{peer}' (using password: {using})"),
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

async fn read(
    client: &mut PacketConn,
    shared: &Shared,
    buf: &mut Vec<u8>,
    expected_seq: u8,
) -> Result<u8, LoginError> {
    let read = tokio::time::timeout(
        shared.login_timeout,
        client.read_packet(buf, MAX_PRE_AUTH_PACKET),
    );
    let Ok(read) = read.await else {
        return Err(LoginError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client sent nothing to log in with in time",
        )));
    };
    match read {
        Ok(Some((first, last))) if first == expected_seq => Ok(last),
        Ok(Some(_)) => {
            refuse(
                client,
                expected_seq,
                codes::ER_NET_PACKETS_OUT_OF_ORDER,
                "Got packets out of order".into(),
            )
            .await
        }
        Ok(None) => Err(LoginError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "client closed the connection",
        ))),
        Err(ReadError::Io(e)) => Err(e.into()),
        Err(ReadError::TooLarge(n)) => {
            refuse(
                client,
                expected_seq,
                codes::ER_NET_PACKET_TOO_LARGE,
                format!(
                    "Got a packet bigger than {MAX_PRE_AUTH_PACKET} bytes before authentication ({n} bytes or more)"
                ),
            )
            .await
        }
        Err(e) => {
            refuse(
                client,
                expected_seq,
                codes::ER_HANDSHAKE_ERROR,
                format!("Bad handshake: {e}"),
            )
            .await
        }
    }
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
