//! The MySQL client/server protocol: bytes only, no SQL semantics.
//!
//! - [`consts`]: capability and status flags, command bytes.
//! - [`codes`]: server error codes and SQLSTATEs idgate sends.
//! - [`wire`]: a bounds-checked reader and writers for protocol integers and strings.
//! - [`packet`]: framing (3-byte length, sequence id, 16 MiB split packets) over a stream.
//! - [`stream`]: that stream: plain TCP, or TLS after an upgrade.
//! - [`spare`]: read buffers parked by connections waiting for their peer.
//! - [`handshake`]: the initial handshake, both as server (to clients) and as client (to shards).
//! - [`mod@sha2`]: caching_sha2_password: scramble, RSA, the salted `password_hash`.
//! - [`reply`]: OK, ERR and EOF packets.
//! - [`response`]: where a server's reply to a command ends (result sets, multi-results).
//! - [`resultset`]: text result sets idgate writes itself (admin commands).
//! - [`mod@column`]: column definition packets.
//! - [`row`]: result-set rows, text and binary, split into values and built from them.
//! - [`stmt`]: COM_STMT_EXECUTE parameter blocks and the binary form of one value.

pub mod codes;
pub mod column;
pub mod consts;
pub mod handshake;
pub mod packet;
pub mod reply;
pub mod response;
pub mod resultset;
pub mod row;
pub mod sha2;
pub mod spare;
pub mod stmt;
pub mod stream;
pub mod wire;

/// A packet that does not follow the protocol. Never a panic: the session
/// answers with an error or closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed packet: {0}")]
pub struct Malformed(pub &'static str);
