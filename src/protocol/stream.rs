//! The byte stream under a [`super::packet::PacketConn`]: a TCP socket,
//! or TLS over one after the connection was upgraded (a client's SSL
//! request, or idgate's own to a shard).
//!
//! An enum rather than a trait object or a type parameter: the plain path
//! is one `match` away from the socket calls (no allocation, no dynamic
//! dispatch), and a connection can change from plain to TLS in place
//! during its handshake.

use bytes::BufMut;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsStream;

thread_local! {
    /// The event loop this thread runs ([`event_loop`]).
    static EVENT_LOOP: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The event loop the calling thread runs: 0 for the shared multi-thread
/// runtime (any of its workers), `N + 1` for session thread `N`
/// (`crate::workers`). A socket is registered with the event loop of the
/// thread that opened it; used from another, each of its events reaches
/// the task through that loop (a wake-up across threads).
pub fn event_loop() -> u32 {
    EVENT_LOOP.with(|l| l.get())
}

/// Marks the calling thread as running event loop `id` ([`event_loop`]).
pub fn set_event_loop(id: u32) {
    EVENT_LOOP.with(|l| l.set(id));
}

/// A connected stream, plain or TLS.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    /// Boxed: a TLS session is large, the plain variant stays small.
    Tls(Box<TlsStream<Socket>>),
    /// The socket was taken for a TLS handshake that failed: every call
    /// is an error.
    Gone,
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "connection closed after a failed TLS handshake",
    )
}

impl Stream {
    /// The TCP socket under the stream (peer address, a readiness probe).
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Stream::Plain(s) => Some(s),
            Stream::Tls(s) => s.get_ref().0 .0.as_ref(),
            Stream::Gone => None,
        }
    }

    /// Whether the stream is encrypted.
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// Reads what is available into `buf` (0: the peer closed).
    #[inline]
    pub async fn read_buf<B: BufMut + ?Sized>(&mut self, buf: &mut B) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read_buf(buf).await,
            Stream::Tls(s) => s.read_buf(buf).await,
            Stream::Gone => Err(gone()),
        }
    }

    /// Writes all of `bytes`. On TLS the records are flushed too: the
    /// peer may be waiting for them before it sends anything.
    #[inline]
    pub async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.write_all(bytes).await,
            Stream::Tls(s) => {
                s.write_all(bytes).await?;
                s.flush().await
            }
            Stream::Gone => Err(gone()),
        }
    }

    /// [`Stream::write_all`] for the first bytes written to a socket just
    /// registered with this thread's event loop (a client's greeting).
    /// tokio knows nothing of the new socket's readiness until its epoll
    /// event comes, so its first write waits for that: one more
    /// `epoll_wait` and a turn of the event loop before the client, which
    /// waits for the server to speak first, gets anything. A new socket's
    /// send buffer is empty: a plain `send` goes out at once, and what it
    /// could not send (nothing, in practice) goes the usual way.
    pub async fn write_all_first(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Stream::Plain(s) = self else {
            return self.write_all(bytes).await;
        };
        let sent = match socket2::SockRef::from(&*s).send_with_flags(bytes, libc::MSG_NOSIGNAL) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                0
            }
            Err(e) => return Err(e),
        };
        match bytes.get(sent..) {
            Some(rest) if !rest.is_empty() => s.write_all(rest).await,
            _ => Ok(()),
        }
    }

    /// Shuts down the write side (TLS: sends close_notify first).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.shutdown().await,
            Stream::Tls(s) => s.shutdown().await,
            Stream::Gone => Ok(()),
        }
    }

    /// Registers the socket with the calling thread's event loop instead
    /// of the one it was registered with (two `epoll_ctl` calls; a TLS
    /// session stays as it is, over the same socket). `Ok(false)`: there
    /// is no socket. On an error the socket is closed.
    pub fn reregister(&mut self) -> io::Result<bool> {
        match self {
            Stream::Plain(_) => {
                let Stream::Plain(tcp) = std::mem::replace(self, Stream::Gone) else {
                    unreachable!("matched above");
                };
                *self = Stream::Plain(reregister(tcp)?);
            }
            Stream::Tls(s) => s.get_mut().0.reregister()?,
            Stream::Gone => return Ok(false),
        }
        Ok(true)
    }

    /// Runs a TLS handshake as the server on a plain stream.
    pub async fn accept_tls(&mut self, acceptor: &tokio_rustls::TlsAcceptor) -> io::Result<()> {
        let Stream::Plain(tcp) = std::mem::replace(self, Stream::Gone) else {
            return Err(io::Error::other("the connection is not plain TCP"));
        };
        let tls = acceptor.accept(Socket(Some(tcp))).await?;
        *self = Stream::Tls(Box::new(TlsStream::Server(tls)));
        Ok(())
    }

    /// Runs a TLS handshake as the client on a plain stream.
    pub async fn connect_tls(
        &mut self,
        connector: &tokio_rustls::TlsConnector,
        server_name: rustls_pki_types::ServerName<'static>,
    ) -> io::Result<()> {
        let Stream::Plain(tcp) = std::mem::replace(self, Stream::Gone) else {
            return Err(io::Error::other("the connection is not plain TCP"));
        };
        let tls = connector.connect(server_name, Socket(Some(tcp))).await?;
        *self = Stream::Tls(Box::new(TlsStream::Client(tls)));
        Ok(())
    }
}

/// A TCP socket registered anew with the calling thread's event loop.
fn reregister(tcp: TcpStream) -> io::Result<TcpStream> {
    TcpStream::from_std(tcp.into_std()?)
}

/// The socket under a TLS session: a TCP stream that can be registered
/// with another event loop while the session stays in place
/// ([`Stream::reregister`]). `None` only after that failed.
#[derive(Debug)]
pub struct Socket(Option<TcpStream>);

impl Socket {
    fn reregister(&mut self) -> io::Result<()> {
        let tcp = self.0.take().ok_or_else(unregistered)?;
        self.0 = Some(reregister(tcp)?);
        Ok(())
    }

    fn tcp(self: Pin<&mut Self>) -> io::Result<Pin<&mut TcpStream>> {
        match self.get_mut().0.as_mut() {
            Some(s) => Ok(Pin::new(s)),
            None => Err(unregistered()),
        }
    }
}

fn unregistered() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "connection closed: it could not be moved to another event loop",
    )
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.tcp() {
            Ok(s) => s.poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.tcp() {
            Ok(s) => s.poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.tcp() {
            Ok(s) => s.poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.tcp() {
            Ok(s) => s.poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.tcp() {
            Ok(s) => s.poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}
