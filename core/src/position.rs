//! Positions as editors send them and as the rope indexes them.
//!
//! LSP positions are `(line, character)` where `character` counts code units
//! of the encoding negotiated at `initialize` (utf-8 bytes, utf-16 code units
//! or utf-32 chars). The rope indexes chars. This module owns the conversion
//! between the two and the clamping rules of the LSP specification:
//!
//! > If the character value is greater than the line length it defaults back
//! > to the line length.
//!
//! A line past the end of the document clamps to the end of the document, and a
//! column that lands inside a character (inside a surrogate pair, inside a
//! multi-byte UTF-8 sequence) rounds down to that character's start. A column
//! can never land between the `\r` and `\n` of a CRLF pair, because the line
//! length excludes its terminator.

use ropey::{Rope, RopeSlice};

/// The unit in which an editor counts `Position.character`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PositionEncoding {
    Utf8,
    Utf16,
    Utf32,
}

impl PositionEncoding {
    pub fn as_lsp_str(self) -> &'static str {
        match self {
            PositionEncoding::Utf8 => "utf-8",
            PositionEncoding::Utf16 => "utf-16",
            PositionEncoding::Utf32 => "utf-32",
        }
    }

    pub fn from_lsp_str(s: &str) -> Option<PositionEncoding> {
        match s {
            "utf-8" => Some(PositionEncoding::Utf8),
            "utf-16" => Some(PositionEncoding::Utf16),
            "utf-32" => Some(PositionEncoding::Utf32),
            _ => None,
        }
    }

    /// Picks the encoding for an editor that offered `offered` (in its order of
    /// preference). utf-8 wins when offered because it needs no conversion on
    /// our side and is what Neovim's byte columns already are; otherwise the
    /// editor's first known choice; utf-16 is the mandatory fallback.
    pub fn negotiate<'a>(offered: impl IntoIterator<Item = &'a str>) -> PositionEncoding {
        let known: Vec<PositionEncoding> =
            offered.into_iter().filter_map(Self::from_lsp_str).collect();
        if known.contains(&PositionEncoding::Utf8) {
            PositionEncoding::Utf8
        } else {
            known.first().copied().unwrap_or(PositionEncoding::Utf16)
        }
    }
}

/// A position exactly as an editor sent it, in that editor's encoding.
/// Unvalidated: it may point past the line or past the document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WirePosition {
    pub line: u32,
    pub character: u32,
}

impl From<lsp_types::Position> for WirePosition {
    fn from(p: lsp_types::Position) -> WirePosition {
        WirePosition {
            line: p.line,
            character: p.character,
        }
    }
}

impl From<WirePosition> for lsp_types::Position {
    fn from(p: WirePosition) -> lsp_types::Position {
        lsp_types::Position {
            line: p.line,
            character: p.character,
        }
    }
}

/// A char index into one particular rope, produced only by clamping, so it is
/// always within `0..=len_chars` and never splits a CRLF pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CharIdx(usize);

impl CharIdx {
    pub fn get(self) -> usize {
        self.0
    }
}

/// A line and a column counted in chars (utf-32): the encoding-independent form
/// in which the workspace keeps cursors and selections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct LineCol {
    pub line: u32,
    pub col: u32,
}

/// Number of chars of the line's terminator (`\r\n`, `\n`, `\r` or none).
fn terminator_len(line: RopeSlice<'_>) -> usize {
    let n = line.len_chars();
    if n == 0 {
        return 0;
    }
    match line.char(n - 1) {
        '\n' if n >= 2 && line.char(n - 2) == '\r' => 2,
        '\n' | '\r' => 1,
        _ => 0,
    }
}

/// Clamps `pos` (in `encoding`) into `rope` and returns its char index.
pub fn to_char_idx(rope: &Rope, pos: WirePosition, encoding: PositionEncoding) -> CharIdx {
    let line_idx = pos.line as usize;
    if line_idx >= rope.len_lines() {
        return CharIdx(rope.len_chars());
    }
    let line_start = rope.line_to_char(line_idx);
    let line = rope.line(line_idx);
    let content_chars = line.len_chars() - terminator_len(line);
    let wanted = pos.character as usize;
    let col_chars = match encoding {
        PositionEncoding::Utf32 => wanted.min(content_chars),
        PositionEncoding::Utf16 => {
            let content_cu = line.char_to_utf16_cu(content_chars);
            line.utf16_cu_to_char(wanted.min(content_cu))
        }
        PositionEncoding::Utf8 => {
            let content_bytes = line.char_to_byte(content_chars);
            line.byte_to_char(wanted.min(content_bytes))
        }
    };
    CharIdx(line_start + col_chars)
}

/// Clamps a raw char index into `rope`, stepping back off the middle of a
/// CRLF pair (an insertion of "\n..." right after a "\r" creates one).
pub fn clamp_char_idx(rope: &Rope, raw: usize) -> CharIdx {
    let idx = raw.min(rope.len_chars());
    if idx > 0 && idx < rope.len_chars() && rope.char(idx - 1) == '\r' && rope.char(idx) == '\n' {
        return CharIdx(idx - 1);
    }
    CharIdx(idx)
}

/// The position of `idx` in `encoding`.
pub fn to_wire(rope: &Rope, idx: CharIdx, encoding: PositionEncoding) -> WirePosition {
    let line_idx = rope.char_to_line(idx.0);
    let line = rope.line(line_idx);
    let col_chars = idx.0 - rope.line_to_char(line_idx);
    let character = match encoding {
        PositionEncoding::Utf32 => col_chars,
        PositionEncoding::Utf16 => line.char_to_utf16_cu(col_chars),
        PositionEncoding::Utf8 => line.char_to_byte(col_chars),
    };
    WirePosition {
        line: saturate(line_idx),
        character: saturate(character),
    }
}

/// The encoding-independent line and column of `idx`.
pub fn to_line_col(rope: &Rope, idx: CharIdx) -> LineCol {
    let p = to_wire(rope, idx, PositionEncoding::Utf32);
    LineCol {
        line: p.line,
        col: p.character,
    }
}

/// Clamps `pos` into `rope` and returns its line and char column.
pub fn clamp_to_line_col(rope: &Rope, pos: WirePosition, encoding: PositionEncoding) -> LineCol {
    to_line_col(rope, to_char_idx(rope, pos, encoding))
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    /// Converts every `(line, character)` in `positions` in every encoding and
    /// prints the char index it clamps to and the position it maps back to.
    #[track_caller]
    fn check(text: &str, positions: &[(u32, u32)], expect: Expect) {
        let rope = Rope::from_str(text);
        let mut out = String::new();
        for &(line, character) in positions {
            for enc in [
                PositionEncoding::Utf8,
                PositionEncoding::Utf16,
                PositionEncoding::Utf32,
            ] {
                let idx = to_char_idx(&rope, WirePosition { line, character }, enc);
                let back = to_wire(&rope, idx, enc);
                out.push_str(&format!(
                    "({line},{character}) {} -> char {} -> ({},{})\n",
                    enc.as_lsp_str(),
                    idx.get(),
                    back.line,
                    back.character
                ));
            }
        }
        expect.assert_eq(&out);
    }

    #[test]
    fn empty_document_clamps_everything_to_zero() {
        check(
            "",
            &[(0, 0), (u32::MAX, u32::MAX)],
            expect![[r#"
                (0,0) utf-8 -> char 0 -> (0,0)
                (0,0) utf-16 -> char 0 -> (0,0)
                (0,0) utf-32 -> char 0 -> (0,0)
                (4294967295,4294967295) utf-8 -> char 0 -> (0,0)
                (4294967295,4294967295) utf-16 -> char 0 -> (0,0)
                (4294967295,4294967295) utf-32 -> char 0 -> (0,0)
            "#]],
        );
    }

    #[test]
    fn emoji_counts_differently_per_encoding() {
        // "a😀b": 😀 is 4 bytes, 2 utf-16 code units, 1 char.
        check(
            "a😀b",
            &[(0, 2), (0, 3), (0, 5)],
            expect![[r#"
                (0,2) utf-8 -> char 1 -> (0,1)
                (0,2) utf-16 -> char 1 -> (0,1)
                (0,2) utf-32 -> char 2 -> (0,2)
                (0,3) utf-8 -> char 1 -> (0,1)
                (0,3) utf-16 -> char 2 -> (0,3)
                (0,3) utf-32 -> char 3 -> (0,3)
                (0,5) utf-8 -> char 2 -> (0,5)
                (0,5) utf-16 -> char 3 -> (0,4)
                (0,5) utf-32 -> char 3 -> (0,3)
            "#]],
        );
    }

    #[test]
    fn column_past_line_end_clamps_before_crlf() {
        check(
            "ab\r\ncd\rx\n",
            &[(0, 9), (1, 2147483647), (2, 1), (3, 0), (9, 9)],
            expect![[r#"
                (0,9) utf-8 -> char 2 -> (0,2)
                (0,9) utf-16 -> char 2 -> (0,2)
                (0,9) utf-32 -> char 2 -> (0,2)
                (1,2147483647) utf-8 -> char 6 -> (1,2)
                (1,2147483647) utf-16 -> char 6 -> (1,2)
                (1,2147483647) utf-32 -> char 6 -> (1,2)
                (2,1) utf-8 -> char 8 -> (2,1)
                (2,1) utf-16 -> char 8 -> (2,1)
                (2,1) utf-32 -> char 8 -> (2,1)
                (3,0) utf-8 -> char 9 -> (3,0)
                (3,0) utf-16 -> char 9 -> (3,0)
                (3,0) utf-32 -> char 9 -> (3,0)
                (9,9) utf-8 -> char 9 -> (3,0)
                (9,9) utf-16 -> char 9 -> (3,0)
                (9,9) utf-32 -> char 9 -> (3,0)
            "#]],
        );
    }

    #[test]
    fn only_lsp_terminators_break_lines() {
        // U+2028 and NEL are not line breaks in LSP (ropey's unicode_lines is off).
        let rope = Rope::from_str("a\u{2028}b\u{85}c\nd");
        assert_eq!(rope.len_lines(), 2);
        let idx = to_char_idx(
            &rope,
            WirePosition {
                line: 1,
                character: 0,
            },
            PositionEncoding::Utf16,
        );
        assert_eq!(idx.get(), 6);
    }

    #[test]
    fn negotiation_prefers_utf8_then_client_order_then_utf16() {
        use PositionEncoding::*;
        assert_eq!(PositionEncoding::negotiate(["utf-16", "utf-8"]), Utf8);
        assert_eq!(PositionEncoding::negotiate(["utf-32", "utf-16"]), Utf32);
        assert_eq!(PositionEncoding::negotiate(["latin-1"]), Utf16);
        assert_eq!(PositionEncoding::negotiate([]), Utf16);
    }
}
