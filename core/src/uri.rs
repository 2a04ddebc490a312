//! The one canonical spelling of a `file:` URI.
//!
//! Editors spell one file many ways: VS Code and Neovim send
//! `pages/posts/%5Bid%5D.tsx`, the `url` crate and the Claude Code CLI
//! `pages/posts/[id].tsx`, some clients `FILE://localhost/…`. The hub compares
//! URIs byte for byte, so every `file:` URI that enters the service is put
//! into one form at the edge (`lsp::connection`, `ide::mcp`), and every URI
//! the service builds from a path comes from [`from_path`], which yields the
//! same form. The form:
//!
//! - the scheme `file` in lower case and an empty authority (`localhost`, in
//!   any case, is the same machine and becomes empty);
//! - the path percent-decoded, then every byte outside the RFC 3986
//!   unreserved set (`A–Z a–z 0–9 - . _ ~`) and `/` encoded as `%XX` with
//!   upper-case hex (what VS Code writes);
//! - no empty, `.` or trailing segments (`/a//./b/` is `/a/b`), so one path
//!   has one spelling.
//!
//! What cannot be read one way only is refused rather than guessed: another
//! host, a `..` segment (a symlink makes `a/link/..` differ from `a`), a
//! backslash (a `/` to WHATWG parsers, a file name character to others), a
//! query or fragment, bad percent-encoding, NUL, or a path that is not
//! absolute. Like WHATWG parsers (Helix, `lsp-types`), leading and trailing
//! spaces and C0 controls and any tab or line break are ignored, so a string
//! counts as a file URI exactly when such a parser would read it as one.
//!
//! A form is a [`CanonicalUri`], which only [`canonical`] and [`from_path`]
//! make: a function that takes one needs no check that its URI is in the
//! form. **Invariant:** a `CanonicalUri` holds the one canonical spelling.
//!
//! Pure: no IO.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// Why a `file:` URI (or a path) has no canonical form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    #[error("names another host ({0:?}), not this machine")]
    RemoteHost(String),
    #[error("the path is not absolute")]
    NotAbsolute,
    #[error("has a `..` segment")]
    DotDot,
    #[error("has a backslash, which parsers read differently")]
    Backslash,
    #[error("has a query or fragment")]
    QueryOrFragment,
    #[error("has bad percent-encoding")]
    BadPercent,
    #[error("has a NUL byte")]
    Nul,
    #[error("has a control character")]
    Control,
}

/// A `file:` URI in the one canonical form. The constructor is the proof:
/// the field is private, and only [`canonical`] and [`from_path`] (both
/// through the one renderer of the form) make one, so two values are equal
/// exactly when they name one file by the rules above.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CanonicalUri(String);

impl CanonicalUri {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }

    /// The form as the `url` crate's `Url` (the hub's document key), which
    /// parses it to the same text; `None` if it would not parse.
    pub fn to_url(&self) -> Option<lsp_types::Url> {
        lsp_types::Url::parse(&self.0).ok()
    }
}

impl std::fmt::Display for CanonicalUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for CanonicalUri {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<CanonicalUri> for String {
    fn from(uri: CanonicalUri) -> String {
        uri.0
    }
}

impl PartialEq<str> for CanonicalUri {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for CanonicalUri {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// Whether a WHATWG parser would read `raw` as a URI of the `file` scheme
/// (whatever the letter case, spaces around it or tabs inside it).
pub fn is_file_uri(raw: &str) -> bool {
    let mut scheme = cleaned(raw).take(5);
    "file:"
        .chars()
        .all(|want| scheme.next().is_some_and(|c| c.eq_ignore_ascii_case(&want)))
}

/// The canonical form of `raw`: `None` if it is not a `file:` URI at all
/// (left as it is by callers), else the form or why there is none.
pub fn canonical(raw: &str) -> Option<Result<CanonicalUri, UriError>> {
    if !is_file_uri(raw) {
        return None;
    }
    let s: String = cleaned(raw).collect();
    let rest = &s["file:".len()..];
    Some(canonical_rest(rest))
}

/// Whether `raw` is already in the canonical form (no allocation: the
/// connections ask this of every name in every message).
pub fn is_canonical(raw: &str) -> bool {
    let Some(path) = raw.strip_prefix("file://") else {
        return false;
    };
    if path == "/" {
        return true;
    }
    let Some(path) = path.strip_prefix('/') else {
        return false;
    };
    path.split('/').all(|segment| {
        let bytes = segment.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'%' => {
                    let hex = |b: Option<&u8>| {
                        b.filter(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(b))
                            .and_then(|b| (*b as char).to_digit(16))
                    };
                    let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2)))
                    else {
                        return false;
                    };
                    // An escape of what the form keeps raw, of `/` or of NUL
                    // is not the form.
                    let byte = (hi * 16 + lo) as u8;
                    if keeps_raw(byte) || byte == b'/' || byte == 0 {
                        return false;
                    }
                    i += 3;
                }
                b if keeps_raw(b) => i += 1,
                _ => return false,
            }
        }
        !matches!(segment, "" | "." | "..")
    })
}

/// `file:` + an absolute `path` in the canonical form. Paths are taken as
/// they are: `.` and empty components go, `..` is refused.
pub fn from_path(path: &Path) -> Result<CanonicalUri, UriError> {
    if !path.is_absolute() {
        return Err(UriError::NotAbsolute);
    }
    let mut segments = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => segments.push(part.as_bytes().to_vec()),
            Component::ParentDir => return Err(UriError::DotDot),
            Component::Prefix(_) => return Err(UriError::NotAbsolute),
        }
    }
    if segments.iter().flatten().any(|&b| b == 0) {
        return Err(UriError::Nul);
    }
    Ok(render(&segments))
}

/// `raw` without tabs and line breaks and trimmed of spaces and C0 controls,
/// as the WHATWG URL parser reads it.
fn cleaned(raw: &str) -> impl Iterator<Item = char> + '_ {
    let trim = |c: char| c <= ' ';
    raw.trim_matches(trim)
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
}

/// Everything after `file:`.
fn canonical_rest(rest: &str) -> Result<CanonicalUri, UriError> {
    if rest.contains(['?', '#']) {
        return Err(UriError::QueryOrFragment);
    }
    if rest.contains('\\') {
        return Err(UriError::Backslash);
    }
    let path = match rest.strip_prefix("//") {
        Some(after) => {
            let (host, path) = after.split_at(after.find('/').unwrap_or(after.len()));
            let host = decode(host)?;
            if !host.is_empty() && !host.eq_ignore_ascii_case(b"localhost") {
                return Err(UriError::RemoteHost(
                    String::from_utf8_lossy(&host).into_owned(),
                ));
            }
            if path.is_empty() { "/" } else { path }
        }
        None => rest,
    };
    if !path.starts_with('/') {
        return Err(UriError::NotAbsolute);
    }
    let bytes = decode(path)?;
    let mut segments = Vec::new();
    for segment in bytes.split(|&b| b == b'/') {
        match segment {
            b"" | b"." => {}
            b".." => return Err(UriError::DotDot),
            s if s.contains(&0) => return Err(UriError::Nul),
            s => segments.push(s.to_vec()),
        }
    }
    Ok(render(&segments))
}

/// Percent-decodes `s`; raw control characters are refused.
fn decode(s: &str) -> Result<Vec<u8>, UriError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
                let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
                    return Err(UriError::BadPercent);
                };
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            b if b < 0x20 || b == 0x7f => return Err(UriError::Control),
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// The RFC 3986 unreserved bytes, which the form never encodes.
fn keeps_raw(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// The form of the path of `segments`: the only maker of a
/// [`CanonicalUri`].
fn render(segments: &[Vec<u8>]) -> CanonicalUri {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::from("file://");
    if segments.is_empty() {
        out.push('/');
    }
    for segment in segments {
        out.push('/');
        for &b in segment {
            if keeps_raw(b) {
                out.push(b as char);
            } else {
                out.push('%');
                out.push(HEX[usize::from(b >> 4)] as char);
                out.push(HEX[usize::from(b & 15)] as char);
            }
        }
    }
    CanonicalUri(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(raw: &str) -> String {
        canonical(raw)
            .expect("a file URI")
            .expect("canonical")
            .into_string()
    }

    #[test]
    fn spellings_of_one_file_meet() {
        let want = "file:///w/pages/posts/%5Bid%5D.tsx";
        for raw in [
            "file:///w/pages/posts/[id].tsx",
            "file:///w/pages/posts/%5Bid%5D.tsx",
            "file:///w/pages/posts/%5bid%5d.tsx",
            "FILE:///w/pages/posts/[id].tsx",
            "File://localhost/w/pages/posts/[id].tsx",
            "file://LocalHost/w//pages/./posts/%5Bid%5D.tsx",
            " file:/w/pages/posts/[id].tsx\n",
            "fi\tle:///w/pages/posts/[id].tsx",
            "file:///%77/pages/posts/[id].tsx/",
        ] {
            assert_eq!(ok(raw), want, "{raw:?}");
        }
        assert_eq!(
            from_path(Path::new("/w/pages/posts/[id].tsx")).unwrap(),
            want
        );
        assert_eq!(ok("file:///a%20b/c%2Bd"), "file:///a%20b/c%2Bd");
        assert_eq!(ok("file:///a b/c+d"), "file:///a%20b/c%2Bd");
        assert_eq!(ok("file:///caf%C3%A9"), ok("file:///café"));
        assert_eq!(ok("file://"), "file:///");
        for not_the_form in [
            "file:///a%00",
            "file:///%2E",
            "file:///a%2Fb",
            "file:///a%5b",
            "file:///a/",
        ] {
            assert!(!is_canonical(not_the_form), "{not_the_form}");
        }
        assert!(is_canonical("file:///a/%5Bid%5D.tsx") && is_canonical("file:///"));
        assert_eq!(ok("file:///"), "file:///");
    }

    /// Two spellings of one file are one `CanonicalUri`, equal, hashed
    /// and ordered as one, and equal to the one made from its path.
    #[test]
    fn a_canonical_uri_is_one_value_per_file() {
        let one = |raw: &str| canonical(raw).expect("a file URI").expect("canonical");
        let (a, b) = (one("file:///a/%62.rs"), one("file:///a/b.rs"));
        assert_eq!(a, b);
        assert_eq!(a, one("FILE://localhost/a//./b.rs"));
        assert_eq!(a, from_path(Path::new("/a/b.rs")).unwrap());
        assert_eq!(a.as_str(), "file:///a/b.rs");
        assert_eq!(a.to_string(), "file:///a/b.rs");
        assert_eq!(a.to_url().unwrap().as_str(), a.as_str());
        let set: std::collections::BTreeSet<CanonicalUri> = [a.clone(), b].into();
        assert_eq!(set.len(), 1);
        let hashed: std::collections::HashSet<CanonicalUri> =
            [a, one("file:///a/[b].rs"), one("file:///a/%5Bb%5D.rs")].into();
        assert_eq!(hashed.len(), 2);
    }

    #[test]
    fn what_is_not_one_file_is_refused_or_left_alone() {
        for (raw, why) in [
            (
                "file://remotehost/w/a",
                UriError::RemoteHost("remotehost".into()),
            ),
            ("file:///w/../etc/passwd", UriError::DotDot),
            ("file:///w/%2e%2E/etc", UriError::DotDot),
            ("file:///w/a%2", UriError::BadPercent),
            ("file:///%E0%A4%A", UriError::BadPercent),
            ("file:///w/a%zz", UriError::BadPercent),
            ("file:///w/a%00b", UriError::Nul),
            ("file:///w/a\u{1}b", UriError::Control),
            ("file:\\\\\\etc\\passwd", UriError::Backslash),
            ("file:///w/a?x=1", UriError::QueryOrFragment),
            ("file:///w/a#x", UriError::QueryOrFragment),
            ("file:etc/passwd", UriError::NotAbsolute),
            ("file: oops", UriError::NotAbsolute),
        ] {
            assert_eq!(canonical(raw), Some(Err(why)), "{raw:?}");
        }
        for other in [
            "untitled:Untitled-1",
            "https://example.com/x",
            "fil:",
            "",
            "files:///a",
        ] {
            assert_eq!(canonical(other), None, "{other:?}");
        }
        assert_eq!(from_path(Path::new("a/b")), Err(UriError::NotAbsolute));
        assert_eq!(from_path(Path::new("/a/../b")), Err(UriError::DotDot));
    }

    /// The canonical form parses with the `url` crate (the hub's `Url`) to
    /// itself and to the path it names.
    #[test]
    fn the_url_crate_keeps_the_form() {
        for raw in ["file:///w/[id].tsx", "file:///a b/é+%25", "file:///"] {
            let form = ok(raw);
            let url = lsp_types::Url::parse(&form).unwrap();
            assert_eq!(url.as_str(), form);
            assert_eq!(ok(url.as_str()), form);
        }
        let url = lsp_types::Url::parse(&ok("file:///a b/é+%25")).unwrap();
        assert_eq!(url.to_file_path().unwrap(), Path::new("/a b/é+%"));
    }

    /// One path's random spelling: each byte raw where a parser would keep
    /// it, else (or at random) percent-encoded in either hex case; random
    /// scheme case, `localhost` or not, doubled slashes and `.` segments.
    fn spelling() -> impl Strategy<Value = (Vec<Vec<u8>>, String)> {
        let segment = prop::collection::vec(any::<u8>(), 1..6)
            .prop_filter("not a dot segment, no NUL, no slash", |s| {
                s != b"." && s != b".." && !s.contains(&0) && !s.contains(&b'/')
            });
        (
            prop::collection::vec(segment, 0..4),
            any::<u64>(),
            any::<bool>(),
        )
            .prop_map(|(segments, mut dice, localhost)| {
                let mut roll = |n: u64| {
                    let r = dice % n;
                    dice = dice.rotate_left(7) ^ 0x9e37_79b9_7f4a_7c15;
                    r
                };
                let scheme: String = "file"
                    .chars()
                    .map(|c| {
                        if roll(2) == 0 {
                            c.to_ascii_uppercase()
                        } else {
                            c
                        }
                    })
                    .collect();
                let mut out = format!("{scheme}://");
                if localhost {
                    out.push_str("LocalHost");
                }
                for segment in &segments {
                    out.push('/');
                    if roll(4) == 0 {
                        out.push_str("./");
                    }
                    if roll(4) == 0 {
                        out.push('/');
                    }
                    for &b in segment {
                        let raw_ok = b.is_ascii_graphic() && !b"%?#\\/".contains(&b);
                        if raw_ok && roll(2) == 0 {
                            out.push(b as char);
                        } else if roll(2) == 0 {
                            out.push_str(&format!("%{b:02X}"));
                        } else {
                            out.push_str(&format!("%{b:02x}"));
                        }
                    }
                }
                (segments, out)
            })
    }

    proptest! {
        #[test]
        fn canonical_is_idempotent(raw in "(?s)[Ff][Ii][Ll][Ee]:.{0,40}") {
            if let Some(Ok(form)) = canonical(&raw) {
                prop_assert!(is_canonical(form.as_str()), "{}", form);
                prop_assert_eq!(canonical(form.as_str()), Some(Ok(form.clone())));
            }
        }

        #[test]
        fn is_canonical_is_exactly_being_the_form(raw in "(?s)file:///[a-z%0-9A-F./~_-]{0,30}") {
            let form = canonical(&raw).and_then(Result::ok);
            prop_assert_eq!(is_canonical(&raw), form.as_ref().map(CanonicalUri::as_str) == Some(raw.as_str()));
        }

        #[test]
        fn every_spelling_of_a_path_has_one_form((segments, raw) in spelling()) {
            let path: std::path::PathBuf = std::iter::once(std::ffi::OsStr::new("/"))
                .chain(segments.iter().map(|s| std::ffi::OsStr::from_bytes(s)))
                .collect();
            let form = from_path(&path).unwrap();
            prop_assert_eq!(canonical(&raw), Some(Ok(form)));
        }
    }
}
