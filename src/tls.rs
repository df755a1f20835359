//! TLS on both sides, with rustls over the `ring` provider: towards
//! clients (`[server] tls_cert`, `tls_key`: a reloadable acceptor) and
//! towards shards (`[backend] tls`, `tls_ca`: a connector per mode). A leaf:
//! `config` uses it to check the PEM files when it loads.

use arc_swap::ArcSwap;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{ring, CryptoProvider};
use rustls::{CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// `[backend] tls`: whether idgate's connections to the shards use TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardTlsMode {
    /// Never: the shard's offer is ignored.
    Disabled,
    /// When the shard offers it (its certificate is not checked).
    #[default]
    Preferred,
    /// Always; a shard that does not offer it is an error (its certificate
    /// is not checked, as MySQL's `ssl-mode=REQUIRED`).
    Required,
    /// Always, and the shard's certificate must be signed by `tls_ca` (the
    /// host name is not checked, as MySQL's `ssl-mode=VERIFY_CA`).
    VerifyCa,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// Reads the certificate chain and private key (PEM) into a server config.
///
/// Errors name the file and what is wrong with it (unreadable, no
/// certificate, no key, a key that does not match the certificate).
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = read_certs(cert)?;
    let key_path = key;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("{}: no private key read: {e}", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "{} and {}: not a usable certificate and key: {e}",
                cert.display(),
                key_path.display()
            )
        })?;
    Ok(Arc::new(config))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

/// The CA certificates of a PEM file, as trust roots.
pub fn ca_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for c in read_certs(path)? {
        roots
            .add(c)
            .map_err(|e| format!("{}: not a CA certificate: {e}", path.display()))?;
    }
    Ok(roots)
}

/// TLS towards clients: the certificate and key files and the acceptor
/// made from them, replaced whole by [`ClientTls::reload`] (sessions
/// already encrypted keep theirs).
pub struct ClientTls {
    cert: PathBuf,
    key: PathBuf,
    acceptor: ArcSwap<TlsAcceptor>,
}

impl ClientTls {
    /// Loads the certificate and key; errors as [`server_config`].
    pub fn load(cert: &Path, key: &Path) -> Result<ClientTls, String> {
        let config = server_config(cert, key)?;
        Ok(ClientTls {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            acceptor: ArcSwap::from_pointee(TlsAcceptor::from(config)),
        })
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> Arc<TlsAcceptor> {
        self.acceptor.load_full()
    }

    /// Reads the files again; on an error the certificate in use stays.
    pub fn reload(&self) -> Result<(), String> {
        let config = server_config(&self.cert, &self.key)?;
        self.acceptor.store(Arc::new(TlsAcceptor::from(config)));
        Ok(())
    }

    /// The certificate file (for log lines).
    pub fn cert_path(&self) -> &Path {
        &self.cert
    }
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// TLS towards shards: the mode and, unless disabled, the connector.
#[derive(Clone, Default)]
pub struct ShardTls {
    pub mode: ShardTlsMode,
    /// `None` when disabled, or when the CA of `verify_ca` could not be
    /// read (then every connection fails: never in clear text).
    connector: Option<TlsConnector>,
    /// Why there is no connector although the mode wants one.
    error: Option<String>,
}

impl std::fmt::Debug for ShardTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardTls")
            .field("mode", &self.mode)
            .field("connector", &self.connector.is_some())
            .field("error", &self.error)
            .finish()
    }
}

impl ShardTls {
    /// The connector for `mode`; `ca` is needed for `verify_ca`.
    pub fn new(mode: ShardTlsMode, ca: Option<&Path>) -> ShardTls {
        let verifier: Arc<dyn ServerCertVerifier> = match mode {
            ShardTlsMode::Disabled => return ShardTls::default(),
            ShardTlsMode::Preferred | ShardTlsMode::Required => Arc::new(NoCheck(provider())),
            ShardTlsMode::VerifyCa => {
                let roots = match ca {
                    Some(p) => ca_roots(p),
                    None => Err("[backend] tls = \"verify_ca\" needs tls_ca".to_string()),
                };
                match roots.and_then(|r| {
                    WebPkiServerVerifier::builder_with_provider(Arc::new(r), provider())
                        .build()
                        .map_err(|e| e.to_string())
                }) {
                    Ok(v) => Arc::new(CaOnly(v)),
                    Err(e) => {
                        return ShardTls {
                            mode,
                            connector: None,
                            error: Some(e),
                        }
                    }
                }
            }
        };
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map(|b| {
                b.dangerous()
                    .with_custom_certificate_verifier(verifier)
                    .with_no_client_auth()
            });
        match config {
            Ok(c) => ShardTls {
                mode,
                connector: Some(TlsConnector::from(Arc::new(c))),
                error: None,
            },
            Err(e) => ShardTls {
                mode,
                connector: None,
                error: Some(e.to_string()),
            },
        }
    }

    /// The connector to use, or why there is none (an error only for
    /// modes that need TLS).
    pub fn connector(&self) -> Result<Option<&TlsConnector>, String> {
        match (&self.connector, &self.error) {
            (Some(c), _) => Ok(Some(c)),
            (None, Some(e)) => Err(e.clone()),
            (None, None) => Ok(None),
        }
    }

    /// Whether a shard that does not offer TLS is refused.
    pub fn required(&self) -> bool {
        matches!(self.mode, ShardTlsMode::Required | ShardTlsMode::VerifyCa)
    }
}

/// The name a shard's certificate is presented for: the host of
/// `host:port` (an IP address or a DNS name).
pub fn server_name(address: &str) -> ServerName<'static> {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).unwrap_or(ServerName::IpAddress(
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST).into(),
    ))
}

/// Accepts any certificate (`preferred`, `required`): encryption without
/// authentication, as MySQL's REQUIRED. Handshake signatures are still
/// checked (the peer holds the key of the certificate it sent).
#[derive(Debug)]
struct NoCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The chain must lead to the CA (`verify_ca`); the name in the
/// certificate is not compared with the shard's address.
#[derive(Debug)]
struct CaOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for CaOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            // The chain was verified before the name was compared.
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
