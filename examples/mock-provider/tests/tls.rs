//! HTTPS: the mock offers ALPN h2 and http/1.1 and streams over both.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokentap_mock::{MockConfig, MockServer};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn connector(alpn: &[u8]) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(fixture("localhost-cert.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    TlsConnector::from(Arc::new(config))
}

#[tokio::test]
async fn streams_over_h2_and_http11_with_alpn() {
    let config = MockConfig {
        ttft_ms: 1,
        itl_ms: 0,
        tokens: 3,
        tls_cert: Some(fixture("localhost-cert.pem")),
        tls_key: Some(fixture("localhost-key.pem")),
        ..MockConfig::default()
    };
    let server = MockServer::bind("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
    let addr = server.local_addr();
    assert!(server.url().starts_with("https://"));
    tokio::spawn(server.run());

    for alpn in [&b"h2"[..], b"http/1.1"] {
        let tcp = TcpStream::connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let tls = connector(alpn).connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
        let request = Request::post("https://localhost/v1/chat/completions")
            .header("host", "localhost")
            .body(Full::new(Bytes::from_static(br#"{"model":"m","stream":true}"#)))
            .unwrap();
        let response = if alpn == b"h2" {
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
            tokio::spawn(conn);
            sender.send_request(request).await.unwrap()
        } else {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
            tokio::spawn(conn);
            sender.send_request(request).await.unwrap()
        };
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(body.ends_with(b"data: [DONE]\n\n"), "{alpn:?}");
    }
}
