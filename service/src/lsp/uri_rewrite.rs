//! The schema-blind URI rewriter: every `file:` URI in a message's params
//! put into its one canonical form (`core::uri`) before the hub sees it,
//! and, for remote clients, confined to `MOONKALE_ROOT`.
//!
//! It knows no LSP method: any string of the params (an object key too, as
//! `WorkspaceEdit.changes` is keyed by URI) that is a `file:` URI is a name,
//! but a string under the key `text`, which is content. Most messages
//! already name files canonically, so a scan that builds nothing decides
//! first (and refuses), and only the messages that need a respelling are
//! rebuilt. A document URI (`file:`, `untitled:`) over [`MAX_URI_BYTES`] is
//! refused wherever it is. [`super::connection`] calls [`canonical_names`]
//! on every message it reads.

use std::path::Path;

use serde::de::DeserializeSeed;
use serde_json::Value;

use super::message::{self, Message};
use crate::core::uri;

/// `msg` with every `file:` URI in its params in the one canonical form
/// (`core::uri`), so the hub can compare names byte for byte. Document text
/// is not looked at: it is content, not a name. A local editor's URI that has
/// no canonical form is left as it was sent; for a remote client (`root`
/// set) it is refused, as is any name that is not inside `root` (whole
/// components, no `..`, no symlink on the way, not `.git`; the root itself
/// may be named, as `rootUri`). What is refused is given back with the
/// reason.
pub fn canonical_names(msg: Message, root: Option<&Path>) -> Result<Message, (Message, String)> {
    let (Message::Request { params, .. } | Message::Notification { params, .. }) = &msg else {
        return Ok(msg);
    };
    // Most messages already name files canonically: a scan that builds
    // nothing decides (and refuses) first, so only the others are rebuilt.
    let mut scan = Scan {
        root,
        changed: false,
        refused: None,
    };
    let scanned = ScanSeed {
        scan: &mut scan,
        in_text: false,
    }
    .deserialize(&mut serde_json::Deserializer::from_str(params.get()));
    if let Some(why) = scan.refused {
        return Err((msg, why));
    }
    if scanned.is_err() || !scan.changed {
        return Ok(msg);
    }
    let Ok(mut value) = serde_json::from_str::<Value>(params.get()) else {
        return Ok(msg);
    };
    if let Err(why) = canonical_in(&mut value, None, root) {
        return Err((msg, why));
    }
    let canonical = message::params(&value);
    Ok(match msg {
        Message::Request { id, method, .. } => Message::Request {
            id,
            method,
            params: canonical,
        },
        Message::Notification { method, .. } => Message::Notification {
            method,
            params: canonical,
        },
        response @ Message::Response { .. } => response,
    })
}

/// What a scan of params found: whether a name must be respelled, or why
/// one is refused.
struct Scan<'r> {
    root: Option<&'r Path>,
    changed: bool,
    refused: Option<String>,
}

impl Scan<'_> {
    fn name<E: serde::de::Error>(&mut self, s: &str) -> Result<(), E> {
        match canonical_name(s, self.root) {
            Ok(respelled) => {
                self.changed |= respelled.is_some();
                Ok(())
            }
            Err(why) => {
                self.refused = Some(why);
                Err(E::custom("refused"))
            }
        }
    }
}

/// Walks one JSON value for [`Scan`] without building it (`in_text`: under
/// the key `text`, which is content).
struct ScanSeed<'a, 'r> {
    scan: &'a mut Scan<'r>,
    in_text: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for ScanSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ScanSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        if self.in_text {
            return Ok(());
        }
        self.scan.name(s)
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(ScanSeed {
                scan: &mut *self.scan,
                in_text: self.in_text,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(Key)? {
            self.scan.name(&key)?;
            map.next_value_seed(ScanSeed {
                scan: &mut *self.scan,
                in_text: key == "text",
            })?;
        }
        Ok(())
    }
}

/// An object key, borrowed from the message unless it has escapes.
struct Key;

impl<'de> serde::de::DeserializeSeed<'de> for Key {
    type Value = std::borrow::Cow<'de, str>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Key {
    type Value = std::borrow::Cow<'de, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(s.into())
    }

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(s.to_owned().into())
    }
}

/// Canonicalizes the names in `v` (under the object key `key`), object keys
/// included (a `WorkspaceEdit` is keyed by URI).
fn canonical_in(v: &mut Value, key: Option<&str>, root: Option<&Path>) -> Result<(), String> {
    match v {
        Value::String(s) if key != Some("text") => {
            if let Some(form) = canonical_name(s, root)? {
                *s = form.into_string();
            }
        }
        Value::Array(items) => {
            for item in items {
                canonical_in(item, key, root)?;
            }
        }
        Value::Object(map) if map.keys().any(|k| uri::is_file_uri(k)) => {
            for (k, mut item) in std::mem::take(map) {
                let k = canonical_name(&k, root)?.map_or(k, uri::CanonicalUri::into_string);
                canonical_in(&mut item, Some(&k), root)?;
                map.insert(k, item);
            }
        }
        Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                canonical_in(item, Some(k), root)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The longest document URI (`file:`, `untitled:`) a connection may name:
/// a Linux path is at most 4 KiB, and every URI the hub keeps (a document,
/// a selection, a parked wait) is then small next to the caps.
pub const MAX_URI_BYTES: usize = 8 << 10;

/// Whether `s` names a document by URI (`file:` or `untitled:`, any case).
fn is_document_uri(s: &str) -> bool {
    let starts = |scheme: &str| {
        s.get(..scheme.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(scheme))
    };
    starts("file:") || starts("untitled:")
}

/// The canonical form of `s` when it is a `file:` URI spelled otherwise.
fn canonical_name(s: &str, root: Option<&Path>) -> Result<Option<uri::CanonicalUri>, String> {
    if s.len() > MAX_URI_BYTES && is_document_uri(s) {
        return Err(format!(
            "a document URI of {} bytes, over the {MAX_URI_BYTES}-byte cap",
            s.len()
        ));
    }
    if root.is_none() && uri::is_canonical(s) {
        return Ok(None); // the common case, without allocating
    }
    let form = match (uri::canonical(s), root) {
        (None, _) | (Some(Err(_)), None) => return Ok(None),
        (Some(Err(why)), Some(_)) => return Err(format!("not a usable file URI: {s:?} ({why})")),
        (Some(Ok(form)), _) => form,
    };
    if let Some(root) = root {
        let path = form.to_url().and_then(|u| u.to_file_path().ok());
        let Some(path) = path.filter(|p| p.to_str().is_some()) else {
            return Err(format!("not a UTF-8 file path: {s:?}"));
        };
        if path != root {
            let raw = path.to_str().expect("checked above");
            if let Err(refused) =
                crate::workspace_fs::confine(std::slice::from_ref(&root.to_path_buf()), raw)
            {
                return Err(format!("{} (the root is {})", refused.0, root.display()));
            }
        }
    }
    Ok((form != s).then_some(form))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A document URI past [`MAX_URI_BYTES`] is refused wherever it is (a
    /// hostile editor's selection or parked wait would otherwise keep it);
    /// a long document text or message is not a URI.
    #[test]
    fn overlong_document_uris_are_refused() {
        let long = format!("file:///w/{}", "a".repeat(MAX_URI_BYTES));
        let msg = |v: Value| Message::Notification {
            method: "x".into(),
            params: message::params(&v),
        };
        for v in [
            json!({"textDocument": {"uri": long}}),
            json!({"textDocument": {"uri": long.replace("file:", "untitled:")}}),
            json!({"textDocument": {"uri": long.to_uppercase()}}),
        ] {
            let refused = canonical_names(msg(v), None).err().map(|(_, why)| why);
            assert!(
                refused
                    .as_deref()
                    .is_some_and(|w| w.contains("8192-byte cap")),
                "{refused:?}"
            );
        }
        let text = json!({"textDocument": {"uri": "file:///w/a", "text": long}});
        assert!(canonical_names(msg(text), None).is_ok());
        let short = json!({"textDocument": {"uri": "file:///w/a"}, "message": "b".repeat(20_000)});
        assert!(canonical_names(msg(short), None).is_ok());
    }

    /// Names are respelled canonically wherever they are (object keys too)
    /// but in document text; a local editor's unusable URI is kept as sent,
    /// a remote client's is refused, as is a name outside the root.
    #[test]
    fn names_are_respelled_and_remote_names_confined() {
        let names = |v: Value, root: Option<&Path>| {
            let msg = Message::Notification {
                method: "x".into(),
                params: message::params(&v),
            };
            match canonical_names(msg, root) {
                Ok(Message::Notification { params, .. }) => {
                    Ok(serde_json::from_str::<Value>(params.get()).unwrap())
                }
                Ok(other) => panic!("{other:?}"),
                Err((_, why)) => Err(why),
            }
        };
        let local = names(
            json!({"textDocument": {"uri": "FILE:///w/[a]", "text": "file:///w/[a]"},
                   "changes": {"file:///w/[b]": [{"uri": "file://localhost/w/c"}]},
                   "arguments": ["file:///w/%5bd%5d", 3], "bad": "file://host/x"}),
            None,
        );
        assert_eq!(
            local,
            Ok(
                json!({"textDocument": {"uri": "file:///w/%5Ba%5D", "text": "file:///w/[a]"},
                   "changes": {"file:///w/%5Bb%5D": [{"uri": "file:///w/c"}]},
                   "arguments": ["file:///w/%5Bd%5D", 3], "bad": "file://host/x"})
            )
        );

        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let r = root.display();
        let inside = names(
            json!({"uri": format!(" FILE://localhost{r}/a.txt")}),
            Some(&root),
        );
        assert_eq!(inside, Ok(json!({"uri": format!("file://{r}/a.txt")})));
        for outside in [
            json!({"changes": {"file:///etc/passwd": []}}),
            json!({"uri": format!("file://host{r}/a.txt")}),
            json!({"deep": [[{"uri": "File:/etc/passwd"}]]}),
        ] {
            assert!(names(outside.clone(), Some(&root)).is_err(), "{outside}");
        }
        let content = json!({"text": "file:///etc/passwd"});
        assert_eq!(names(content.clone(), Some(&root)), Ok(content));
    }
}
