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

/// How long a question waits before the command runs, unless told.
pub const NOTIFY_AFTER: Duration = Duration::from_secs(20);
/// The environment variable holding the question's summary.
pub const QUESTION_ENV: &str = "MOONKALE_QUESTION";
/// A notify command that runs longer is killed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// `--notify-command` and `--notify-after`.
#[derive(Clone, Debug)]
pub struct Notify {
    pub command: String,
    pub after: Duration,
}

/// The questions waiting, each with when to notify it: pure, so the
/// timing is tested alone.
#[derive(Debug, Default)]
pub struct Waiting {
    /// Approval id → (when to notify, summary).
    questions: HashMap<String, (Instant, String)>,
}

impl Waiting {
    pub fn asked(&mut self, approval: &str, title: &str, due: Instant) {
        let summary = crate::printable::one_line(&format!("Claude asks: {title}"));
        self.questions.insert(approval.to_owned(), (due, summary));
    }

    /// Answered (anywhere): never notified.
    pub fn closed(&mut self, approval: &str) {
        self.questions.remove(approval);
    }

    /// When the next question is due.
    pub fn next(&self) -> Option<Instant> {
        self.questions.values().map(|(at, _)| *at).min()
    }

    /// The summaries of the questions due at `now`, each once, oldest
    /// first.
    pub fn take_due(&mut self, now: Instant) -> Vec<String> {
        let mut due: Vec<(Instant, String)> = Vec::new();
        self.questions.retain(|_, (at, summary)| {
            if *at <= now {
                due.push((*at, std::mem::take(summary)));
                false
            } else {
                true
            }
        });
        due.sort();
        due.into_iter().map(|(_, summary)| summary).collect()
    }
}

/// Follows the questions of every session on `client` and runs the
/// command for each one that waited `notify.after`; returns when the
/// connection closes.
pub async fn run(client: Client, notify: Notify) {
    let Some(mut notifications) = client.notifications() else {
        return;
    };
    if client.agent_subscribe(None).await.is_err() {
        return;
    }
    let mut waiting = Waiting::default();
    loop {
        tokio::select! {
            n = notifications.next() => match n {
                Some(Notification::Approval { approval, status, .. }) => match status {
                    ApprovalStatus::Pending => {
                        waiting.asked(&approval.approval, &approval.title, Instant::now() + notify.after);
                    }
                    ApprovalStatus::Closed => waiting.closed(&approval.approval),
                },
                Some(_) => {}
                None => return,
            },
            () = sleep_until(waiting.next()) => {
                for summary in waiting.take_due(Instant::now()) {
                    tokio::spawn(run_command(notify.command.clone(), summary));
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
async fn run_command(command: String, summary: String) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A question answered before its time is never notified; one left
    /// waiting is, once, with its summary on one line.
    #[test]
    fn only_questions_left_waiting_are_notified_once() {
        let t0 = Instant::now();
        let mut w = Waiting::default();
        w.asked("s/1", "Write a.txt", t0 + NOTIFY_AFTER);
        w.asked(
            "s/2",
            "Run rm -rf /\nand more",
            t0 + NOTIFY_AFTER + Duration::from_secs(1),
        );
        w.asked("s/3", "Edit b.txt", t0 + NOTIFY_AFTER);
        w.closed("s/3");
        assert_eq!(w.next(), Some(t0 + NOTIFY_AFTER));
        assert!(w.take_due(t0).is_empty());
        assert_eq!(w.take_due(t0 + NOTIFY_AFTER), ["Claude asks: Write a.txt"]);
        let later = t0 + NOTIFY_AFTER * 2;
        let second = w.take_due(later);
        assert_eq!(second.len(), 1);
        assert!(!second[0].contains('\n'), "{second:?}");
        assert!(w.take_due(later).is_empty() && w.next().is_none());
    }
}
