//! The connection's two tasks and the table that joins them: the writer
//! sends frames in the order calls made them; the reader owns the stream,
//! answers each waiting call by its id and delivers notifications.
//!
//! **Invariant:** only the reader task reads the stream, so no caller's
//! future, dropped at any point, can leave a frame half read; a dropped
//! call only leaves the table (its answer is thrown away when it comes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use moonkale_protocol::jsonrpc::{self, Message, RequestId};
use moonkale_wire::framing::{FrameReader, write_frame};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
use crate::notification::{Delivery, Notifications, QUEUE, typed};

/// Frames that may wait for the writer; a caller past that waits itself.
const OUTGOING: usize = 256;

type Answer = oneshot::Sender<Result<Value>>;

pub(crate) struct Calls {
    outgoing: mpsc::Sender<Vec<u8>>,
    table: Mutex<Table>,
    next_id: AtomicI64,
    notifications: Mutex<Option<Notifications>>,
    reader: tokio::task::AbortHandle,
}

/// The calls waiting for an answer; `closed` once nothing more comes.
#[derive(Default)]
struct Table {
    waiting: HashMap<i64, Answer>,
    closed: bool,
}

impl Calls {
    pub fn start<R, W>(read: R, write: W) -> Arc<Calls>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let (outgoing, frames) = mpsc::channel(OUTGOING);
        let (tx, rx) = mpsc::channel(QUEUE);
        // The reader starts once the table exists; it holds it weakly, so
        // the last handle's drop ends both tasks.
        let (table_tx, table_rx) = oneshot::channel::<std::sync::Weak<Calls>>();
        let reader = tokio::spawn(async move {
            let Ok(calls) = table_rx.await else { return };
            read_loop(FrameReader::new(read), calls, Delivery { tx, missed: 0 }).await;
        });
        let calls = Arc::new(Calls {
            outgoing,
            table: Mutex::new(Table::default()),
            next_id: AtomicI64::new(1),
            notifications: Mutex::new(Some(Notifications { rx })),
            reader: reader.abort_handle(),
        });
        let _ = table_tx.send(Arc::downgrade(&calls));
        tokio::spawn(write_loop(write, frames, Arc::downgrade(&calls)));
        calls
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding it cannot leave the table half changed.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn take_notifications(&self) -> Option<Notifications> {
        self.notifications
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Sends a request and waits for its answer.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut table = self.table();
            if table.closed {
                return Err(Error::Closed);
            }
            table.waiting.insert(id, tx);
        }
        // Leaves the table however this future ends.
        let _waiting = Waiting { calls: self, id };
        let frame = jsonrpc::request(&RequestId::Number(id), method, params);
        self.outgoing.send(frame).await.map_err(|_| Error::Closed)?;
        rx.await.unwrap_or(Err(Error::Closed))
    }

    pub async fn notify(&self, method: &str, params: Value) -> Result<()> {
        if self.table().closed {
            return Err(Error::Closed);
        }
        let frame = jsonrpc::notification(method, params);
        self.outgoing.send(frame).await.map_err(|_| Error::Closed)
    }

    /// Nothing more comes: every waiting call is answered [`Error::Closed`].
    fn close(&self) {
        let waiting = {
            let mut table = self.table();
            table.closed = true;
            std::mem::take(&mut table.waiting)
        };
        for (_, answer) in waiting {
            let _ = answer.send(Err(Error::Closed));
        }
    }

    fn answer(&self, id: i64, result: Result<Value>) {
        if let Some(answer) = self.table().waiting.remove(&id) {
            let _ = answer.send(result);
        }
    }
}

impl Drop for Calls {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

struct Waiting<'a> {
    calls: &'a Calls,
    id: i64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.calls.table().waiting.remove(&self.id);
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut write: W,
    mut frames: mpsc::Receiver<Vec<u8>>,
    calls: std::sync::Weak<Calls>,
) {
    while let Some(frame) = frames.recv().await {
        if write_frame(&mut write, &frame).await.is_err() {
            break;
        }
    }
    // A write failed (or every handle is gone): no answer can come.
    if let Some(calls) = calls.upgrade() {
        calls.close();
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut read: FrameReader<R>,
    calls: std::sync::Weak<Calls>,
    mut delivery: Delivery,
) {
    while let Ok(Some(body)) = read.read_frame().await {
        let Some(calls) = calls.upgrade() else { return };
        match jsonrpc::parse(&body) {
            Ok(Message::Response {
                id: Some(RequestId::Number(id)),
                result,
            }) => calls.answer(
                id,
                result.map_err(|e| Error::Remote {
                    code: e.code,
                    message: e.message,
                }),
            ),
            Ok(Message::Notification { method, params }) => {
                delivery.deliver(typed(method, &params));
            }
            // Requests to an editor (`window/showDocument`, …) are not a
            // front end's to answer; a frame that is no message is skipped.
            Ok(_) | Err(_) => {}
        }
    }
    if let Some(calls) = calls.upgrade() {
        calls.close();
    }
}
