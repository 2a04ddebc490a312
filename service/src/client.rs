//! A small LSP client: used by `moonkale-service status`, tests and
//! benchmarks. It speaks the same framing as the server.

use std::path::Path;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::error::{Error, IoContext, Result};
use crate::lsp::connection::ROLE_OPTION;
use crate::lsp::framing::{FrameReader, write_frame};
use crate::lsp::message::{self, Message, RequestId};

pub struct LspClient<R, W> {
    reader: FrameReader<R>,
    writer: W,
    next_id: i64,
    /// Notifications and server requests that arrived while waiting for a
    /// response, oldest first.
    pub received: Vec<Message>,
}

impl LspClient<OwnedReadHalf, OwnedWriteHalf> {
    pub async fn connect_unix(path: &Path) -> Result<Self> {
        let stream = UnixStream::connect(path)
            .await
            .context(|| format!("connecting to {}", path.display()))?;
        let (r, w) = stream.into_split();
        Ok(LspClient::new(r, w))
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> LspClient<R, W> {
    pub fn new(read: R, write: W) -> Self {
        LspClient {
            reader: FrameReader::new(read),
            writer: write,
            next_id: 1,
            received: Vec::new(),
        }
    }

    /// Sends a request and waits for its response.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = RequestId::Number(self.next_id);
        self.next_id += 1;
        self.send_raw(&message::request(&id, method, params))
            .await?;
        loop {
            match self.next_message().await? {
                Message::Response {
                    id: Some(got),
                    result,
                } if got == id => {
                    // The code is for programs; the message is what a
                    // person reads (status, stop and changes print it).
                    return result.map_err(|e| Error::Remote(e.message));
                }
                other => self.received.push(other),
            }
        }
    }

    pub async fn notify(&mut self, method: &str, params: Value) -> Result<()> {
        self.send_raw(&message::notification(method, params)).await
    }

    pub async fn send_raw(&mut self, body: &[u8]) -> Result<()> {
        write_frame(&mut self.writer, body)
            .await
            .context(|| "sending to the service".into())
    }

    pub async fn next_message(&mut self) -> Result<Message> {
        let body = self.reader.read_frame().await?.ok_or(Error::Closed)?;
        message::parse(&body)
            .map_err(|e| Error::Invalid(format!("bad message from the service: {e:?}")))
    }

    /// `initialize` + `initialized` as an observer: a connection that is not
    /// listed among the editors.
    pub async fn initialize_observer(&mut self, name: &str) -> Result<Value> {
        let result = self
            .request(
                "initialize",
                json!({
                    "processId": std::process::id(),
                    "clientInfo": {"name": name},
                    "capabilities": {"general": {"positionEncodings": ["utf-8", "utf-16"]}},
                    "initializationOptions": {ROLE_OPTION: "observer"},
                }),
            )
            .await?;
        self.notify("initialized", json!({})).await?;
        Ok(result)
    }
}

/// Connecting or starting lives with the client, which the shim shares.
pub use moonkale_client::{START_TIMEOUT, connect_or_start};
