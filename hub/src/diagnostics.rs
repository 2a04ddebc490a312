//! Diagnostics forwarded by editors, keyed by document and source.
//!
//! The service invents no diagnostics: every entry came from an editor that
//! forwarded what its other language servers said (`moonkale/publishDiagnostics`).
//! A new publish for the same (document, source) replaces the old one, as
//! `textDocument/publishDiagnostics` does.
//!
//! Every byte an entry holds (its diagnostics with their messages, its URI
//! and source, the structs themselves) is counted, so the store has a byte
//! cap of its own and counts toward the workspace's: an editor that forwards
//! without end is refused, never let grow the service.

use std::collections::BTreeMap;

use lsp_types::{DiagnosticSeverity, Url};

use super::EditorId;
use super::status::DiagnosticsCount;
use crate::core::PositionEncoding;

/// Diagnostics kept per (document, source).
pub const MAX_DIAGNOSTICS_PER_SOURCE: usize = 10_000;
/// Documents that may have diagnostics at once.
pub const MAX_DIAGNOSED_DOCUMENTS: usize = 100_000;
/// Bytes all diagnostics of a workspace may hold.
pub const MAX_DIAGNOSTICS_BYTES: usize = 64 << 20;

pub struct SourceDiagnostics {
    /// Who forwarded them; they go when that editor detaches.
    pub editor: EditorId,
    /// The forwarding editor's encoding, in which `items`' ranges count.
    pub encoding: PositionEncoding,
    pub items: Vec<lsp_types::Diagnostic>,
    /// What this entry holds, URI and source included (set by `publish`).
    bytes: usize,
}

impl SourceDiagnostics {
    pub fn new(
        editor: EditorId,
        encoding: PositionEncoding,
        items: Vec<lsp_types::Diagnostic>,
    ) -> SourceDiagnostics {
        SourceDiagnostics {
            editor,
            encoding,
            items,
            bytes: 0,
        }
    }
}

#[derive(Default)]
pub struct DiagnosticsStore {
    by_uri: BTreeMap<Url, BTreeMap<String, SourceDiagnostics>>,
    /// The sum of the entries' `bytes`.
    bytes: usize,
}

impl DiagnosticsStore {
    /// Stores `entry` for (`uri`, `source`), replacing what was there, if the
    /// store then holds at most `budget` bytes; else keeps the old entry and
    /// says why not.
    pub fn publish(
        &mut self,
        uri: Url,
        source: String,
        mut entry: SourceDiagnostics,
        budget: usize,
    ) -> Result<(), String> {
        if entry.items.len() > MAX_DIAGNOSTICS_PER_SOURCE {
            entry.items.truncate(MAX_DIAGNOSTICS_PER_SOURCE);
            tracing::warn!(%uri, %source, "diagnostics truncated to {MAX_DIAGNOSTICS_PER_SOURCE}");
        }
        let replaced = self
            .by_uri
            .get(&uri)
            .and_then(|sources| sources.get(&source))
            .map_or(0, |e| e.bytes);
        if entry.items.is_empty() {
            if let Some(sources) = self.by_uri.get_mut(&uri) {
                sources.remove(&source);
                if sources.is_empty() {
                    self.by_uri.remove(&uri);
                }
            }
            self.bytes -= replaced;
            return Ok(());
        }
        if !self.by_uri.contains_key(&uri) && self.by_uri.len() >= MAX_DIAGNOSED_DOCUMENTS {
            return Err(format!(
                "diagnostics for {uri} refused: over {MAX_DIAGNOSED_DOCUMENTS} documents"
            ));
        }
        entry.bytes = std::mem::size_of::<SourceDiagnostics>()
            + uri.as_str().len()
            + source.len()
            + entry.items.iter().map(diagnostic_bytes).sum::<usize>();
        let after = self.bytes - replaced + entry.bytes;
        if after > budget {
            return Err(format!(
                "diagnostics for {uri} from {source} refused: they would make {after} bytes, over the {budget} left for diagnostics"
            ));
        }
        self.bytes = after;
        self.by_uri.entry(uri).or_default().insert(source, entry);
        Ok(())
    }

    /// Bytes held by all entries.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn remove_editor(&mut self, editor: EditorId) {
        let mut freed = 0;
        self.by_uri.retain(|_, sources| {
            sources.retain(|_, e| {
                let keep = e.editor != editor;
                if !keep {
                    freed += e.bytes;
                }
                keep
            });
            !sources.is_empty()
        });
        self.bytes -= freed;
    }

    /// The number of diagnostics stored for `uri`.
    pub fn count_for(&self, uri: &Url) -> usize {
        self.for_uri(uri).map(|e| e.items.len()).sum()
    }

    pub fn for_uri<'a>(&'a self, uri: &Url) -> impl Iterator<Item = &'a SourceDiagnostics> + 'a {
        self.by_uri
            .get(uri)
            .into_iter()
            .flat_map(|sources| sources.values())
    }

    pub fn uris(&self) -> impl Iterator<Item = &Url> {
        self.by_uri.keys()
    }

    pub fn counts(&self) -> Vec<DiagnosticsCount> {
        let mut out = Vec::new();
        for (uri, sources) in &self.by_uri {
            for (source, entry) in sources {
                let mut c = DiagnosticsCount {
                    uri: uri.to_string(),
                    source: source.clone(),
                    ..Default::default()
                };
                for d in &entry.items {
                    match d.severity {
                        Some(DiagnosticSeverity::ERROR) => c.errors += 1,
                        Some(DiagnosticSeverity::WARNING) => c.warnings += 1,
                        Some(DiagnosticSeverity::INFORMATION) => c.information += 1,
                        Some(DiagnosticSeverity::HINT) => c.hints += 1,
                        // The spec leaves a missing severity to the client; count it as an error like VS Code.
                        _ => c.errors += 1,
                    }
                }
                out.push(c);
            }
        }
        out
    }
}

/// What one diagnostic holds: its struct and, for everything on the heap
/// (message, source, code, related information, data), its JSON size.
fn diagnostic_bytes(d: &lsp_types::Diagnostic) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, d).expect("a diagnostic serializes");
    std::mem::size_of::<lsp_types::Diagnostic>() + count.0
}
