//! What the host writes to the CLI's stdin: user turns and control
//! messages, one JSON object per line (agent-host.md §1.3, §1.5).

use serde_json::{Value, json};

/// One line for stdin (with its `\n`).
fn line(value: Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&value).expect("a Value always serializes");
    bytes.push(b'\n');
    bytes
}

/// A user turn. The prompt travels as JSON on stdin, so newlines, quotes and
/// any size of text reach the model unchanged.
pub fn user_message(prompt: &str) -> Vec<u8> {
    line(json!({
        "type": "user",
        "message": {"role": "user", "content": prompt},
        "parent_tool_use_id": null,
        "session_id": "default",
    }))
}

/// A user turn with images (`(media type, base64 data)`) before its text,
/// as content blocks of the Messages API.
pub fn user_message_with_images(prompt: &str, images: &[(&str, &str)]) -> Vec<u8> {
    if images.is_empty() {
        return user_message(prompt);
    }
    let mut content: Vec<Value> = images
        .iter()
        .map(|(media_type, data)| {
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
        })
        .collect();
    content.push(json!({"type": "text", "text": prompt}));
    line(json!({
        "type": "user",
        "message": {"role": "user", "content": content},
        "parent_tool_use_id": null,
        "session_id": "default",
    }))
}

/// A control request from the host (`initialize`, `interrupt`,
/// `set_permission_mode`, `set_model`, …); `request` holds `subtype` and its
/// fields.
pub fn request(request_id: &str, request: Value) -> Vec<u8> {
    line(json!({"type": "control_request", "request_id": request_id, "request": request}))
}

pub fn initialize(request_id: &str, sdk_mcp_servers: &[&str]) -> Vec<u8> {
    request(
        request_id,
        json!({"subtype": "initialize", "hooks": null, "sdkMcpServers": sdk_mcp_servers}),
    )
}

pub fn interrupt(request_id: &str) -> Vec<u8> {
    request(request_id, json!({"subtype": "interrupt"}))
}

pub fn set_permission_mode(request_id: &str, mode: crate::launch::PermissionMode) -> Vec<u8> {
    request(
        request_id,
        json!({"subtype": "set_permission_mode", "mode": mode.as_str()}),
    )
}

/// Replaces the CLI's MCP servers with `servers` (as `--mcp-config`'s
/// `mcpServers`; an `sdk` entry is served over this control protocol).
pub fn set_mcp_servers(request_id: &str, servers: &serde_json::Map<String, Value>) -> Vec<u8> {
    request(
        request_id,
        json!({"subtype": "mcp_set_servers", "servers": servers}),
    )
}

/// `None` goes back to the default model.
pub fn set_model(request_id: &str, model: Option<&str>) -> Vec<u8> {
    request(request_id, json!({"subtype": "set_model", "model": model}))
}

fn success(request_id: &str, response: Value) -> Vec<u8> {
    line(
        json!({"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": response}}),
    )
}

/// Allows a `can_use_tool`. `input` is sent back always (the original when
/// the user did not change it), as the CLI expects; `always` echoes the
/// CLI's `permission_suggestions` so it stops asking for this session.
pub fn allow(request_id: &str, input: &Value, always: Option<&Value>) -> Vec<u8> {
    let mut response = json!({"behavior": "allow", "updatedInput": input});
    if let Some(suggestions) = always {
        response["updatedPermissions"] = suggestions.clone();
    }
    success(request_id, response)
}

/// Denies a `can_use_tool`; `message` becomes the tool's error result.
/// `interrupt` also ends the turn.
pub fn deny(request_id: &str, message: &str, interrupt: bool) -> Vec<u8> {
    success(
        request_id,
        json!({"behavior": "deny", "message": message, "interrupt": interrupt}),
    )
}

/// Refuses a control request of the CLI (e.g. a subtype we do not serve).
pub fn error(request_id: &str, message: &str) -> Vec<u8> {
    line(
        json!({"type": "control_response", "response": {"subtype": "error", "request_id": request_id, "error": message}}),
    )
}

/// Answers an `mcp_message` with the in-process server's JSON-RPC reply
/// (for a notification, an empty result).
pub fn mcp_response(request_id: &str, reply: Option<Value>) -> Vec<u8> {
    let reply = reply.unwrap_or_else(|| json!({"jsonrpc": "2.0", "result": {}}));
    success(request_id, json!({"mcp_response": reply}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap()
    }

    /// Security case 41: the prompt reaches the CLI byte-exact, as one
    /// stdin line.
    #[test]
    fn hostile_41_prompts_survive_as_json() {
        let prompt = format!(
            "--dangerously-skip-permissions\r\nline \"two\" % ^ & \t\\ end\u{2028}{}",
            "x".repeat(100 * 1024)
        );
        let prompt = prompt.as_str();
        let bytes = user_message(prompt);
        assert_eq!(
            bytes.iter().filter(|&&b| b == b'\n').count(),
            1,
            "one line on the wire"
        );
        let back: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back["message"]["content"], prompt);
    }

    #[test]
    fn permission_answers() {
        let input = json!({"file_path": "/w/a.txt", "content": "A\n"});
        expect![[r#"
            {"response":{"request_id":"r1","response":{"behavior":"allow","updatedInput":{"content":"A\n","file_path":"/w/a.txt"}},"subtype":"success"},"type":"control_response"}
        "#]]
        .assert_eq(&text(allow("r1", &input, None)));
        expect![[r#"
            {"response":{"request_id":"r2","response":{"behavior":"deny","interrupt":false,"message":"User said no"},"subtype":"success"},"type":"control_response"}
        "#]]
        .assert_eq(&text(deny("r2", "User said no", false)));
        let always = json!([{"type": "setMode", "mode": "acceptEdits", "destination": "session"}]);
        let back: Value = serde_json::from_slice(&allow("r3", &input, Some(&always))).unwrap();
        assert_eq!(back["response"]["response"]["updatedPermissions"], always);
    }
}
