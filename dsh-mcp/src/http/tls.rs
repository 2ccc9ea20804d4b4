//! HTTPS for the HTTP server: rustls (with *ring*) over a PEM certificate
//! chain and key.

use std::path::PathBuf;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

/// What a library said went wrong.
type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why the certificate or key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file cannot be read or holds no certificate.
    #[error("cannot read a PEM certificate chain from {path}: {source}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Cause,
    },
    /// The key file cannot be read or holds no private key.
    #[error("cannot read a PEM private key from {path}: {source}")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Cause,
    },
    /// rustls refused the pair (a key that does not match the
    /// certificate, an unsupported key type).
    #[error("the certificate {cert} and the key {key} cannot be used together: {source}")]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        #[source]
        source: Cause,
    },
}

/// A PEM certificate chain (the server's first) and its private key.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl TlsFiles {
    /// Reads both files and makes the acceptor (TLS 1.2 and 1.3, no client
    /// certificates, `http/1.1` offered by ALPN).
    pub(crate) fn acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let certs = CertificateDer::pem_file_iter(&self.cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .and_then(|certs| {
                if certs.is_empty() {
                    Err(rustls_pki_types::pem::Error::NoItemsFound)
                } else {
                    Ok(certs)
                }
            })
            .map_err(|source| TlsError::Certificate {
                path: self.cert.clone(),
                source: source.into(),
            })?;
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|source| TlsError::Key {
            path: self.key.clone(),
            source: source.into(),
        })?;
        let config_error = |source: rustls::Error| TlsError::Config {
            cert: self.cert.clone(),
            key: self.key.clone(),
            source: source.into(),
        };
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(config_error)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}
