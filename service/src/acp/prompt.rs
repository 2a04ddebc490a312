//! A `session/prompt`'s content as the one text the service's session
//! takes, and how a turn's end reads to the client (pure).

use moonkale_protocol::agent::Image;
use moonkale_protocol::jsonrpc::ResponseError;
use serde_json::Value;

/// The prompt's blocks as one text and its images: text as it is, a
/// resource link as an `@` mention of its file (Claude Code reads it), an
/// embedded resource as its text in a `<context>` block, images as they
/// are (before the text, as the CLI takes them). Audio is not taken
/// (`promptCapabilities` says so).
pub fn text_of(blocks: &Value) -> Result<(String, Vec<Image>), ResponseError> {
    let Some(blocks) = blocks.as_array() else {
        return Err(ResponseError::invalid_params(
            "prompt is a list of content blocks",
        ));
    };
    let mut text = String::new();
    let mut images = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("resource_link") => {
                let uri = block["uri"].as_str().unwrap_or_default();
                match uri.strip_prefix("file://") {
                    Some(path) => {
                        text.push_str(" @");
                        text.push_str(path);
                        text.push(' ');
                    }
                    None => text.push_str(uri),
                }
            }
            Some("resource") => {
                let resource = &block["resource"];
                let uri = resource["uri"].as_str().unwrap_or_default();
                let Some(body) = resource["text"].as_str() else {
                    return Err(ResponseError::invalid_params(format!(
                        "the embedded resource {uri:?} has no text (binary resources are not taken)"
                    )));
                };
                text.push_str(&format!("\n<context uri={uri:?}>\n{body}\n</context>\n"));
            }
            Some("image") => {
                let (Some(media_type), Some(data)) =
                    (block["mimeType"].as_str(), block["data"].as_str())
                else {
                    return Err(ResponseError::invalid_params(
                        "an image block needs its mimeType and base64 data",
                    ));
                };
                images.push(Image {
                    media_type: media_type.to_owned(),
                    data: data.to_owned(),
                });
            }
            Some("audio") => {
                return Err(ResponseError::invalid_params(
                    "audio content is not taken by this agent (see promptCapabilities)",
                ));
            }
            _ => {
                return Err(ResponseError::invalid_params(
                    "an unknown content block in the prompt",
                ));
            }
        }
    }
    if text.trim().is_empty() && images.is_empty() {
        return Err(ResponseError::invalid_params("the prompt is empty"));
    }
    Ok((text, images))
}

/// ACP's stop reason for the CLI's `result` of a turn, or the error the
/// turn ended with.
pub fn stop_reason(result: &Value, cancelled: bool) -> Result<&'static str, String> {
    if cancelled {
        return Ok("cancelled");
    }
    match result["subtype"].as_str() {
        Some("error_max_turns") => return Ok("max_turn_requests"),
        Some("success") | None if result["is_error"] != true => {}
        _ => {
            let text = result["result"].as_str().filter(|t| !t.is_empty());
            let errors: Vec<&str> = result["errors"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            return Err(match text {
                Some(text) => text.to_owned(),
                None if !errors.is_empty() => errors.join("; "),
                None => format!(
                    "the turn ended with {}",
                    result["subtype"].as_str().unwrap_or("an error")
                ),
            });
        }
    }
    Ok(match result["stop_reason"].as_str() {
        Some("max_tokens") => "max_tokens",
        Some("refusal") => "refusal",
        _ => "end_turn",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_become_one_text() {
        let prompt = json!([
            {"type": "text", "text": "Explain"},
            {"type": "resource_link", "uri": "file:///w/a.rs", "name": "a.rs"},
            {"type": "resource", "resource": {"uri": "file:///w/b.rs", "text": "fn b() {}"}},
        ]);
        assert_eq!(
            text_of(&prompt).unwrap().0,
            "Explain @/w/a.rs \n<context uri=\"file:///w/b.rs\">\nfn b() {}\n</context>\n"
        );
        let (text, images) =
            text_of(&json!([{"type": "image", "data": "AA==", "mimeType": "image/png"}])).unwrap();
        assert_eq!((text.as_str(), images[0].data.as_str()), ("", "AA=="));
        for bad in [
            json!("hi"),
            json!([]),
            json!([{"type": "image", "mimeType": "image/png"}]),
            json!([{"type": "audio", "data": "AA==", "mimeType": "audio/wav"}]),
            json!([{"type": "resource", "resource": {"uri": "x", "blob": "AA=="}}]),
            json!([{"type": "video"}]),
        ] {
            assert_eq!(text_of(&bad).unwrap_err().code, -32602, "{bad}");
        }
    }

    #[test]
    fn a_turns_end_reads_as_its_stop_reason() {
        let ok = json!({"type": "result", "subtype": "success", "is_error": false, "stop_reason": "end_turn"});
        assert_eq!(stop_reason(&ok, false), Ok("end_turn"));
        assert_eq!(stop_reason(&ok, true), Ok("cancelled"));
        let long = json!({"subtype": "success", "is_error": false, "stop_reason": "max_tokens"});
        assert_eq!(stop_reason(&long, false), Ok("max_tokens"));
        let refused = json!({"subtype": "success", "is_error": false, "stop_reason": "refusal"});
        assert_eq!(stop_reason(&refused, false), Ok("refusal"));
        let turns = json!({"subtype": "error_max_turns", "is_error": true});
        assert_eq!(stop_reason(&turns, false), Ok("max_turn_requests"));
        let api =
            json!({"subtype": "success", "is_error": true, "result": "API Error: 529 Overloaded"});
        assert_eq!(
            stop_reason(&api, false),
            Err("API Error: 529 Overloaded".into())
        );
        let broken =
            json!({"subtype": "error_during_execution", "is_error": true, "errors": ["a", "b"]});
        assert_eq!(stop_reason(&broken, false), Err("a; b".into()));
    }
}
