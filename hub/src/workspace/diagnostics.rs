//! Diagnostics editors forward (`moonkale/publishDiagnostics`, kept in the
//! [`crate::diagnostics`] store) and pull (`textDocument/diagnostic`), each
//! converted into the asking side's position encoding.

use lsp_types::{
    DocumentDiagnosticReport, FullDocumentDiagnosticReport, RelatedFullDocumentDiagnosticReport,
    Url,
};
use serde_json::Value;

use super::Workspace;
use crate::EditorId;
use crate::core::PositionEncoding;
use crate::core::position::{to_char_idx, to_wire};
use crate::diagnostics::SourceDiagnostics;
use moonkale_protocol::document::PublishDiagnosticsParams;
use moonkale_protocol::jsonrpc::ResponseError;

impl Workspace {
    pub(super) fn publish_diagnostics(&mut self, editor: EditorId, p: PublishDiagnosticsParams) {
        let encoding = self.editors[&editor].info.encoding;
        let entry = SourceDiagnostics::new(editor, encoding, p.diagnostics);
        let budget = (self.limits.total_bytes.saturating_sub(self.total_bytes))
            .min(self.limits.diagnostics_bytes);
        if let Err(why) = self.diagnostics.publish(p.uri, p.source, entry, budget) {
            self.violation(editor, why);
        }
    }

    pub(super) fn pull_diagnostics(
        &mut self,
        editor: EditorId,
        p: lsp_types::DocumentDiagnosticParams,
    ) -> Result<Value, ResponseError> {
        let uri = p.text_document.uri;
        let to = self.editors[&editor].info.encoding;
        // What this editor forwarded itself it already shows; echoing it back
        // would show every diagnostic twice.
        let mut items = Vec::new();
        for entry in self
            .diagnostics
            .for_uri(&uri)
            .filter(|e| e.editor != editor)
        {
            for d in &entry.items {
                let mut d = d.clone();
                d.range = self.convert_range(&uri, d.range, entry.encoding, to);
                items.push(d);
            }
        }
        let report = DocumentDiagnosticReport::Full(RelatedFullDocumentDiagnosticReport {
            related_documents: None,
            full_document_diagnostic_report: FullDocumentDiagnosticReport {
                result_id: None,
                items,
            },
        });
        Ok(serde_json::to_value(report).expect("a report serializes"))
    }

    pub(super) fn convert_range(
        &self,
        uri: &Url,
        range: lsp_types::Range,
        from: PositionEncoding,
        to: PositionEncoding,
    ) -> lsp_types::Range {
        let Some((_, open)) = self.latest(uri).filter(|_| from != to) else {
            return range;
        };
        let text = open.doc.text();
        let conv =
            |p: lsp_types::Position| to_wire(text, to_char_idx(text, p.into(), from), to).into();
        lsp_types::Range {
            start: conv(range.start),
            end: conv(range.end),
        }
    }
}
