//! moonkale-protocol: the types on moonkale-service's wire, shared by the
//! service, the editor shim, the front-door client and the tests.
//!
//! - [`jsonrpc`]: JSON-RPC 2.0 messages as LSP uses them, parsed defensively.
//! - [`document`], [`agent`], [`terminal`], [`proposal`], [`changes`]: every `moonkale/*`
//!   request and notification as a type, in the manner of rust-analyzer's
//!   `lsp/ext.rs`: one uninhabited type per method implementing
//!   [`lsp_types::request::Request`] or
//!   [`lsp_types::notification::Notification`], with typed params and
//!   result. [`ALL_METHODS`] lists them; docs/protocol.md documents exactly
//!   these (a test checks it).
//! - [`editor`]: the notifications an editor sends, one closed enum.
//! - [`command`]: the `workspace/executeCommand` commands, one closed enum
//!   ([`Command`]) with their wire names.
//! - [`ide`]: Claude Code's IDE protocol: MCP tool results, `selection_changed`.
//! - [`screen`]: a terminal's screen on the wire (rows of styled spans).
//! - [`status`]: the `moonkale/status` snapshot.
//! - [`dispatch`]: typed dispatch of a request by its method.
//! - [`ApprovalId`]: which question of which session an answer is for.
//!
//! Field names are the wire's, camelCase; optional fields the service may
//! leave out are `Option`s, and what a client may leave out defaults as the
//! service documents it.
//!
//! **Invariant:** this crate does no IO and depends on nothing of the
//! service: a front end compiles it alone.

pub mod agent;
mod approval_id;
pub mod changes;
pub mod command;
pub mod dispatch;
pub mod document;
pub mod editor;
pub mod ide;
pub mod jsonrpc;
pub mod proposal;
pub mod screen;
pub mod status;
pub mod terminal;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The LSP types the wire types are made of (`Url`, `Position`, …).
pub use lsp_types;

pub use agent::PermissionMode;
pub use approval_id::ApprovalId;
pub use command::Command;
pub use lsp_types::notification::Notification;
pub use lsp_types::request::Request;

/// Declares a request type: `request!(Doc, Name, "method", Params => Result)`.
macro_rules! request {
    ($(#[$doc:meta])* $name:ident, $method:literal, $params:ty => $result:ty) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $name {}
        impl lsp_types::request::Request for $name {
            type Params = $params;
            type Result = $result;
            const METHOD: &'static str = $method;
        }
    };
}

/// Declares a notification type: `notification!(Doc, Name, "method", Params)`.
macro_rules! notification {
    ($(#[$doc:meta])* $name:ident, $method:literal, $params:ty) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $name {}
        impl lsp_types::notification::Notification for $name {
            type Params = $params;
            const METHOD: &'static str = $method;
        }
    };
}
pub(crate) use {notification, request};

/// Every `moonkale/*` method this crate defines, requests and
/// notifications, in both directions.
pub const ALL_METHODS: &[&str] = &[
    // documents and selection
    <document::SelectionChanged as Notification>::METHOD,
    <document::PublishDiagnostics as Notification>::METHOD,
    <document::DocumentText as Request>::METHOD,
    <document::WaitForVersion as Request>::METHOD,
    <status::StatusRequest as Request>::METHOD,
    <status::Subscribe as Request>::METHOD,
    <status::Changed as Notification>::METHOD,
    // proposals
    <proposal::ProposalClosed as Notification>::METHOD,
    <proposal::List as Request>::METHOD,
    // change sets
    <changes::List as Request>::METHOD,
    <changes::Show as Request>::METHOD,
    <changes::Undo as Request>::METHOD,
    <changes::Keep as Request>::METHOD,
    <changes::Changed as Notification>::METHOD,
    // the agent
    <agent::Start as Request>::METHOD,
    <agent::Send as Request>::METHOD,
    <agent::Events as Request>::METHOD,
    <agent::Preview as Request>::METHOD,
    <agent::List as Request>::METHOD,
    <agent::Interrupt as Request>::METHOD,
    <agent::SetPermissionMode as Request>::METHOD,
    <agent::SetModel as Request>::METHOD,
    <agent::Answer as Request>::METHOD,
    <agent::Trust as Request>::METHOD,
    <agent::Prepare as Request>::METHOD,
    <agent::HookPermission as Request>::METHOD,
    <agent::HookDone as Request>::METHOD,
    <agent::HookSecret as Request>::METHOD,
    <agent::Subscribe as Request>::METHOD,
    <agent::Unsubscribe as Request>::METHOD,
    <agent::EventNotification as Notification>::METHOD,
    <agent::TextNotification as Notification>::METHOD,
    <agent::ApprovalNotification as Notification>::METHOD,
    // terminals
    <terminal::Open as Request>::METHOD,
    <terminal::StartClaude as Request>::METHOD,
    <terminal::SandboxLink as Request>::METHOD,
    <terminal::List as Request>::METHOD,
    <terminal::Input as Request>::METHOD,
    <terminal::Resize as Request>::METHOD,
    <terminal::Screen as Request>::METHOD,
    <terminal::Scrollback as Request>::METHOD,
    <terminal::Links as Request>::METHOD,
    <terminal::OpenLink as Request>::METHOD,
    <terminal::Close as Request>::METHOD,
    <terminal::Subscribe as Request>::METHOD,
    <terminal::Unsubscribe as Request>::METHOD,
    <terminal::UpdateNotification as Notification>::METHOD,
    <terminal::ExitNotification as Notification>::METHOD,
    <terminal::ClosedNotification as Notification>::METHOD,
];

/// The hash that names a workspace's files in the runtime directory
/// (`ws-<hash>.json`, `.sock`, …): FNV-1a 64 of its canonical path. FNV-1a
/// is stable across Rust versions, unlike `DefaultHasher`, so a shim, a
/// front end and a service built by different toolchains agree on names.
pub fn path_hash(root: &std::path::Path) -> u64 {
    root.as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// A wire value as JSON. The types of this crate always serialize (no map
/// has keys other than strings).
pub fn to_json(value: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).expect("wire types serialize")
}

/// The params of a method that takes none: sent as `null`, and whatever a
/// client sends is accepted (the service never looked at it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoParams;

impl Serialize for NoParams {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_unit()
    }
}

impl<'de> Deserialize<'de> for NoParams {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| NoParams)
    }
}

/// The result `{}` of a request that answers nothing else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `moonkale/...` method names docs/protocol.md mentions: a name
    /// starts after a character that cannot be part of a path
    /// (`.moonkale/proposals/` and `$XDG_RUNTIME_DIR/moonkale/` are paths).
    fn documented(doc: &str) -> std::collections::BTreeSet<String> {
        let mut found = std::collections::BTreeSet::new();
        for (at, _) in doc.match_indices("moonkale/") {
            let before = doc[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || "./-_~$".contains(c)) {
                continue;
            }
            let rest = &doc[at + "moonkale/".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '/')
                .collect();
            let name = name.trim_end_matches('/');
            if !name.is_empty() {
                found.insert(format!("moonkale/{name}"));
            }
        }
        found
    }

    #[test]
    fn the_protocol_doc_documents_every_method_and_nothing_else() {
        let doc = include_str!("../../docs/protocol.md");
        let documented = documented(doc);
        let defined: std::collections::BTreeSet<String> =
            ALL_METHODS.iter().map(|m| m.to_string()).collect();
        assert_eq!(defined.len(), ALL_METHODS.len(), "a method is listed twice");
        let undocumented: Vec<_> = defined.difference(&documented).collect();
        let unknown: Vec<_> = documented.difference(&defined).collect();
        assert!(
            undocumented.is_empty() && unknown.is_empty(),
            "defined but not in docs/protocol.md: {undocumented:?}; \
             in docs/protocol.md but not defined: {unknown:?}"
        );
    }

    /// What typed values look like on the wire: each line is `METHOD
    /// params` or `METHOD -> result`, as the service and its clients write
    /// them.
    #[test]
    fn the_wire_shapes_of_typed_values() {
        use crate::screen::{Color, Cursor, Row, Span, Update};
        fn line<R: Request>(out: &mut String, params: &R::Params) {
            *out += &format!("{} {}\n", R::METHOD, to_json(params));
        }
        fn result<R: Request>(out: &mut String, result: &R::Result) {
            *out += &format!("{} -> {}\n", R::METHOD, to_json(result));
        }
        fn note<N: Notification>(out: &mut String, params: &N::Params) {
            *out += &format!("{} {}\n", N::METHOD, to_json(params));
        }
        let mut out = String::new();
        line::<agent::Start>(
            &mut out,
            &agent::StartParams {
                prompt: Some("hi".into()),
                permission_mode: Some(agent::PermissionMode::AcceptEdits),
                model: None,
                ..Default::default()
            },
        );
        result::<agent::Send>(
            &mut out,
            &agent::SendResult {
                session: "s".into(),
                seq: 3,
                state: agent::SessionState::WaitingForApproval,
            },
        );
        line::<agent::Answer>(
            &mut out,
            &agent::AnswerParams::deny("s/1").with_message("not now"),
        );
        line::<agent::Subscribe>(&mut out, &agent::SubscriptionParams::default());
        line::<agent::List>(&mut out, &NoParams);
        line::<terminal::Input>(&mut out, &terminal::InputParams::keys(2, ["Ctrl+c"]));
        line::<terminal::Open>(&mut out, &terminal::OpenParams::default());
        line::<terminal::StartClaude>(&mut out, &None);
        note::<terminal::UpdateNotification>(
            &mut out,
            &terminal::UpdateParams {
                terminal: 2,
                update: Update {
                    lines: vec![Row {
                        index: 0,
                        spans: vec![Span {
                            text: "ok".into(),
                            fg: Some(Color::Indexed(2)),
                            bg: Some(Color::Rgb(1, 2, 255)),
                            bold: true,
                            dim: false,
                            italic: false,
                            underline: false,
                            inverse: false,
                        }],
                    }],
                    cursor: Some(Cursor {
                        row: 0,
                        col: 2,
                        visible: true,
                    }),
                    ..Update::default()
                },
            },
        );
        note::<terminal::ExitNotification>(
            &mut out,
            &terminal::ExitParams {
                terminal: 2,
                exit_code: None,
            },
        );
        expect_test::expect![[r##"
            moonkale/agent/start {"permissionMode":"acceptEdits","prompt":"hi"}
            moonkale/agent/send -> {"seq":3,"session":"s","state":"waitingForApproval"}
            moonkale/agent/answer {"allow":false,"approval":"s/1","message":"not now"}
            moonkale/agent/subscribe {}
            moonkale/agent/list null
            moonkale/terminal/input {"keys":["Ctrl+c"],"terminal":2}
            moonkale/terminal/open {"cols":80,"keepAlive":false,"rows":24}
            moonkale/terminal/startClaude null
            moonkale/terminal/update {"cursor":{"col":2,"row":0,"visible":true},"lines":[{"index":0,"spans":[{"bg":"#0102ff","bold":true,"fg":"2","text":"ok"}]}],"terminal":2}
            moonkale/terminal/exit {"exitCode":null,"terminal":2}
        "##]]
        .assert_eq(&out);
    }

    #[test]
    fn the_path_hash_is_fnv1a_64() {
        assert_eq!(path_hash("".as_ref()), 0xcbf2_9ce4_8422_2325);
        assert_eq!(path_hash("a".as_ref()), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn no_params_is_null_and_takes_anything() {
        assert_eq!(serde_json::to_string(&NoParams).unwrap(), "null");
        for sent in ["null", "{}", "[1]", "{\"x\": 1}"] {
            assert_eq!(serde_json::from_str::<NoParams>(sent).unwrap(), NoParams);
        }
        assert_eq!(serde_json::to_string(&Empty {}).unwrap(), "{}");
        assert!(serde_json::from_str::<Empty>("{\"extra\": 1}").is_ok());
    }
}

#[cfg(test)]
mod module_graph;

#[cfg(test)]
mod doc_paths;

#[cfg(test)]
mod crate_graph {
    /// The `[dependencies]` of a workspace crate, by its folder.
    fn dependencies(folder: &str) -> Vec<String> {
        let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(folder)
            .join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).expect("a manifest");
        let section = text
            .split("\n[dependencies]\n")
            .nth(1)
            .expect("a [dependencies] section");
        section
            .lines()
            .take_while(|l| !l.starts_with('['))
            .filter_map(|l| l.split(['.', ' ', '=']).next())
            .filter(|name| !name.is_empty() && !name.starts_with('#'))
            .map(str::to_owned)
            .collect()
    }

    /// The hub depends on no adapter; the protocol, the wire crate, the
    /// front-door client and the shim on nothing of the server (no PTYs, no
    /// TLS, no WebSocket); the wire crate, under the client and the shim, on
    /// neither of them nor on the hub (ARCHITECTURE.md, Crates).
    #[test]
    fn the_hub_and_the_front_ends_do_not_depend_on_the_server() {
        let server = [
            "moonkale-service",
            "moonkale-claude",
            "portable-pty",
            "vt100",
            "rustls",
            "tokio-rustls",
            "tokio-tungstenite",
        ];
        for folder in ["protocol", "wire", "hub", "client", "shell", "editor-shim"] {
            let deps = dependencies(folder);
            assert!(!deps.is_empty(), "{folder}: no dependencies read");
            for dep in &deps {
                assert!(!server.contains(&dep.as_str()), "{folder} depends on {dep}");
            }
        }
        for dep in dependencies("wire") {
            assert!(
                !["moonkale-hub", "moonkale-client", "moonkale-shim"].contains(&dep.as_str()),
                "wire depends on {dep}"
            );
        }
        assert!(dependencies("hub").contains(&"moonkale-protocol".to_owned()));
        // The shell's components stand on the client alone of ours, so a
        // desktop shell embeds them without the service.
        let ours: Vec<String> = dependencies("shell")
            .into_iter()
            .filter(|d| d.starts_with("moonkale-"))
            .collect();
        assert_eq!(ours, ["moonkale-client"], "the shell depends on {ours:?}");
        for folder in ["client", "editor-shim", "service"] {
            let deps = dependencies(folder);
            assert!(deps.contains(&"moonkale-wire".to_owned()), "{folder}");
        }
    }

    /// The core is pure by construction: no async runtime, no IO crate, no
    /// crate above it; the hub stands on it.
    #[test]
    fn the_core_has_no_runtime_and_the_hub_stands_on_it() {
        let core = dependencies("core");
        assert!(!core.is_empty(), "core: no dependencies read");
        for dep in &core {
            assert!(
                !dep.starts_with("tokio")
                    && !dep.starts_with("futures")
                    && ![
                        "libc",
                        "moonkale-hub",
                        "moonkale-wire",
                        "moonkale-client",
                        "moonkale-service"
                    ]
                    .contains(&dep.as_str()),
                "core depends on {dep}"
            );
        }
        assert!(dependencies("hub").contains(&"moonkale-core".to_owned()));
    }
}
