//! The client side of the remote front door: a WebSocket to `serve
//! --listen` (`ws://` or `wss://`), bridged to LSP frames over an in-memory
//! pipe, so `moonkale_client::Client` and the `agent` printers work
//! over it unchanged.

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::error::{Error, Result};
use crate::lsp::framing::{FrameReader, write_frame};

pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// Where a remote service is and how to prove who we are.
#[derive(Clone, Debug)]
pub struct RemoteTarget {
    /// `ws://host:port/` or `wss://host:port/`.
    pub url: String,
    pub token: String,
    /// For `wss://`: the PEM certificate (or CA) to trust.
    pub ca: Option<PathBuf>,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// How long reaching the service (TCP, TLS, upgrade) may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Connects and returns the two ends of an LSP-framed stream. Every failure
/// is an [`Error::Connect`] or [`Error::Invalid`] sentence saying what
/// happened and what to do.
pub async fn connect(target: &RemoteTarget) -> Result<(BoxRead, BoxWrite)> {
    let bad_url = |why: &str| {
        Error::Invalid(format!(
            "{}: {why}; the URL must look like ws://host:port/ or wss://host:port/",
            target.url
        ))
    };
    let url = lsp_types::Url::parse(&target.url).map_err(|e| bad_url(&e.to_string()))?;
    if !matches!(url.scheme(), "ws" | "wss") {
        return Err(bad_url("not a WebSocket URL"));
    }
    let host = url.host_str().ok_or_else(|| bad_url("no host"))?.to_owned();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| bad_url("no port"))?;
    let ws = tokio::time::timeout(CONNECT_TIMEOUT, handshake(target, &url, &host, port))
        .await
        .map_err(|_| {
            Error::Connect(format!(
                "{host}:{port} did not answer within {} s: check the URL and the network",
                CONNECT_TIMEOUT.as_secs()
            ))
        })??;
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (theirs_read, mut theirs_write) = tokio::io::split(theirs);
    let (mut to_service, mut from_service) = ws.split();
    tokio::spawn(async move {
        let inbound = async {
            while let Some(Ok(frame)) = from_service.next().await {
                match frame {
                    Message::Text(text)
                        if write_frame(&mut theirs_write, text.as_bytes())
                            .await
                            .is_err() =>
                    {
                        break;
                    }
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            let _ = theirs_write.shutdown().await;
        };
        let outbound = async {
            let mut frames = FrameReader::new(theirs_read);
            while let Ok(Some(body)) = frames.read_frame().await {
                let text = String::from_utf8_lossy(&body).into_owned();
                if to_service.send(Message::text(text)).await.is_err() {
                    break;
                }
            }
            let _ = to_service.close().await;
        };
        tokio::select! {
            () = inbound => {}
            () = outbound => {}
        }
    });
    let (read, write) = tokio::io::split(ours);
    Ok((Box::new(read), Box::new(write)))
}

type Ws = tokio_tungstenite::WebSocketStream<Box<dyn Io>>;

/// TCP, TLS for `wss://`, and the upgrade with the bearer token.
async fn handshake(
    target: &RemoteTarget,
    url: &lsp_types::Url,
    host: &str,
    port: u16,
) -> Result<Ws> {
    let tcp = TcpStream::connect((host, port)).await.map_err(|e| {
        Error::Connect(match e.kind() {
            std::io::ErrorKind::ConnectionRefused => format!(
                "nothing listens at {host}:{port} (connection refused): check the URL, and that \
                 `moonkale-service serve --listen` runs there"
            ),
            _ => format!("cannot reach {host}:{port} ({e}): check the URL and the network"),
        })
    })?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = if url.scheme() == "wss" {
        Box::new(tls(target, host, tcp).await?)
    } else {
        Box::new(tcp)
    };
    let mut req = target
        .url
        .as_str()
        .into_client_request()
        .map_err(|e| Error::Invalid(format!("{}: {e}", target.url)))?;
    let bearer = format!("Bearer {}", target.token)
        .parse()
        .map_err(|_| Error::Invalid("the token is not a valid header value".into()))?;
    req.headers_mut().insert("Authorization", bearer);
    match tokio_tungstenite::client_async(req, stream).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let status = response.status().as_u16();
            let reason = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect::<String>();
            Err(Error::Connect(refused(&target.url, status, reason.trim())))
        }
        Err(e) => Err(Error::Connect(format!(
            "{} did not accept a WebSocket ({e}): check that the URL names `moonkale-service \
             serve --listen`, and wss:// if it uses TLS",
            target.url
        ))),
    }
}

/// The sentence for an HTTP refusal of the upgrade.
fn refused(url: &str, status: u16, reason: &str) -> String {
    let said = if reason.is_empty() {
        format!("{status}")
    } else {
        format!("{status}: {reason}")
    };
    match status {
        401 => format!(
            "{url} refused the token ({said}): set MOONKALE_TOKEN or --token-file to the \
             service's token"
        ),
        429 => format!(
            "{url} is slowing down failed attempts from this address ({said}): check the token, \
             then try again in a minute"
        ),
        _ => format!("{url} refused the connection ({said}): check the URL"),
    }
}

async fn tls(
    target: &RemoteTarget,
    host: &str,
    tcp: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let ca = target.ca.as_ref().ok_or_else(|| {
        Error::Invalid("wss:// needs --ca FILE: the certificate the service uses, or its CA".into())
    })?;
    let bad = |e: &dyn std::fmt::Display| {
        Error::Invalid(format!(
            "reading {}: {e}; --ca must be a PEM certificate",
            ca.display()
        ))
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad(&e))? {
        roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Invalid(format!("TLS: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| Error::Invalid(format!("{host}: {e}")))?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| {
            Error::Connect(format!(
                "TLS with {host} failed ({e}): pass --ca with the certificate the service uses \
                 (or its CA), and a host name that certificate names"
            ))
        })
}
