//! Diagnostics forwarded by editors, keyed by document and source.
//!
//! The service invents no diagnostics: every entry came from an editor that
//! forwarded what its other language servers said (`moonkale/publishDiagnostics`).
//! A new publish for the same (document, source) replaces the old one, as
//! `textDocument/publishDiagnostics` does.

use std::collections::BTreeMap;

use lsp_types::{DiagnosticSeverity, Url};

use super::EditorId;
use super::status::DiagnosticsCount;
use crate::core::PositionEncoding;

/// Diagnostics kept per (document, source).
pub const MAX_DIAGNOSTICS_PER_SOURCE: usize = 10_000;
/// Documents that may have diagnostics at once.
pub const MAX_DIAGNOSED_DOCUMENTS: usize = 100_000;

pub struct SourceDiagnostics {
    /// Who forwarded them; they go when that editor detaches.
    pub editor: EditorId,
    /// The forwarding editor's encoding, in which `items`' ranges count.
    pub encoding: PositionEncoding,
    pub items: Vec<lsp_types::Diagnostic>,
}

#[derive(Default)]
pub struct DiagnosticsStore {
    by_uri: BTreeMap<Url, BTreeMap<String, SourceDiagnostics>>,
}

impl DiagnosticsStore {
    pub fn publish(
        &mut self,
        uri: Url,
        source: String,
        mut entry: SourceDiagnostics,
    ) -> Result<(), String> {
        if entry.items.len() > MAX_DIAGNOSTICS_PER_SOURCE {
            entry.items.truncate(MAX_DIAGNOSTICS_PER_SOURCE);
            tracing::warn!(%uri, %source, "diagnostics truncated to {MAX_DIAGNOSTICS_PER_SOURCE}");
        }
        if entry.items.is_empty() {
            if let Some(sources) = self.by_uri.get_mut(&uri) {
                sources.remove(&source);
                if sources.is_empty() {
                    self.by_uri.remove(&uri);
                }
            }
            return Ok(());
        }
        if !self.by_uri.contains_key(&uri) && self.by_uri.len() >= MAX_DIAGNOSED_DOCUMENTS {
            return Err(format!(
                "diagnostics for {uri} refused: over {MAX_DIAGNOSED_DOCUMENTS} documents"
            ));
        }
        self.by_uri.entry(uri).or_default().insert(source, entry);
        Ok(())
    }

    pub fn remove_editor(&mut self, editor: EditorId) {
        self.by_uri.retain(|_, sources| {
            sources.retain(|_, e| e.editor != editor);
            !sources.is_empty()
        });
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
