//! The client side of the remote front door: a WebSocket to `serve
//! --listen` (`ws://` or `wss://`), bridged to LSP frames over an in-memory
//! pipe, so [`crate::front_door::FrontDoor`] and the `agent` printers work
//! over it unchanged.

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::error::{Error, IoContext, Result};
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

/// Connects and returns the two ends of an LSP-framed stream.
pub async fn connect(target: &RemoteTarget) -> Result<(BoxRead, BoxWrite)> {
    let url = lsp_types::Url::parse(&target.url)
        .map_err(|e| Error::Invalid(format!("{}: {e}", target.url)))?;
    let host = url
        .host_str()
        .ok_or_else(|| Error::Invalid(format!("{}: no host", target.url)))?
        .to_owned();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| Error::Invalid(format!("{}: no port", target.url)))?;
    let tcp = TcpStream::connect((host.as_str(), port))
        .await
        .context(|| format!("connecting to {host}:{port}"))?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = match url.scheme() {
        "ws" => Box::new(tcp),
        "wss" => Box::new(tls(target, &host, tcp).await?),
        other => {
            return Err(Error::Invalid(format!(
                "{other}: the URL must start with ws:// or wss://"
            )));
        }
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
    let (ws, _) = tokio_tungstenite::client_async(req, stream)
        .await
        .map_err(|e| Error::Invalid(format!("connecting to {}: {e}", target.url)))?;

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
    let bad = |e: &dyn std::fmt::Display| Error::Invalid(format!("reading {}: {e}", ca.display()));
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
        .context(|| format!("TLS with {host}"))
}
