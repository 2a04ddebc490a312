//! A key pressed in the page's terminal, as the key name the service's
//! terminal encodes (`"Enter"`, `"Up"`, `"Ctrl+c"`): one encoder, in the
//! service, which knows the screen's cursor-key mode. Pure, so every key
//! is a unit test.

/// The service's name for a key by its DOM `key` (`"Enter"`, `"ArrowUp"`,
/// `"c"`), with Ctrl, Alt and Shift; `None` for a key that sends nothing
/// itself (a modifier alone) or plain printable text, which arrives
/// through the input's text instead (composition included).
pub fn key_name(key: &str, ctrl: bool, alt: bool, shift: bool) -> Option<String> {
    let named = match key {
        "ArrowUp" => Some("Up"),
        "ArrowDown" => Some("Down"),
        "ArrowLeft" => Some("Left"),
        "ArrowRight" => Some("Right"),
        "Enter" | "Escape" | "Tab" | "Backspace" | "Home" | "End" | "PageUp" | "PageDown"
        | "Delete" | "Insert" => Some(key),
        f if f.len() <= 3
            && f.starts_with('F')
            && f[1..].parse::<u8>().is_ok_and(|n| (1..=12).contains(&n)) =>
        {
            Some(f)
        }
        _ => None,
    };
    let mut mods = String::new();
    if ctrl {
        mods.push_str("Ctrl+");
    }
    if alt {
        mods.push_str("Alt+");
    }
    if let Some(name) = named {
        if shift {
            mods.push_str("Shift+");
        }
        return Some(format!("{mods}{name}"));
    }
    let mut chars = key.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if ctrl || alt => {
            let c = if ctrl { c.to_ascii_lowercase() } else { c };
            Some(format!("{mods}{c}"))
        }
        _ => None,
    }
}

/// What changed from `sent` to `now` in a text input, as a terminal takes
/// it: how many characters to erase (Backspace) and the text to type.
pub fn typed_difference(sent: &str, now: &str) -> (usize, String) {
    let common = sent
        .chars()
        .zip(now.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a.len_utf8())
        .sum::<usize>();
    (sent[common..].chars().count(), now[common..].to_owned())
}

#[cfg(test)]
mod tests {
    use super::{key_name, typed_difference};

    #[test]
    fn typing_and_erasing_in_the_input() {
        assert_eq!(typed_difference("", "ls"), (0, "ls".into()));
        assert_eq!(typed_difference("ls", "ls -l"), (0, " -l".into()));
        assert_eq!(typed_difference("ls -l", "ls"), (3, String::new()));
        assert_eq!(typed_difference("caf", "café"), (0, "é".into()));
        assert_eq!(typed_difference("abc", "abX"), (1, "X".into()));
        assert_eq!(typed_difference("日本", "日"), (1, String::new()));
    }

    #[test]
    fn keys_by_the_services_names() {
        let cases: &[(&str, bool, bool, bool, Option<&str>)] = &[
            ("Enter", false, false, false, Some("Enter")),
            ("Backspace", false, false, false, Some("Backspace")),
            ("Tab", false, false, false, Some("Tab")),
            ("Tab", false, false, true, Some("Shift+Tab")),
            ("Escape", false, false, false, Some("Escape")),
            ("ArrowUp", false, false, false, Some("Up")),
            ("ArrowLeft", true, false, false, Some("Ctrl+Left")),
            ("F5", false, false, false, Some("F5")),
            ("c", true, false, false, Some("Ctrl+c")),
            ("C", true, false, true, Some("Ctrl+c")),
            ("b", false, true, false, Some("Alt+b")),
            // Printable text comes through the input, not as a key.
            ("a", false, false, false, None),
            ("A", false, false, true, None),
            ("é", false, false, false, None),
            ("Shift", false, false, true, None),
            ("Control", true, false, false, None),
            ("Fn", false, false, false, None),
        ];
        for (key, ctrl, alt, shift, want) in cases {
            assert_eq!(
                key_name(key, *ctrl, *alt, *shift).as_deref(),
                *want,
                "{key} ctrl={ctrl} alt={alt} shift={shift}"
            );
        }
    }
}
