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

/// What a hook may do with a packet of the reply: keep it, or replace its payload.
pub type Hook<'a> = &'a mut (dyn FnMut(Kind, &[u8]) -> Option<Vec<u8>> + Send);

/// Relays one reply from `backend` to `client` until `tracker` says it is
/// complete. `seq_delta` is added to every sequence id (non-zero only when the
/// command was re-framed into a different number of packets than the client
/// sent). LOCAL INFILE requests are answered by relaying the client's file
/// packets to the shard.
pub async fn relay_reply(
    backend: &mut BackendConn,
    client: &mut PacketConn,
    tracker: &mut Tracker,
    seq_delta: u8,
    hook: Hook<'_>,
) -> Result<(), RelayError> {
    let shard = backend.shard.clone();
    let protocol = |source: Malformed| {
        RelayError::Backend(BackendError::Protocol {
            shard: shard.clone(),
            source,
        })
    };
    let mut pos = 0;
    loop {
        while let Some(h) = backend.conn.header_at(pos) {
            let end = pos + 4 + h.len;
            if backend.conn.buffered().len() < end {
                break;
            }
            let seq = h.seq.wrapping_add(seq_delta);
            let buf = backend.conn.buffered_mut();
            buf[pos + 3] = seq;
            let payload = &buf[pos + 4..end];
            let kind = tracker.feed(h.len, payload).map_err(protocol)?;
            if let Some(replacement) = hook(kind, payload) {
                flush(backend, client, pos).await?;
                let mut out = Vec::with_capacity(replacement.len() + 4);
                frame(&mut out, seq, &replacement);
                client.write_raw(&out).await.map_err(RelayError::Client)?;
                backend.conn.consume(4 + h.len);
                pos = 0;
            } else {
                pos = end;
            }
            if kind == Kind::LocalInfile {
                flush(backend, client, pos).await?;
                pos = 0;
                relay_infile(backend, client, seq_delta).await?;
                tracker.resume_after_infile();
            }
            if tracker.is_done() {
                break;
            }
        }
        if tracker.is_done() {
            flush(backend, client, pos).await?;
            backend.status = tracker.status();
            return Ok(());
        }
        if pos >= FLUSH_AT {
            flush(backend, client, pos).await?;
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

/// Writes the first `n` buffered bytes of the shard's reply to the client.
async fn flush(
    backend: &mut BackendConn,
    client: &mut PacketConn,
    n: usize,
) -> Result<(), RelayError> {
    if n > 0 {
        client
            .write_raw(&backend.conn.buffered()[..n])
            .await
            .map_err(RelayError::Client)?;
        backend.conn.consume(n);
    }
    Ok(())
}

/// Passes the client's LOCAL INFILE packets to the shard, physical packet by
/// physical packet, up to and including the empty packet that ends the file.
async fn relay_infile(
    backend: &mut BackendConn,
    client: &mut PacketConn,
    seq_delta: u8,
) -> Result<(), RelayError> {
    let lost = |source| {
        RelayError::Backend(BackendError::Lost {
            shard: backend.shard.clone(),
            source,
        })
    };
    loop {
        client.fill_to(4).await.map_err(RelayError::Client)?;
        let Some(h) = client.header_at(0) else {
            continue;
        };
        client
            .fill_to(4 + h.len)
            .await
            .map_err(RelayError::Client)?;
        let buf = client.buffered_mut();
        buf[3] = h.seq.wrapping_sub(seq_delta);
        backend
            .conn
            .write_raw(&client.buffered()[..4 + h.len])
            .await
            .map_err(lost)?;
        client.consume(4 + h.len);
        if h.len == 0 {
            return Ok(());
        }
    }
}
