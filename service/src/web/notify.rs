//! `--notify-command`: a question that waited [`NOTIFY_AFTER`] unanswered
//! runs the user's command with its one-line summary in the environment
//! (`MOONKALE_QUESTION`), so ntfy, Pushover or notify-send reach a phone
//! with no hosted relay. The command comes from the user's command line
//! only, never from a workspace; the summary is never spliced into it.
//! Also the QR code of the page's URL, for a phone's camera.

use std::collections::HashMap;
use std::time::Duration;

use moonkale_client::moonkale_protocol::agent::ApprovalStatus;
use moonkale_client::{Client, Notification};
use tokio::time::Instant;

/// How long a question waits before the command runs.
pub const NOTIFY_AFTER: Duration = Duration::from_secs(20);
/// The environment variable holding the question's summary.
pub const QUESTION_ENV: &str = "MOONKALE_QUESTION";
/// A notify command that runs longer is killed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Follows the questions of every session on `client` and notifies each
/// one that waited [`NOTIFY_AFTER`]; returns when the connection closes.
pub async fn run(client: Client, command: String) {
    let Some(mut notifications) = client.notifications() else {
        return;
    };
    if client.agent_subscribe(None).await.is_err() {
        return;
    }
    // Approval id → (when to notify, summary).
    let mut waiting: HashMap<String, (Instant, String)> = HashMap::new();
    loop {
        let next = waiting.values().map(|(at, _)| *at).min();
        tokio::select! {
            n = notifications.next() => match n {
                Some(Notification::Approval { approval, status, .. }) => match status {
                    ApprovalStatus::Pending => {
                        let summary = crate::printable::one_line(&format!("Claude asks: {}", approval.title));
                        waiting.insert(approval.approval.clone(), (Instant::now() + NOTIFY_AFTER, summary));
                    }
                    ApprovalStatus::Closed => {
                        waiting.remove(&approval.approval);
                    }
                },
                Some(_) => {}
                None => return,
            },
            () = sleep_until(next) => {
                let now = Instant::now();
                let due: Vec<String> = waiting
                    .iter()
                    .filter(|(_, (at, _))| *at <= now)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in due {
                    if let Some((_, summary)) = waiting.remove(&id) {
                        tokio::spawn(notify(command.clone(), summary));
                    }
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs the user's command through `sh -c` with the summary in its
/// environment; its output is not ours to print.
async fn notify(command: String, summary: String) {
    let child = tokio::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&command)
        .env(QUESTION_ENV, &summary)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn();
    match child {
        Ok(mut child) => match tokio::time::timeout(COMMAND_TIMEOUT, child.wait()).await {
            Ok(Ok(status)) if !status.success() => {
                tracing::warn!("the notify command failed ({status})");
            }
            Ok(_) => {}
            Err(_) => tracing::warn!("the notify command ran over {COMMAND_TIMEOUT:?}; killed"),
        },
        Err(e) => tracing::warn!("cannot run the notify command: {e}"),
    }
}

/// The URL as a QR code in text (two rows per line), for a phone's camera.
pub fn qr_text(url: &str) -> String {
    match qrcode::QrCode::new(url.as_bytes()) {
        Ok(code) => code
            .render::<qrcode::render::unicode::Dense1x2>()
            .quiet_zone(true)
            .build(),
        Err(_) => String::new(),
    }
}
