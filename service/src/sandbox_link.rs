//! `moonkale-service sandbox-link --socket S -- claude [args…]`: the side of
//! a sandbox link ([`crate::ide::link`]) that runs inside the sandbox.
//!
//! It listens on the sandbox's own loopback (any free port), writes the
//! sandbox's lock file (`$CLAUDE_CONFIG_DIR/ide/<port>.lock`, else
//! `~/.claude/ide/<port>.lock`, the careful way of [`lockfile`]) with the
//! link's token from `MOONKALE_LINK_TOKEN`, starts `claude` with
//! `CLAUDE_CODE_SSE_PORT` set to that port, relays each connection the CLI
//! makes to the link's unix socket byte for byte, and when the CLI exits
//! removes the lock (while it is still ours) and exits with the CLI's
//! status. It decides nothing: everything it relays is checked on the
//! service's side, which trusts nothing that comes out of the sandbox.
//!
//! This is our own binary run inside the sandbox rather than a script for
//! what a sandbox "usually" has: current CLIs are a native binary, so not
//! even Node is certain there, and `socat`/Python are not either; the
//! sandbox must see `moonkale-service` (the same path, or `--link-bin`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::{TcpListener, UnixStream};

use crate::error::{Error, IoContext, Result};
use crate::ide::link::is_socket_name;
use crate::ide::lockfile::{self, LockContents, LockFile};

/// The variable that carries the link's token into the sandbox.
pub const TOKEN_VAR: &str = "MOONKALE_LINK_TOKEN";

/// Connections relayed at once (the CLI makes one; a few for reconnects).
const MAX_RELAYED: usize = 8;

/// Checks what the host put into the command: the socket is an absolute
/// path to a link socket's name, the token is 64 lowercase hex digits.
pub fn check(socket: &Path, token: Option<&str>) -> Result<()> {
    let name = socket.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !socket.is_absolute() || !is_socket_name(name) {
        return Err(Error::Invalid(format!(
            "{} is not a Moonkale sandbox link's socket (`moonkale-service claude --sandbox` prints the right command)",
            crate::printable::one_line(&socket.display().to_string())
        )));
    }
    match token {
        Some(t) if t.len() == 64 && t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
            Ok(())
        }
        Some(_) => Err(Error::Invalid(format!("{TOKEN_VAR} is not a link token"))),
        None => Err(Error::Invalid(format!(
            "{TOKEN_VAR} is not set inside the sandbox: pass it through (docker: -e {TOKEN_VAR})"
        ))),
    }
}

/// Runs the link and `command` (the CLI and its arguments); the CLI's exit
/// status.
pub async fn run(socket: PathBuf, command: Vec<String>) -> Result<i32> {
    let token = std::env::var(TOKEN_VAR).ok();
    check(&socket, token.as_deref())?;
    let token = token.expect("checked");
    let Some((program, args)) = command.split_first() else {
        return Err(Error::Invalid(
            "name the command to run after `--` (claude and its arguments)".into(),
        ));
    };
    let workspace = socket.parent().expect("an absolute file path").to_owned();
    reach(&socket).await?;
    let (listener, lock) = listen_and_lock(&workspace, &token).await?;
    let port = listener
        .local_addr()
        .context(|| "reading the port".into())?
        .port();
    let mut cli = tokio::process::Command::new(program);
    // The CLI works in the workspace as the sandbox sees it (the link's
    // folder), wherever the sandbox command started this relay (`docker
    // exec` without `-w` starts in the container's own folder).
    cli.args(args).current_dir(&workspace);
    // Ours stay out of the CLI's environment (the token is in the lock).
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("MOONKALE") {
            cli.env_remove(key);
        }
    }
    cli.envs(crate::ide::cli_env(port));
    let mut child = cli
        .spawn()
        .map_err(|e| Error::io(format!("starting {program}"), e))?;
    let relay = tokio::spawn(relay(listener, socket));
    let status = wait_forwarding_signals(&mut child).await;
    relay.abort();
    drop(lock);
    let status = status.map_err(|e| Error::io(format!("waiting for {program}"), e))?;
    Ok(exit_code(status))
}

/// A child's status as a shell reports it: its code, or 128 + the signal
/// that ended it.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Connects once to see the socket is there and is a socket: a clear
/// sentence now rather than a CLI that never links.
async fn reach(socket: &Path) -> Result<()> {
    let hint = "mount the workspace inside the sandbox at the same path (docker: -v \"$PWD:$PWD\" -w \"$PWD\"), or tell `moonkale-service claude --sandbox-path HOST=INSIDE` where it is";
    match std::fs::symlink_metadata(socket) {
        Ok(meta) if std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) => {}
        Ok(_) => {
            return Err(Error::Invalid(format!(
                "{} is not the link's socket",
                crate::printable::one_line(&socket.display().to_string())
            )));
        }
        Err(e) => {
            return Err(Error::Invalid(format!(
                "cannot see the Moonkale link {} from inside the sandbox ({e}): {hint}",
                crate::printable::one_line(&socket.display().to_string())
            )));
        }
    }
    connect(socket).await.map(drop).map_err(|e| {
        Error::Invalid(format!(
            "cannot reach the Moonkale link {} from inside the sandbox ({e}): is its `moonkale-service claude --sandbox` still running?",
            crate::printable::one_line(&socket.display().to_string())
        ))
    })
}

/// Connects to the socket; a path too long for `sockaddr_un` is reached
/// through its folder's descriptor.
async fn connect(socket: &Path) -> std::io::Result<UnixStream> {
    use std::os::unix::ffi::OsStrExt;
    if socket.as_os_str().as_bytes().len() < 100 {
        return UnixStream::connect(socket).await;
    }
    let dir = std::fs::File::open(socket.parent().expect("absolute"))?;
    let short = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&dir)
    ))
    .join(socket.file_name().expect("a file name"));
    let stream = UnixStream::connect(short).await;
    drop(dir);
    stream
}

/// Binds the sandbox's loopback and places the lock file for that port;
/// a name already taken in the lock folder is not ours: another port.
async fn listen_and_lock(workspace: &Path, token: &str) -> Result<(TcpListener, LockFile)> {
    let dir = lockfile::lock_dir()?;
    let mut last = None;
    for _ in 0..8 {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .context(|| "listening on the sandbox's loopback".into())?;
        let port = listener
            .local_addr()
            .context(|| "reading the port".into())?
            .port();
        let contents = LockContents::ours(vec![workspace.to_owned()], token);
        match LockFile::create(&dir, port, &contents) {
            Ok(lock) => return Ok((listener, lock)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("tried"))
}

/// Relays each connection on `listener` to the link's socket.
async fn relay(listener: TcpListener, socket: PathBuf) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_RELAYED));
    loop {
        let Ok((mut tcp, _)) = listener.accept().await else {
            // Out of descriptors, say: do not spin.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue; // dropped: the CLI retries
        };
        let socket = socket.clone();
        tokio::spawn(async move {
            if let Ok(mut unix) = connect(&socket).await {
                let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
            }
            drop(slot);
        });
    }
}

/// Waits for the CLI. Ctrl-C and Ctrl-\ reach it from the terminal (it is
/// in our foreground process group), so we only stay alive for them;
/// SIGTERM and SIGHUP sent to us are passed on.
async fn wait_forwarding_signals(
    child: &mut tokio::process::Child,
) -> std::io::Result<std::process::ExitStatus> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut quit = signal(SignalKind::quit())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let pass_on = |sig: i32| {
        if let Some(pid) = pid {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, sig) };
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => return status,
            _ = int.recv() => {}
            _ = quit.recv() => {}
            _ = term.recv() => pass_on(libc::SIGTERM),
            _ = hup.recv() => pass_on(libc::SIGHUP),
        }
    }
}

/// The words a host puts in front of the sandbox's `claude` word:
/// `<link_bin> sandbox-link --socket <socket> --`.
pub fn relay_words(link_bin: &Path, socket: &Path) -> Result<Vec<String>> {
    let word = |p: &Path, what: &str| -> Result<String> {
        let s = p
            .to_str()
            .filter(|s| p.is_absolute() && !s.chars().any(char::is_control));
        s.map(str::to_owned).ok_or_else(|| {
            Error::Invalid(format!(
                "{what} {} cannot go into a sandbox command (it must be an absolute path of printable UTF-8)",
                crate::printable::one_line(&p.display().to_string())
            ))
        })
    };
    Ok(vec![
        word(link_bin, "the program")?,
        "sandbox-link".into(),
        "--socket".into(),
        word(socket, "the link socket")?,
        "--".into(),
    ])
}

/// Where the CLI is in a sandbox command: the first word after the
/// sandbox program whose file name is `claude`.
pub fn claude_word(sandbox: &[String]) -> Result<usize> {
    if sandbox.iter().any(|w| w.contains('\0')) {
        return Err(Error::Invalid("the sandbox command contains a NUL".into()));
    }
    let is_claude = |w: &String| w.rsplit('/').next() == Some("claude");
    sandbox
        .iter()
        .skip(1)
        .position(is_claude)
        .map(|i| i + 1)
        .ok_or_else(|| {
            Error::Invalid(
                "the sandbox command must run `claude` inside the sandbox, e.g. `-- docker exec -it box claude` or `-- bwrap --bind / / --unshare-net claude`".into(),
            )
        })
}

/// The command that runs Claude Code inside a sandbox, linked: the
/// sandbox command's words up to its [`claude_word`], then
/// [`relay_words`], then that word and the rest, then `claude_args`.
pub fn in_sandbox_command(
    sandbox: &[String],
    link_bin: &Path,
    socket: &Path,
    claude_args: &[String],
) -> Result<Vec<String>> {
    let at = claude_word(sandbox)?;
    let mut argv = sandbox[..at].to_vec();
    argv.extend(relay_words(link_bin, socket)?);
    argv.extend(sandbox[at..].iter().cloned());
    argv.extend(claude_args.iter().cloned());
    Ok(argv)
}

/// A workspace's default sandbox as `sandbox set` takes it, checked: the
/// command runs `claude`, the paths cover the workspace.
pub fn default_sandbox(
    root: &Path,
    command: Vec<String>,
    paths: Vec<crate::core::path_map::PathPair>,
    link_bin: Option<PathBuf>,
) -> Result<crate::user_state::DefaultSandbox> {
    claude_word(&command)?;
    let map = crate::core::path_map::PathMap::new(paths.clone());
    if map.to_inside(&root.display().to_string()).is_err() {
        return Err(Error::Invalid(format!(
            "the workspace {} is under none of the --sandbox-path folders",
            crate::printable::one_line(&root.display().to_string())
        )));
    }
    if let Some(bin) = &link_bin
        && !bin.is_absolute()
    {
        return Err(Error::Invalid("--link-bin must be an absolute path".into()));
    }
    Ok(crate::user_state::DefaultSandbox {
        command,
        paths,
        link_bin,
    })
}

/// A default sandbox in one line: its command, shell-quoted, and its
/// folders.
pub fn describe(sandbox: &crate::user_state::DefaultSandbox) -> String {
    let command: Vec<String> = sandbox.command.iter().map(|w| shell_word(w)).collect();
    let mut line = crate::printable::one_line(&command.join(" "));
    for pair in &sandbox.paths {
        line += &format!(
            " (--sandbox-path {})",
            crate::printable::one_line(&pair.to_string())
        );
    }
    if let Some(bin) = &sandbox.link_bin {
        line += &format!(
            " (--link-bin {})",
            crate::printable::one_line(&bin.display().to_string())
        );
    }
    line
}

/// One word for a POSIX shell: as it is when it is plainly safe, else in
/// single quotes.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:=@%+,-".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The command line to paste into a sandbox the service cannot start:
/// the token as an assignment, then the relay and `claude`.
pub fn printable_command(
    token: &str,
    link_bin: &Path,
    socket: &Path,
    claude_args: &[String],
) -> Result<String> {
    let mut words = relay_words(link_bin, socket)?;
    words.push("claude".into());
    words.extend(claude_args.iter().cloned());
    let quoted: Vec<String> = words.iter().map(|w| shell_word(w)).collect();
    Ok(format!("{TOKEN_VAR}={token} {}", quoted.join(" ")))
}

/// The environment of a program started in a sandbox by the host: its
/// own plus the token.
pub fn with_token(mut env: Vec<(OsString, OsString)>, token: &str) -> Vec<(OsString, OsString)> {
    env.retain(|(k, _)| k != TOKEN_VAR);
    env.push((TOKEN_VAR.into(), token.into()));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOCKET: &str = "/w/p/.moonkale-link-0123456789abcdef.sock";
    const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn words(ws: &[&str]) -> Vec<String> {
        ws.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn the_relay_goes_before_the_claude_word() {
        let bin = Path::new("/usr/bin/moonkale-service");
        let cmd = |sandbox: &[&str]| {
            in_sandbox_command(
                &words(sandbox),
                bin,
                Path::new(SOCKET),
                &words(&["--model", "m"]),
            )
            .map(|argv| argv.join(" "))
            .unwrap_or_else(|e| format!("error: {e}"))
        };
        let out = [
            cmd(&["docker", "exec", "-it", "box", "claude"]),
            cmd(&[
                "bwrap",
                "--bind",
                "/",
                "/",
                "--unshare-net",
                "/usr/local/bin/claude",
                "-c",
            ]),
            cmd(&["docker", "exec", "claude-box", "claude"]),
            cmd(&["claude"]),
            cmd(&["docker", "exec", "box", "sh"]),
        ]
        .join("\n");
        expect_test::expect![[r#"
            docker exec -it box /usr/bin/moonkale-service sandbox-link --socket /w/p/.moonkale-link-0123456789abcdef.sock -- claude --model m
            bwrap --bind / / --unshare-net /usr/bin/moonkale-service sandbox-link --socket /w/p/.moonkale-link-0123456789abcdef.sock -- /usr/local/bin/claude -c --model m
            docker exec claude-box /usr/bin/moonkale-service sandbox-link --socket /w/p/.moonkale-link-0123456789abcdef.sock -- claude --model m
            error: the sandbox command must run `claude` inside the sandbox, e.g. `-- docker exec -it box claude` or `-- bwrap --bind / / --unshare-net claude`
            error: the sandbox command must run `claude` inside the sandbox, e.g. `-- docker exec -it box claude` or `-- bwrap --bind / / --unshare-net claude`"#]].assert_eq(&out);
    }

    #[test]
    fn values_are_checked_and_quoted() {
        let bin = Path::new("/opt/a b/moonkale-service");
        let hostile = Path::new(
            "/w/a'b $(touch PWNED1) `touch PWNED2` ;c/.moonkale-link-0123456789abcdef.sock",
        );
        let printed = printable_command(
            TOKEN,
            bin,
            hostile,
            &words(&["--append-system-prompt", "it's"]),
        )
        .unwrap();
        expect_test::expect![[r#"MOONKALE_LINK_TOKEN=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef '/opt/a b/moonkale-service' sandbox-link --socket '/w/a'\''b $(touch PWNED1) `touch PWNED2` ;c/.moonkale-link-0123456789abcdef.sock' -- claude --append-system-prompt 'it'\''s'"#]].assert_eq(&printed);
        let newline = Path::new("/w/a\nb/.moonkale-link-0123456789abcdef.sock");
        assert!(relay_words(bin, newline).is_err());
        assert!(relay_words(Path::new("relative/bin"), Path::new(SOCKET)).is_err());
    }

    #[test]
    fn what_the_sandbox_side_accepts() {
        let ok = Path::new(SOCKET);
        assert!(check(ok, Some(TOKEN)).is_ok());
        let msg = |r: Result<()>| r.unwrap_err().to_string();
        let out = [
            msg(check(ok, None)),
            msg(check(ok, Some("short"))),
            msg(check(Path::new("/w/p/.ssh/agent.sock"), Some(TOKEN))),
            msg(check(
                Path::new(".moonkale-link-0123456789abcdef.sock"),
                Some(TOKEN),
            )),
        ]
        .join("\n");
        expect_test::expect![[r#"
            MOONKALE_LINK_TOKEN is not set inside the sandbox: pass it through (docker: -e MOONKALE_LINK_TOKEN)
            MOONKALE_LINK_TOKEN is not a link token
            /w/p/.ssh/agent.sock is not a Moonkale sandbox link's socket (`moonkale-service claude --sandbox` prints the right command)
            .moonkale-link-0123456789abcdef.sock is not a Moonkale sandbox link's socket (`moonkale-service claude --sandbox` prints the right command)"#]].assert_eq(&out);
    }
}
