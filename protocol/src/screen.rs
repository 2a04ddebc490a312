//! A terminal's screen on the wire (camelCase JSON), as the service's VT
//! model renders it and front ends draw it:
//! - a [`Row`] is one line of cells as [`Span`]s; consecutive cells with the
//!   same style merge into one span, a wide (CJK) character is emitted once
//!   (it occupies two columns, the client measures it), and trailing
//!   default-style blanks are trimmed;
//! - an [`Update`] replaces whole rows, so applying it on top of a snapshot
//!   that already contains it is harmless: a client may take a snapshot at
//!   any moment and then apply the following updates.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A colour other than the terminal default.
///
/// Serialised as a string: a palette index as its decimal number (`"0"` to
/// `"255"`; 0–7 are the normal and 8–15 the bright ANSI colours), and a
/// truecolour as `"#rrggbb"` (lowercase hex). The default colour is an
/// absent field, never a `Color`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    Indexed(u8),
    Rgb(u8, u8, u8),
}

impl std::fmt::Display for Color {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Indexed(i) => write!(f, "{i}"),
            Self::Rgb(r, g, b) => write!(f, "#{r:02x}{g:02x}{b:02x}"),
        }
    }
}

impl Serialize for Color {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl std::str::FromStr for Color {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a colour (\"0\"..\"255\" or \"#rrggbb\")");
        if let Some(hex) = s.strip_prefix('#') {
            if hex.len() != 6 || !hex.is_ascii() {
                return Err(bad());
            }
            let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| bad());
            return Ok(Self::Rgb(byte(0)?, byte(2)?, byte(4)?));
        }
        s.parse().map(Self::Indexed).map_err(|_| bad())
    }
}

impl<'de> Deserialize<'de> for Color {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A run of cells sharing one style. Flags are omitted from JSON when false.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Span {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fg: Option<Color>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bg: Option<Color>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub bold: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub dim: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub italic: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub underline: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub inverse: bool,
}

// serde's `skip_serializing_if` hands the predicate a reference.
fn is_false(b: &bool) -> bool {
    !*b
}
/// One line. On the live screen `index` is the screen row (0 = top); in
/// scrollback (`moonkale/terminal/scrollback`) it is the distance above the screen's top row
/// (1 = the line just above it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub index: u16,
    pub spans: Vec<Span>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cursor {
    pub row: u16,
    pub col: u16,
    pub visible: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Size {
    pub rows: u16,
    pub cols: u16,
}

/// The whole visible screen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub rows: u16,
    pub cols: u16,
    pub lines: Vec<Row>,
    pub cursor: Cursor,
    pub alternate_screen: bool,
    pub title: String,
}

/// What changed since the previous update: replaced rows and
/// whichever of size, cursor, alternate-screen flag and title changed. After
/// a resize every row is sent, so the client can rebuild from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Update {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Size>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<Row>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Cursor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alternate_screen: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}
