//! HTTPS for the mock: a rustls acceptor from PEM files, offering ALPN h2 and http/1.1.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsSetupError {
    #[error("reading certificate chain {path}: {source}")]
    Certificate { path: String, source: rustls_pki_types::pem::Error },
    #[error("reading private key {path}: {source}")]
    PrivateKey { path: String, source: rustls_pki_types::pem::Error },
    #[error("building TLS config: {0}")]
    Config(#[from] rustls::Error),
}

pub(crate) fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsSetupError> {
    let certificate_error = |source| TlsSetupError::Certificate { path: cert.display().to_string(), source };
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(certificate_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(certificate_error)?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|source| TlsSetupError::PrivateKey { path: key.display().to_string(), source })?;
    // An explicit provider: the process may link several rustls backends (the proxy does).
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
