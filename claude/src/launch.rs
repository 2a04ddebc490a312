//! The command line and environment of a session's `claude` process.
//!
//! As the SDKs do (agent-host.md §1.1–1.2): stream-json both ways, partial
//! messages, permission questions over the control channel
//! (`--permission-prompt-tool stdio`), valued flags in `--flag=value` form so
//! a value can never be read as another flag, and never a prompt in argv.

use std::ffi::{OsStr, OsString};

use uuid::Uuid;

use crate::{Error, Result};

/// Longest argv element: anything longer (a prompt, a pasted file) belongs
/// on stdin.
pub const MAX_ARG_BYTES: usize = 8 * 1024;

/// How much the CLI may do without asking: the front door's own type, so
/// the mode a user picks reaches `--permission-mode` unchanged.
pub use moonkale_protocol::agent::PermissionMode;

/// Whether the process starts a new conversation or continues one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionStart {
    New(Uuid),
    Resume(Uuid),
}

/// What a session's process is started with.
#[derive(Clone, Debug)]
pub struct Launch {
    pub session: SessionStart,
    pub permission_mode: PermissionMode,
    pub model: Option<String>,
    /// `--mcp-config` JSON (e.g. an in-process server `{"type":"sdk",…}`).
    pub mcp_config: Option<String>,
    /// `Some(sources)`: load only these settings files
    /// (`--setting-sources=user`, for a workspace the user does not trust)
    /// and only the MCP servers of `mcp_config` (`--strict-mcp-config`).
    /// `None`: the CLI's default, every source.
    pub setting_sources: Option<Vec<SettingSource>>,
}

/// A Claude Code settings file the CLI may load (`--setting-sources`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettingSource {
    /// `~/.claude/settings.json`: the user's own.
    User,
    /// `<cwd>/.claude/settings.json`: the repository's.
    Project,
    /// `<cwd>/.claude/settings.local.json`.
    Local,
}

impl SettingSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SettingSource::User => "user",
            SettingSource::Project => "project",
            SettingSource::Local => "local",
        }
    }
}

impl Launch {
    /// The arguments after the executable. Fails if any would contain a
    /// line break.
    pub fn argv(&self) -> Result<Vec<String>> {
        let mut argv: Vec<String> = [
            "--output-format",
            "stream-json",
            "--input-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--permission-prompt-tool",
            "stdio",
        ]
        .map(String::from)
        .to_vec();
        argv.push(format!(
            "--permission-mode={}",
            self.permission_mode.as_str()
        ));
        argv.push(match &self.session {
            SessionStart::New(id) => format!("--session-id={id}"),
            SessionStart::Resume(id) => format!("--resume={id}"),
        });
        if let Some(model) = &self.model {
            argv.push(format!("--model={model}"));
        }
        if let Some(config) = &self.mcp_config {
            argv.push(format!("--mcp-config={config}"));
        }
        if let Some(sources) = &self.setting_sources {
            let names: Vec<&str> = sources.iter().map(|s| s.as_str()).collect();
            argv.push(format!("--setting-sources={}", names.join(",")));
            argv.push("--strict-mcp-config".into());
        }
        if let Some(index) = argv.iter().position(|a| a.contains(['\n', '\r'])) {
            return Err(Error::LineBreakInArgv { index });
        }
        if let Some((index, a)) = argv
            .iter()
            .enumerate()
            .find(|(_, a)| a.len() > MAX_ARG_BYTES)
        {
            return Err(Error::ArgTooLong {
                index,
                len: a.len(),
                max: MAX_ARG_BYTES,
            });
        }
        Ok(argv)
    }
}

/// Variables never passed to the CLI: ours (tokens, configuration), the
/// marker that would make it think it runs inside Claude Code, and Node
/// settings that change how it runs.
fn scrubbed(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with("MOONKALE")
        || matches!(
            name.as_ref(),
            "CLAUDECODE" | "CLAUDE_CODE_SSE_PORT" | "NODE_OPTIONS" | "DEBUG"
        )
}

/// What a hosted CLI says it was started by (`CLAUDE_CODE_ENTRYPOINT`); its
/// transcripts record it, so the service knows its own sessions there.
pub const ENTRYPOINT: &str = "sdk-rust";

/// The child's environment: the parent's, scrubbed, plus what a headless
/// host sets. The user's `ANTHROPIC_API_KEY` passes as it is (`claude -p`
/// honours it, so a hosted session does: one rule for every front end);
/// `api_key` replaces it when the agent was given its own.
pub fn child_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    api_key: Option<&str>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> =
        parent.into_iter().filter(|(k, _)| !scrubbed(k)).collect();
    env.push(("CLAUDE_CODE_ENTRYPOINT".into(), ENTRYPOINT.into()));
    env.push(("CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS".into(), "1".into()));
    if let Some(key) = api_key {
        env.retain(|(k, _)| k != "ANTHROPIC_API_KEY");
        env.push(("ANTHROPIC_API_KEY".into(), key.into()));
    }
    env
}

/// Where git looks for the repository of a CLI in a workspace the user
/// does not trust: nowhere. A repository's own configuration names
/// programs git runs for `status` and `log` (`core.fsmonitor`,
/// `gpg.program` through `log.showSignature`, filter drivers whose names
/// come from the repository's `.gitattributes`, so no `-c` can switch every
/// one off), and the CLI runs such calls itself at the start of a turn,
/// hardened or not depending on its version. With `GIT_DIR` naming no
/// repository, git reads none of the workspace's configuration and every
/// git call in it fails before running anything.
pub const NO_REPOSITORY: &str = "/dev/null";

/// Makes `env` one in which git finds no repository ([`NO_REPOSITORY`]):
/// the user's own `GIT_*` variables go too, as none may point git back at
/// the workspace.
pub fn without_repository(env: &mut Vec<(OsString, OsString)>) {
    env.retain(|(k, _)| !k.to_string_lossy().starts_with("GIT_"));
    env.push(("GIT_DIR".into(), NO_REPOSITORY.into()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    #[test]
    fn argv_of_a_new_plan_session() {
        let id = Uuid::from_u128(0x1234);
        let launch = Launch {
            session: SessionStart::New(id),
            permission_mode: PermissionMode::Plan,
            model: Some("sonnet".into()),
            mcp_config: None,
            setting_sources: None,
        };
        expect![[r#"--output-format stream-json --input-format stream-json --verbose --include-partial-messages --permission-prompt-tool stdio --permission-mode=plan --session-id=00000000-0000-0000-0000-000000001234 --model=sonnet"#]]
            .assert_eq(&launch.argv().unwrap().join(" "));
    }

    /// An untrusted workspace: only the user's settings and our own MCP
    /// servers.
    #[test]
    fn argv_of_a_session_in_an_untrusted_workspace() {
        let launch = Launch {
            session: SessionStart::New(Uuid::nil()),
            permission_mode: PermissionMode::Default,
            model: None,
            mcp_config: Some("{}".into()),
            setting_sources: Some(vec![SettingSource::User]),
        };
        expect![[r#"--output-format stream-json --input-format stream-json --verbose --include-partial-messages --permission-prompt-tool stdio --permission-mode=default --session-id=00000000-0000-0000-0000-000000000000 --mcp-config={} --setting-sources=user --strict-mcp-config"#]]
            .assert_eq(&launch.argv().unwrap().join(" "));
    }

    #[test]
    fn a_line_break_never_reaches_argv() {
        let launch = Launch {
            session: SessionStart::Resume(Uuid::nil()),
            permission_mode: PermissionMode::Default,
            model: Some("x\n--dangerously-skip-permissions".into()),
            mcp_config: None,
            setting_sources: None,
        };
        assert!(matches!(
            launch.argv(),
            Err(Error::LineBreakInArgv { index: 10 })
        ));
    }

    proptest::proptest! {
        /// Security case 41: whatever the settings, argv never carries a
        /// line break or a long value (prompts go over stdin: see
        /// `control::user_message`).
        #[test]
        fn hostile_41_argv_has_no_line_breaks_and_no_long_values(
            model in proptest::option::of(".{0,20000}"),
            mcp in proptest::option::of(".{0,20000}"),
            resume in proptest::bool::ANY,
        ) {
            let id = Uuid::from_u128(7);
            let launch = Launch {
                session: if resume { SessionStart::Resume(id) } else { SessionStart::New(id) },
                permission_mode: PermissionMode::Plan,
                model,
                mcp_config: mcp,
                setting_sources: None,
            };
            if let Ok(argv) = launch.argv() {
                for a in argv {
                    proptest::prop_assert!(!a.contains(['\n', '\r']));
                    proptest::prop_assert!(a.len() <= MAX_ARG_BYTES);
                }
            }
        }
    }

    #[test]
    fn environment_is_scrubbed() {
        let parent = [
            ("PATH", "/bin"),
            ("CLAUDECODE", "1"),
            ("ANTHROPIC_API_KEY", "sk-user"),
            ("MOONKALE_TOKEN", "t"),
            ("HOME", "/h"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = child_env(parent.clone(), None);
        let names: Vec<_> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "PATH",
                "ANTHROPIC_API_KEY",
                "HOME",
                "CLAUDE_CODE_ENTRYPOINT",
                "CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS"
            ],
            "the user's key is a login `claude -p` honours"
        );
        let with_key = child_env(parent, Some("sk-configured"));
        let keys: Vec<_> = with_key
            .iter()
            .filter(|(k, _)| k == "ANTHROPIC_API_KEY")
            .collect();
        assert_eq!(
            keys,
            [&("ANTHROPIC_API_KEY".into(), "sk-configured".into())]
        );
    }
}
