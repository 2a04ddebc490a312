//! `moonkale-service agent …`: the agent's front door for scripts and
//! terminals. A thin client: it speaks `moonkale/agent/*` to the running
//! service and prints; the session itself lives in the service, so an
//! interrupted `agent send` loses nothing (`agent show` reads it later).

use std::io::Write;

use serde_json::{Value, json};

use crate::client::LspClient;
use crate::error::{Error, Result};
use crate::lsp::message::Message;
use crate::runtime::ServiceInfo;

type Client = LspClient<tokio::net::unix::OwnedReadHalf, tokio::net::unix::OwnedWriteHalf>;

async fn connect(info: &ServiceInfo) -> Result<Client> {
    let mut client = LspClient::connect_unix(&info.socket).await?;
    client.initialize_observer("moonkale-agent-cli").await?;
    Ok(client)
}

/// `agent send`: starts a session (or continues `session`), prints the
/// reply as it streams, and returns the exit code: 0 when the turn ended
/// well, 1 when it failed.
pub async fn send(
    info: &ServiceInfo,
    session: Option<String>,
    permission_mode: Option<String>,
    prompt: String,
) -> Result<i32> {
    let mut client = connect(info).await?;
    let started = match session {
        Some(session) => {
            client
                .request("moonkale/agent/subscribe", json!({"session": session}))
                .await?;
            client
                .request(
                    "moonkale/agent/send",
                    json!({"session": session, "prompt": prompt}),
                )
                .await?
        }
        None => {
            let mut params = json!({"prompt": prompt});
            if let Some(mode) = permission_mode {
                params["permissionMode"] = json!(mode);
            }
            client.request("moonkale/agent/start", params).await?
        }
    };
    let session = started["session"].as_str().unwrap_or_default().to_owned();
    let from = started["seq"].as_u64().unwrap_or(0);
    eprintln!("session {session}");
    let mut pending: Vec<Message> = std::mem::take(&mut client.received);
    pending.reverse();
    let mut stdout = std::io::stdout();
    loop {
        let message = match pending.pop() {
            Some(m) => m,
            None => client.next_message().await?,
        };
        let Message::Notification { method, params } = message else {
            continue;
        };
        let params: Value = serde_json::from_str(params.get()).unwrap_or_default();
        if params["session"] != session.as_str() {
            continue;
        }
        match method.as_str() {
            "moonkale/agent/text" => {
                let _ = write!(stdout, "{}", params["text"].as_str().unwrap_or_default());
                let _ = stdout.flush();
            }
            "moonkale/agent/approval" if params["status"] == "pending" => {
                let a = &params["approval"];
                eprintln!(
                    "\nClaude asks to run {}. Answer with: moonkale-service agent answer {} allow|always|deny",
                    a["title"].as_str().unwrap_or_default(),
                    a["approval"].as_str().unwrap_or_default()
                );
            }
            "moonkale/agent/event" => {
                let event = &params["event"];
                if event["seq"].as_u64().unwrap_or(0) < from || event["kind"] != "state" {
                    continue;
                }
                match event["data"]["state"].as_str() {
                    Some("idle") => {
                        println!();
                        return Ok(0);
                    }
                    Some("failed") => {
                        println!();
                        eprintln!(
                            "the turn failed: {}",
                            event["data"]["error"]
                                .as_str()
                                .unwrap_or("(no reason given)")
                        );
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
pub async fn list(info: &ServiceInfo, as_json: bool) -> Result<String> {
    let mut client = connect(info).await?;
    let list = client.request("moonkale/agent/list", Value::Null).await?;
    if as_json {
        return Ok(serde_json::to_string_pretty(&list).expect("serializes") + "\n");
    }
    let mut out = String::new();
    for s in list["sessions"].as_array().into_iter().flatten() {
        out += &format!(
            "{}  {:<18}  {}\n",
            s["session"].as_str().unwrap_or_default(),
            s["state"].as_str().unwrap_or_default(),
            s["title"].as_str().unwrap_or_default()
        );
    }
    if out.is_empty() {
        out = "no agent sessions in this workspace\n".into();
    }
    Ok(out)
}

/// `agent show ID`: the whole transcript, read page by page.
pub async fn show(info: &ServiceInfo, session: &str) -> Result<String> {
    let mut client = connect(info).await?;
    let mut out = String::new();
    let mut since = 0;
    loop {
        let page = client
            .request(
                "moonkale/agent/events",
                json!({"session": session, "since": since}),
            )
            .await?;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        for event in &events {
            render_event(event, &mut out);
        }
        let next = page["next"].as_u64().unwrap_or(since);
        if events.is_empty() || next == since {
            out += &format!("[state: {}]\n", page["state"].as_str().unwrap_or_default());
            return Ok(out);
        }
        since = next;
    }
}

/// `agent answer APPROVAL allow|always|deny`.
pub async fn answer(info: &ServiceInfo, approval: &str, verdict: &str) -> Result<()> {
    let (allow, always) = match verdict {
        "allow" => (true, false),
        "always" => (true, true),
        "deny" => (false, false),
        other => {
            return Err(Error::Invalid(format!(
                "{other:?}: answer allow, always or deny"
            )));
        }
    };
    let mut client = connect(info).await?;
    client
        .request(
            "moonkale/agent/answer",
            json!({"approval": approval, "allow": allow, "always": always}),
        )
        .await?;
    Ok(())
}

/// One event as text for a terminal.
fn render_event(event: &Value, out: &mut String) {
    let data = &event["data"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match event["kind"].as_str().unwrap_or_default() {
        "prompt" => *out += &format!("> {}\n", text(&data["text"])),
        "cli" => match data["type"].as_str() {
            Some("assistant") => {
                for block in data["message"]["content"].as_array().into_iter().flatten() {
                    match block["type"].as_str() {
                        Some("text") => *out += &format!("{}\n", text(&block["text"])),
                        Some("tool_use") => {
                            *out += &format!("[{} {}]\n", text(&block["name"]), block["input"])
                        }
                        _ => {}
                    }
                }
            }
            Some("result") if data["is_error"] == true => {
                *out += &format!("[error: {}]\n", text(&data["result"]));
            }
            _ => {}
        },
        "approval" => *out += &format!("[asks: {}]\n", text(&data["title"])),
        "decision" => {
            let verdict = if data["allow"] == true {
                "allowed"
            } else {
                "denied"
            };
            *out += &format!("[{verdict} by {}]\n", text(&data["by"]));
        }
        "notice" => *out += &format!("[{}]\n", text(&data["message"])),
        "state" if data["state"] == "failed" => {
            *out += &format!("[failed: {}]\n", text(&data["error"]));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    #[test]
    fn renders_a_turn() {
        let events = [
            json!({"kind": "prompt", "data": {"text": "write a.txt"}}),
            json!({"kind": "cli", "data": {"type": "system", "subtype": "init"}}),
            json!({"kind": "cli", "data": {"type": "assistant", "message": {"content": [
                {"type": "text", "text": "Writing it."},
                {"type": "tool_use", "name": "Write", "input": {"file_path": "/w/a.txt"}},
            ]}}}),
            json!({"kind": "approval", "data": {"title": "Write a.txt"}}),
            json!({"kind": "decision", "data": {"allow": false, "by": "timeout"}}),
            json!({"kind": "cli", "data": {"type": "result", "is_error": true, "result": "API Error: 529"}}),
            json!({"kind": "state", "data": {"state": "failed", "error": "API Error: 529"}}),
        ];
        let mut out = String::new();
        for e in &events {
            render_event(e, &mut out);
        }
        expect![[r#"
            > write a.txt
            Writing it.
            [Write {"file_path":"/w/a.txt"}]
            [asks: Write a.txt]
            [denied by timeout]
            [error: API Error: 529]
            [failed: API Error: 529]
        "#]]
        .assert_eq(&out);
    }
}
