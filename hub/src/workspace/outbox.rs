//! What the hub sends editors: notifications, requests with our own ids,
//! and the answers to them that decide something (a button pressed); also
//! what is published on a topic.
//!
//! **Invariant:** sending never waits: a full outbox loses the message (the
//! editor stopped reading), never stalls the workspace. An awaited answer
//! is forgotten once it arrives or the question is withdrawn
//! (`$/cancelRequest`), so a late press decides nothing.

use std::collections::HashMap;

use lsp_types::notification::{Cancel, LogMessage, Notification, ShowMessage};
use lsp_types::request::{Request, ShowDocument, ShowMessageRequest};
use lsp_types::{
    CancelParams, LogMessageParams, MessageActionItem, MessageType, NumberOrString, Range,
    ShowDocumentParams, ShowMessageParams, ShowMessageRequestParams, Url,
};
use serde::Serialize;
use serde_json::Value;

use super::Workspace;
use crate::{EditorId, Role, Topic};
use moonkale_protocol::jsonrpc::{self as message, RequestId, ResponseError};

/// What an editor's answer to one of our requests decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Awaited {
    Proposal(u64),
    /// The `window/showDocument` of a proposal: a refusal means the
    /// editor sees its hunks on the target file instead.
    ShowProposal(u64),
    Approval(String),
    /// One question (by index) of an `AskUserQuestion` approval.
    Question(String, usize),
}

impl Workspace {
    /// An editor answered one of our requests: a button pressed decides
    /// what it was asked about.
    pub(super) fn editor_response(
        &mut self,
        editor: EditorId,
        id: RequestId,
        result: Result<Value, ResponseError>,
    ) {
        let Some(awaited) = self.awaited_answers.remove(&(editor, id.clone())) else {
            return; // an answer nothing waits for (progress creation, …)
        };
        if let Awaited::ShowProposal(_) = awaited {
            // Only `{"success": true}` says the document is on screen: a
            // null result (an editor without `showDocument`), an error or
            // `false` means the user would never see the proposal.
            let shown = result
                .as_ref()
                .is_ok_and(|v| v.get("success").and_then(Value::as_bool) == Some(true));
            self.show_deadlines
                .retain(|(_, e, asked)| (*e, asked) != (editor, &id));
            return self.proposal_shown(editor, shown);
        }
        // The pressed button's title; none if the user dismissed the box.
        let title = result
            .ok()
            .and_then(|v| v.get("title").and_then(Value::as_str).map(str::to_owned));
        let title = title.as_deref();
        match awaited {
            Awaited::Proposal(proposal) => self.proposal_button(proposal, title),
            Awaited::ShowProposal(_) => {}
            Awaited::Approval(approval) => self.approval_button(approval, title),
            Awaited::Question(approval, index) => self.question_button(approval, index, title),
        }
    }

    /// A subscription to `topic` (or its end); the (empty) result.
    pub(super) fn subscription(
        &mut self,
        editor: EditorId,
        subscribe: bool,
        topic: Topic,
    ) -> Value {
        if subscribe {
            self.subscriptions.subscribe(editor, topic);
        } else {
            self.subscriptions.unsubscribe(editor, &topic);
        }
        serde_json::json!({})
    }

    /// Sends `method` to every connection subscribed to `topic`.
    pub(super) fn publish(&self, topic: &Topic, method: &str, params: Value) {
        let body = message::notification(method, params);
        for editor in self.subscriptions.subscribers(topic) {
            if let Some(ed) = self.editors.get(&editor)
                && ed.outbox.try_send(body.clone()).is_err()
            {
                tracing::debug!(editor = editor.0, %method, "outbox full; notification dropped");
            }
        }
    }

    /// Sends request `R` to an editor; its answer comes back as an
    /// `EditorResponse` event with the returned id.
    pub(super) fn send_request<R: Request>(
        &mut self,
        editor: EditorId,
        params: R::Params,
    ) -> RequestId {
        self.clock += 1;
        let id = RequestId::String(format!("moonkale-{}", self.clock));
        if let Some(ed) = self.editors.get(&editor)
            && ed
                .outbox
                .try_send(message::request(&id, R::METHOD, wire(params)))
                .is_err()
        {
            tracing::debug!(
                editor = editor.0,
                method = R::METHOD,
                "outbox full; request dropped"
            );
        }
        id
    }

    /// Asks a question with buttons (`window/showMessageRequest`); the
    /// answer decides `awaited`.
    pub(super) fn ask(
        &mut self,
        editor: EditorId,
        awaited: Awaited,
        typ: MessageType,
        message: String,
        buttons: impl IntoIterator<Item = String>,
    ) {
        let actions = buttons
            .into_iter()
            .map(|title| MessageActionItem {
                title,
                properties: HashMap::new(),
            })
            .collect();
        let params = ShowMessageRequestParams {
            typ,
            message,
            actions: Some(actions),
        };
        let asked = self.send_request::<ShowMessageRequest>(editor, params);
        self.awaited_answers.insert((editor, asked), awaited);
    }

    /// Withdraws the questions (buttons) still open in editors about
    /// `decided`: it was decided elsewhere.
    pub(super) fn cancel_questions(&mut self, decided: &Awaited) {
        let asked: Vec<(EditorId, RequestId)> = self
            .awaited_answers
            .iter()
            .filter(|(_, a)| *a == decided)
            .map(|(key, _)| key.clone())
            .collect();
        for (editor, id) in asked {
            self.awaited_answers.remove(&(editor, id.clone()));
            let id = match id {
                RequestId::String(s) => NumberOrString::String(s),
                // Never: the ids `send_request` makes are strings.
                RequestId::Number(n) => NumberOrString::String(n.to_string()),
            };
            self.notify::<Cancel>(editor, CancelParams { id });
        }
    }

    /// The real editors (not observers), each with whether it shows
    /// `window/showMessageRequest` buttons.
    pub(super) fn editors_with_buttons(&self) -> Vec<(EditorId, bool)> {
        self.editors
            .iter()
            .filter(|(_, ed)| ed.info.role == Role::Editor)
            .map(|(id, ed)| (*id, ed.info.shows_message_buttons))
            .collect()
    }

    /// Sends notification `N` to an editor (dropped if it does not read).
    pub(super) fn notify<N: Notification>(&self, editor: EditorId, params: N::Params) {
        if let Some(ed) = self.editors.get(&editor)
            && ed
                .outbox
                .try_send(message::notification(N::METHOD, wire(params)))
                .is_err()
        {
            tracing::debug!(
                editor = editor.0,
                method = N::METHOD,
                "outbox full; notification dropped"
            );
        }
    }

    /// `window/showDocument`: shows `uri` in the editor, selecting
    /// `selection` if given.
    pub(super) fn show_document(
        &mut self,
        editor: EditorId,
        uri: Url,
        take_focus: bool,
        selection: Option<Range>,
    ) -> RequestId {
        let params = ShowDocumentParams {
            uri,
            external: None,
            take_focus: Some(take_focus),
            selection,
        };
        self.send_request::<ShowDocument>(editor, params)
    }

    /// `window/showMessage`: tells the user something.
    pub(super) fn show_message(&self, editor: EditorId, typ: MessageType, message: String) {
        self.notify::<ShowMessage>(editor, ShowMessageParams { typ, message });
    }

    /// Logs a protocol violation and tells the editor, which may not know
    /// that we stopped trusting its stream.
    pub(super) fn violation(&mut self, editor: EditorId, what: String) {
        tracing::warn!(editor = editor.0, "protocol violation: {what}");
        let message = format!("moonkale: {what}");
        self.notify::<LogMessage>(
            editor,
            LogMessageParams {
                typ: MessageType::WARNING,
                message,
            },
        );
    }
}

/// Params as JSON; the LSP types always serialize.
fn wire(params: impl Serialize) -> Value {
    serde_json::to_value(params).expect("LSP params serialize")
}
