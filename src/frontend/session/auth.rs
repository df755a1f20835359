//! Checking a client's password with the user's plugin, for a login and
//! for COM_CHANGE_USER alike: the auth switch when the client started
//! with another plugin than the user's (a user without `auth` whose
//! password idgate holds in plain text takes a token of either plugin as
//! it comes), mysql_native_password's one round, and
//! caching_sha2_password's fast path, full authentication over TLS
//! (cleartext) or by RSA (see `protocol::sha2` for the exchange).
//!
//! The fast path needs SHA256(SHA256(password)): known from a plaintext
//! password, otherwise cached here after the user's first full
//! authentication (as MySQL does; the cache lives as long as the process).

use crate::config::{AuthPlugin, Secret};
use crate::frontend::shared::Shared;
use crate::protocol::codes::{self, ErrorCode};
use crate::protocol::handshake::{self, NATIVE_PASSWORD};
use crate::protocol::packet::{PacketConn, ReadError};
use crate::protocol::reply;
use crate::protocol::sha2;
use std::sync::atomic::Ordering;

/// Largest packet read before the client has authenticated, its first
/// packets and the exchange after them alike (a handshake response with a
/// long user name, schema and connection attributes fits many times; an
/// RSA block is 256 or 512 bytes): nothing bigger is read (or allocated).
pub const MAX_AUTH_PACKET: usize = 16 << 10;

/// One password check: what the client sent first.
pub struct Attempt<'a> {
    pub user: &'a [u8],
    /// The plugin the client's token was made with (empty: none named).
    pub plugin: &'a [u8],
    pub token: Vec<u8>,
    /// This connection's nonce.
    pub nonce: &'a [u8],
    /// Sequence id of the next packet idgate sends.
    pub seq: u8,
}

/// The outcome of a check that ran to its end.
pub struct Verdict {
    pub accepted: bool,
    /// Sequence id for the packet that answers it (OK or the 1045 error).
    pub seq: u8,
    /// Whether the client sent a password (for "using password: YES").
    pub used_password: bool,
}

/// Why a check could not finish; the client has been told when it could be.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("client connection lost during authentication: {0}")]
    Io(#[from] std::io::Error),
    #[error("{message}")]
    Refused { code: ErrorCode, message: String },
}

/// Which of idgate's two plugins a client's answer was made with.
fn answered(named: &[u8]) -> Option<AuthPlugin> {
    [
        AuthPlugin::MysqlNativePassword,
        AuthPlugin::CachingSha2Password,
    ]
    .into_iter()
    .find(|p| p.wire_name() == named)
}

/// Whether a user's login goes on with the plugin the client's first
/// answer was made with, without a switch: a user without `auth` whose
/// password idgate holds in plain text can check a token of either, so a
/// driver that knows only mysql_native_password (Node's `mysql`, older PHP
/// and Java drivers) logs in through idgate as it does directly to
/// MariaDB, whatever the greeting named. A user with `auth` gets that
/// plugin and no other, and a hashed password checks one plugin only.
fn takes_either(user: &crate::config::UserConfig) -> bool {
    user.auth.is_none() && matches!(user.secret, Secret::Plain(_))
}

/// Runs the exchange up to (not including) the OK or error that ends it.
pub async fn authenticate(
    client: &mut PacketConn,
    shared: &Shared,
    a: Attempt<'_>,
) -> Result<Verdict, AuthError> {
    let account = shared.user(a.user);
    let mut seq = a.seq;
    let mut token = a.token;
    let named = if a.plugin.is_empty() {
        NATIVE_PASSWORD
    } else {
        a.plugin
    };
    let plugin = match account {
        Some((_, u)) if takes_either(u) => answered(named).unwrap_or(u.plugin),
        Some((_, u)) => u.plugin,
        // As a user without `auth` (the most common kind), so that the
        // exchange up to the refusal looks like theirs.
        None => answered(named).unwrap_or(shared.config.server.default_auth),
    };
    let token_fits = token.is_empty()
        || token.len()
            == match plugin {
                AuthPlugin::MysqlNativePassword => 20,
                AuthPlugin::CachingSha2Password => 32,
            };
    if named != plugin.wire_name() || !token_fits {
        let switch = handshake::auth_switch_request(plugin.wire_name(), a.nonce);
        client.write_packet(seq, &switch).await?;
        let (p, next) = read(client, shared, seq.wrapping_add(1)).await?;
        token = p;
        seq = next;
    }
    let used_password = !token.is_empty();
    let verdict = |accepted, seq| Verdict {
        accepted,
        seq,
        used_password,
    };
    let Some((index, user)) = account else {
        if plugin == AuthPlugin::CachingSha2Password && !token.is_empty() {
            // As for a user whose hash is not cached yet: the password is
            // asked for (then refused), so the exchange does not tell an
            // unknown user from a hashed one.
            client.write_packet(seq, &sha2::PERFORM_FULL_AUTH).await?;
            let (_, next) = full_auth(client, shared, a.nonce, seq.wrapping_add(1)).await?;
            return Ok(verdict(false, next));
        }
        return Ok(verdict(false, seq));
    };
    let secret = &user.secret;
    let accepted = match plugin {
        AuthPlugin::MysqlNativePassword => secret.verify_native(a.nonce, &token),
        AuthPlugin::CachingSha2Password => {
            if token.is_empty() || secret.is_empty() {
                return Ok(verdict(token.is_empty() && secret.is_empty(), seq));
            }
            let known = secret.sha2_stage2().or_else(|| shared.sha2.cached(index));
            if let Some(stage2) = known {
                // A wrong scramble against a known hash is a wrong password
                // (MySQL does not fall back to a full authentication either).
                if !sha2::verify_scramble(a.nonce, &stage2, &token) {
                    return Ok(verdict(false, seq));
                }
                // Sent with the OK (or error) that follows: one write.
                client.queue_packet(seq, &sha2::FAST_AUTH_OK);
                shared.sha2.fast.fetch_add(1, Ordering::Relaxed);
                return Ok(verdict(true, seq.wrapping_add(1)));
            }
            client.write_packet(seq, &sha2::PERFORM_FULL_AUTH).await?;
            let (password, next) = full_auth(client, shared, a.nonce, seq.wrapping_add(1)).await?;
            seq = next;
            let ok = password.as_deref().is_some_and(|p| check_full(secret, p));
            if let (true, Some(p)) = (ok, &password) {
                shared.sha2.cache.lock().insert(index, sha2::stage2(p));
                let counter = if client.is_tls() {
                    &shared.sha2.full_tls
                } else {
                    &shared.sha2.full_rsa
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            ok
        }
    };
    Ok(verdict(accepted, seq))
}

/// A password sent in full checked against the stored secret (never empty here).
fn check_full(secret: &Secret, password: &[u8]) -> bool {
    !password.is_empty() && secret.verify_plain(password)
}

/// The full authentication after PERFORM_FULL_AUTH: the password (`None`
/// when what came does not decrypt), and the next sequence id to send.
async fn full_auth(
    client: &mut PacketConn,
    shared: &Shared,
    nonce: &[u8],
    expected: u8,
) -> Result<(Option<Vec<u8>>, u8), AuthError> {
    let (mut p, mut seq) = read(client, shared, expected).await?;
    if p.as_slice() == [sha2::REQUEST_PUBLIC_KEY] {
        let keys = match shared.sha2.keys().await {
            Ok(k) => k,
            Err(e) => {
                tracing::error!("caching_sha2_password: {e}");
                return refuse(
                    client,
                    seq,
                    codes::ER_HANDSHAKE_ERROR,
                    format!("idgate has no RSA key to send ({e}); connect with TLS"),
                )
                .await;
            }
        };
        let mut out = Vec::with_capacity(1 + keys.public_pem.len());
        out.push(sha2::MORE_DATA);
        out.extend_from_slice(&keys.public_pem);
        client.write_packet(seq, &out).await?;
        shared.sha2.key_requests.fetch_add(1, Ordering::Relaxed);
        (p, seq) = read(client, shared, seq.wrapping_add(1)).await?;
    }
    if client.is_tls() {
        // In clear inside TLS, NUL-terminated.
        let pw = p.strip_suffix(&[0]).unwrap_or(&p).to_vec();
        return Ok((Some(pw), seq));
    }
    let keys = match shared.sha2.keys().await {
        Ok(k) => k,
        Err(e) => {
            tracing::error!("caching_sha2_password: {e}");
            return Ok((None, seq));
        }
    };
    // Decryption is CPU work of a millisecond or so: done in place (a
    // login's cost, as MySQL's).
    Ok((keys.decrypt_password(nonce, &p), seq))
}

/// Reads the client's next packet of the exchange, which must carry
/// sequence id `expected`: its payload and the sequence id to answer with.
async fn read(
    client: &mut PacketConn,
    shared: &Shared,
    expected: u8,
) -> Result<(Vec<u8>, u8), AuthError> {
    let mut buf = Vec::new();
    let last = read_login_packet(
        client,
        shared,
        &mut buf,
        expected,
        (
            "during authentication",
            "the client did not go on with its authentication in time",
        ),
    )
    .await?;
    Ok((buf, last.wrapping_add(1)))
}

/// Reads one packet of a client that has not authenticated yet into `buf`:
/// at most [`MAX_AUTH_PACKET`] bytes, within `shared.login_timeout`, with
/// sequence id `expected`; the sequence id of its last physical packet. A
/// packet out of order, too large or malformed is answered with the
/// client's error before the `Refused`. `(when, timed_out)`: the words the
/// too-large error and the time-out use (the login's first packets, or the
/// exchange after them).
pub(in crate::frontend) async fn read_login_packet(
    client: &mut PacketConn,
    shared: &Shared,
    buf: &mut Vec<u8>,
    expected: u8,
    (when, timed_out): (&str, &'static str),
) -> Result<u8, AuthError> {
    let read = tokio::time::timeout(
        shared.login_timeout,
        client.read_packet(buf, MAX_AUTH_PACKET),
    );
    let Ok(read) = read.await else {
        return Err(AuthError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            timed_out,
        )));
    };
    match read {
        Ok(Some((first, last))) if first == expected => Ok(last),
        Ok(Some(_)) => {
            refuse(
                client,
                expected,
                codes::ER_NET_PACKETS_OUT_OF_ORDER,
                "Got packets out of order".into(),
            )
            .await
        }
        Ok(None) => Err(AuthError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "client closed the connection",
        ))),
        Err(ReadError::Io(e)) => Err(e.into()),
        Err(ReadError::TooLarge(n)) => {
            refuse(
                client,
                expected,
                codes::ER_NET_PACKET_TOO_LARGE,
                format!(
                    "Got a packet bigger than {MAX_AUTH_PACKET} bytes {when} ({n} bytes or more)"
                ),
            )
            .await
        }
        Err(e) => {
            refuse(
                client,
                expected,
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
) -> Result<T, AuthError> {
    let _ = client
        .write_packet(seq, &reply::err_packet(&code, &message))
        .await;
    Err(AuthError::Refused { code, message })
}
