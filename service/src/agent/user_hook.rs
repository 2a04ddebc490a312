//! The opt-in for a `claude` the user starts by hand (`claude --ide` in
//! their own terminal): `moonkale-service hooks install` adds the service's
//! hooks ([`super::hooks`]) to the user's own Claude Code settings
//! (`~/.claude/settings.json`, or under `CLAUDE_CONFIG_DIR`; never a file
//! in a workspace), keeping a copy of the file as it was the first time;
//! `hooks remove` takes them out again. The hooks then ask the service that
//! serves the folder the CLI runs in, with the user's own secret (a file in
//! the user's configuration, 0600); where no service serves it, or the CLI
//! was started by the service (it has hooks of its own start), they do
//! nothing.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::{Error, IoContext, Result};

/// The events the service's hooks listen to, and the hook kind of each.
const EVENTS: [(&str, &str); 3] = [
    ("PermissionRequest", "permission"),
    ("PostToolUse", "done"),
    ("PermissionDenied", "done"),
];

/// Where the user's Claude Code settings are.
pub fn settings_path(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> Option<PathBuf> {
    super::claude_config_dir(env).map(|dir| dir.join("settings.json"))
}

/// The user's own hook secret (`$XDG_CONFIG_HOME/moonkale/hook-secret`),
/// made on first use when `create`.
pub fn user_secret(create: bool) -> Result<Option<String>> {
    let path = crate::user_state::config_dir()?.join("hook-secret");
    match std::fs::read_to_string(&path) {
        Ok(secret) => Ok(Some(secret.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            if let Some(dir) = path.parent() {
                crate::user_state::ensure_private_dir(dir)?;
            }
            let secret = crate::runtime::new_token()?;
            crate::runtime::write_private_atomic(&path, secret.as_bytes())?;
            Ok(Some(secret))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
    }
}

/// Whether a hook entry is one of ours: a command running a
/// `moonkale-service … hook …` of the user's.
fn ours(entry: &Value) -> bool {
    entry["hooks"].as_array().is_some_and(|hooks| {
        hooks.iter().any(|h| {
            h["command"]
                .as_str()
                .is_some_and(|c| c.contains("moonkale-service") && c.ends_with(" --user"))
        })
    })
}

fn read_settings(path: &Path) -> Result<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(json!({})),
        Ok(text) => serde_json::from_str::<Value>(&text)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{} is not a JSON object; fix it, then run this again (nothing was changed)",
                    path.display()
                ))
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({})),
        Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
    }
}

fn write_settings(path: &Path, settings: &Value) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
    }
    let bytes = serde_json::to_vec_pretty(settings).expect("serializes");
    Ok(crate::runtime::write_private_atomic(path, &bytes)?)
}

/// Adds the hooks (once) to the settings at `path`; what it did, in words.
pub fn install(path: &Path, program: &Path) -> Result<String> {
    let mut settings = read_settings(path)?;
    user_secret(true)?;
    let backup = path.with_extension("json.moonkale-backup");
    if path.exists() && !backup.exists() {
        std::fs::copy(path, &backup).context(|| format!("copying {}", path.display()))?;
    }
    remove_ours(&mut settings);
    match &settings["hooks"] {
        Value::Null => settings["hooks"] = json!({}),
        Value::Object(hooks)
            if EVENTS
                .iter()
                .all(|(e, _)| hooks.get(*e).is_none_or(Value::is_array)) => {}
        _ => {
            return Err(Error::Invalid(format!(
                "the hooks in {} are not as Claude Code reads them; fix them, then run this \
                 again (nothing was changed)",
                path.display()
            )));
        }
    }
    let program = crate::sandbox_link::shell_word(&program.display().to_string());
    for (event, kind) in EVENTS {
        let mut hook =
            json!({"type": "command", "command": format!("{program} hook {kind} --user")});
        if kind == "permission" {
            hook["timeout"] = 600.into();
        }
        let entry = json!({"matcher": "*", "hooks": [hook]});
        match settings["hooks"][event].as_array_mut() {
            Some(list) => list.push(entry),
            None => settings["hooks"][event] = json!([entry]),
        }
    }
    write_settings(path, &settings)?;
    let copy = if backup.exists() {
        format!("; its earlier copy is {}", backup.display())
    } else {
        String::new()
    };
    Ok(format!(
        "Claude Code's permission questions now reach the workspace's service from any `claude` \
         you start ({} changed{copy}); `moonkale-service hooks remove` undoes it",
        path.display(),
    ))
}

/// Takes the hooks out of the settings at `path`; what it did, in words.
pub fn remove(path: &Path) -> Result<String> {
    let mut settings = read_settings(path)?;
    if !remove_ours(&mut settings) {
        return Ok(format!("{} has no hooks of moonkale's", path.display()));
    }
    write_settings(path, &settings)?;
    Ok(format!("removed moonkale's hooks from {}", path.display()))
}

/// Drops our entries (and the lists and the `hooks` object they leave
/// empty); whether there were any.
fn remove_ours(settings: &mut Value) -> bool {
    let Some(hooks) = settings["hooks"].as_object_mut() else {
        return false;
    };
    let mut removed = false;
    for (event, _) in EVENTS {
        if let Some(list) = hooks.get_mut(event).and_then(Value::as_array_mut) {
            let before = list.len();
            list.retain(|entry| !ours(entry));
            removed |= list.len() != before;
            if list.is_empty() {
                hooks.remove(event);
            }
        }
    }
    if hooks.is_empty() {
        settings.as_object_mut().expect("an object").remove("hooks");
    }
    removed
}
