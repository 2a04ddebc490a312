//! A remote front-door client for the tests (tests/tests/remote.rs): JSON-RPC
//! over a WebSocket to `moonkale-service serve --listen`, one message per
//! text frame, with `Authorization: Bearer <token>`, plain or over TLS.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::ws_rpc::WsRpc;

/// A token long enough for the service (32 characters at least).
pub const TOKEN: &str = "remote-test-token-0123456789abcdef0123456789";

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub type RemoteClient = WsRpc<Box<dyn Io>>;

impl RemoteClient {
    /// Connects to `addr` (host:port) without TLS.
    pub async fn connect(addr: &str, token: &str) -> RemoteClient {
        let tcp = TcpStream::connect(addr).await.expect("TCP connect");
        RemoteClient::over(Box::new(tcp), "ws", addr, token).await
    }

    /// Connects over TLS, trusting only the PEM certificate `ca`, with
    /// `name` as the server name.
    pub async fn connect_tls(addr: &str, token: &str, ca: &Path, name: &str) -> RemoteClient {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).expect("read CA") {
            roots.add(cert.expect("PEM")).expect("add CA");
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = TcpStream::connect(addr).await.expect("TCP connect");
        let server_name = rustls::pki_types::ServerName::try_from(name.to_owned()).expect("name");
        let tls = connector
            .connect(server_name, tcp)
            .await
            .expect("TLS handshake");
        RemoteClient::over(Box::new(tls), "wss", addr, token).await
    }

    /// Upgrades an already connected stream (plain WebSocket).
    pub async fn over_stream(stream: Box<dyn Io>, addr: &str, token: &str) -> RemoteClient {
        RemoteClient::over(stream, "ws", addr, token).await
    }

    async fn over(stream: Box<dyn Io>, scheme: &str, addr: &str, token: &str) -> RemoteClient {
        let mut req = format!("{scheme}://{addr}/")
            .into_client_request()
            .expect("request");
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {token}").parse().expect("header"),
        );
        let (ws, _) = tokio_tungstenite::client_async(req, stream)
            .await
            .expect("WebSocket upgrade");
        WsRpc::new(ws)
    }

    /// `initialize` + `initialized` for the workspace `root`.
    pub async fn initialize(&mut self, name: &str, root: &Path) -> Value {
        let result = self
            .call(
                "initialize",
                json!({"processId": null, "clientInfo": {"name": name},
                       "rootUri": format!("file://{}", root.display()),
                       "capabilities": {"general": {"positionEncodings": ["utf-16"]},
                                        "window": {"showMessage": {}}}}),
            )
            .await;
        self.notify("initialized", json!({})).await;
        result
    }
}
