//! The rendered state of one service-owned terminal: a `vt100` parser fed
//! with the bytes the child wrote, turned into serialisable rows of styled
//! spans, full snapshots, incremental row diffs and scrollback pages.
//!
//! Pure: no IO, no clock, no tasks. The owner of the pty feeds bytes in with
//! [`Screen::process`] and ships [`Snapshot`]s and [`Update`]s to clients.
//!
//! The wire types (rows of spans, snapshots, updates) are
//! `moonkale_protocol::screen`'s, re-exported here.

pub use moonkale_protocol::screen::{Color, Cursor, Row, Size, Snapshot, Span, Update};

/// One terminal screen plus what was last reported by [`Screen::changes`].
pub struct Screen {
    parser: vt100::Parser<TitleTracker>,
    /// What the last [`Screen::changes`] call reported (initially the blank
    /// screen), kept rendered so a diff is a plain comparison of rows.
    reported: Snapshot,
}

/// Collects the window title, which `vt100` reports through callbacks only.
#[derive(Default)]
struct TitleTracker {
    title: String,
}

impl vt100::Callbacks for TitleTracker {
    fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
        self.title = String::from_utf8_lossy(title).into_owned();
    }

    // `vt100` splits OSC parameters on `;`, so a title containing `;` does
    // not match its `[0|2, title]` pattern and lands here: glue it back.
    fn unhandled_osc(&mut self, _: &mut vt100::Screen, params: &[&[u8]]) {
        if let [kind, rest @ ..] = params
            && (*kind == b"0" || *kind == b"2")
            && !rest.is_empty()
        {
            self.title = String::from_utf8_lossy(&rest.join(&b';')).into_owned();
        }
    }
}

/// The style part of a [`Span`], compared to decide where spans split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Style {
    fg: Option<Color>,
    bg: Option<Color>,
    bold: bool,
    dim: bool,
    italic: bool,
    underline: bool,
    inverse: bool,
}

/// A vt100 colour on the wire; the default colour is none.
fn color(color: vt100::Color) -> Option<Color> {
    match color {
        vt100::Color::Default => None,
        vt100::Color::Idx(i) => Some(Color::Indexed(i)),
        vt100::Color::Rgb(r, g, b) => Some(Color::Rgb(r, g, b)),
    }
}

impl Style {
    fn of(cell: &vt100::Cell) -> Self {
        Self {
            fg: color(cell.fgcolor()),
            bg: color(cell.bgcolor()),
            bold: cell.bold(),
            dim: cell.dim(),
            italic: cell.italic(),
            underline: cell.underline(),
            inverse: cell.inverse(),
        }
    }

    fn span(self, text: String) -> Span {
        Span {
            text,
            fg: self.fg,
            bg: self.bg,
            bold: self.bold,
            dim: self.dim,
            italic: self.italic,
            underline: self.underline,
            inverse: self.inverse,
        }
    }
}

/// `vt100` wants non-zero sizes; a zero from a client means "as small as
/// possible", not a panic.
fn non_zero(n: u16) -> std::num::NonZeroU16 {
    std::num::NonZeroU16::new(n).unwrap_or(std::num::NonZeroU16::MIN)
}

/// Renders visible row `row` of `screen` (which honours the scrollback
/// offset currently set on it).
fn render_row(screen: &vt100::Screen, row: u16, index: u16) -> Row {
    let (_, cols) = screen.size();
    let mut spans: Vec<Span> = Vec::new();
    let mut current: Option<(Style, String)> = None;
    // Byte length of `current`'s text and the span count up to the last
    // cell that is not a default-style blank: the trim point.
    let mut keep: (usize, usize) = (0, 0);
    for col in 0..cols.get() {
        let Some(cell) = screen.cell(row, col) else {
            break;
        };
        // The right half of a wide character: its left half already
        // carries the character.
        if cell.is_wide_continuation() {
            continue;
        }
        let style = Style::of(cell);
        let text = if cell.has_contents() {
            cell.contents()
        } else {
            " "
        };
        match &mut current {
            Some((s, buf)) if *s == style => buf.push_str(text),
            _ => {
                if let Some((s, buf)) = current.take() {
                    spans.push(s.span(buf));
                }
                current = Some((style, text.to_owned()));
            }
        }
        if style != Style::default() || text != " " {
            let len = current.as_ref().map_or(0, |(_, buf)| buf.len());
            keep = (spans.len(), len);
        }
    }
    if let Some((s, buf)) = current {
        spans.push(s.span(buf));
    }
    // Trim: drop spans after the last meaningful cell, cut that span's text
    // after it. Only default-style blanks lie beyond that point.
    let (last, len) = keep;
    if len == 0 {
        spans.clear();
    } else {
        spans.truncate(last + 1);
        spans[last].text.truncate(len);
    }
    Row { index, spans }
}

impl Screen {
    /// A blank screen of `rows` × `cols` (zero is treated as one) keeping up
    /// to `scrollback` lines above the visible screen.
    pub fn new(rows: u16, cols: u16, scrollback: usize) -> Self {
        let parser = vt100::Parser::new_with_callbacks(
            non_zero(rows),
            non_zero(cols),
            scrollback,
            TitleTracker::default(),
        );
        let mut screen = Self {
            parser,
            reported: Snapshot {
                rows: 0,
                cols: 0,
                lines: Vec::new(),
                cursor: Cursor {
                    row: 0,
                    col: 0,
                    visible: true,
                },
                alternate_screen: false,
                title: String::new(),
            },
        };
        // The baseline is the blank screen, so the first `changes` reports
        // only what output did.
        screen.reported = screen.snapshot();
        screen
    }

    /// Feeds output of the child. Chunks may end anywhere, even inside a
    /// UTF-8 sequence or an escape sequence: the parser keeps its state.
    pub fn process(&mut self, bytes: &[u8]) {
        self.parser.process(bytes);
    }

    /// Resizes (zero is treated as one). The next [`Screen::changes`]
    /// reports the new size and every row.
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.parser.set_size(non_zero(rows), non_zero(cols));
    }

    /// The window title last set by the child (OSC 0 or 2), or empty.
    pub fn title(&self) -> &str {
        &self.parser.callbacks().title
    }

    /// Whether arrow keys must be sent in application cursor mode (DECCKM),
    /// see [`super::keys::encode_with`].
    pub fn application_cursor(&self) -> bool {
        self.parser.screen().application_cursor()
    }

    /// Whether the program asked for bracketed paste (`\x1b[?2004h`).
    pub fn bracketed_paste(&self) -> bool {
        self.parser.screen().bracketed_paste()
    }

    /// The whole visible screen.
    pub fn snapshot(&self) -> Snapshot {
        let screen = self.parser.screen();
        let (rows, cols) = screen.size();
        let (row, col) = screen.cursor_position();
        Snapshot {
            rows: rows.get(),
            cols: cols.get(),
            lines: (0..rows.get()).map(|r| render_row(screen, r, r)).collect(),
            cursor: Cursor {
                row,
                col,
                visible: !screen.hide_cursor(),
            },
            alternate_screen: screen.alternate_screen(),
            title: self.title().to_owned(),
        }
    }

    /// What changed since the previous call (or since creation), or `None`
    /// when nothing did. Rows are compared rendered, so output that rewrites
    /// a row with the same content and style reports nothing.
    pub fn changes(&mut self) -> Option<Update> {
        let now = self.snapshot();
        let old = &self.reported;
        let resized = (now.rows, now.cols) != (old.rows, old.cols);
        let lines: Vec<Row> = if resized {
            now.lines.clone()
        } else {
            now.lines
                .iter()
                .zip(&old.lines)
                .filter(|(new, old)| new != old)
                .map(|(new, _)| new.clone())
                .collect()
        };
        let update = Update {
            size: resized.then_some(Size {
                rows: now.rows,
                cols: now.cols,
            }),
            lines,
            cursor: (now.cursor != old.cursor).then_some(now.cursor),
            alternate_screen: (now.alternate_screen != old.alternate_screen)
                .then_some(now.alternate_screen),
            title: (now.title != old.title).then(|| now.title.clone()),
        };
        self.reported = now;
        (update != Update::default()).then_some(update)
    }

    /// Up to `count` lines of history above the visible screen, oldest
    /// first, ending `offset` lines above the screen's top row (`offset` 0:
    /// the page just above the screen). Each [`Row::index`] is the line's
    /// distance above the top row. Empty beyond the history, and in the
    /// alternate screen, which has no history.
    ///
    /// `vt100` only shows history by scrolling its view, so this scrolls
    /// the view one page at a time and puts it back to the live screen
    /// before returning; takes `&mut self` for that reason only.
    pub fn scrollback(&mut self, offset: usize, count: usize) -> Vec<Row> {
        let screen = self.parser.screen_mut();
        let available = screen.scrollback_len();
        let first = available.min(offset.saturating_add(count)); // farthest distance
        let last = offset.saturating_add(1); // nearest distance
        let mut out = Vec::new();
        let height = usize::from(screen.size().0.get());
        let mut distance = first;
        while distance >= last {
            // With the view scrolled back by `distance`, visible row `r`
            // shows the line at distance `distance - r`.
            screen.set_scrollback(distance);
            let page = height.min(distance - last + 1);
            for r in 0..page {
                let d = distance - r;
                let index = u16::try_from(d).unwrap_or(u16::MAX);
                // `r < height <= u16::MAX`.
                let row = u16::try_from(r).unwrap_or(u16::MAX);
                out.push(render_row(screen, row, index));
            }
            distance -= page;
        }
        screen.set_scrollback(0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    /// Header line, then one compact JSON row per non-empty line.
    fn render(s: &Snapshot) -> String {
        let mut out = format!(
            "{}x{} cursor={},{}{} alt={} title={:?}\n",
            s.rows,
            s.cols,
            s.cursor.row,
            s.cursor.col,
            if s.cursor.visible { "" } else { " hidden" },
            s.alternate_screen,
            s.title,
        );
        for line in s.lines.iter().filter(|l| !l.spans.is_empty()) {
            out.push_str(&serde_json::to_string(line).unwrap());
            out.push('\n');
        }
        out
    }

    fn check(input: &str, expect: Expect) {
        let mut screen = Screen::new(4, 20, 100);
        screen.process(input.as_bytes());
        expect.assert_eq(&render(&screen.snapshot()));
    }

    #[test]
    fn plain_text() {
        check(
            "hello\r\nworld   ",
            expect![[r#"
                4x20 cursor=1,8 alt=false title=""
                {"index":0,"spans":[{"text":"hello"}]}
                {"index":1,"spans":[{"text":"world"}]}
            "#]],
        );
    }

    #[test]
    fn sgr_colours() {
        check(
            "\x1b[31mred\x1b[0m \x1b[92mbright\x1b[m\r\n\
             \x1b[38;5;208midx\x1b[48;5;17mbg\x1b[m\r\n\
             \x1b[38;2;255;0;128mrgb\x1b[48;2;1;2;3m!\x1b[m",
            expect![[r##"
                4x20 cursor=2,4 alt=false title=""
                {"index":0,"spans":[{"text":"red","fg":"1"},{"text":" "},{"text":"bright","fg":"10"}]}
                {"index":1,"spans":[{"text":"idx","fg":"208"},{"text":"bg","fg":"208","bg":"17"}]}
                {"index":2,"spans":[{"text":"rgb","fg":"#ff0080"},{"text":"!","fg":"#ff0080","bg":"#010203"}]}
            "##]],
        );
    }

    #[test]
    fn attributes() {
        check(
            "\x1b[1mb\x1b[22;3mi\x1b[23;4mu\x1b[24;7mv\x1b[1;3mbi\x1b[m \x1b[2md",
            expect![[r#"
                4x20 cursor=0,8 alt=false title=""
                {"index":0,"spans":[{"text":"b","bold":true},{"text":"i","italic":true},{"text":"u","underline":true},{"text":"v","inverse":true},{"text":"bi","bold":true,"italic":true,"inverse":true},{"text":" "},{"text":"d","dim":true}]}
            "#]],
        );
    }

    #[test]
    fn styled_trailing_blanks_are_kept() {
        check(
            "a\x1b[44m  \x1b[m   ",
            expect![[r#"
                4x20 cursor=0,6 alt=false title=""
                {"index":0,"spans":[{"text":"a"},{"text":"  ","bg":"4"}]}
            "#]],
        );
    }

    #[test]
    fn cursor_movement_and_hidden_cursor() {
        check(
            "abc\x1b[3;5HX\x1b[AY\x1b[10DZ\x1b[?25l",
            expect![[r#"
                4x20 cursor=1,1 hidden alt=false title=""
                {"index":0,"spans":[{"text":"abc"}]}
                {"index":1,"spans":[{"text":"Z    Y"}]}
                {"index":2,"spans":[{"text":"    X"}]}
            "#]],
        );
    }

    #[test]
    fn clear_screen() {
        check(
            "one\r\ntwo\x1b[2J\x1b[Hnew",
            expect![[r#"
                4x20 cursor=0,3 alt=false title=""
                {"index":0,"spans":[{"text":"new"}]}
            "#]],
        );
    }

    #[test]
    fn alternate_screen() {
        let mut screen = Screen::new(3, 10, 100);
        screen.process(b"shell$ ");
        screen.process(b"\x1b[?1049h\x1b[Hfull-screen");
        expect![[r#"
            3x10 cursor=1,1 alt=true title=""
            {"index":0,"spans":[{"text":"full-scree"}]}
            {"index":1,"spans":[{"text":"n"}]}
        "#]]
        .assert_eq(&render(&screen.snapshot()));
        screen.process(b"\x1b[?1049l");
        expect![[r#"
            3x10 cursor=0,7 alt=false title=""
            {"index":0,"spans":[{"text":"shell$"}]}
        "#]]
        .assert_eq(&render(&screen.snapshot()));
    }

    #[test]
    fn wide_characters_are_emitted_once() {
        check(
            "a漢字b\r\n\x1b[31m漢\x1b[m",
            expect![[r#"
                4x20 cursor=1,2 alt=false title=""
                {"index":0,"spans":[{"text":"a漢字b"}]}
                {"index":1,"spans":[{"text":"漢","fg":"1"}]}
            "#]],
        );
    }

    #[test]
    fn title() {
        check(
            "\x1b]0;my title\x07\x1b]2;a;b\x1b\\x",
            expect![[r#"
                4x20 cursor=0,1 alt=false title="a;b"
                {"index":0,"spans":[{"text":"x"}]}
            "#]],
        );
        let mut screen = Screen::new(2, 5, 0);
        screen.process(b"\x1b]0;vim\x07");
        assert_eq!(screen.title(), "vim");
    }

    #[test]
    fn split_utf8_and_escape_sequences() {
        let mut screen = Screen::new(2, 10, 0);
        for b in "\x1b[1;38;5;200mé\x1b[0m!".bytes() {
            screen.process(&[b]);
        }
        expect![[r#"
            2x10 cursor=0,2 alt=false title=""
            {"index":0,"spans":[{"text":"é","fg":"200","bold":true},{"text":"!"}]}
        "#]]
        .assert_eq(&render(&screen.snapshot()));
    }

    fn json(update: Option<Update>) -> String {
        update.map_or("None".to_owned(), |u| serde_json::to_string(&u).unwrap())
    }

    #[test]
    fn changes_report_only_changed_rows() {
        let mut screen = Screen::new(3, 10, 0);
        expect!["None"].assert_eq(&json(screen.changes()));
        screen.process(b"one\r\ntwo\r\nthree");
        expect![[r#"{"lines":[{"index":0,"spans":[{"text":"one"}]},{"index":1,"spans":[{"text":"two"}]},{"index":2,"spans":[{"text":"three"}]}],"cursor":{"row":2,"col":5,"visible":true}}"#]]
            .assert_eq(&json(screen.changes()));
        expect!["None"].assert_eq(&json(screen.changes()));
        // Rewriting row 0 identically and styling row 1 changes row 1 only.
        screen.process(b"\x1b[1;1Hone\x1b[2;1H\x1b[1mtwo\x1b[m\x1b[3;6H");
        expect![[r#"{"lines":[{"index":1,"spans":[{"text":"two","bold":true}]}]}"#]]
            .assert_eq(&json(screen.changes()));
        screen.process(b"\x1b]2;t\x07\x1b[?1049h");
        expect![[r#"{"lines":[{"index":0,"spans":[]},{"index":1,"spans":[]},{"index":2,"spans":[]}],"cursor":{"row":0,"col":0,"visible":true},"alternateScreen":true,"title":"t"}"#]]
            .assert_eq(&json(screen.changes()));
    }

    #[test]
    fn resize() {
        let mut screen = Screen::new(3, 10, 100);
        screen.process(b"0123456789\r\nab\r\ncd");
        let _ = screen.changes();
        screen.resize(2, 4);
        expect![[r#"
            2x4 cursor=1,2 alt=false title=""
            {"index":0,"spans":[{"text":"ab"}]}
            {"index":1,"spans":[{"text":"cd"}]}
        "#]]
        .assert_eq(&render(&screen.snapshot()));
        expect![[r#"{"size":{"rows":2,"cols":4},"lines":[{"index":0,"spans":[{"text":"ab"}]},{"index":1,"spans":[{"text":"cd"}]}],"cursor":{"row":1,"col":2,"visible":true}}"#]]
            .assert_eq(&json(screen.changes()));
        screen.resize(0, 0);
        assert_eq!((screen.snapshot().rows, screen.snapshot().cols), (1, 1));
    }

    #[test]
    fn scrollback_pages_without_moving_the_view() {
        let mut screen = Screen::new(2, 10, 100);
        for i in 0..7 {
            screen.process(format!("line{i}\r\n").as_bytes());
        }
        // Screen: "line6", "" ; history: line0..line5 (distance 6..1).
        let before = screen.snapshot();
        let text = |rows: Vec<Row>| {
            rows.iter()
                .map(|r| {
                    let t: String = r.spans.iter().map(|s| s.text.as_str()).collect();
                    format!("{}:{t}", r.index)
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        expect!["3:line3 2:line4 1:line5"].assert_eq(&text(screen.scrollback(0, 3)));
        expect!["6:line0 5:line1 4:line2 3:line3 2:line4"]
            .assert_eq(&text(screen.scrollback(1, 5)));
        expect!["6:line0"].assert_eq(&text(screen.scrollback(5, 10)));
        expect![""].assert_eq(&text(screen.scrollback(6, 10)));
        expect![""].assert_eq(&text(screen.scrollback(0, 0)));
        assert_eq!(screen.snapshot(), before);
        assert_eq!(screen.changes(), screen_changes_after_output());
    }

    /// What `changes` says after the output of the scrollback test: the
    /// scrollback calls must not add anything of their own.
    fn screen_changes_after_output() -> Option<Update> {
        let mut screen = Screen::new(2, 10, 100);
        for i in 0..7 {
            screen.process(format!("line{i}\r\n").as_bytes());
        }
        screen.changes()
    }
}
