//! The MCP both of the service's MCP servers speak: Claude Code's IDE
//! server (`ide::mcp`, over the WebSocket) and the editor tools a hosted
//! session offers its CLI (`agent::session`, in-process over the control
//! protocol). One place knows the methods, the `initialize` answer and how
//! a tool's entry of the tool table (`moonkale_protocol::ide::tools`) is
//! listed; each server lists only its own tools.
//!
//! Hand-written rather than rmcp: four methods are used, over transports
//! rmcp does not ship (a WebSocket, the CLI's control protocol), with
//! replies that must match recorded shapes (see ARCHITECTURE.md).

use moonkale_protocol::ide::ToolSpec;
use serde_json::{Map, Value, json};

/// The MCP methods a server answers; anything else is not found.
#[derive(Debug, PartialEq, Eq)]
pub enum Method<'a> {
    Initialize,
    Ping,
    ToolsList,
    ToolsCall,
    Unknown(&'a str),
}

impl<'a> Method<'a> {
    pub fn parse(method: &'a str) -> Method<'a> {
        match method {
            "initialize" => Method::Initialize,
            "ping" => Method::Ping,
            "tools/list" => Method::ToolsList,
            "tools/call" => Method::ToolsCall,
            other => Method::Unknown(other),
        }
    }
}

/// How a server picks the protocol version of its `initialize` answer.
pub enum Versions {
    /// One of these if the client asked for it, else the fallback (Claude
    /// Code's IDE link: every CLI generation accepts the fallback).
    Known {
        accepted: &'static [&'static str],
        fallback: &'static str,
    },
    /// The client's own (an in-process server, as the SDKs answer), else
    /// this one.
    Echo(&'static str),
}

/// Who a server is, for its `initialize` answer.
pub struct ServerInfo {
    pub name: &'static str,
    pub versions: Versions,
    /// Advertise `tools.listChanged`.
    pub tools_list_changed: bool,
}

impl ServerInfo {
    pub fn initialize_result(&self, params: &Value) -> Value {
        let asked = params.get("protocolVersion").and_then(Value::as_str);
        let version = match &self.versions {
            Versions::Known { accepted, fallback } => {
                asked.filter(|v| accepted.contains(v)).unwrap_or(fallback)
            }
            Versions::Echo(default) => asked.unwrap_or(default),
        };
        let tools = if self.tools_list_changed {
            json!({"listChanged": true})
        } else {
            json!({})
        };
        json!({
            "protocolVersion": version,
            "capabilities": {"tools": tools},
            "serverInfo": {"name": self.name, "version": env!("CARGO_PKG_VERSION")},
        })
    }
}

/// A `tools/list` answer of these tools, in order, each from its entry
/// in the one tool table ([`moonkale_protocol::ide::tools`]).
pub fn tools_list(tools: impl IntoIterator<Item = ToolSpec>) -> Value {
    json!({"tools": tools.into_iter().map(tool).collect::<Vec<_>>()})
}

/// One tool of a `tools/list` answer, its arguments an object schema.
fn tool(spec: ToolSpec) -> Value {
    let properties: Map<String, Value> = spec
        .params
        .iter()
        .map(|p| {
            let schema = match p.description {
                Some(description) => {
                    json!({"type": p.kind.json_type(), "description": description})
                }
                None => json!({"type": p.kind.json_type()}),
            };
            (p.name.to_owned(), schema)
        })
        .collect();
    let required: Vec<&str> = spec
        .params
        .iter()
        .filter(|p| p.required)
        .map(|p| p.name)
        .collect();
    json!({
        "name": spec.name,
        "description": spec.description,
        "inputSchema": {"type": "object", "properties": properties, "required": required},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_negotiated_or_echoed() {
        let ide = ServerInfo {
            name: "ide",
            versions: Versions::Known {
                accepted: &["2025-06-18", "2024-11-05"],
                fallback: "2024-11-05",
            },
            tools_list_changed: true,
        };
        let sdk = ServerInfo {
            name: "sdk",
            versions: Versions::Echo("2025-06-18"),
            tools_list_changed: false,
        };
        let asked = |v: &str| json!({"protocolVersion": v});
        let version = |s: &ServerInfo, p: Value| s.initialize_result(&p)["protocolVersion"].clone();
        assert_eq!(version(&ide, asked("2025-06-18")), "2025-06-18");
        assert_eq!(version(&ide, asked("2031-01-01")), "2024-11-05");
        assert_eq!(version(&sdk, asked("2031-01-01")), "2031-01-01");
        assert_eq!(version(&sdk, json!({})), "2025-06-18");
        assert_eq!(
            ide.initialize_result(&json!({}))["capabilities"],
            json!({"tools": {"listChanged": true}})
        );
        assert_eq!(Method::parse("tools/call"), Method::ToolsCall);
        assert_eq!(
            Method::parse("resources/list"),
            Method::Unknown("resources/list")
        );
    }
}
