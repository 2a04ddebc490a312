//! Text that came from elsewhere (a session's transcript, an editor's
//! name, a process name, a remote service's error) made safe to print on a
//! terminal. Such text may carry escape sequences: OSC 52 sets the user's
//! clipboard, CSI moves the cursor and rewrites what was printed, and bidi
//! overrides make text read differently from what it is. Every printer of
//! such text goes through [`for_terminal`].

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every C0 control but `\n` and `\t`, DEL, every C1 control
/// and every bidi override or isolate replaced by a visible escape: `^[`
/// for ESC (caret notation for C0 and DEL), `<U+009B>` for the others.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            _ if !unsafe_char(c) => out.push(c),
            '\0'..='\x1f' => {
                out.push('^');
                out.push(char::from(c as u8 + 0x40));
            }
            '\x7f' => out.push_str("^?"),
            _ => {
                let _ = write!(out, "<U+{:04X}>", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

/// `n` and the noun that fits it: "1 change", "3 changes", "0 files",
/// "2 processes" (nouns whose plural adds `s`, or `es` after an `s`).
pub fn counted(n: usize, singular: &str) -> String {
    let s = match (n, singular.ends_with('s')) {
        (1, _) => "",
        (_, true) => "es",
        (_, false) => "s",
    };
    format!("{n} {singular}{s}")
}

/// `text` on one line: [`for_terminal`], with line breaks and tabs shown
/// as escapes too (for error messages and list rows).
pub fn one_line(text: &str) -> String {
    for_terminal(text).replace('\n', "^J").replace('\t', " ")
}

/// Serialized JSON with the characters [`for_terminal`] would escape that
/// serde_json leaves as they are (DEL, C1, bidi) written as `\uXXXX`: the
/// same JSON value, safe on a terminal. (serde_json escapes C0 itself, and
/// outside strings JSON has none of these characters.)
pub fn json_for_terminal(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if unsafe_char(c) && c > '\x1f' {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

fn unsafe_char(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\0'..='\x1f' | '\x7f'..='\u{9f}' => true,
        // Bidi embeddings, overrides and isolates (CVE-2021-42574).
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls_and_bidi_overrides() {
        let hostile = "a\x1b]52;c;aGk=\x07b\x1b[2Jc\u{9b}31m\r\u{202e}d\u{2066}\x7f";
        assert_eq!(
            for_terminal(hostile),
            "a^[]52;c;aGk=^Gb^[[2Jc<U+009B>31m^M<U+202E>d<U+2066>^?"
        );
        assert!(matches!(for_terminal("plain\ttext\n€"), Cow::Borrowed(_)));
        assert_eq!(one_line("two\nlines\x00"), "two^Jlines^@");
        let json =
            serde_json::to_string(&serde_json::json!({"t": "\x1b[1m\u{9b}\u{202e}"})).unwrap();
        let safe = json_for_terminal(&json);
        assert_eq!(safe, r#"{"t":"\u001b[1m\u009b\u202e"}"#);
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["t"], "\x1b[1m\u{9b}\u{202e}");
    }
}
