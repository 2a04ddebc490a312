//! The page's files (liveview's script, ours, the stylesheet, the icon),
//! built into the binary. Each carries an entity tag, so a browser asks
//! again with it and gets a 304 for the copy it holds (a reload, a phone
//! coming back) and never a stale file after an upgrade; each is gzipped
//! once, for browsers that take it (liveview's script, three quarters of a
//! first load, goes at a quarter of its size).

use std::sync::OnceLock;

use crate::http::Head;

/// One file of the page, in each encoding it is sent in.
pub struct Asset {
    pub kind: &'static str,
    plain: Encoded,
    /// `None` when gzip would not make it smaller.
    gzip: Option<Encoded>,
}

/// A file's bytes in one encoding and their entity tag.
struct Encoded {
    body: Vec<u8>,
    /// Quoted, as in `ETag`.
    etag: String,
}

/// What a request for a file says of its browser: whether it takes gzip,
/// and the tags of the copies it holds (`If-None-Match`).
#[derive(Default)]
pub struct Wanted {
    gzip: bool,
    held: Option<String>,
}

impl Wanted {
    pub fn of(head: &Head) -> Wanted {
        let text = |v: &[u8]| std::str::from_utf8(v).ok().map(str::to_owned);
        Wanted {
            gzip: head
                .all("accept-encoding")
                .filter_map(|v| std::str::from_utf8(v).ok())
                .any(takes_gzip),
            held: head.single("if-none-match").ok().flatten().and_then(text),
        }
    }

    fn holds(&self, etag: &str) -> bool {
        self.held.as_deref().is_some_and(|held| {
            held.trim() == "*"
                || held
                    .split(',')
                    .any(|tag| tag.trim().trim_start_matches("W/") == etag)
        })
    }
}

/// How to answer a request for a file.
pub struct Answer<'a> {
    /// `None`: the browser's copy is this one (a 304).
    pub body: Option<&'a [u8]>,
    /// The head lines of either answer: caching, the tag, the encoding.
    pub headers: String,
}

impl Asset {
    pub fn answer(&self, wanted: &Wanted) -> Answer<'_> {
        let (sent, gzip) = match &self.gzip {
            Some(gzip) if wanted.gzip => (gzip, true),
            _ => (&self.plain, false),
        };
        let encoding = if gzip {
            "Content-Encoding: gzip\r\n"
        } else {
            ""
        };
        Answer {
            body: (!wanted.holds(&sent.etag)).then_some(sent.body.as_slice()),
            headers: format!(
                "Cache-Control: no-cache, private\r\nETag: {}\r\nVary: Accept-Encoding\r\n{encoding}",
                sent.etag
            ),
        }
    }
}

/// Whether an `Accept-Encoding` value takes gzip (`gzip` or `*`, not at
/// `q=0`).
fn takes_gzip(value: &str) -> bool {
    value.split(',').any(|item| {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or_default().trim();
        let weight = parts
            .find_map(|p| p.trim().strip_prefix("q="))
            .map_or(1.0, |q| q.trim().parse::<f32>().unwrap_or(0.0));
        (coding.eq_ignore_ascii_case("gzip") || coding == "*") && weight > 0.0
    })
}

/// The file at `path` (one of the gate's asset paths; anything else is the
/// stylesheet).
pub fn asset(path: &str) -> &'static Asset {
    static LIVEVIEW: OnceLock<Asset> = OnceLock::new();
    static APP_JS: OnceLock<Asset> = OnceLock::new();
    static ICON: OnceLock<Asset> = OnceLock::new();
    static APP_CSS: OnceLock<Asset> = OnceLock::new();
    const JS: &str = "text/javascript; charset=utf-8";
    match path {
        "/liveview.js" => LIVEVIEW.get_or_init(|| {
            let glue = dioxus_liveview::interpreter_glue("/ws");
            let glue = glue
                .trim()
                .trim_start_matches("<script>")
                .trim_end_matches("</script>");
            encoded(JS, glue)
        }),
        "/app.js" => APP_JS.get_or_init(|| encoded(JS, include_str!("app.js"))),
        "/icon.svg" => ICON.get_or_init(|| encoded("image/svg+xml", include_str!("icon.svg"))),
        _ => APP_CSS.get_or_init(|| encoded("text/css; charset=utf-8", include_str!("app.css"))),
    }
}

fn encoded(kind: &'static str, text: &str) -> Asset {
    use std::hash::{Hash, Hasher};
    use std::io::Write as _;
    // SipHash with fixed keys: the same text gives the same tag in every
    // process of this build (another toolchain may tag it otherwise: a
    // browser then reads it once more).
    let mut hasher = std::hash::DefaultHasher::new();
    text.hash(&mut hasher);
    let hash = hasher.finish();
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let gzip = gzip
        .write_all(text.as_bytes())
        .and_then(|()| gzip.finish())
        .ok()
        .filter(|gzip| gzip.len() < text.len())
        .map(|body| Encoded {
            body,
            etag: format!("\"{hash:016x}-gz\""),
        });
    Asset {
        kind,
        plain: Encoded {
            body: text.as_bytes().to_vec(),
            etag: format!("\"{hash:016x}\""),
        },
        gzip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(gzip: bool, held: Option<&str>) -> Wanted {
        Wanted {
            gzip,
            held: held.map(str::to_owned),
        }
    }

    /// A browser holding a file's tag gets a 304 for it, in the encoding
    /// it takes; a tag of another file or encoding is not this one.
    #[test]
    fn held_tags_match_only_the_files_own() {
        let css = asset("/app.css");
        let plain = css.answer(&wanted(false, None));
        assert_eq!(plain.body, Some(include_str!("app.css").as_bytes()));
        let tag = |a: &Answer| {
            a.headers
                .lines()
                .find_map(|l| l.strip_prefix("ETag: "))
                .expect("a tag")
                .to_owned()
        };
        let plain_tag = tag(&plain);
        assert!(plain_tag.starts_with('"') && plain_tag.ends_with('"'));
        assert!(css.answer(&wanted(false, Some(&plain_tag))).body.is_none());
        let listed = format!("\"x\", W/{plain_tag}");
        assert!(css.answer(&wanted(false, Some(&listed))).body.is_none());
        assert!(css.answer(&wanted(false, Some("*"))).body.is_none());
        assert!(css.answer(&wanted(false, Some("\"0\""))).body.is_some());
        let js_tag = tag(&asset("/app.js").answer(&wanted(false, None)));
        assert!(css.answer(&wanted(false, Some(&js_tag))).body.is_some());
        // The gzipped copy has its own tag: a plain one is not it.
        let gz = css.answer(&wanted(true, Some(&plain_tag)));
        assert!(gz.body.is_some());
        assert!(gz.headers.contains("Content-Encoding: gzip\r\n"));
        assert_ne!(tag(&gz), plain_tag);
        assert!(css.answer(&wanted(true, Some(&tag(&gz)))).body.is_none());
    }

    /// liveview's script gzipped is what it was, and much smaller.
    #[test]
    fn gzip_is_the_same_file_smaller() {
        use std::io::Read as _;
        let script = asset("/liveview.js");
        let plain = script.answer(&wanted(false, None)).body.unwrap().to_vec();
        let gz = script.answer(&wanted(true, None)).body.unwrap();
        assert!(
            gz.len() * 3 < plain.len(),
            "{} of {}",
            gz.len(),
            plain.len()
        );
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, plain);
    }

    #[test]
    fn accept_encoding_as_browsers_send_it() {
        assert!(takes_gzip("gzip, deflate, br, zstd"));
        assert!(takes_gzip("br;q=1.0, GZIP;q=0.5"));
        assert!(takes_gzip("*"));
        assert!(!takes_gzip("identity"));
        assert!(!takes_gzip("gzip;q=0"));
        assert!(!takes_gzip("br, gzip; q=0.0"));
        assert!(!takes_gzip(""));
    }
}
