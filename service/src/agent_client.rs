//! `moonkale-service agent …` and `moonkale-service connect URL …`: the
//! agent's front door for scripts and terminals, local or remote. A thin
//! printer over [`moonkale_client::Client`]; the session itself lives in the service, so
//! an interrupted `agent send` loses nothing (`agent show` reads it later),
//! and `follow` picks up after a lost connection from the last event it
//! printed.

use moonkale_client::{Client, Notification, Notifications, Role};
use moonkale_protocol::agent::{
    AnswerParams, Approval, ApprovalKind, ApprovalStatus, Event as AgentEvent, PermissionMode,
    SessionEvent, SessionState,
};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::printable::{for_terminal, json_for_terminal, one_line};
use crate::remote::client::RemoteTarget;

/// Which service the commands talk to.
pub enum Target {
    /// The workspace's unix socket.
    Local(std::path::PathBuf),
    /// `serve --listen` elsewhere.
    Remote(RemoteTarget),
}

impl Target {
    /// The agent command `sub` (`answer`, `follow`) for this target's
    /// sessions, as a person types it.
    fn command(&self, sub: &str) -> String {
        match self {
            Target::Local(_) => format!("moonkale-service agent {sub}"),
            Target::Remote(remote) => {
                format!("moonkale-service connect {} {sub}", one_line(&remote.url))
            }
        }
    }
}

const NAME: &str = "moonkale-agent-cli";

/// An observer connection and its notifications.
async fn connect(target: &Target) -> Result<(Client, Notifications)> {
    let client = match target {
        Target::Local(socket) => Client::observe_socket(socket, NAME).await?,
        Target::Remote(remote) => {
            let (read, write) = crate::remote::client::connect(remote).await?;
            Client::over(read, write, Role::Observer, NAME).await?
        }
    };
    let notifications = client.notifications().expect("a new client's");
    Ok((client, notifications))
}

/// The next notification; the connection's end is an error.
async fn next_notification(notifications: &mut Notifications) -> Result<Notification> {
    notifications.next().await.ok_or(Error::Closed)
}

/// `agent send`: starts a session (or continues `session`), prints the
/// reply as it streams, and returns the exit code: 0 when the turn ended
/// well, 1 when it failed.
pub async fn send(
    target: &Target,
    session: Option<String>,
    permission_mode: Option<String>,
    prompt: String,
) -> Result<i32> {
    let mode = permission_mode
        .map(|m| {
            PermissionMode::parse(&m).ok_or_else(|| {
                Error::Invalid(format!(
                    "unknown permission mode {m:?} (plan, default, acceptEdits or bypassPermissions)"
                ))
            })
        })
        .transpose()?;
    let (door, mut notifications) = connect(target).await?;
    let (session, from) = match session {
        Some(session) => {
            door.agent_subscribe(Some(&session)).await?;
            if let Some(mode) = mode {
                door.agent_set_permission_mode(&session, mode).await?;
            }
            let seq = door.agent_send(&session, &prompt).await?;
            (session, seq)
        }
        None => {
            // Only what comes after this prompt ends its turn: a new
            // session may record states of its own first (its CLI
            // starting, an adopted spare's).
            let started = door.agent_start(Some(&prompt), mode).await?;
            let from = started.seq.unwrap_or(0);
            (started.session, from)
        }
    };
    // The session's id is told once something of it shows (or at its
    // end): a turn that fails at once is one line, its reason.
    let mut told = false;
    let tell = |told: &mut bool| {
        if !std::mem::replace(told, true) {
            eprintln!("session {}", one_line(&session));
        }
    };
    let mut printed = false;
    // The text printed last ends the line (or a paragraph): a new message's
    // text starts a paragraph of its own, as `claude -p` separates them.
    let mut trailing_newlines = 0;
    let answer_command = target.command("answer");
    loop {
        let next = tokio::select! {
            next = next_notification(&mut notifications) => next?,
            _ = tokio::signal::ctrl_c() => {
                // The turn is the service's: it goes on.
                if printed {
                    eprintln!();
                }
                eprintln!(
                    "the turn goes on in the service (session {}): `{} {}` shows it",
                    one_line(&session),
                    target.command("follow"),
                    one_line(&session)
                );
                return Ok(130);
            }
        };
        match next {
            Notification::AgentText {
                session: s,
                text,
                thinking: false,
                offset,
            } if s == session => {
                tell(&mut told);
                if offset == 0 && printed && !text.is_empty() {
                    crate::stdout::write("\n".repeat(2usize.saturating_sub(trailing_newlines)));
                    trailing_newlines = 2;
                }
                printed |= !text.is_empty();
                let shown = for_terminal(&text);
                crate::stdout::write(&shown);
                let tail = shown.len() - shown.trim_end_matches('\n').len();
                trailing_newlines = if tail == shown.len() {
                    trailing_newlines + tail
                } else {
                    tail
                };
            }
            Notification::Approval {
                session: s,
                approval,
                status: ApprovalStatus::Pending,
            } if s == session => {
                tell(&mut told);
                eprintln!();
                approval_hint(&approval, &answer_command);
            }
            Notification::AgentEvent { session: s, event } if s == session && event.seq >= from => {
                let SessionEvent::State(state) = &event.event else {
                    continue;
                };
                match state.state {
                    SessionState::Idle => {
                        tell(&mut told);
                        crate::stdout::line("");
                        return Ok(0);
                    }
                    SessionState::Failed => {
                        if printed {
                            crate::stdout::line("");
                        }
                        let why = match (&state.login, target) {
                            (Some(login), Target::Remote(_)) => login.sentence_remote(),
                            (Some(login), Target::Local(_)) => login.sentence(),
                            (None, _) => format!(
                                "the turn failed (session {}): {}",
                                session,
                                state.error.as_deref().unwrap_or("no reason given")
                            ),
                        };
                        eprintln!("moonkale-service: {}", one_line(&why));
                        return Ok(1);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

/// `agent list`.
pub async fn list(target: &Target, as_json: bool) -> Result<String> {
    let sessions = connect(target).await?.0.agent_list().await?;
    if as_json {
        let json = serde_json::json!({"sessions": sessions});
        let json = serde_json::to_string_pretty(&json).expect("serializes");
        return Ok(json_for_terminal(&json) + "\n");
    }
    if sessions.is_empty() {
        return Ok("no agent sessions in this workspace\n".into());
    }
    Ok(sessions
        .iter()
        .map(|s| {
            let (session, title) = (one_line(&s.session), one_line(&s.title));
            let cli = match s.cli {
                Some(cli) => format!(
                    "claude pid {}, {}",
                    cli.pid,
                    cli.rss_bytes
                        .map_or("memory unknown".to_owned(), |b| format!(
                            "{:.0} MiB",
                            b as f64 / 1048576.0
                        ))
                ),
                None if s.outside => "started outside".to_owned(),
                None => "no claude running".to_owned(),
            };
            format!(
                "{session}  {:<15}  {cli:<25}  {title}\n",
                s.state.in_words()
            )
        })
        .collect())
}

/// The session the user named by `given`: its whole id, or the one id it
/// is a unique prefix of (as git takes a commit's).
pub async fn resolve_session(target: &Target, given: &str) -> Result<String> {
    if uuid::Uuid::parse_str(given).is_ok() {
        return Ok(given.to_owned());
    }
    if given.is_empty() {
        return Err(Error::Invalid(
            "give a session id (`agent list` shows them)".into(),
        ));
    }
    let sessions = connect(target).await?.0.agent_list().await?;
    let ids = sessions.iter().map(|s| s.session.as_str());
    crate::id_prefix::pick(given, ids, "session", "agent list").map(str::to_owned)
}

/// `agent close ID`.
pub async fn close(target: &Target, session: &str) -> Result<()> {
    Ok(connect(target).await?.0.agent_close(session).await?)
}

/// `agent delete ID`.
pub async fn delete(target: &Target, session: &str) -> Result<()> {
    Ok(connect(target).await?.0.agent_delete(session).await?)
}

/// `agent delete --failed`: every session whose last turn failed; how
/// many.
pub async fn delete_failed(target: &Target) -> Result<usize> {
    let (door, _) = connect(target).await?;
    let failed: Vec<String> = door
        .agent_list()
        .await?
        .into_iter()
        .filter(|s| s.state == moonkale_protocol::agent::SessionState::Failed)
        .map(|s| s.session)
        .collect();
    for session in &failed {
        door.agent_delete(session).await?;
    }
    Ok(failed.len())
}

/// `agent show ID`: the whole transcript, read page by page.
pub async fn show(target: &Target, session: &str) -> Result<String> {
    let (door, _) = connect(target).await?;
    let mut out = String::new();
    let mut since = 0;
    loop {
        let page = door.agent_events(session, since).await?;
        for event in &page.events {
            render_event(event, &mut out);
        }
        if page.events.is_empty() || page.next == since {
            out += &format!("[state: {}]\n", page.state.in_words());
            for approval in &page.pending_approvals {
                out += &approval_hint_text(approval, &target.command("answer"));
            }
            return Ok(out);
        }
        since = page.next;
    }
}

/// `agent answer APPROVAL allow|always|deny|accept-edits|answer TEXT…`.
pub async fn answer(
    target: &Target,
    approval: &str,
    verdict: &str,
    texts: &[String],
    message: Option<String>,
) -> Result<()> {
    let mut params = if verdict == "deny" {
        AnswerParams::deny(approval)
    } else {
        AnswerParams::allow(approval)
    };
    match verdict {
        "allow" | "deny" => {}
        "always" => params = params.always(),
        "accept-edits" => params = params.with_mode(PermissionMode::AcceptEdits),
        "answer" => {
            let (door, _) = connect(target).await?;
            let id = moonkale_protocol::ApprovalId::parse(approval).ok_or_else(|| {
                Error::Invalid(format!(
                    "{approval:?} is not an approval id (session/number)"
                ))
            })?;
            let page = door.agent_events(id.session(), u64::MAX).await?;
            let asked = page
                .pending_approvals
                .iter()
                .find(|a| a.approval == approval)
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "approval {approval} is not waiting (answered already?)"
                    ))
                })?;
            let questions: Vec<&str> = match &asked.kind {
                ApprovalKind::Question { questions } => {
                    questions.iter().map(|q| q.question.as_str()).collect()
                }
                _ => Vec::new(),
            };
            if questions.len() != texts.len() {
                return Err(Error::Invalid(format!(
                    "Claude asked {}; give one answer for each, in order",
                    crate::printable::counted(questions.len(), "question")
                )));
            }
            let answers: serde_json::Map<String, Value> = questions
                .iter()
                .zip(texts)
                .map(|(q, a)| ((*q).to_owned(), serde_json::json!(a)))
                .collect();
            return Ok(door.agent_answer(params.with_answers(answers)).await?);
        }
        other => {
            return Err(Error::Invalid(format!(
                "{other:?}: answer allow, always, deny, accept-edits or answer"
            )));
        }
    }
    if let Some(message) = message {
        params = params.with_message(message);
    }
    Ok(connect(target).await?.0.agent_answer(params).await?)
}

/// `trust [--revoke]` with a service running: it keeps the decision and
/// tells its editors; returns what it says.
pub async fn trust(socket: &std::path::Path, trusted: bool) -> Result<String> {
    let client = Client::observe_socket(socket, NAME).await?;
    Ok(client.trust(trusted).await?.message)
}

/// `follow SESSION`: prints the transcript so far, then the turn as it
/// streams, with a hint for each approval asked. A lost connection is
/// retried every second, resuming after the last event printed, so nothing
/// is missed or printed twice. With `until_idle`, returns once the session
/// is idle (0) or failed (1); otherwise runs until interrupted.
pub async fn follow(target: &Target, session: &str, until_idle: bool) -> Result<i32> {
    let mut next = 0;
    loop {
        match follow_once(target, session, &mut next, until_idle).await {
            Ok(code) => return Ok(code),
            // Nothing printed yet: a wrong URL, token or session id, most likely.
            Err(e) if next == 0 => return Err(e),
            Err(e) => {
                let e = one_line(&e.to_string());
                eprintln!("[connection lost: {e}; resuming after event {}]", next - 1);
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
}

async fn follow_once(
    target: &Target,
    session: &str,
    next: &mut u64,
    until_idle: bool,
) -> Result<i32> {
    let (door, mut notifications) = connect(target).await?;
    door.agent_subscribe(Some(session)).await?;
    let print = |event: &AgentEvent, next: &mut u64| {
        if event.seq < *next {
            return; // already printed (live and paged overlap)
        }
        let mut out = String::new();
        render_event(event, &mut out);
        crate::stdout::write(&out);
        *next = event.seq + 1;
    };
    let state = loop {
        let page = door.agent_events(session, *next).await?;
        for event in &page.events {
            print(event, next);
        }
        if page.events.is_empty() {
            for approval in &page.pending_approvals {
                approval_hint(approval, &target.command("answer"));
            }
            break page.state;
        }
    };
    let ended = |state: &str| match state {
        "idle" => Some(0),
        "failed" => Some(1),
        _ => None,
    };
    if until_idle && let Some(code) = ended(state.as_str()) {
        return Ok(code);
    }
    loop {
        match next_notification(&mut notifications).await? {
            Notification::AgentEvent { session: s, event } if s == session => {
                print(&event, next);
                if until_idle
                    && let SessionEvent::State(data) = &event.event
                    && let Some(code) = ended(data.state.as_str())
                {
                    return Ok(code);
                }
            }
            Notification::Approval {
                session: s,
                approval,
                status: ApprovalStatus::Pending,
            } if s == session => approval_hint(&approval, &target.command("answer")),
            _ => {}
        }
    }
}

/// How to answer `approval`, on stderr; `verb` is the whole command that
/// answers (`moonkale-service agent answer`).
fn approval_hint(approval: &Approval, verb: &str) {
    eprint!("{}", approval_hint_text(approval, verb));
}

/// [`approval_hint`]'s text. Every text from the session is made safe for
/// the terminal first.
fn approval_hint_text(approval: &Approval, verb: &str) -> String {
    let id = one_line(&approval.approval);
    match &approval.kind {
        ApprovalKind::Plan { plan, .. } => format!(
            "Claude's plan is ready:\n{}\nAnswer with: {verb} {id} allow (edits asked) | accept-edits | deny (keep planning)\n",
            for_terminal(plan)
        ),
        ApprovalKind::Question { questions } => {
            let mut out = String::new();
            for q in questions {
                let options: Vec<String> = q
                    .options
                    .iter()
                    .flatten()
                    .map(|o| one_line(&o.label))
                    .collect();
                let many = if q.multi_select == Some(true) {
                    " (several: join with \", \")"
                } else {
                    ""
                };
                out += &format!(
                    "Claude asks: {} [{}]{many}\n",
                    one_line(&q.question),
                    options.join(" | ")
                );
            }
            out + &format!("Answer with: {verb} {id} answer \"TEXT\"… (one per question) | deny\n")
        }
        ApprovalKind::Tool => format!(
            "Claude asks to run {}. Answer with: {verb} {id} allow|always|deny\n",
            one_line(&approval.title),
        ),
    }
}

/// One event as text for a terminal: whatever the session holds, no
/// control sequence reaches the terminal ([`for_terminal`]).
fn render_event(event: &AgentEvent, out: &mut String) {
    let mut raw = String::new();
    render_raw(event, &mut raw);
    *out += &for_terminal(&raw);
}

fn render_raw(event: &AgentEvent, out: &mut String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match &event.event {
        SessionEvent::Prompt(prompt) => *out += &format!("> {}\n", prompt.text),
        // A CLI message is the CLI's own format: only its text and tool
        // calls are shown. One it made up to say why a turn failed (no
        // login, an API error) is not: the failed state says it, once.
        SessionEvent::Cli(data)
            if data["type"] == "assistant" && data["message"]["model"] != "<synthetic>" =>
        {
            for block in data["message"]["content"].as_array().into_iter().flatten() {
                match block["type"].as_str() {
                    Some("text") => *out += &format!("{}\n", text(&block["text"])),
                    Some("tool_use") => {
                        *out += &format!(
                            "[{}]\n",
                            moonkale_protocol::agent::tool_summary(
                                block["name"].as_str().unwrap_or("a tool"),
                                &block["input"]
                            )
                        )
                    }
                    _ => {}
                }
            }
        }
        SessionEvent::Approval(approval) => {
            *out += &format!(
                "[asks: {} (approval {})]\n",
                approval.title, approval.approval
            )
        }
        SessionEvent::Decision(decision) => {
            let words =
                moonkale_protocol::agent::decision_in_words(decision.allow(), decision.by());
            *out += &format!("[{words}]\n");
        }
        SessionEvent::Notice(notice) => *out += &format!("[{}]\n", notice.message),
        SessionEvent::State(state) if state.state == SessionState::Failed => {
            let error = state.error.as_deref().unwrap_or_default();
            *out += &format!("[failed: {error}]\n");
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;
    use serde_json::json;

    #[test]
    fn renders_a_turn() {
        let events = [
            json!({"kind": "prompt", "data": {"text": "write a.txt"}}),
            json!({"kind": "cli", "data": {"type": "system", "subtype": "init"}}),
            json!({"kind": "cli", "data": {"type": "assistant", "message": {"content": [
                {"type": "text", "text": "Writing it."},
                {"type": "tool_use", "name": "Write", "input": {"file_path": "/w/a.txt"}},
            ]}}}),
            json!({"kind": "approval", "data": {"approval": "s/1", "session": "s", "kind": "tool",
                "tool": "Write", "input": {}, "title": "Write a.txt", "destructive": false}}),
            json!({"kind": "decision", "data": {"approval": "s/1", "tool": "Write", "allow": false,
                "always": false, "by": "timeout"}}),
            json!({"kind": "cli", "data": {"type": "result", "is_error": true, "result": "API Error: 529"}}),
            json!({"kind": "state", "data": {"state": "failed", "error": "API Error: 529"}}),
        ];
        let mut out = String::new();
        for (seq, mut e) in events.into_iter().enumerate() {
            e["seq"] = json!(seq);
            e["at"] = json!(0);
            let event: AgentEvent = serde_json::from_value(e).unwrap();
            render_event(&event, &mut out);
        }
        expect![[r#"
            > write a.txt
            Writing it.
            [Write /w/a.txt]
            [asks: Write a.txt (approval s/1)]
            [denied: no answer in time]
            [failed: API Error: 529]
        "#]]
        .assert_eq(&out);
    }

    /// A transcript written by an earlier version (main at 7a99753) prints
    /// as that version printed it.
    #[test]
    fn renders_a_transcript_of_an_earlier_version() {
        let text = include_str!("../tests/data/transcript-7a99753.jsonl");
        let mut out = String::new();
        for line in text.lines() {
            render_event(&serde_json::from_str(line).unwrap(), &mut out);
        }
        expect![[r#"
            [This workspace is not trusted, so its .claude/settings.json is not loaded: Claude Code sessions the service runs for it load the repository's own Claude Code settings: .claude/settings.json and .claude/settings.local.json (hooks there run shell commands, permission rules there can allow tools without asking) and the MCP servers of .mcp.json (programs that start with the session) would. Trust it with `moonkale-service trust` (or the editor command "Moonkale: trust this workspace") if you trust whoever wrote it.]
            > Write a.txt
            with a greeting
            I will write it.
            [Write /tmp/w/a.txt]
            [denied by the permission mode or your rules]
            [asks: Write /tmp/w/a.txt (approval 00000000-0000-0000-0000-000000005e55/1)]
            [allowed in an editor]
            Done.
            > Now look at this
            [failed: API Error: 529 overloaded]
        "#]].assert_eq(&out);
    }
}
