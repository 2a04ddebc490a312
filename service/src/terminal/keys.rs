//! Key names (as clients send them) to the bytes an xterm would write to the
//! pty for them.
//!
//! A key is either plain text, sent as is (`"a"`, `"é"`, `"hello"`), or a
//! named key (`"Enter"`, `"Up"`, `"F5"`, ...) optionally prefixed by
//! modifiers joined with `+`: `"Ctrl+c"`, `"Alt+Left"`, `"Ctrl+Alt+c"`,
//! `"Shift+Tab"`. Names and modifiers are case-sensitive, so the text
//! `"end"` is three letters while `"End"` is the key. With a modifier the
//! base must be a named key or a single character.
//!
//! Arrows, Home and End depend on the cursor-key mode (DECCKM, set by
//! `\x1b[?1h`, reported by [`super::screen::Screen::application_cursor`]):
//! normal mode sends CSI (`\x1b[A`), application mode SS3 (`\x1bOA`).
//! [`encode`] assumes normal mode; [`encode_with`] takes the mode.
//! With modifiers they always use CSI with xterm's modifier parameter
//! `1 + Shift(1) + Alt(2) + Ctrl(4)`: `"Ctrl+Left"` is `\x1b[1;5D`.

/// A key name that has no encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("empty key")]
    Empty,
    #[error("unknown key name: {0:?}")]
    Unknown(String),
    #[error("key combination has no terminal encoding: {0:?}")]
    Unsupported(String),
}

/// Bytes for `key` in normal cursor-key mode; see the module doc.
pub fn encode(key: &str) -> Result<Vec<u8>, KeyError> {
    encode_with(key, false)
}

#[derive(Clone, Copy, Default)]
struct Mods {
    shift: bool,
    alt: bool,
    ctrl: bool,
}

impl Mods {
    fn any(self) -> bool {
        self.shift || self.alt || self.ctrl
    }

    /// xterm's modifier parameter for CSI sequences.
    fn param(self) -> u8 {
        1 + u8::from(self.shift) + 2 * u8::from(self.alt) + 4 * u8::from(self.ctrl)
    }
}

/// How a named key is encoded.
enum Named {
    /// Fixed bytes; Alt prefixes ESC, Shift and Ctrl are ignored (as xterm
    /// does by default for Enter, Escape, ...).
    Fixed(&'static [u8]),
    /// `CSI final` (or `SS3 final` in application cursor mode), `CSI 1;m
    /// final` with modifiers: arrows, Home, End.
    Cursor(u8),
    /// `SS3 final`, `CSI 1;m final` with modifiers: F1–F4.
    Ss3(u8),
    /// `CSI n ~`, `CSI n;m ~` with modifiers.
    Tilde(u8),
    Tab,
    Backspace,
    Space,
}

fn named(name: &str) -> Option<Named> {
    use Named::*;
    Some(match name {
        "Enter" | "Return" => Fixed(b"\r"),
        "Escape" | "Esc" => Fixed(b"\x1b"),
        "Tab" => Tab,
        "Backspace" => Backspace,
        "Space" => Space,
        "Up" => Cursor(b'A'),
        "Down" => Cursor(b'B'),
        "Right" => Cursor(b'C'),
        "Left" => Cursor(b'D'),
        "Home" => Cursor(b'H'),
        "End" => Cursor(b'F'),
        "Insert" => Tilde(2),
        "Delete" => Tilde(3),
        "PageUp" => Tilde(5),
        "PageDown" => Tilde(6),
        "F1" => Ss3(b'P'),
        "F2" => Ss3(b'Q'),
        "F3" => Ss3(b'R'),
        "F4" => Ss3(b'S'),
        "F5" => Tilde(15),
        "F6" => Tilde(17),
        "F7" => Tilde(18),
        "F8" => Tilde(19),
        "F9" => Tilde(20),
        "F10" => Tilde(21),
        "F11" => Tilde(23),
        "F12" => Tilde(24),
        _ => return None,
    })
}

/// Splits leading `Ctrl+`, `Alt+`, `Shift+` (any order, aliases `Control`
/// and `Meta`) off `key`.
fn split_mods(key: &str) -> (Mods, &str) {
    let mut mods = Mods::default();
    let mut rest = key;
    // Stripping whole `Name+` prefixes (rather than splitting on `+`) keeps
    // `+` usable as a base: "Ctrl++", "a+b".
    while let Some((name, tail)) = rest.split_once('+') {
        match name {
            "Ctrl" | "Control" => mods.ctrl = true,
            "Alt" | "Meta" => mods.alt = true,
            "Shift" => mods.shift = true,
            _ => break,
        }
        rest = tail;
    }
    (mods, rest)
}

/// The C0 control code Ctrl+`c` produces, as in xterm.
fn ctrl_code(c: char) -> Option<u8> {
    Some(match c {
        'a'..='z' | 'A'..='Z' => (c.to_ascii_uppercase() as u8) & 0x1f,
        ' ' | '@' | '2' => 0,
        '[' | '3' => 0x1b,
        '\\' | '4' => 0x1c,
        ']' | '5' => 0x1d,
        '^' | '6' => 0x1e,
        '_' | '/' | '7' => 0x1f,
        '?' | '8' => 0x7f,
        _ => return None,
    })
}

/// Bytes for `key`; `application_cursor` selects SS3 arrows (DECCKM set).
pub fn encode_with(key: &str, application_cursor: bool) -> Result<Vec<u8>, KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    let (mods, base) = split_mods(key);
    if !mods.any() {
        return Ok(match named(base) {
            Some(k) => encode_named(&k, mods, application_cursor),
            // Plain text, whatever it contains.
            None => base.as_bytes().to_vec(),
        });
    }
    if base.is_empty() {
        return Err(KeyError::Unknown(key.to_owned()));
    }
    if let Some(k) = named(base) {
        return Ok(encode_named(&k, mods, application_cursor));
    }
    let mut chars = base.chars();
    let (Some(c), None) = (chars.next(), chars.next()) else {
        return Err(KeyError::Unknown(key.to_owned()));
    };
    let mut out = Vec::new();
    if mods.alt {
        out.push(0x1b);
    }
    if mods.ctrl {
        // Ctrl+Shift+letter is Ctrl+letter: control codes have no case.
        let code = ctrl_code(c).ok_or_else(|| KeyError::Unsupported(key.to_owned()))?;
        out.push(code);
    } else if mods.shift {
        // Only letters have a layout-independent shifted form.
        if !c.is_alphabetic() {
            return Err(KeyError::Unsupported(key.to_owned()));
        }
        out.extend(c.to_uppercase().collect::<String>().bytes());
    } else {
        let mut buf = [0; 4];
        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }
    Ok(out)
}

fn encode_named(key: &Named, mods: Mods, application_cursor: bool) -> Vec<u8> {
    let esc_if_alt = |bytes: &[u8]| {
        let mut out = if mods.alt { vec![0x1b] } else { Vec::new() };
        out.extend_from_slice(bytes);
        out
    };
    match *key {
        Named::Fixed(bytes) => esc_if_alt(bytes),
        Named::Tab if mods.shift => {
            let mut out = esc_if_alt(b"");
            out.extend_from_slice(b"\x1b[Z");
            out
        }
        Named::Tab => esc_if_alt(b"\t"),
        // xterm: Backspace is DEL, Ctrl+Backspace is BS.
        Named::Backspace => esc_if_alt(if mods.ctrl { b"\x08" } else { b"\x7f" }),
        Named::Space => esc_if_alt(if mods.ctrl { b"\0" } else { b" " }),
        Named::Cursor(fin) | Named::Ss3(fin) if mods.any() => {
            format!("\x1b[1;{}{}", mods.param(), fin as char).into_bytes()
        }
        Named::Cursor(fin) if !application_cursor => vec![0x1b, b'[', fin],
        Named::Cursor(fin) | Named::Ss3(fin) => vec![0x1b, b'O', fin],
        Named::Tilde(n) if mods.any() => format!("\x1b[{n};{}~", mods.param()).into_bytes(),
        Named::Tilde(n) => format!("\x1b[{n}~").into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    /// One line per key: name, then the bytes escaped, or the error.
    fn table(keys: &[&str], application_cursor: bool) -> String {
        keys.iter()
            .map(|key| {
                let shown = match encode_with(key, application_cursor) {
                    Ok(bytes) => bytes.escape_ascii().to_string(),
                    Err(e) => format!("error: {e}"),
                };
                format!("{key:<14} {shown}\n")
            })
            .collect()
    }

    #[test]
    fn normal_mode() {
        let keys = [
            "a",
            "é",
            "hello",
            "end",
            "+",
            "a+b",
            "Enter",
            "Backspace",
            "Tab",
            "Shift+Tab",
            "Escape",
            "Esc",
            "Space",
            "Up",
            "Down",
            "Right",
            "Left",
            "Home",
            "End",
            "PageUp",
            "PageDown",
            "Delete",
            "Insert",
            "F1",
            "F4",
            "F5",
            "F12",
            "Ctrl+a",
            "Ctrl+C",
            "Ctrl+z",
            "Ctrl+[",
            "Ctrl+\\",
            "Ctrl+]",
            "Ctrl+^",
            "Ctrl+_",
            "Ctrl+Space",
            "Ctrl+Backspace",
            "Alt+x",
            "Alt+Enter",
            "Ctrl+Alt+c",
            "Alt+Ctrl+c",
            "Shift+a",
            "Ctrl+Shift+a",
            "Alt+é",
            "Ctrl++",
            "Shift+Up",
            "Alt+Up",
            "Ctrl+Left",
            "Ctrl+Shift+Right",
            "Ctrl+Alt+Shift+Home",
            "Shift+F1",
            "Ctrl+Delete",
            "Alt+PageUp",
            "Ctrl+F5",
        ];
        expect![[r#"
            a              a
            é              \xc3\xa9
            hello          hello
            end            end
            +              +
            a+b            a+b
            Enter          \r
            Backspace      \x7f
            Tab            \t
            Shift+Tab      \x1b[Z
            Escape         \x1b
            Esc            \x1b
            Space           
            Up             \x1b[A
            Down           \x1b[B
            Right          \x1b[C
            Left           \x1b[D
            Home           \x1b[H
            End            \x1b[F
            PageUp         \x1b[5~
            PageDown       \x1b[6~
            Delete         \x1b[3~
            Insert         \x1b[2~
            F1             \x1bOP
            F4             \x1bOS
            F5             \x1b[15~
            F12            \x1b[24~
            Ctrl+a         \x01
            Ctrl+C         \x03
            Ctrl+z         \x1a
            Ctrl+[         \x1b
            Ctrl+\         \x1c
            Ctrl+]         \x1d
            Ctrl+^         \x1e
            Ctrl+_         \x1f
            Ctrl+Space     \x00
            Ctrl+Backspace \x08
            Alt+x          \x1bx
            Alt+Enter      \x1b\r
            Ctrl+Alt+c     \x1b\x03
            Alt+Ctrl+c     \x1b\x03
            Shift+a        A
            Ctrl+Shift+a   \x01
            Alt+é          \x1b\xc3\xa9
            Ctrl++         error: key combination has no terminal encoding: "Ctrl++"
            Shift+Up       \x1b[1;2A
            Alt+Up         \x1b[1;3A
            Ctrl+Left      \x1b[1;5D
            Ctrl+Shift+Right \x1b[1;6C
            Ctrl+Alt+Shift+Home \x1b[1;8H
            Shift+F1       \x1b[1;2P
            Ctrl+Delete    \x1b[3;5~
            Alt+PageUp     \x1b[5;3~
            Ctrl+F5        \x1b[15;5~
        "#]]
        .assert_eq(&table(&keys, false));
    }

    #[test]
    fn application_cursor_mode() {
        let keys = ["Up", "Left", "Home", "End", "Ctrl+Up", "F1", "PageUp", "a"];
        expect![[r#"
            Up             \x1bOA
            Left           \x1bOD
            Home           \x1bOH
            End            \x1bOF
            Ctrl+Up        \x1b[1;5A
            F1             \x1bOP
            PageUp         \x1b[5~
            a              a
        "#]]
        .assert_eq(&table(&keys, true));
    }

    #[test]
    fn errors() {
        let keys = [
            "",
            "Ctrl+",
            "Ctrl+Foo",
            "Ctrl+ab",
            "Shift+1",
            "Ctrl+é",
            "Alt+hello",
        ];
        expect![[r#"
                           error: empty key
            Ctrl+          error: unknown key name: "Ctrl+"
            Ctrl+Foo       error: unknown key name: "Ctrl+Foo"
            Ctrl+ab        error: unknown key name: "Ctrl+ab"
            Shift+1        error: key combination has no terminal encoding: "Shift+1"
            Ctrl+é         error: key combination has no terminal encoding: "Ctrl+é"
            Alt+hello      error: unknown key name: "Alt+hello"
        "#]]
        .assert_eq(&table(&keys, false));
        assert_eq!(encode("Nope+x"), Ok(b"Nope+x".to_vec()));
    }
}
