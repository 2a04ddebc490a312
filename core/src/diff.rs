//! Line hunks between an original text and a proposed one, for showing and
//! partly reverting Claude Code's proposals, and a three-way merge of two
//! texts made from one. Pure.

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

/// Lines (both sides together) of the changed middle of two texts (what
/// is left once their common first and last lines are set aside) that are
/// diffed line by line; a larger middle is one hunk. Myers' diff costs
/// about (lines × differences): 800 000 random lines a side took 12 s, so
/// what a transcript or a proposal can make the service diff is bounded
/// here.
pub const MAX_DIFF_LINES: usize = 50_000;
/// Hunks one diff gives at most. Past that, hunks closer than
/// [`MERGE_GAP`] lines are merged, and what is still over is one last hunk:
/// a `replace_all` over a large file must not become 100 000 hunks, each a
/// diagnostic in every editor.
pub const MAX_HUNKS: usize = 256;
/// Equal lines between two hunks that are merged when a diff has more
/// than [`MAX_HUNKS`] hunks.
pub const MERGE_GAP: usize = 3;

/// The hunks between two texts, by lines, with no context merged in, at
/// most [`MAX_HUNKS`] of them (see there) and with bounded work
/// ([`MAX_DIFF_LINES`]). Reverting every hunk gives back `old` exactly,
/// whatever was merged.
pub fn hunks(old: &str, new: &str) -> Vec<Hunk> {
    let (old, new) = (lines(old), lines(new));
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (old_mid, new_mid) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );
    if old_mid.is_empty() && new_mid.is_empty() {
        return Vec::new();
    }
    if old_mid.len() + new_mid.len() > MAX_DIFF_LINES {
        return vec![Hunk {
            old: prefix..prefix + old_mid.len(),
            new: prefix..prefix + new_mid.len(),
        }];
    }
    let diff = TextDiff::from_slices(old_mid, new_mid);
    let found = diff
        .grouped_ops(0)
        .into_iter()
        .filter_map(|group| {
            let mut changes = group
                .iter()
                .filter(|op| !matches!(op, DiffOp::Equal { .. }));
            let first = changes.next()?;
            let last = changes.next_back().unwrap_or(first);
            Some(Hunk {
                old: prefix + first.old_range().start..prefix + last.old_range().end,
                new: prefix + first.new_range().start..prefix + last.new_range().end,
            })
        })
        .collect();
    at_most_max_hunks(found)
}

/// [`MAX_HUNKS`] hunks at most: neighbours closer than [`MERGE_GAP`] lines
/// merged, then the rest as one. A merged hunk spans the equal lines
/// between its parts, which are the same on both sides, so reverting it is
/// still exact.
fn at_most_max_hunks(found: Vec<Hunk>) -> Vec<Hunk> {
    if found.len() <= MAX_HUNKS {
        return found;
    }
    let mut merged: Vec<Hunk> = Vec::new();
    for h in found {
        match merged.last_mut() {
            Some(last) if h.old.start - last.old.end <= MERGE_GAP => {
                last.old.end = h.old.end;
                last.new.end = h.new.end;
            }
            _ => merged.push(h),
        }
    }
    if merged.len() > MAX_HUNKS {
        let rest = merged.split_off(MAX_HUNKS - 1);
        let (first, last) = (&rest[0], &rest[rest.len() - 1]);
        merged.push(Hunk {
            old: first.old.start..last.old.end,
            new: first.new.start..last.new.end,
        });
    }
    merged
}

/// Whether two hunks' ranges of the same text overlap or touch (an
/// insertion right before or after a changed line counts: which order the
/// lines go in is not ours to guess).
fn collide(a: &std::ops::Range<usize>, b: &std::ops::Range<usize>) -> bool {
    a.start <= b.end && b.start <= a.end
}

/// Three-way merge by lines: `theirs`' changes to `base` applied to `ours`
/// (another text made from `base`), when no change of theirs collides with
/// one of ours. Else the lines of `ours` whose changes collide.
pub fn merge(base: &str, ours: &str, theirs: &str) -> Result<String, Vec<std::ops::Range<usize>>> {
    let mine = hunks(base, ours);
    let other = hunks(base, theirs);
    let clashes: Vec<std::ops::Range<usize>> = mine
        .iter()
        .filter(|m| other.iter().any(|o| collide(&m.old, &o.old)))
        .map(|m| m.new.clone())
        .collect();
    if !clashes.is_empty() {
        return Err(clashes);
    }
    let (base, ours, theirs) = (lines(base), lines(ours), lines(theirs));
    // Both sides' replacements of base lines, in base order: none overlap.
    let mut edits: Vec<(&std::ops::Range<usize>, &[&str])> = mine
        .iter()
        .map(|h| (&h.old, &ours[h.new.clone()]))
        .chain(other.iter().map(|h| (&h.old, &theirs[h.new.clone()])))
        .collect();
    edits.sort_by_key(|(old, _)| (old.start, old.end));
    let mut merged = String::new();
    let mut at = 0;
    for (old, new) in edits {
        merged.extend(base[at..old.start].iter().copied());
        merged.extend(new.iter().copied());
        at = old.end;
    }
    merged.extend(base[at..].iter().copied());
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A list of one range is what `merge` answers, not a range mistyped.
    #[allow(clippy::single_range_in_vec_init)]
    #[test]
    fn merges_changes_made_apart_and_names_the_lines_that_collide() {
        let base = "a\nb\nc\nd\ne\nf\n";
        let ours = "A\nb\nc\nd\ne\nf\n";
        let theirs = "a\nb\nc\nd\nE\ne2\nf\n";
        let merged = "A\nb\nc\nd\nE\ne2\nf\n";
        assert_eq!(merge(base, ours, theirs).as_deref(), Ok(merged));
        // Either way round.
        assert_eq!(merge(base, theirs, ours).as_deref(), Ok(merged));
        // Nothing of ours: theirs; nothing of theirs: ours.
        assert_eq!(merge(base, base, theirs).as_deref(), Ok(theirs));
        assert_eq!(merge(base, ours, base).as_deref(), Ok(ours));
        // A line next to one they changed collides, as does the same line.
        assert_eq!(merge(base, "a\nb\nc\nD\ne\nf\n", theirs), Err(vec![3..4]));
        assert_eq!(
            merge(base, "a\nb\nc\nd\nX\nY\nf\n", theirs),
            Err(vec![4..6])
        );
        // Both adding at the end: which goes first is unknown.
        assert_eq!(merge("a\n", "a\nb\n", "a\nc\n"), Err(vec![1..2]));
    }

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

    /// `new` with every hunk of [`hunks`] reverted.
    fn revert_all(old: &str, new: &str) -> String {
        let old_lines = lines(old);
        let mut new_lines = lines(new);
        for h in hunks(old, new).iter().rev() {
            new_lines.splice(h.new.clone(), old_lines[h.old.clone()].iter().copied());
        }
        new_lines.concat()
    }

    #[test]
    fn reverting_every_hunk_gives_back_the_original() {
        let old: String = (0..50).map(|i| format!("{i}\n")).collect();
        let new = old
            .replace("3\n", "three\n")
            .replace("40\n", "")
            .replace("49\n", "49\n50\n");
        assert_eq!(revert_all(&old, &new), old);
    }

    /// A `replace_all`-shaped edit of every other line of a large file:
    /// not one hunk per line, and still exact.
    #[test]
    fn many_nearby_changes_are_merged_under_the_cap() {
        let old: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        let new: String = (0..20_000)
            .map(|i| match i % 2 {
                0 => format!("LINE {i}\n"),
                _ => format!("line {i}\n"),
            })
            .collect();
        let found = hunks(&old, &new);
        assert_eq!(found.len(), 1, "{:?}", &found[..found.len().min(3)]);
        assert_eq!(revert_all(&old, &new), old);
        // Far apart, more changes than the cap: the tail is one hunk.
        let spaced: String = (0..20_000)
            .map(|i| match i % 10 {
                0 => format!("LINE {i}\n"),
                _ => format!("line {i}\n"),
            })
            .collect();
        let found = hunks(&old, &spaced);
        assert_eq!(found.len(), MAX_HUNKS);
        assert_eq!((found[0].old.clone(), found[1].old.clone()), (0..1, 10..11));
        assert_eq!(found[MAX_HUNKS - 1].old, 10 * (MAX_HUNKS - 1)..19_991);
        assert_eq!(revert_all(&old, &spaced), old);
    }

    /// Two unrelated texts past [`MAX_DIFF_LINES`]: one hunk between their
    /// common first and last lines, found without diffing them.
    #[test]
    fn a_middle_too_large_to_diff_is_one_hunk() {
        let mut x: u64 = 7;
        let mut random = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("{:x}\n", x % 100_000)
        };
        let middle = MAX_DIFF_LINES / 2 + 1;
        let old: String = std::iter::once("same\n".to_owned())
            .chain((0..middle).map(|_| random()))
            .chain(std::iter::once("end\n".to_owned()))
            .collect();
        let new: String = std::iter::once("same\n".to_owned())
            .chain((0..middle).map(|_| random()))
            .chain(std::iter::once("end\n".to_owned()))
            .collect();
        assert_eq!(
            hunks(&old, &new),
            vec![Hunk {
                old: 1..1 + middle,
                new: 1..1 + middle
            }]
        );
        assert_eq!(revert_all(&old, &new), old);
    }
}
