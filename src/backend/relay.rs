//! Relaying a shard's reply to the client.
//!
//! Packets are passed on as they arrive, byte for byte, in as few writes as
//! possible: a reply that fits in one read goes out in one write. Nothing is
//! decoded beyond what [`Tracker`] needs to find the end of the reply, except
//! packets a caller's hook asks to replace (an OK packet whose last_insert_id
//! must change). Whole result sets are never buffered.

use super::conn::{BackendConn, BackendError};
use crate::protocol::packet::{frame, PacketConn};
use crate::protocol::response::{Kind, Tracker};
use crate::protocol::Malformed;
use std::io;

/// Complete packets are passed on once this many bytes are pending.
const FLUSH_AT: usize = 64 * 1024;

/// Which side failed while relaying.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The shard's connection broke or it sent something invalid: the client
    /// should get an error, and the shard connection is unusable.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The client went away: the session ends.
    #[error("client connection lost: {0}")]
    Client(io::Error),
}

/// What a hook decides for one packet of the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Pass it on unchanged.
    Keep,
    /// Pass on this payload instead.
    Replace(Vec<u8>),
    /// Do not pass it on (e.g. a parameter definition of a parameter idgate added).
    Drop,
}

/// Called for every packet of a reply, with what the tracker made of it.
pub type Hook<'a> = &'a mut (dyn FnMut(Kind, &[u8]) -> Action + Send);

/// Relays one reply from `backend` to `client` until `tracker` says it is
/// complete.
///
/// The shard's packets must arrive numbered from `backend_seq` (one past
/// the last packet of the command); a gap is a protocol error. They are
/// renumbered from `*next_seq` (the sequence id the client expects next), so
/// a command re-framed into a different number of packets, or packets dropped
/// by the hook, still reach the client in order; `*next_seq` is advanced past
/// every packet written, also when the relay fails half-way, so an error
/// packet sent after a partial reply stays in sequence. LOCAL INFILE requests
/// are answered by relaying the client's file packets to the shard.
pub async fn relay_reply(
    backend: &mut BackendConn,
    client: &mut PacketConn,
    tracker: &mut Tracker,
    backend_seq: u8,
    next_seq: &mut u8,
    hook: Hook<'_>,
) -> Result<(), RelayError> {
    // Sequence id of the next packet from the shard, and of the next one
    // to the client counting packets not yet flushed.
    let mut expected = backend_seq;
    let mut seq = *next_seq;
    // Bytes at the front of the read buffer that are checked and ready to pass on.
    let mut pos = 0;
    loop {
        while let Some(h) = backend.conn.header_at(pos) {
            let end = pos + 4 + h.len;
            if backend.conn.buffered().len() < end {
                break;
            }
            if h.seq != expected {
                // What is pending is not passed on: the client gets the error
                // in its place, where it can read one.
                return Err(protocol(
                    &backend.shard,
                    Malformed("reply packets out of order"),
                ));
            }
            expected = expected.wrapping_add(1);
            let buf = backend.conn.buffered_mut();
            buf[pos + 3] = seq;
            let payload = &buf[pos + 4..end];
            let kind = tracker
                .feed(h.len, payload)
                .map_err(|e| protocol(&backend.shard, e))?;
            match hook(kind, payload) {
                Action::Keep => {
                    pos = end;
                    seq = seq.wrapping_add(1);
                }
                Action::Replace(replacement) => {
                    flush(backend, client, pos, next_seq, seq).await?;
                    let mut out = Vec::with_capacity(replacement.len() + 4);
                    seq = frame(&mut out, seq, &replacement).wrapping_add(1);
                    client.write_raw(&out).await.map_err(RelayError::Client)?;
                    *next_seq = seq;
                    backend.conn.consume(4 + h.len);
                    pos = 0;
                }
                Action::Drop => {
                    flush(backend, client, pos, next_seq, seq).await?;
                    backend.conn.consume(4 + h.len);
                    pos = 0;
                }
            }
            if kind == Kind::LocalInfile {
                flush(backend, client, pos, next_seq, seq).await?;
                pos = 0;
                let (client_next, backend_next) = relay_infile(backend, client, h.seq).await?;
                seq = client_next;
                *next_seq = seq;
                expected = backend_next;
                tracker.resume_after_infile();
            }
            if tracker.is_done() {
                break;
            }
        }
        if tracker.is_done() {
            flush(backend, client, pos, next_seq, seq).await?;
            backend.status = tracker.status();
            backend.diagnostics = tracker.diagnostics();
            backend.insert_id = tracker.insert_id();
            return Ok(());
        }
        if pos >= FLUSH_AT {
            flush(backend, client, pos, next_seq, seq).await?;
            pos = 0;
        }
        backend.conn.fill().await.map_err(|source| {
            RelayError::Backend(BackendError::Lost {
                shard: backend.shard.clone(),
                source,
            })
        })?;
    }
}

/// The error of a reply `shard` framed wrongly (the name is copied only
/// then, not for every reply).
fn protocol(shard: &str, source: Malformed) -> RelayError {
    RelayError::Backend(BackendError::Protocol {
        shard: shard.to_string(),
        source,
    })
}

/// Writes the first `n` buffered bytes of the shard's reply to the client;
/// `seq` is the sequence id that follows them.
async fn flush(
    backend: &mut BackendConn,
    client: &mut PacketConn,
    n: usize,
    next_seq: &mut u8,
    seq: u8,
) -> Result<(), RelayError> {
    if n > 0 {
        client
            .write_raw(&backend.conn.buffered()[..n])
            .await
            .map_err(RelayError::Client)?;
        backend.conn.consume(n);
        *next_seq = seq;
    }
    Ok(())
}

/// Passes the client's LOCAL INFILE packets to the shard, physical packet by
/// physical packet, up to and including the empty packet that ends the file.
/// `request_seq` is the shard's sequence id of its request; the client's
/// packets are renumbered after it. Returns the sequence ids the client and
/// the shard use for the next packet of the reply.
async fn relay_infile(
    backend: &mut BackendConn,
    client: &mut PacketConn,
    request_seq: u8,
) -> Result<(u8, u8), RelayError> {
    let shard = backend.shard.clone();
    let mut backend_seq = request_seq;
    loop {
        client.fill_to(4).await.map_err(RelayError::Client)?;
        let Some(h) = client.header_at(0) else {
            continue;
        };
        client
            .fill_to(4 + h.len)
            .await
            .map_err(RelayError::Client)?;
        backend_seq = backend_seq.wrapping_add(1);
        let client_next = h.seq.wrapping_add(1);
        client.buffered_mut()[3] = backend_seq;
        backend
            .conn
            .write_raw(&client.buffered()[..4 + h.len])
            .await
            .map_err(|source| {
                RelayError::Backend(BackendError::Lost {
                    shard: shard.clone(),
                    source,
                })
            })?;
        client.consume(4 + h.len);
        if h.len == 0 {
            return Ok((client_next, backend_seq.wrapping_add(1)));
        }
    }
}
