//! Text from a session or a terminal made safe to show: [`inert`]. Pure,
//! and below every other module of the crate (the model and the diffs
//! both use it).

/// Text from a session or a terminal as a person should see it: control
/// characters as their visible pictures (`␛`, `␇`), and bidi controls,
/// which would reorder what surrounds them (`txt.exe` shown as `exe.txt`),
/// as their code points. Line breaks and tabs stay.
pub fn inert(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\u{0}'..='\u{1f}' => out.push(char::from_u32(0x2400 + c as u32).unwrap_or('?')),
            '\u{7f}' => out.push('␡'),
            '\u{80}'..='\u{9f}'
            | '\u{61c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}' => out.push_str(&format!("⟨U+{:04X}⟩", c as u32)),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_bidi_controls_show_as_what_they_are() {
        assert_eq!(
            inert("a\u{202e}txt.exe\u{202c}\u{1b}]52;c;eA==\u{7}\n\tb"),
            "a⟨U+202E⟩txt.exe⟨U+202C⟩␛]52;c;eA==␇\n\tb"
        );
    }
}
