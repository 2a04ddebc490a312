//! A remote front-door client for the tests (tests/tests/remote.rs,
//! cli.rs): JSON-RPC over a WebSocket to `moonkale-service serve --listen`,
//! one message per text frame, with `Authorization: Bearer <token>`, plain
//! or over TLS; raw upgrade attempts; a throwaway certificate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
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

/// A certificate for localhost and 127.0.0.1 signed by a throwaway CA
/// (openssl); the CA's certificate goes to `ca`, which clients trust.
pub async fn make_certificate(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let path = |name: &str| dir.join(name);
    let openssl = |args: Vec<String>| async move {
        let out = tokio::process::Command::new("openssl")
            .args(&args)
            .output()
            .await
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let s = |p: PathBuf| p.display().to_string();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ]
    .map(String::from);
    let mut ca = vec!["req".into(), "-x509".into()];
    ca.extend(ec.clone());
    ca.extend(["-days", "1", "-subj", "/CN=moonkale test CA", "-keyout"].map(String::from));
    ca.extend([s(path("ca.key")), "-out".into(), s(path("ca.pem"))]);
    openssl(ca).await;
    let mut req = vec!["req".into()];
    req.extend(ec);
    req.extend(["-subj", "/CN=localhost", "-keyout"].map(String::from));
    req.extend([s(path("key.pem")), "-out".into(), s(path("req.pem"))]);
    openssl(req).await;
    std::fs::write(
        path("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n",
    )
    .unwrap();
    let mut sign = vec![
        "x509".into(),
        "-req".into(),
        "-in".into(),
        s(path("req.pem")),
    ];
    sign.extend([
        "-CA".into(),
        s(path("ca.pem")),
        "-CAkey".into(),
        s(path("ca.key")),
    ]);
    sign.extend([
        "-CAcreateserial".into(),
        "-days".into(),
        "1".into(),
        "-extfile".into(),
        s(path("ext.cnf")),
    ]);
    sign.extend(["-out".into(), s(path("cert.pem"))]);
    openssl(sign).await;
    (path("ca.pem"), path("cert.pem"), path("key.pem"))
}

/// Sends a raw upgrade request with `extra` header lines to `path`; the
/// HTTP status of the answer.
pub async fn upgrade_status(addr: &str, path: &str, extra: &str) -> u16 {
    let tcp = send_upgrade(addr, path, extra).await;
    read_status(tcp).await
}

/// Connects and sends a raw upgrade request with `extra` header lines to
/// `path`, without reading the answer ([`read_status`]).
pub async fn send_upgrade(addr: &str, path: &str, extra: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    );
    tcp.write_all(head.as_bytes()).await.expect("write");
    tcp
}

/// The HTTP status of the answer to an upgrade request sent on `tcp`.
pub async fn read_status(mut tcp: TcpStream) -> u16 {
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let n = tokio::time::timeout(crate::TIMEOUT, tcp.read(&mut buf))
            .await
            .expect("an answer")
            .expect("read");
        assert!(n > 0, "closed without an answer");
        answer.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&answer);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {line:?}"))
}
