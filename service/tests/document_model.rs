//! Property test: the document store against a plain `String` model.
//!
//! Random full and incremental edits over text with emoji, CJK, CRLF and lone
//! CR, with positions in all three encodings, including out-of-range ones.
//! The model is written independently of ropey: it splits lines by hand and
//! counts code units char by char.

use moonkale_service::core::{Document, PositionEncoding, TextChange, WirePosition};
use proptest::prelude::*;

/// Char index of `pos` in `text` under the LSP clamping rules, computed on a
/// plain string.
fn model_char_idx(text: &str, pos: WirePosition, enc: PositionEncoding) -> usize {
    let chars: Vec<char> = text.chars().collect();
    // Line starts: after '\n', and after a '\r' that is not followed by '\n'.
    let mut starts = vec![0];
    for (i, &c) in chars.iter().enumerate() {
        if c == '\n' || (c == '\r' && chars.get(i + 1) != Some(&'\n')) {
            starts.push(i + 1);
        }
    }
    let line = pos.line as usize;
    if line >= starts.len() {
        return chars.len();
    }
    let mut i = starts[line];
    let mut units = 0usize;
    while i < chars.len() && chars[i] != '\n' && chars[i] != '\r' {
        let w = match enc {
            PositionEncoding::Utf8 => chars[i].len_utf8(),
            PositionEncoding::Utf16 => chars[i].len_utf16(),
            PositionEncoding::Utf32 => 1,
        };
        if units + w > pos.character as usize {
            break;
        }
        units += w;
        i += 1;
    }
    i
}

fn model_apply(text: &mut String, change: &TextChange, enc: PositionEncoding) {
    match change.range {
        None => *text = change.text.clone(),
        Some((start, end)) => {
            let from = model_char_idx(text, start, enc);
            let to = model_char_idx(text, end, enc);
            let mut chars: Vec<char> = text.chars().collect();
            chars.splice(from..to, change.text.chars());
            *text = chars.into_iter().collect();
        }
    }
}

fn piece() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "a", "Z", " ", "é", "中文", "😀", "👍🏽", "\n", "\r\n", "\r", "\t", "\u{2028}",
        ]),
        0..8,
    )
    .prop_map(|v| v.concat())
}

fn position() -> impl Strategy<Value = WirePosition> {
    (
        prop_oneof![0u32..6, Just(u32::MAX)],
        prop_oneof![0u32..12, Just(2147483647u32)],
    )
        .prop_map(|(line, character)| WirePosition { line, character })
}

fn change() -> impl Strategy<Value = TextChange> {
    prop_oneof![
        1 => piece().prop_map(|text| TextChange { range: None, text }),
        6 => (position(), position(), piece()).prop_map(|(a, b, text)| {
            let (start, end) =
                if (a.line, a.character) <= (b.line, b.character) { (a, b) } else { (b, a) };
            TextChange { range: Some((start, end)), text }
        }),
    ]
}

fn encoding() -> impl Strategy<Value = PositionEncoding> {
    prop::sample::select(vec![
        PositionEncoding::Utf8,
        PositionEncoding::Utf16,
        PositionEncoding::Utf32,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn document_matches_string_model(
        initial in piece(),
        batches in prop::collection::vec(prop::collection::vec(change(), 1..4), 1..12),
        enc in encoding(),
    ) {
        let mut doc = Document::open(&initial, 0, "text").unwrap();
        let mut model = initial.clone();
        for (i, batch) in batches.iter().enumerate() {
            doc.apply_changes(i as i32 + 1, batch, enc).unwrap();
            for change in batch {
                model_apply(&mut model, change, enc);
            }
            prop_assert_eq!(doc.text().to_string(), model.clone());
            prop_assert_eq!(doc.version(), i as i32 + 1);
        }
    }

    #[test]
    fn a_refused_batch_leaves_the_text_unchanged(
        initial in piece(),
        good in change(),
        enc in encoding(),
    ) {
        let mut doc = Document::open(&initial, 5, "text").unwrap();
        let inverted = TextChange {
            range: Some((WirePosition { line: 1, character: 0 }, WirePosition { line: 0, character: 0 })),
            text: "x".into(),
        };
        prop_assert!(doc.apply_changes(6, &[good, inverted], enc).is_err());
        prop_assert_eq!(doc.text().to_string(), initial);
        prop_assert_eq!(doc.version(), 5);
    }
}
