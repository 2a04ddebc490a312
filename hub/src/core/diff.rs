//! Line hunks between an original text and a proposed one, for showing and
//! partly reverting Claude Code's proposals. Pure.

use similar::{DiffOp, TextDiff};

/// A hunk: lines `old` of the original become lines `new` of the proposal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hunk {
    pub old: std::ops::Range<usize>,
    pub new: std::ops::Range<usize>,
}

/// `text` cut into lines as [`hunks`] counts them: each with its
/// terminator (`\n`, `\r\n` or a lone `\r`), the last one maybe without.
pub fn lines(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let end = match bytes[i] {
            b'\n' => i + 1,
            b'\r' if bytes.get(i + 1) == Some(&b'\n') => i + 2,
            b'\r' => i + 1,
            _ => {
                i += 1;
                continue;
            }
        };
        lines.push(&text[start..end]);
        start = end;
        i = end;
    }
    if start < bytes.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// The hunks between two texts, by lines, with no context merged in.
pub fn hunks(old: &str, new: &str) -> Vec<Hunk> {
    let diff = TextDiff::from_lines(old, new);
    diff.grouped_ops(0)
        .into_iter()
        .filter_map(|group| {
            let mut changes = group
                .iter()
                .filter(|op| !matches!(op, DiffOp::Equal { .. }));
            let first = changes.next()?;
            let last = changes.next_back().unwrap_or(first);
            Some(Hunk {
                old: first.old_range().start..last.old_range().end,
                new: first.new_range().start..last.new_range().end,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hunks_by_line() {
        let old = "a\nb\nc\nd\ne\n";
        let new = "a\nB\nc\nd\ne\nf\n";
        assert_eq!(
            hunks(old, new),
            vec![
                Hunk {
                    old: 1..2,
                    new: 1..2
                },
                Hunk {
                    old: 5..5,
                    new: 5..6
                }
            ]
        );
        assert_eq!(
            hunks("", "x\n"),
            vec![Hunk {
                old: 0..0,
                new: 0..1
            }]
        );
        assert!(hunks(old, old).is_empty());
    }

    #[test]
    fn lines_end_where_the_diff_says() {
        assert_eq!(
            lines("first\nsecond\rthird\r\nfourth\nlast"),
            vec!["first\n", "second\r", "third\r\n", "fourth\n", "last"]
        );
        assert_eq!(lines("\n\n"), vec!["\n", "\n"]);
        assert!(lines("").is_empty());
        // A lone `\r` is a line of its own to the diff too.
        assert_eq!(hunks("a\rb\r", "a\rB\r")[0].old, 1..2);
    }

    #[test]
    fn reverting_every_hunk_gives_back_the_original() {
        let old: String = (0..50).map(|i| format!("{i}\n")).collect();
        let new = old
            .replace("3\n", "three\n")
            .replace("40\n", "")
            .replace("49\n", "49\n50\n");
        let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
        let mut new_lines: Vec<&str> = new.split_inclusive('\n').collect();
        for h in hunks(&old, &new).iter().rev() {
            new_lines.splice(h.new.clone(), old_lines[h.old.clone()].iter().copied());
        }
        assert_eq!(new_lines.concat(), old);
    }
}
