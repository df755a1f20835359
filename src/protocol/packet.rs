//! Packet framing over a byte stream.
//!
//! A MySQL packet is a 3-byte little-endian payload length, a 1-byte sequence
//! id, and the payload. A payload of 16 MiB - 1 or more is split: every
//! physical packet of exactly `0xffffff` bytes is continued by the next one,
//! and a payload that is an exact multiple ends with an empty packet.

use super::consts::MAX_PAYLOAD;
use super::spare;
use super::stream::Stream;
use bytes::{Buf, BufMut, BytesMut};
use std::io;
use std::net::SocketAddr;
use tokio::net::TcpStream;

/// Initial read buffer size; buffers that grew past [`SHRINK_ABOVE`] are given back when idle.
const READ_CHUNK: usize = spare::CHUNK;
const SHRINK_ABOVE: usize = 256 * 1024;

/// Why a logical packet could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The peer closed the connection or the socket failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A payload larger than the configured maximum.
    #[error("packet of {0} bytes or more exceeds the limit")]
    TooLarge(usize),
    /// Sequence ids out of order inside one split packet.
    #[error("packet sequence out of order: expected {expected}, got {got}")]
    OutOfOrder { expected: u8, got: u8 },
}

/// A connection that reads and writes MySQL packets.
///
/// Reads go through an internal buffer, so relaying can look at several
/// packets of a reply that arrived in one read and pass them on in one write.
#[derive(Debug)]
pub struct PacketConn {
    stream: Stream,
    rbuf: BytesMut,
    /// `Some` while the last packet written is held back ([`PacketConn::hold_last`]).
    held: Option<Vec<u8>>,
    /// Framed packets queued by [`PacketConn::queue_packet`]: they go out
    /// with the next write, or before the next read.
    queued: Vec<u8>,
    /// The peer's address as accept returned it ([`PacketConn::accepted`]).
    peer: Option<SocketAddr>,
    /// The event loop the socket is registered with
    /// ([`super::stream::event_loop`] where it was made).
    home: u32,
    /// Accepted just now and nothing written yet: the first write (the
    /// greeting) is sent at once ([`Stream::write_all_first`]).
    fresh: bool,
}

/// Where one physical packet sits in the read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawHeader {
    /// Payload length (at most `0xffffff`).
    pub len: usize,
    /// Sequence id.
    pub seq: u8,
}

impl PacketConn {
    /// Wraps a connected stream (sets TCP_NODELAY: replies are small and latency-bound).
    pub fn new(stream: TcpStream) -> Self {
        let _ = stream.set_nodelay(true);
        Self::plain(stream, None)
    }

    /// Wraps a client's connection as accepted: its peer's address known
    /// (not asked of the kernel again); TCP_NODELAY set unless the
    /// listening socket's was, which the accepted socket inherits on Linux
    /// ([`crate::listener`]). Two system calls fewer per connection.
    pub fn accepted(stream: TcpStream, peer: SocketAddr, nodelay_inherited: bool) -> Self {
        if !nodelay_inherited {
            let _ = stream.set_nodelay(true);
        }
        let mut conn = Self::plain(stream, Some(peer));
        conn.fresh = true;
        conn
    }

    fn plain(stream: TcpStream, peer: Option<SocketAddr>) -> Self {
        PacketConn {
            stream: Stream::Plain(stream),
            rbuf: spare::take(),
            held: None,
            queued: Vec::new(),
            peer,
            home: super::stream::event_loop(),
            fresh: false,
        }
    }

    /// The event loop the socket is registered with
    /// ([`super::stream::event_loop`]).
    pub fn home(&self) -> u32 {
        self.home
    }

    /// Moves the socket to the calling thread's event loop when it is
    /// registered with another's (a pooled shard connection opened by a
    /// session on another session thread): its replies then wake the
    /// session without crossing threads. On an error the connection is
    /// gone. `Ok(true)`: moved.
    pub fn move_here(&mut self) -> io::Result<bool> {
        let here = super::stream::event_loop();
        if self.home == here || !self.stream.reregister()? {
            return Ok(false);
        }
        self.home = here;
        Ok(true)
    }

    /// From now on, the last physical packet written is held back until
    /// the next write, a read, or [`PacketConn::take_held`]: the caller may
    /// change the final packet of a reply (a query of several statements
    /// marks each result but the last with "more results exist").
    pub fn hold_last(&mut self) {
        self.held.get_or_insert_with(Vec::new).clear();
    }

    /// Whether written packets are being held back ([`PacketConn::hold_last`]).
    pub fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// The packet held back (framed: header and payload), to change it in
    /// place before it goes out.
    pub fn held_mut(&mut self) -> Option<&mut Vec<u8>> {
        self.held.as_mut().filter(|h| !h.is_empty())
    }

    /// Stops holding back; returns the packet held (framed), if any.
    pub fn take_held(&mut self) -> Option<Vec<u8>> {
        self.held.take().filter(|h| !h.is_empty())
    }

    /// Frames `payload` and keeps it to go out with the next write (one
    /// system call, one segment for the peer), or before the next read if
    /// none comes first: for a packet that is never the last of its reply
    /// (caching_sha2_password's fast-auth result is followed by the OK).
    /// Returns the sequence id of the last physical packet queued.
    pub fn queue_packet(&mut self, seq: u8, payload: &[u8]) -> u8 {
        frame(&mut self.queued, seq, payload)
    }

    /// Writes what [`PacketConn::queue_packet`] queued, if anything.
    async fn flush_queued(&mut self) -> io::Result<()> {
        if !self.queued.is_empty() {
            let queued = std::mem::take(&mut self.queued);
            self.stream.write_all(&queued).await?;
        }
        Ok(())
    }

    /// Writes framed `bytes`, holding back their last packet when asked to.
    async fn write_out(&mut self, bytes: &[u8]) -> io::Result<()> {
        if std::mem::take(&mut self.fresh) && self.queued.is_empty() && self.held.is_none() {
            return self.stream.write_all_first(bytes).await;
        }
        if !self.queued.is_empty() {
            if self.held.is_none() {
                let mut out = std::mem::take(&mut self.queued);
                out.extend_from_slice(bytes);
                return self.stream.write_all(&out).await;
            }
            self.flush_queued().await?;
        }
        let Some(held) = self.held.as_mut() else {
            return self.stream.write_all(bytes).await;
        };
        // The start of the last whole packet of `bytes`.
        let mut at = 0usize;
        let mut last = None;
        while let Some(h) = bytes.get(at..at + 4) {
            let next = at + 4 + (u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize);
            if next > bytes.len() {
                break;
            }
            last = Some(at);
            at = next;
        }
        let split = match last {
            Some(l) if at == bytes.len() => l,
            // Not whole packets: nothing can be held.
            _ => bytes.len(),
        };
        let previous = std::mem::replace(held, bytes[split..].to_vec());
        if !previous.is_empty() {
            self.stream.write_all(&previous).await?;
        }
        self.stream.write_all(&bytes[..split]).await
    }

    /// Writes a packet held back (before reading: the peer may be waiting
    /// for it, e.g. a LOCAL INFILE request).
    async fn release_held(&mut self) -> io::Result<()> {
        if let Some(h) = self.held.as_mut().filter(|h| !h.is_empty()) {
            let h = std::mem::take(h);
            self.stream.write_all(&h).await?;
        }
        Ok(())
    }

    /// The TCP socket under the connection (peer address, a readiness
    /// probe); `None` after a failed TLS handshake.
    pub fn tcp(&self) -> Option<&TcpStream> {
        self.stream.tcp()
    }

    /// The peer's IP address (plain or TLS).
    pub fn peer_ip(&self) -> Option<std::net::IpAddr> {
        self.peer_addr().map(|a| a.ip())
    }

    /// The peer's address: as accepted ([`PacketConn::accepted`]), or asked of the socket.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
            .or_else(|| self.tcp().and_then(|s| s.peer_addr().ok()))
    }

    /// Whether the connection is encrypted.
    pub fn is_tls(&self) -> bool {
        self.stream.is_tls()
    }

    /// Upgrades the connection to TLS as the server (after a client's SSL
    /// request). Bytes already buffered would be part of the TLS handshake:
    /// with any, the upgrade is refused (read the SSL request with
    /// [`PacketConn::fill_exact`]).
    pub async fn accept_tls(&mut self, acceptor: &tokio_rustls::TlsAcceptor) -> io::Result<()> {
        self.check_unbuffered()?;
        self.stream.accept_tls(acceptor).await
    }

    /// Upgrades the connection to TLS as the client (after idgate's own SSL
    /// request to a shard).
    pub async fn connect_tls(
        &mut self,
        connector: &tokio_rustls::TlsConnector,
        server_name: rustls_pki_types::ServerName<'static>,
    ) -> io::Result<()> {
        self.check_unbuffered()?;
        self.stream.connect_tls(connector, server_name).await
    }

    fn check_unbuffered(&self) -> io::Result<()> {
        if self.rbuf.is_empty()
            && self.queued.is_empty()
            && self.held.as_ref().is_none_or(|h| h.is_empty())
        {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "data received before the TLS handshake",
            ))
        }
    }

    /// Reads until exactly `n` bytes are buffered, never more (the bytes
    /// after a client's SSL request belong to the TLS handshake).
    pub async fn fill_exact(&mut self, n: usize) -> io::Result<()> {
        self.flush_queued().await?;
        while self.rbuf.len() < n {
            let want = n - self.rbuf.len();
            self.rbuf.reserve(want);
            let got = self
                .stream
                .read_buf(&mut (&mut self.rbuf).limit(want))
                .await?;
            if got == 0 {
                return Err(closed_by_peer());
            }
        }
        Ok(())
    }

    /// Bytes read from the socket and not yet consumed.
    pub fn buffered(&self) -> &[u8] {
        &self.rbuf
    }

    /// Mutable access to unconsumed bytes (to fix sequence ids in place before relaying).
    pub fn buffered_mut(&mut self) -> &mut [u8] {
        &mut self.rbuf
    }

    /// Drops `n` consumed bytes from the front of the read buffer.
    pub fn consume(&mut self, n: usize) {
        self.rbuf.advance(n.min(self.rbuf.len()));
        if self.rbuf.is_empty() && self.rbuf.capacity() > SHRINK_ABOVE {
            self.rbuf = spare::take();
        }
    }

    /// Reads more bytes from the socket into the buffer. An orderly close by the
    /// peer is an `UnexpectedEof` error.
    pub async fn fill(&mut self) -> io::Result<()> {
        self.flush_queued().await?;
        if self.held.is_some() {
            self.release_held().await?;
        }
        room_to_read(&mut self.rbuf);
        let n = self.stream.read_buf(&mut self.rbuf).await?;
        if n == 0 {
            return Err(closed_by_peer());
        }
        Ok(())
    }

    /// [`PacketConn::fill`] for a connection with nothing buffered, that
    /// may wait long for its peer (a client between commands): on a plain
    /// socket it waits holding no read buffer (its allocation is parked in
    /// [`spare`] and taken back when bytes arrive). One read per command
    /// that arrives, as `fill` makes: a short read clears the socket's
    /// readiness, so the wait for the next command starts at once.
    async fn fill_idle(&mut self) -> io::Result<()> {
        if !self.rbuf.is_empty() || !self.queued.is_empty() || self.held.is_some() {
            return self.fill().await;
        }
        let Self {
            stream: Stream::Plain(tcp),
            rbuf,
            ..
        } = &mut *self
        else {
            return self.fill().await;
        };
        loop {
            std::future::poll_fn(|cx| {
                let ready = tcp.poll_read_ready(cx);
                if ready.is_pending() {
                    spare::park(rbuf);
                }
                ready
            })
            .await?;
            room_to_read(rbuf);
            // A read that leaves room in the buffer has drained the socket:
            // its readiness is cleared now (the closure says WouldBlock,
            // as tokio's own `poll_read` does after a short read), so the
            // next command's wait does not begin with a read that finds
            // nothing. Bytes that came after the read are a new edge, and
            // wake the wait.
            let room = rbuf.capacity() - rbuf.len();
            let mut got = 0;
            let read = tcp.try_io(tokio::io::Interest::READABLE, || {
                got = tcp.try_read_buf(rbuf)?;
                if got > 0 && got < room {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(got)
            });
            match read {
                Ok(0) => return Err(closed_by_peer()),
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => return Ok(()),
                // Readiness was stale: it is cleared, the next poll waits.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Makes sure at least `n` bytes are buffered.
    pub async fn fill_to(&mut self, n: usize) -> io::Result<()> {
        if n > self.rbuf.capacity() {
            self.rbuf.reserve(n - self.rbuf.len());
        }
        while self.rbuf.len() < n {
            self.fill().await?;
        }
        Ok(())
    }

    /// Header of the physical packet at `offset` of the buffer, if fully buffered.
    pub fn header_at(&self, offset: usize) -> Option<RawHeader> {
        let h = self.rbuf.get(offset..offset + 4)?;
        Some(RawHeader {
            len: u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize,
            seq: h[3],
        })
    }

    /// Reads one logical packet (joining split packets) into `out` (cleared
    /// first) and returns the sequence id of its first and last physical packet.
    ///
    /// `Ok(None)` means the peer closed the connection cleanly between packets.
    pub async fn read_packet(
        &mut self,
        out: &mut Vec<u8>,
        max_len: usize,
    ) -> Result<Option<(u8, u8)>, ReadError> {
        out.clear();
        let mut first = None;
        loop {
            while self.rbuf.len() < 4 {
                if self.rbuf.is_empty() && first.is_none() {
                    match self.fill_idle().await {
                        Ok(()) => continue,
                        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
                        Err(e) => return Err(e.into()),
                    }
                }
                self.fill().await?;
            }
            let Some(h) = self.header_at(0) else {
                continue;
            };
            if let Some((_, last)) = first {
                let expected = u8::wrapping_add(last, 1);
                if h.seq != expected {
                    return Err(ReadError::OutOfOrder {
                        expected,
                        got: h.seq,
                    });
                }
            }
            if out.len() + h.len > max_len {
                return Err(ReadError::TooLarge(out.len() + h.len));
            }
            self.fill_to(4 + h.len).await?;
            out.extend_from_slice(&self.rbuf[4..4 + h.len]);
            self.consume(4 + h.len);
            let start = first.map(|(s, _)| s).unwrap_or(h.seq);
            first = Some((start, h.seq));
            if h.len < MAX_PAYLOAD {
                return Ok(first);
            }
        }
    }

    /// Writes raw bytes (already framed packets).
    pub async fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_out(bytes).await
    }

    /// Frames `payload` starting at sequence id `seq` and writes it; returns
    /// the sequence id of the last physical packet written.
    pub async fn write_packet(&mut self, seq: u8, payload: &[u8]) -> io::Result<u8> {
        let mut buf = Vec::with_capacity(payload.len() + 8);
        let last = frame(&mut buf, seq, payload);
        self.write_out(&buf).await?;
        Ok(last)
    }

    /// Shuts down the write side (best effort).
    pub async fn shutdown(&mut self) {
        let _ = self.flush_queued().await;
        let _ = self.stream.shutdown().await;
    }
}

impl Drop for PacketConn {
    /// A connection that ends leaves its read buffer to the next one
    /// (a client that connects per request gets it instead of 8 KiB anew).
    fn drop(&mut self) {
        spare::park(&mut self.rbuf);
    }
}

/// An orderly close by the peer, as a read reports it.
fn closed_by_peer() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by peer")
}

/// Makes room for a read: a buffer parked in [`spare`] is taken back; one
/// with less than half a chunk free grows (an empty one is reused from the
/// start of its allocation, without allocating).
fn room_to_read(rbuf: &mut BytesMut) {
    if rbuf.capacity() == 0 {
        *rbuf = spare::take();
    } else if rbuf.capacity() - rbuf.len() < READ_CHUNK / 2 {
        rbuf.reserve(READ_CHUNK.max(rbuf.len()));
    }
}

/// The sequence id of the last physical packet of `framed` (whole packets).
pub fn last_seq(framed: &[u8]) -> Option<u8> {
    let mut at = 0usize;
    let mut seq = None;
    while let Some(h) = framed.get(at..at + 4) {
        seq = Some(h[3]);
        at += 4 + (u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize);
    }
    seq
}

/// Appends `payload` framed as packets starting at sequence id `seq` (split
/// at 16 MiB); returns the sequence id of the last physical packet.
pub fn frame(out: &mut Vec<u8>, mut seq: u8, payload: &[u8]) -> u8 {
    let mut rest = payload;
    loop {
        let n = rest.len().min(MAX_PAYLOAD);
        out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        out.push(seq);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        if n < MAX_PAYLOAD {
            return seq;
        }
        seq = seq.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn an_accepted_connections_first_packet_goes_out_without_waiting_for_readiness() {
        use std::future::Future;
        use std::io::Read;
        use std::task::{Context, Waker};
        // Accepted as the listener does: by the kernel, then registered
        // with this runtime.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let (server, peer) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let server = TcpStream::from_std(server).unwrap();
        let mut conn = PacketConn::accepted(server, peer, false);
        // Polled once, before this runtime has seen the new socket's first
        // epoll event (tokio's own write waits for it: Pending here).
        let polled = {
            let mut first = std::pin::pin!(conn.write_packet(0, b"greeting"));
            first.as_mut().poll(&mut Context::from_waker(Waker::noop()))
        };
        assert!(
            matches!(polled, std::task::Poll::Ready(Ok(0))),
            "{polled:?}"
        );
        let mut got = [0u8; 12];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"\x08\0\0\0greeting");
        // Later packets go the usual way.
        conn.write_packet(1, b"ok").await.unwrap();
        let mut got = [0u8; 6];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"\x02\0\0\x01ok");
    }

    #[test]
    fn frame_splits_at_16_mib_and_ends_with_an_empty_packet_on_exact_multiples() {
        let mut out = Vec::new();
        let last = frame(&mut out, 0, &vec![7u8; MAX_PAYLOAD]);
        assert_eq!(last, 1);
        assert_eq!(out.len(), 4 + MAX_PAYLOAD + 4);
        assert_eq!(&out[out.len() - 4..], &[0, 0, 0, 1]);

        let mut out = Vec::new();
        assert_eq!(frame(&mut out, 3, b"abc"), 3);
        assert_eq!(out, [3, 0, 0, 3, b'a', b'b', b'c']);
    }

    #[tokio::test]
    async fn read_packet_joins_split_packets_and_checks_sequence() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let big = vec![1u8; MAX_PAYLOAD + 10];
        let big2 = big.clone();
        let writer = tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let mut buf = Vec::new();
            frame(&mut buf, 0, &big2);
            frame(&mut buf, 0, b"x");
            // a split packet whose continuation has a wrong sequence id
            buf.extend_from_slice(&[0xff, 0xff, 0xff, 0]);
            buf.extend_from_slice(&vec![0u8; MAX_PAYLOAD]);
            buf.extend_from_slice(&[1, 0, 0, 9, 0]);
            s.write_all(&buf).await.unwrap();
        });
        let (s, _) = listener.accept().await.unwrap();
        let mut c = PacketConn::new(s);
        let mut out = Vec::new();
        assert_eq!(
            c.read_packet(&mut out, 1 << 30).await.unwrap(),
            Some((0, 1))
        );
        assert_eq!(out, big);
        assert_eq!(
            c.read_packet(&mut out, 1 << 30).await.unwrap(),
            Some((0, 0))
        );
        assert_eq!(out, b"x");
        assert!(matches!(
            c.read_packet(&mut out, 1 << 30).await,
            Err(ReadError::OutOfOrder {
                expected: 1,
                got: 9
            })
        ));
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn a_connection_waiting_for_its_peer_holds_no_read_buffer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut peer = TcpStream::connect(addr).await.unwrap();
        let (s, _) = listener.accept().await.unwrap();
        let mut c = PacketConn::new(s);
        let mut out = Vec::new();
        let mut one = Vec::new();
        frame(&mut one, 0, b"first");
        peer.write_all(&one).await.unwrap();
        assert_eq!(c.read_packet(&mut out, 1024).await.unwrap(), Some((0, 0)));
        assert_eq!(out, b"first");
        // That read left room in the buffer, so it drained the socket: its
        // readiness is cleared already, and the next wait does not begin
        // with a read that finds nothing.
        let stale = tokio::time::timeout(
            Duration::ZERO,
            c.tcp().unwrap().ready(tokio::io::Interest::READABLE),
        )
        .await;
        assert!(stale.is_err(), "readiness left set after a short read");
        // Nothing sent: the read waits, its buffer parked (a read cut
        // short, as a session's is by KILL, leaves it parked too).
        let waiting =
            tokio::time::timeout(Duration::from_millis(20), c.read_packet(&mut out, 1024)).await;
        assert!(waiting.is_err(), "nothing was sent");
        assert_eq!(c.rbuf.capacity(), 0);
        // Two packets in one segment, then the peer closes: both read, then
        // the clean end.
        let mut two = Vec::new();
        frame(&mut two, 0, b"second");
        frame(&mut two, 0, b"third");
        peer.write_all(&two).await.unwrap();
        drop(peer);
        assert_eq!(c.read_packet(&mut out, 1024).await.unwrap(), Some((0, 0)));
        assert_eq!(out, b"second");
        assert_eq!(c.read_packet(&mut out, 1024).await.unwrap(), Some((0, 0)));
        assert_eq!(out, b"third");
        assert_eq!(c.read_packet(&mut out, 1024).await.unwrap(), None);
    }

    #[tokio::test]
    async fn queued_packets_go_out_first_with_the_next_write_or_before_a_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = tokio::spawn(async move {
            let mut c = PacketConn::new(TcpStream::connect(addr).await.unwrap());
            let mut out = Vec::new();
            let mut got = Vec::new();
            for _ in 0..3 {
                let (seq, _) = c.read_packet(&mut out, 1 << 20).await.unwrap().unwrap();
                got.push((seq, out.clone()));
            }
            // The server reads after queueing: the queued packet came
            // first, so the answer can follow it.
            c.write_packet(4, b"answer").await.unwrap();
            let (seq, _) = c.read_packet(&mut out, 1 << 20).await.unwrap().unwrap();
            got.push((seq, out.clone()));
            got
        });
        let (s, from) = listener.accept().await.unwrap();
        let mut c = PacketConn::accepted(s, from, false);
        assert_eq!(c.peer_addr(), Some(from));
        assert!(c.tcp().unwrap().nodelay().unwrap());
        assert_eq!(c.queue_packet(1, b"fast"), 1);
        assert_eq!(c.write_packet(2, b"ok").await.unwrap(), 2);
        c.queue_packet(3, b"asked");
        let mut out = Vec::new();
        assert_eq!(
            c.read_packet(&mut out, 1 << 20).await.unwrap(),
            Some((4, 4))
        );
        assert_eq!(out, b"answer");
        c.queue_packet(5, b"bye");
        c.shutdown().await;
        let got = peer.await.unwrap();
        let want: Vec<(u8, Vec<u8>)> = vec![
            (1, b"fast".to_vec()),
            (2, b"ok".to_vec()),
            (3, b"asked".to_vec()),
            (5, b"bye".to_vec()),
        ];
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn fill_exact_never_reads_past_what_it_was_asked_for() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let writer = tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let mut buf = Vec::new();
            frame(&mut buf, 1, &[9u8; 32]);
            // What a TLS client sends right after its SSL request.
            buf.extend_from_slice(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5]);
            s.write_all(&buf).await.unwrap();
            s
        });
        let (s, _) = listener.accept().await.unwrap();
        let _keep = writer.await.unwrap();
        let mut c = PacketConn::new(s);
        c.fill_exact(4).await.unwrap();
        assert_eq!(c.header_at(0), Some(RawHeader { len: 32, seq: 1 }));
        c.fill_exact(36).await.unwrap();
        assert_eq!(c.buffered().len(), 36, "read past the packet");
        c.consume(36);
        let mut rest = [0u8; 10];
        let tcp = c.tcp().unwrap();
        tcp.readable().await.unwrap();
        assert_eq!(tcp.try_read(&mut rest).unwrap(), 10);
        assert_eq!(rest[0], 0x16);
    }
}
