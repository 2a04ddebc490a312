//! JSON-RPC over a WebSocket, one message per text frame: the transport of
//! Claude Code's IDE protocol ([`crate::IdeClient`]) and of the remote front
//! door ([`crate::remote::RemoteClient`]). Every read has a deadline.

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::TIMEOUT;

pub struct WsRpc<S> {
    pub ws: WebSocketStream<S>,
    next_id: i64,
    /// Messages that arrived while waiting for a response.
    pub notifications: Vec<Value>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> WsRpc<S> {
    pub fn new(ws: WebSocketStream<S>) -> WsRpc<S> {
        WsRpc {
            ws,
            next_id: 0,
            notifications: Vec::new(),
        }
    }

    pub async fn send(&mut self, msg: Value) {
        assert!(self.send_raw(msg).await, "send failed");
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws.send(Message::text(text)).await.expect("send");
    }

    /// Sends without failing the test: `false` once the connection is gone.
    pub async fn send_raw(&mut self, msg: Value) -> bool {
        self.ws.send(Message::text(msg.to_string())).await.is_ok()
    }

    /// The next JSON-RPC message; `None` once the server closed.
    pub async fn try_recv(&mut self) -> Option<Value> {
        loop {
            let frame = tokio::time::timeout(TIMEOUT, self.ws.next())
                .await
                .expect("timed out waiting for the server");
            match frame? {
                Ok(Message::Text(t)) => return Some(serde_json::from_str(&t).expect("JSON")),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    }

    pub async fn recv(&mut self) -> Value {
        self.try_recv()
            .await
            .expect("the server closed the connection")
    }

    /// Runs `work` while reading this connection (what arrives is set
    /// aside), so that it answers the service's pings meanwhile, as the CLI
    /// does: a stand-in left unread for two ping intervals (60 s), which a
    /// long step takes under load, is dropped as silent. Closed meanwhile,
    /// it fails at its next use.
    pub async fn answering_pings<T>(&mut self, work: impl std::future::Future<Output = T>) -> T {
        tokio::pin!(work);
        let mut open = true;
        loop {
            tokio::select! {
                out = &mut work => return out,
                frame = self.ws.next(), if open => match frame {
                    Some(Ok(Message::Text(t))) => {
                        self.notifications.push(serde_json::from_str(&t).expect("JSON"));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => open = false,
                },
            }
        }
    }

    /// The response with `id` (already set aside, or the next to come),
    /// keeping the other messages aside.
    pub async fn response(&mut self, id: i64) -> Value {
        if let Some(i) = self
            .notifications
            .iter()
            .position(|m| m["id"] == id && m.get("method").is_none())
        {
            return self.notifications.remove(i);
        }
        loop {
            let msg = self.recv().await;
            if msg["id"] == id && msg.get("method").is_none() {
                return msg;
            }
            self.notifications.push(msg);
        }
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Sends a request and returns the whole response, keeping
    /// notifications aside.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let msg = self.recv().await;
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                return msg;
            }
            self.notifications.push(msg);
        }
    }

    /// A request's `result`, failing on an error reply.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let resp = self.request(method, params).await;
        assert!(resp.get("error").is_none(), "{method} failed: {resp}");
        resp["result"].clone()
    }

    /// Waits for the next notification named `method`.
    pub async fn notification(&mut self, method: &str) -> Value {
        if let Some(i) = self
            .notifications
            .iter()
            .position(|n| n["method"] == method)
        {
            return self.notifications.remove(i);
        }
        loop {
            let msg = self.recv().await;
            if msg["method"] == method {
                return msg;
            }
            self.notifications.push(msg);
        }
    }
}
