//! Between a page and the service: [`follow`] loads what the workspace
//! holds and then applies every notification to the page's [`Model`];
//! [`act`] carries out what the person clicked, one action at a time, in
//! order. The service holds the truth: a page that goes away loses
//! nothing, and a page that comes back reads it all again.

use dioxus::prelude::*;
use futures_util::StreamExt;
use moonkale_client::moonkale_protocol::agent::{
    self, AnswerParams, EventsParams, PermissionMode, PreviewParams,
};
use moonkale_client::moonkale_protocol::changes::{KeepParams, UndoParams};
use moonkale_client::moonkale_protocol::lsp_types::Url;
use moonkale_client::moonkale_protocol::terminal::{OpenParams, TerminalId};
use moonkale_client::{Client, Notification};
use serde_json::{Map, Value};

use crate::model::{Model, View};

/// What a page's root context holds: its connection to the service.
#[derive(Clone)]
pub struct Shell {
    pub client: Client,
}

/// What a person can do on the page.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Answer {
        approval: String,
        allow: bool,
        always: bool,
        /// A denial's reason, in the person's words, for the model.
        message: Option<String>,
    },
    ApprovePlan {
        approval: String,
        mode: PermissionMode,
    },
    /// Question text → the label chosen (several for a multi-select).
    AnswerQuestions {
        approval: String,
        answers: Vec<(String, String)>,
    },
    /// A prompt to a session, or the first of a new one.
    Prompt {
        session: Option<String>,
        text: String,
    },
    Interrupt(String),
    SetMode {
        session: String,
        mode: PermissionMode,
    },
    /// `None`: the CLI's default model.
    SetModel {
        session: String,
        model: Option<String>,
    },
    /// A session's transcript was opened: read its events.
    Open(String),
    Proposal {
        document: String,
        accept: bool,
    },
    ShowSet(u64),
    Keep {
        set: u64,
    },
    Undo {
        set: u64,
        uri: Option<Url>,
        hunk: Option<usize>,
    },
    NewTerminal {
        claude: bool,
    },
    OpenTerminal(TerminalId),
    /// Close the terminal in the service (its programs end).
    CloseTerminal(TerminalId),
    /// Show the terminal's lines above its screen (more of them each time).
    History(TerminalId),
    Text {
        terminal: TerminalId,
        text: String,
    },
    Key {
        terminal: TerminalId,
        key: String,
    },
    Resize {
        terminal: TerminalId,
        rows: u16,
        cols: u16,
    },
}

/// Loads the workspace, then applies every notification.
pub async fn follow(client: Client, mut model: Signal<Model>) {
    let Some(mut notifications) = client.notifications() else {
        return;
    };
    if let Err(e) = client.agent_subscribe(None).await {
        model.write().error = Some(format!("Could not follow the sessions: {e}"));
    }
    if let Ok(list) = client.agent_list().await {
        let ids: Vec<String> = list.iter().map(|s| s.session.clone()).collect();
        model.write().load_sessions(list);
        for id in ids {
            // Only what waits: the pending questions, no events.
            let page = client.request::<agent::Events>(EventsParams {
                session: id.clone(),
                since: 0,
                limit: Some(0),
            });
            if let Ok(page) = page.await {
                model.write().load_events(&id, &[], page.pending_approvals);
            }
        }
    }
    read_previews(&client, model);
    match client.status_subscribe().await {
        Ok(status) => model.write().status = Some(status),
        Err(e) => model.write().error = Some(format!("Could not follow the workspace: {e}")),
    }
    read_proposals(&client, model).await;
    read_change_sets(&client, model).await;
    if let Ok(list) = client.terminal_list().await {
        model.write().load_terminals(list);
    }
    loop {
        match notifications.next().await {
            Some(Notification::Lagged { .. }) => reload(&client, model).await,
            Some(n) => {
                // Whatever else queued with it, in the same render.
                let mut batch = vec![n];
                while let Some(n) = notifications.try_next() {
                    batch.push(n);
                }
                let stale = apply_all(&mut model.write(), batch);
                for set in stale {
                    show_set(&client, model, set).await;
                }
                read_previews(&client, model);
                read_proposals(&client, model).await;
                if let View::Terminal(id) = model.peek().view
                    && model
                        .peek()
                        .terminals
                        .get(&id)
                        .is_some_and(|t| t.history_stale)
                {
                    read_history(&client, model, id, false).await;
                }
            }
            None => {
                model.write().disconnected = true;
                return;
            }
        }
    }
}

/// Applies notifications in order; returns the opened change sets whose
/// hunks changed.
fn apply_all(model: &mut Model, batch: Vec<Notification>) -> Vec<u64> {
    let mut stale = Vec::new();
    for n in batch {
        match n {
            Notification::ChangesChanged(changed) => {
                stale.extend(model.load_change_sets(changed.sets));
            }
            n => model.apply(n),
        }
    }
    stale.sort_unstable();
    stale.dedup();
    stale
}

/// Reads the proposals with their hunks when the status lists others
/// than the page holds (`moonkale/status/changed` says when).
async fn read_proposals(client: &Client, mut model: Signal<Model>) {
    if model.peek().proposals_changed()
        && let Ok(proposals) = client.proposals().await
    {
        model.write().proposals = proposals;
    }
}

/// Reads the change sets (at the start, and after notifications were
/// dropped; between, `moonkale/changes/changed` carries them).
async fn read_change_sets(client: &Client, mut model: Signal<Model>) {
    if let Ok(sets) = client.changes(false).await {
        let stale = model.write().load_change_sets(sets);
        for set in stale {
            show_set(client, model, set).await;
        }
    }
}

/// Asks the service what each new editing question would do to its file;
/// each answer lands on its card when it comes (a slow disk holds up no
/// notification).
fn read_previews(client: &Client, mut model: Signal<Model>) {
    let wanted = model.write().previews_to_read();
    for approval in wanted {
        let asked = client.request::<agent::Preview>(PreviewParams {
            approval: approval.clone(),
        });
        spawn(async move {
            // A question answered meanwhile has no card to show it on.
            if let Ok(preview) = asked.await
                && model.peek().previews.contains_key(&approval)
            {
                model.write().previews.insert(approval, Some(preview));
            }
        });
    }
}

/// Reads the lines above a terminal's screen: as many as shown, or
/// `more` (a page of them) on top.
async fn read_history(client: &Client, mut model: Signal<Model>, terminal: TerminalId, more: bool) {
    const PAGE: usize = 200;
    let shown = model
        .peek()
        .terminals
        .get(&terminal)
        .and_then(|t| t.history.as_ref().map(Vec::len))
        .unwrap_or(0);
    let count = if more { shown + PAGE } else { shown.max(PAGE) }.min(crate::model::MAX_HISTORY);
    match client.terminal_scrollback(terminal, 0, count).await {
        Ok(lines) => {
            if let Some(entry) = model.write().terminals.get_mut(&terminal) {
                entry.history = Some(lines);
                entry.history_stale = false;
            }
        }
        Err(e) => model.write().error = Some(e.to_string()),
    }
}

/// Reads one change set's hunks for the page.
async fn show_set(client: &Client, mut model: Signal<Model>, set: u64) {
    match client.change_set(set).await {
        Ok(detail) => {
            model.write().change_details.insert(set, detail);
        }
        Err(e) => model.write().error = Some(e.to_string()),
    }
}

/// After notifications were dropped: the open session's events again.
async fn reload(client: &Client, mut model: Signal<Model>) {
    if let View::Session(id) = model.peek().view.clone() {
        read_events(client, model, &id).await;
    }
    if let Ok(status) = client.status().await {
        model.write().status = Some(status);
    }
    read_proposals(client, model).await;
    read_change_sets(client, model).await;
}

async fn read_events(client: &Client, mut model: Signal<Model>, session: &str) {
    loop {
        let since = model.peek().sessions.get(session).map_or(0, |s| s.next_seq);
        match client.agent_events(session, since).await {
            Ok(page) => {
                let done = page.events.is_empty() || page.next >= page.total;
                model
                    .write()
                    .load_events(session, &page.events, page.pending_approvals);
                if done {
                    return;
                }
            }
            Err(e) => {
                model.write().error = Some(e.to_string());
                return;
            }
        }
    }
}

/// Carries out the page's actions in order; an error is shown on the page.
pub async fn act(client: Client, mut model: Signal<Model>, mut actions: UnboundedReceiver<Action>) {
    while let Some(action) = actions.next().await {
        model.write().error = None;
        if let Err(e) = one(&client, model, action).await {
            model.write().error = Some(e);
        }
    }
}

async fn one(client: &Client, mut model: Signal<Model>, action: Action) -> Result<(), String> {
    let text = |e: moonkale_client::Error| e.to_string();
    match action {
        Action::Answer {
            approval,
            allow,
            always,
            message,
        } => {
            let mut answer = AnswerParams {
                always,
                ..if allow {
                    AnswerParams::allow(approval.clone())
                } else {
                    AnswerParams::deny(approval.clone())
                }
            };
            if let Some(message) = message {
                answer = answer.with_message(message);
            }
            client.agent_answer(answer).await.map_err(text)?;
            model.write().close(&approval);
        }
        Action::ApprovePlan { approval, mode } => {
            let answer = AnswerParams {
                mode: Some(mode),
                ..AnswerParams::allow(approval.clone())
            };
            client.agent_answer(answer).await.map_err(text)?;
            model.write().close(&approval);
        }
        Action::AnswerQuestions { approval, answers } => {
            let mut map = Map::new();
            for (question, label) in answers {
                match map.get_mut(&question) {
                    Some(Value::Array(labels)) => labels.push(Value::String(label)),
                    Some(first) => {
                        let first = first.take();
                        map.insert(question, Value::Array(vec![first, Value::String(label)]));
                    }
                    None => {
                        map.insert(question, Value::String(label));
                    }
                }
            }
            let answer = AnswerParams {
                answers: Some(map),
                ..AnswerParams::allow(approval.clone())
            };
            client.agent_answer(answer).await.map_err(text)?;
            model.write().close(&approval);
        }
        Action::Prompt {
            session: Some(session),
            text: prompt,
        } => {
            client.agent_send(&session, &prompt).await.map_err(text)?;
        }
        Action::Prompt {
            session: None,
            text: prompt,
        } => {
            let started = client
                .agent_start(Some(&prompt), None)
                .await
                .map_err(text)?;
            model.write().open(View::Session(started.session.clone()));
            read_events(client, model, &started.session).await;
        }
        Action::Interrupt(session) => client.agent_interrupt(&session).await.map_err(text)?,
        Action::SetMode { session, mode } => {
            client
                .agent_set_permission_mode(&session, mode)
                .await
                .map_err(text)?;
        }
        Action::SetModel { session, model } => {
            client
                .agent_set_model(&session, model.as_deref())
                .await
                .map_err(text)?;
        }
        Action::Open(session) => read_events(client, model, &session).await,
        Action::Proposal { document, accept } => {
            if accept {
                client.accept_proposal(Some(&document)).await
            } else {
                client.reject_proposal(Some(&document)).await
            }
            .map_err(text)?;
        }
        Action::ShowSet(set) => {
            let detail = client.change_set(set).await.map_err(text)?;
            model.write().change_details.insert(set, detail);
        }
        Action::Keep { set } => {
            client
                .keep_change(KeepParams {
                    set,
                    uri: None,
                    hunk: None,
                })
                .await
                .map_err(text)?;
        }
        // The sets and the opened hunks follow from `changes/changed`.
        Action::Undo { set, uri, hunk } => {
            let undone = client
                .undo_change(UndoParams {
                    set,
                    uri,
                    hunk,
                    reason: None,
                })
                .await
                .map_err(text)?;
            if let Some(refused) = undone.refused.first() {
                model.write().error = Some(format!("Not undone: {}", refused.message));
            }
        }
        Action::NewTerminal { claude } => {
            let info = if claude {
                client.start_claude(&[]).await.map_err(text)?.info
            } else {
                client
                    .terminal_open(&OpenParams {
                        argv: None,
                        cwd: None,
                        env: Default::default(),
                        rows: moonkale_client::moonkale_protocol::terminal::default_rows(),
                        cols: moonkale_client::moonkale_protocol::terminal::default_cols(),
                        // A page reloads (a phone suspends its tabs): the
                        // terminal stays until it is closed.
                        keep_alive: true,
                    })
                    .await
                    .map_err(text)?
            };
            let list = client.terminal_list().await.map_err(text)?;
            model.write().load_terminals(list);
            open_terminal(client, model, info.terminal).await?;
            model.write().open(View::Terminal(info.terminal));
        }
        Action::OpenTerminal(terminal) => open_terminal(client, model, terminal).await?,
        Action::CloseTerminal(terminal) => {
            client.terminal_close(terminal).await.map_err(text)?;
            model.write().terminal_closed(terminal);
        }
        Action::History(terminal) => read_history(client, model, terminal, true).await,
        Action::Text {
            terminal,
            text: typed,
        } => {
            client.terminal_text(terminal, &typed).await.map_err(text)?;
        }
        Action::Key { terminal, key } => {
            client
                .terminal_keys(terminal, &[&key])
                .await
                .map_err(text)?;
        }
        Action::Resize {
            terminal,
            rows,
            cols,
        } => {
            client
                .terminal_resize(terminal, rows, cols)
                .await
                .map_err(text)?;
        }
    }
    Ok(())
}

/// Follows a terminal's screen (its view is the caller's to show). A page
/// loaded at a terminal may not have read the list yet: it is read first,
/// so the screen has an entry to go to.
async fn open_terminal(
    client: &Client,
    mut model: Signal<Model>,
    terminal: TerminalId,
) -> Result<(), String> {
    if !model.peek().terminals.contains_key(&terminal) {
        let list = client.terminal_list().await.map_err(|e| e.to_string())?;
        model.write().load_terminals(list);
    }
    client
        .terminal_subscribe(terminal)
        .await
        .map_err(|e| e.to_string())?;
    let screen = client
        .terminal_screen(terminal)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(entry) = model.write().terminals.get_mut(&terminal) {
        entry.screen = Some(screen.snapshot);
    }
    Ok(())
}
