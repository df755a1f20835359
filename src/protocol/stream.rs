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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsStream;

/// A connected stream, plain or TLS.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    /// Boxed: a TLS session is large, the plain variant stays small.
    Tls(Box<TlsStream<TcpStream>>),
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
            Stream::Tls(s) => Some(s.get_ref().0),
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

    /// Shuts down the write side (TLS: sends close_notify first).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.shutdown().await,
            Stream::Tls(s) => s.shutdown().await,
            Stream::Gone => Ok(()),
        }
    }

    /// Runs a TLS handshake as the server on a plain stream.
    pub async fn accept_tls(&mut self, acceptor: &tokio_rustls::TlsAcceptor) -> io::Result<()> {
        let Stream::Plain(tcp) = std::mem::replace(self, Stream::Gone) else {
            return Err(io::Error::other("the connection is not plain TCP"));
        };
        let tls = acceptor.accept(tcp).await?;
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
        let tls = connector.connect(server_name, tcp).await?;
        *self = Stream::Tls(Box::new(TlsStream::Client(tls)));
        Ok(())
    }
}
