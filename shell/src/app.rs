//! The shell's components: a header with what waits for the user, a tab
//! bar, and one view at a time (questions, sessions, a transcript, change
//! sets, terminals). Everything a session or a terminal says is rendered
//! as text nodes, never as HTML: no `dangerous_inner_html`, no attribute
//! named from data, no data in `href` or `src`.
//!
//! The page's address follows the view: the shell names it (`data-route`,
//! and `data-nav`: whether it is a new entry in the browser's history) and
//! the page's own script keeps it in the history; after a load, Back or
//! Forward, the script tells the shell where the page is through a hidden
//! input (`input.route`). No script is evaluated for it (the page's policy
//! forbids eval).

use dioxus::prelude::*;
use moonkale_client::moonkale_protocol::agent::{
    Approval, ApprovalKind, PermissionMode, PreviewResult, SessionState,
};
use moonkale_client::moonkale_protocol::changes::{ChangeSetSummary, ReviewState};
use moonkale_client::moonkale_protocol::proposal::ProposalInfo;
use moonkale_client::moonkale_protocol::screen::{Color, Row, Snapshot, Span};
use serde_json::Value;

use crate::feed::{self, Action, Shell};
use crate::model::{Line, Model, View, inert};

/// The whole page. Its root context must hold a [`Shell`].
#[component]
pub fn App() -> Element {
    let shell = use_context::<Shell>();
    let mut model = use_context_provider(|| Signal::new(Model::default()));
    let client = shell.client.clone();
    use_coroutine(move |actions| feed::act(client.clone(), model, actions));
    let client = shell.client.clone();
    use_future(move || feed::follow(client.clone(), model));
    let m = model.read();
    let waiting = m.waiting();
    let name = inert(&m.workspace_name());
    let title = if waiting > 0 {
        format!("({waiting}) {name} · Moonkale")
    } else {
        format!("{name} · Moonkale")
    };
    // Nothing to keep until the page said where it is: a reload's place
    // is the page's, not the start view's.
    let route = if m.route_known {
        m.view.route()
    } else {
        String::new()
    };
    let nav = if m.view_is_opened() {
        "push"
    } else {
        "replace"
    };
    let actions = use_actions();
    rsx! {
        div { class: "shell", "data-title": "{title}", "data-route": "{route}", "data-nav": "{nav}",
            input { class: "route", r#type: "hidden",
                oninput: move |e: FormEvent| {
                    let view = model.write().arrive(&e.value()).clone();
                    match view {
                        View::Session(id) => actions.send(Action::Open(id)),
                        View::Terminal(id) => actions.send(Action::OpenTerminal(id)),
                        _ => {}
                    }
                },
            }
            Header {}
            Tabs {}
            if m.disconnected {
                p { class: "banner", role: "alert", "The service is gone: reload the page once it runs again." }
            }
            if let Some(error) = m.error.clone() {
                p { class: "banner", role: "alert", "{error}" }
            }
            main { class: "view",
                match m.view.clone() {
                    View::Questions => rsx! { Questions {} },
                    View::Sessions => rsx! { Sessions {} },
                    View::Session(id) => rsx! { Transcript { id } },
                    View::Changes => rsx! { Changes {} },
                    View::Terminals => rsx! { Terminals {} },
                    View::Terminal(id) => rsx! { Terminal { id } },
                }
            }
        }
    }
}

fn use_model() -> Signal<Model> {
    use_context::<Signal<Model>>()
}

fn use_actions() -> Coroutine<Action> {
    use_coroutine_handle::<Action>()
}

#[component]
fn Header() -> Element {
    let model = use_model();
    let m = model.read();
    let name = inert(&m.workspace_name());
    let waiting = m.waiting();
    let (editors, clients) = m.status.as_ref().map_or((Vec::new(), 0), |s| {
        (
            s.editors
                .iter()
                .filter(|e| e.client != crate::CLIENT_NAME)
                .map(|e| e.client.clone())
                .collect::<Vec<_>>(),
            s.claude_clients.len(),
        )
    });
    rsx! {
        header { class: "header",
            h1 { class: "workspace", "{name}" }
            if waiting > 0 {
                span { class: "badge", aria_label: "{waiting} waiting for you", "{waiting}" }
            }
            p { class: "attached",
                if editors.is_empty() { "No editor attached" } else { "Editors: {editors.join(\", \")}" }
                if clients > 0 { " · Claude Code clients: {clients}" }
            }
        }
    }
}

#[component]
fn Tabs() -> Element {
    let mut model = use_model();
    let (view, questions, changes) = {
        let m = model.read();
        (m.view.clone(), m.waiting(), m.pending_changes())
    };
    let tab = |label: String, target: View, here: bool| {
        rsx! {
            button {
                class: if here { "tab here" } else { "tab" },
                aria_pressed: "{here}",
                onclick: move |_| model.write().open(target.clone()),
                "{label}"
            }
        }
    };
    rsx! {
        nav { class: "tabs",
            {tab(format!("Questions ({questions})"), View::Questions, view == View::Questions)}
            {tab("Sessions".into(), View::Sessions, matches!(view, View::Sessions | View::Session(_)))}
            {tab(format!("Changes ({changes})"), View::Changes, view == View::Changes)}
            {tab("Terminals".into(), View::Terminals, matches!(view, View::Terminals | View::Terminal(_)))}
        }
    }
}

#[component]
fn Questions() -> Element {
    let model = use_model();
    let m = model.read();
    let proposals = m.proposals.clone();
    rsx! {
        section { class: "questions",
            if m.questions.is_empty() && proposals.is_empty() {
                p { class: "empty", "Nothing waits for you." }
            }
            for approval in m.questions.iter().cloned() {
                QuestionCard { key: "{approval.approval}", session_label: m.sessions.get(&approval.session).map(|s| s.label().to_owned()).unwrap_or_else(|| "Claude Code in a terminal".to_owned()), approval }
            }
            for p in proposals {
                ProposalCard { key: "{p.document}", name: m.file_name(&p.target), proposal: p }
            }
        }
    }
}

#[component]
fn QuestionCard(approval: Approval, session_label: String) -> Element {
    let actions = use_actions();
    // Why not: a denial's reason for the model, in the person's words.
    let mut why = use_signal(String::new);
    let id = approval.approval.clone();
    let body = match &approval.kind {
        ApprovalKind::Tool => {
            let preview = use_model().read().previews.get(&id).cloned().flatten();
            rsx! { ToolInput { tool: approval.tool.clone(), input: approval.input.clone(), preview } }
        }
        ApprovalKind::Plan { plan, choices } => {
            let choices = choices.clone();
            rsx! {
                pre { class: "plan", "{inert(plan)}" }
                div { class: "buttons",
                    for choice in choices {
                        button { class: "allow",
                            onclick: { let id = id.clone(); move |_| actions.send(Action::ApprovePlan { approval: id.clone(), mode: choice.mode }) },
                            "{inert(&choice.label)}"
                        }
                    }
                    button { class: "deny",
                        onclick: { let id = id.clone(); move |_| actions.send(Action::Answer { approval: id.clone(), allow: false, always: false, message: None }) },
                        "Keep planning"
                    }
                }
            }
        }
        ApprovalKind::Question { questions } => {
            let questions = questions.clone();
            rsx! { AskCard { approval: id.clone(), questions } }
        }
    };
    let is_tool = matches!(approval.kind, ApprovalKind::Tool);
    rsx! {
        article { class: "card question", aria_label: "Question: {approval.title}",
            p { class: "from", "{inert(&session_label)}" }
            h2 { "{inert(&approval.title)}" }
            {body}
            if is_tool {
                input { class: "why", r#type: "text", aria_label: "Why not (for Claude, with Deny)",
                    placeholder: "Why not? (optional, with Deny)",
                    oninput: move |e: FormEvent| why.set(e.value()),
                }
                div { class: "buttons",
                    button { class: "allow",
                        onclick: { let id = id.clone(); move |_| actions.send(Action::Answer { approval: id.clone(), allow: true, always: false, message: None }) },
                        "Allow"
                    }
                    button { class: "deny",
                        onclick: { let id = id.clone(); move |_| {
                            let words = why.read().trim().to_owned();
                            actions.send(Action::Answer { approval: id.clone(), allow: false, always: false, message: (!words.is_empty()).then_some(words) })
                        } },
                        "Deny"
                    }
                    if !approval.destructive {
                        button { class: "always",
                            onclick: { let id = id.clone(); move |_| actions.send(Action::Answer { approval: id.clone(), allow: true, always: true, message: None }) },
                            "Always"
                        }
                    }
                }
            }
        }
    }
}

/// A tool's input: for the editing tools the diff against the file on
/// disk (the service's preview) or, until it comes or when the tool would
/// fail, the input's own lines; else its fields.
#[component]
fn ToolInput(tool: String, input: Value, preview: Option<PreviewResult>) -> Element {
    if let Some(mut lines) = preview.as_ref().and_then(crate::diff::preview_diff) {
        if let Some(heading) = lines.first_mut() {
            heading.text = use_model().read().relative(&heading.text);
        }
        return rsx! { Diff { lines } };
    }
    let problem = preview.and_then(|p| p.problem);
    if let Some(mut lines) = crate::diff::tool_diff(&tool, &input) {
        if let Some(heading) = lines.first_mut() {
            heading.text = use_model().read().relative(&heading.text);
        }
        return rsx! {
            if let Some(problem) = problem {
                p { class: "problem", "Not as on disk: {inert(&problem)}." }
            }
            Diff { lines }
        };
    }
    let text = tool_fields(&input);
    rsx! { pre { class: "input", "{inert(&text)}" } }
}

/// A tool's input as a person reads it: a command's own lines, then each
/// other field as `name: value` (never the input as JSON).
fn tool_fields(input: &Value) -> String {
    let Some(fields) = input.as_object() else {
        return input.to_string();
    };
    let mut out = Vec::new();
    if let Some(command) = fields.get("command").and_then(Value::as_str) {
        out.push(command.to_owned());
    }
    for (name, value) in fields.iter().filter(|(name, _)| *name != "command") {
        let value = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        out.push(format!("{name}: {value}"));
    }
    out.join("\n")
}

#[component]
fn Diff(lines: Vec<crate::diff::DiffLine>) -> Element {
    rsx! {
        pre { class: "diff",
            for (n, line) in lines.into_iter().enumerate() {
                div { key: "{n}", class: line.class(), "{line.prefix()}{line.text}" }
            }
        }
    }
}

#[component]
fn AskCard(
    approval: String,
    questions: Vec<moonkale_client::moonkale_protocol::agent::Question>,
) -> Element {
    let actions = use_actions();
    let mut chosen = use_signal(Vec::<(String, String)>::new);
    let mut own = use_signal(String::new);
    let single = questions.len() == 1 && questions[0].multi_select != Some(true);
    rsx! {
        for q in questions.iter().cloned() {
            div { class: "ask", key: "{q.question}",
                p { class: "question", "{inert(&q.question)}" }
                if q.multi_select == Some(true) {
                    p { class: "hint", "Choose any, then Answer." }
                }
                div { class: "buttons",
                    for option in q.options.clone().unwrap_or_default() {
                        button {
                            class: if chosen.read().iter().any(|(k, v)| *k == q.question && *v == option.label) { "option chosen" } else { "option" },
                            aria_pressed: "{chosen.read().iter().any(|(k, v)| *k == q.question && *v == option.label)}",
                            onclick: {
                                let (question, label, approval) = (q.question.clone(), option.label.clone(), approval.clone());
                                let multi = q.multi_select == Some(true);
                                move |_| {
                                    if single {
                                        actions.send(Action::AnswerQuestions { approval: approval.clone(), answers: vec![(question.clone(), label.clone())] });
                                        return;
                                    }
                                    let mut c = chosen.write();
                                    if let Some(at) = c.iter().position(|(k, v)| *k == question && *v == label) {
                                        c.remove(at);
                                    } else {
                                        if !multi { c.retain(|(k, _)| *k != question); }
                                        c.push((question.clone(), label.clone()));
                                    }
                                }
                            },
                            "{inert(&option.label)}"
                        }
                    }
                }
            }
        }
        div { class: "own",
            input { r#type: "text", aria_label: "Your own answer", placeholder: "Or answer in your words",
                autocomplete: "off",
                oninput: move |e: FormEvent| own.set(e.value()),
            }
            button {
                onclick: {
                    let approval = approval.clone();
                    let questions = questions.clone();
                    move |_| {
                        let text = own.read().trim().to_owned();
                        let answers = if text.is_empty() {
                            chosen.read().clone()
                        } else {
                            questions.iter().map(|q| (q.question.clone(), text.clone())).collect()
                        };
                        actions.send(Action::AnswerQuestions { approval: approval.clone(), answers });
                    }
                },
                "Answer"
            }
        }
    }
}

#[component]
fn ProposalCard(name: String, proposal: ProposalInfo) -> Element {
    let actions = use_actions();
    let document = proposal.document.to_string();
    rsx! {
        article { class: "card proposal", aria_label: "Proposal: {inert(&proposal.tab_name)}",
            p { class: "from", "Claude Code proposes a change" }
            h2 { "{inert(&name)}" }
            for hunk in proposal.hunks.iter() {
                div { key: "{hunk.index}", class: "hunk",
                    pre { class: "diff",
                        for (n, line) in hunk.removed.lines().enumerate() {
                            div { key: "r{n}", class: "del", "- {inert(line)}" }
                        }
                        for (n, line) in hunk.added.lines().enumerate() {
                            div { key: "a{n}", class: "add", "+ {inert(line)}" }
                        }
                    }
                }
            }
            div { class: "buttons",
                button { class: "allow",
                    onclick: { let d = document.clone(); move |_| actions.send(Action::Proposal { document: d.clone(), accept: true }) },
                    "Accept"
                }
                button { class: "deny",
                    onclick: { let d = document.clone(); move |_| actions.send(Action::Proposal { document: d.clone(), accept: false }) },
                    "Reject"
                }
            }
        }
    }
}

#[component]
fn Sessions() -> Element {
    let mut model = use_model();
    let actions = use_actions();
    let now = crate::model::now_ms();
    let list: Vec<(String, String, SessionState, String)> = model
        .read()
        .session_list()
        .into_iter()
        .map(|s| {
            (
                s.id.clone(),
                s.label().to_owned(),
                s.state,
                crate::model::ago(now, s.updated),
            )
        })
        .collect();
    rsx! {
        section { class: "sessions",
            PromptBox { session: None::<String> }
            if list.is_empty() { p { class: "empty", "No sessions yet: write a prompt to start one." } }
            ul { class: "list",
                for (id, label, state, when) in list {
                    li { key: "{id}",
                        button { class: "session", aria_label: "{inert(&label)} ({state_label(state)})",
                            onclick: { let id = id.clone(); move |_| { model.write().open(View::Session(id.clone())); actions.send(Action::Open(id.clone())); } },
                            span { class: "title", "{inert(&label)}" }
                            span { class: "state {state.as_str()}", "{state_label(state)} · {when}" }
                        }
                    }
                }
            }
        }
    }
}

/// Back to a list: the browser's Back when the list is the entry before
/// (the page's script does it, `app.js`), else the list in place of this
/// entry (a page loaded at a transcript has nothing of its own before).
#[component]
fn Back(to: View, label: &'static str) -> Element {
    let mut model = use_model();
    rsx! {
        button { class: "back", aria_label: "Back to {label}",
            onclick: move |_| model.write().back_to(to.clone()),
            "‹ {label}"
        }
    }
}

fn state_label(state: SessionState) -> &'static str {
    match state {
        SessionState::Idle => "idle",
        SessionState::Running => "running",
        SessionState::WaitingForApproval => "waiting for you",
        SessionState::Failed => "failed",
    }
}

#[component]
fn Transcript(id: String) -> Element {
    let model = use_model();
    let actions = use_actions();
    let m = model.read();
    let Some(s) = m.sessions.get(&id) else {
        return rsx! { p { class: "empty", "No session {id}." } };
    };
    let running = s.state == SessionState::Running || s.state == SessionState::WaitingForApproval;
    let asked = m.questions_of(&id);
    rsx! {
        section { class: "transcript",
            Back { to: View::Sessions, label: "Sessions" }
            h2 { class: "title", "{inert(s.label())}" }
            SessionSettings { id: id.clone(), state: s.state, mode: s.view.permission_mode, model: s.view.model.clone() }
            div { class: "lines",
                for (n, line) in s.lines.iter().cloned().enumerate() {
                    {line_view(n, match line {
                        Line::Tool(t) => Line::Tool(m.relative(&t)),
                        line => line,
                    })}
                }
                if !s.streaming.is_empty() {
                    p { class: "reply streaming", "{s.streaming}" }
                }
            }
            // What the session waits on, where its turn is read (the
            // same card as under Questions).
            for approval in asked {
                QuestionCard { key: "{approval.approval}", session_label: s.label().to_owned(), approval }
            }
            if running {
                button { class: "deny", onclick: { let id = id.clone(); move |_| actions.send(Action::Interrupt(id.clone())) }, "Interrupt" }
            }
            PromptBox { session: Some(id.clone()) }
        }
    }
}

/// What a person may say to each permission mode.
fn mode_label(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::Default => "Ask before each edit",
        PermissionMode::AcceptEdits => "Accept edits",
        PermissionMode::Plan => "Plan only",
        PermissionMode::BypassPermissions => "Ask nothing",
    }
}

/// The model menu: the value a session is told, and what a person reads
/// (`default`: the CLI's own choice).
const MODELS: [(&str, &str); 4] = [
    ("default", "Default model"),
    ("opus", "Opus"),
    ("sonnet", "Sonnet"),
    ("haiku", "Haiku"),
];

/// The session's permission mode and model, changed for its next step.
#[component]
fn SessionSettings(
    id: String,
    state: SessionState,
    mode: PermissionMode,
    model: Option<String>,
) -> Element {
    let actions = use_actions();
    // The model a session runs: one of the menu's, or its own name (one
    // set elsewhere) shown once, first.
    let current = model.unwrap_or_else(|| "default".to_owned());
    let listed = MODELS.iter().any(|(value, _)| *value == current);
    rsx! {
        div { class: "settings",
            span { class: "meta", "{state_label(state)}" }
            select { aria_label: "Permission mode",
                onchange: {
                    let id = id.clone();
                    move |e: FormEvent| {
                        if let Some(mode) = PermissionMode::parse(&e.value()) {
                            actions.send(Action::SetMode { session: id.clone(), mode });
                        }
                    }
                },
                for m in PermissionMode::ALL {
                    option { key: "{m.as_str()}", value: m.as_str(), selected: m == mode, "{mode_label(m)}" }
                }
            }
            select { aria_label: "Model",
                onchange: {
                    let id = id.clone();
                    move |e: FormEvent| {
                        let value = e.value();
                        let model = (value != "default").then_some(value);
                        actions.send(Action::SetModel { session: id.clone(), model });
                    }
                },
                if !listed {
                    option { value: "{current}", selected: true, "{inert(&current)}" }
                }
                for (value, label) in MODELS {
                    option { key: "{value}", value, selected: value == current, "{label}" }
                }
            }
        }
    }
}

fn line_view(n: usize, line: Line) -> Element {
    match line {
        Line::Prompt(t) => rsx! { p { key: "{n}", class: "prompt", "{t}" } },
        Line::Reply(t) => rsx! { p { key: "{n}", class: "reply", "{t}" } },
        Line::Tool(t) => rsx! { p { key: "{n}", class: "tool", "{t}" } },
        Line::Note(t) => rsx! { p { key: "{n}", class: "note", "{t}" } },
        Line::Diff(lines) => rsx! { div { key: "{n}", Diff { lines } } },
    }
}

/// A prompt for `session`, or the first prompt of a new one.
#[component]
fn PromptBox(session: Option<String>) -> Element {
    let actions = use_actions();
    // The textarea is not controlled (echoing `value` from the server
    // races with typing): the page's script empties it on a send.
    let mut text = use_signal(String::new);
    let send = {
        let session = session.clone();
        move || {
            let prompt = text.read().trim().to_owned();
            if prompt.is_empty() {
                return;
            }
            actions.send(Action::Prompt {
                session: session.clone(),
                text: prompt,
            });
            text.set(String::new());
        }
    };
    let label = if session.is_some() {
        "Prompt"
    } else {
        "New session prompt"
    };
    rsx! {
        div { class: "prompt-box",
            textarea { aria_label: "{label}", rows: "2", placeholder: "Ask Claude…",
                oninput: move |e: FormEvent| text.set(e.value()),
                onkeydown: {
                    let mut send = send.clone();
                    move |e: KeyboardEvent| {
                        if e.key() == Key::Enter && !e.modifiers().contains(Modifiers::SHIFT) {
                            send();
                        }
                    }
                },
            }
            button { class: "send", onclick: { let mut send = send.clone(); move |_| send() }, "Send" }
        }
    }
}

#[component]
fn Changes() -> Element {
    let model = use_model();
    let sets: Vec<ChangeSetSummary> = model
        .read()
        .change_sets
        .iter()
        .filter(|s| s.state == ReviewState::Pending)
        .cloned()
        .collect();
    rsx! {
        section { class: "changes",
            if sets.is_empty() { p { class: "empty", "No changes wait for review." } }
            for set in sets {
                ChangeSetCard { key: "{set.id}", set }
            }
        }
    }
}

#[component]
fn ChangeSetCard(set: ChangeSetSummary) -> Element {
    let actions = use_actions();
    let model = use_model();
    let id = set.id;
    let detail = model.read().change_details.get(&id).cloned();
    rsx! {
        article { class: "card", aria_label: "Change set {id}",
            h2 { "{inert(&set.title)}" }
            if let Some(detail) = detail {
                for file in detail.files {
                    crate::changes::FileHunks { key: "{file.uri}", set: id, name: model.read().file_name(&file.uri), file }
                }
            } else {
                ul { class: "files",
                    for f in set.files.iter() {
                        li { key: "{f.uri}", "{inert(&model.read().file_name(&f.uri))} ({f.hunks})" }
                    }
                }
                button { onclick: move |_| actions.send(Action::ShowSet(id)), "Show hunks" }
            }
            div { class: "buttons",
                button { class: "allow", onclick: move |_| actions.send(Action::Keep { set: id }), "Keep" }
                button { class: "deny", onclick: move |_| actions.send(Action::Undo { set: id, uri: None, hunk: None }), "Undo all" }
            }
        }
    }
}

#[component]
fn Terminals() -> Element {
    let mut model = use_model();
    let actions = use_actions();
    let list: Vec<(u64, String, bool)> = model
        .read()
        .terminals
        .values()
        .map(|t| {
            (
                t.info.terminal,
                t.info.title.clone(),
                t.exited.is_some() || t.info.exited,
            )
        })
        .collect();
    rsx! {
        section { class: "terminals",
            div { class: "buttons",
                button { onclick: move |_| actions.send(Action::NewTerminal { claude: false }), "New terminal" }
                button { onclick: move |_| actions.send(Action::NewTerminal { claude: true }), "Start Claude Code here" }
            }
            ul { class: "list",
                for (id, title, exited) in list {
                    li { key: "{id}",
                        button { class: "session",
                            onclick: move |_| { model.write().open(View::Terminal(id)); actions.send(Action::OpenTerminal(id)); },
                            span { class: "title", if title.is_empty() { "Terminal {id}" } else { "{inert(&title)}" } }
                            if exited { span { class: "state", "exited" } }
                        }
                    }
                }
            }
        }
    }
}

/// How long a terminal's size must hold before it is sent.
const RESIZE_SETTLE: std::time::Duration = std::time::Duration::from_millis(150);

#[component]
fn Terminal(id: u64) -> Element {
    let mut model = use_model();
    let actions = use_actions();
    let screen: Option<Snapshot> = model
        .read()
        .terminals
        .get(&id)
        .and_then(|t| t.screen.clone());
    // The input is not controlled (echoing `value` races with typing):
    // what it holds is compared with what was sent, and only the
    // difference goes to the terminal; nothing is sent while an input
    // method composes.
    let mut sent = use_signal(String::new);
    let mut composing = use_signal(|| false);
    let mut wanted = use_signal(|| None::<(u16, u16)>);
    let history: Option<Vec<Row>> = model
        .read()
        .terminals
        .get(&id)
        .and_then(|t| t.history.clone());
    let mut typed = move |value: String| {
        let (erase, text) = crate::keys::typed_difference(&sent.read(), &value);
        for _ in 0..erase {
            actions.send(Action::Key {
                terminal: id,
                key: "Backspace".into(),
            });
        }
        if !text.is_empty() {
            actions.send(Action::Text { terminal: id, text });
        }
        sent.set(value);
    };
    rsx! {
        section { class: "terminal-view", "data-terminal": "{id}",
            div { class: "buttons",
                Back { to: View::Terminals, label: "Terminals" }
                button { onclick: move |_| actions.send(Action::History(id)), "Earlier lines" }
                if history.is_some() {
                    button {
                        onclick: move |_| {
                            if let Some(t) = model.write().terminals.get_mut(&id) {
                                t.history = None;
                            }
                        },
                        "Hide earlier lines"
                    }
                }
                // Ends the terminal's programs in the service, for every
                // page and editor that shows it.
                button { class: "deny close", onclick: move |_| actions.send(Action::CloseTerminal(id)), "Close" }
            }
            if let Some(history) = history {
                div { class: "terminal history", role: "log", aria_label: "Earlier lines",
                    if history.is_empty() {
                        p { class: "empty", "Nothing above the screen yet." }
                    }
                    for (n, row) in history.into_iter().enumerate() {
                        TermRow { key: "{n}", cursor: None, row }
                    }
                }
            }
            div { class: "terminal", role: "log", aria_label: "Terminal",
                onresize: move |e: ResizeEvent| {
                    if let Ok(size) = e.get_content_box_size() {
                        // Cell size from the stylesheet: 8.4 px × 17 px (14 px monospace).
                        let cols = (size.width / 8.4).floor().clamp(10.0, 500.0) as u16;
                        let rows = (size.height / 17.0).floor().clamp(4.0, 200.0) as u16;
                        // A phone turning or a window dragged resizes many
                        // times: only the size it settles on is sent.
                        wanted.set(Some((rows, cols)));
                        spawn(async move {
                            tokio::time::sleep(RESIZE_SETTLE).await;
                            if wanted() == Some((rows, cols)) {
                                actions.send(Action::Resize { terminal: id, rows, cols });
                            }
                        });
                    }
                },

                if let Some(screen) = screen {
                    for row in screen.lines.iter().cloned() {
                        TermRow { key: "{row.index}", cursor: (screen.cursor.visible && screen.cursor.row == row.index).then_some(screen.cursor.col), row }
                    }
                } else {
                    p { class: "empty", "Waiting for the screen…" }
                }
            }
            input { class: "keys", r#type: "text", aria_label: "Terminal input",
                autocomplete: "off", autocapitalize: "off", spellcheck: "false",
                oncompositionstart: move |_| composing.set(true),
                oncompositionend: move |e: CompositionEvent| {
                    composing.set(false);
                    let mut value = sent.read().clone();
                    value.push_str(&e.data().data());
                    typed(value);
                },
                oninput: move |e: FormEvent| {
                    if !composing() {
                        typed(e.value());
                    }
                },
                onkeydown: move |e: KeyboardEvent| {
                    let m = e.modifiers();
                    if let Some(key) = crate::keys::key_name(&e.key().to_string(), m.contains(Modifiers::CONTROL), m.contains(Modifiers::ALT), m.contains(Modifiers::SHIFT)) {
                        // Backspace comes through the input's value, unless
                        // there is nothing in it to erase.
                        if key != "Backspace" || sent.read().is_empty() {
                            actions.send(Action::Key { terminal: id, key: key.clone() });
                        }
                        // A line was entered: the page's script empties the
                        // input (`app.js`), so nothing of it was sent.
                        if key == "Enter" {
                            sent.set(String::new());
                        }
                    }
                },
            }
            div { class: "keybar",
                for (label, key) in [("Esc", "Escape"), ("Tab", "Tab"), ("Ctrl+C", "Ctrl+c"), ("↑", "Up"), ("↓", "Down"), ("Enter", "Enter")] {
                    button { key: "{label}", aria_label: "{key}", onclick: move |_| actions.send(Action::Key { terminal: id, key: key.to_owned() }), "{label}" }
                }
            }
        }
    }
}

#[component]
fn TermRow(row: Row, cursor: Option<u16>) -> Element {
    rsx! {
        div { class: "row",
            for (n, span) in row.spans.iter().enumerate() {
                span { key: "{n}", class: span_class(span),
                    color: span.fg.and_then(css_colour), background_color: span.bg.and_then(css_colour),
                    "{inert(&span.text)}"
                }
            }
            if cursor.is_some() { span { class: "cursor", " " } }
        }
    }
}

/// Classes for a span's style (the 16 colours of the palette live in the
/// stylesheet; a style attribute would need `unsafe-inline`: the other
/// colours are set as the element's style properties, [`css_colour`],
/// which the policy allows).
fn span_class(span: &Span) -> String {
    let mut class = String::from("s");
    if span.bold {
        class.push_str(" b");
    }
    if span.dim {
        class.push_str(" d");
    }
    if span.italic {
        class.push_str(" i");
    }
    if span.underline {
        class.push_str(" u");
    }
    if span.inverse {
        class.push_str(" r");
    }
    // The 16 palette colours have classes; others are style properties.
    if let Some(Color::Indexed(n @ 0..16)) = span.fg {
        class.push_str(&format!(" f{n}"));
    }
    if let Some(Color::Indexed(n @ 0..16)) = span.bg {
        class.push_str(&format!(" g{n}"));
    }
    class
}

/// A colour the stylesheet's palette classes do not name, as CSS: the
/// 256-colour palette's cube and greys as xterm draws them, and true
/// colour as it is (Claude Code's diff backgrounds are one or the other,
/// as the terminal announces).
fn css_colour(colour: Color) -> Option<String> {
    match colour {
        Color::Indexed(0..16) => None,
        Color::Indexed(n @ 16..232) => {
            let level = |v: u8| if v == 0 { 0 } else { 55 + 40 * v };
            let i = n - 16;
            let (r, g, b) = (level(i / 36), level(i / 6 % 6), level(i % 6));
            Some(format!("#{r:02x}{g:02x}{b:02x}"))
        }
        Color::Indexed(n) => {
            let grey = 8 + 10 * (n - 232);
            Some(format!("#{grey:02x}{grey:02x}{grey:02x}"))
        }
        Color::Rgb(r, g, b) => Some(format!("#{r:02x}{g:02x}{b:02x}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::{DiffLine, Sign};

    const HOSTILE: &str = "<script>alert(1)</script><img src=x onerror=alert(2)>\u{202e}";

    fn no_markup(html: &str) {
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("&#60;script&#62;") || html.contains("&lt;script&gt;"),
            "{html}"
        );
    }

    /// A screen's first row: `text` in one span of these colours.
    fn one_span_row(text: &str, fg: Option<Color>, bg: Option<Color>) -> Row {
        Row {
            index: 0,
            spans: vec![Span {
                text: text.into(),
                fg,
                bg,
                bold: false,
                dim: false,
                italic: false,
                underline: false,
                inverse: false,
            }],
        }
    }

    /// Every colour a screen has reaches the page: the palette's 16 by
    /// class, the 256-colour palette and true colour by value.
    #[test]
    fn every_screen_colour_has_a_css_colour() {
        assert_eq!(css_colour(Color::Indexed(1)), None);
        assert_eq!(css_colour(Color::Indexed(16)).as_deref(), Some("#000000"));
        assert_eq!(css_colour(Color::Indexed(196)).as_deref(), Some("#ff0000"));
        assert_eq!(css_colour(Color::Indexed(22)).as_deref(), Some("#005f00"));
        assert_eq!(css_colour(Color::Indexed(255)).as_deref(), Some("#eeeeee"));
        assert_eq!(
            css_colour(Color::Rgb(34, 92, 43)).as_deref(),
            Some("#225c2b")
        );
        let row = one_span_row(
            "+ added",
            Some(Color::Indexed(2)),
            Some(Color::Rgb(34, 92, 43)),
        );
        let html = dioxus_ssr::render_element(rsx! { TermRow { row, cursor: None } });
        assert!(
            html.contains("f2") && html.contains("background-color:#225c2b"),
            "{html}"
        );
    }

    #[test]
    fn what_a_session_or_a_terminal_says_is_text_never_markup() {
        let lines = vec![DiffLine {
            sign: Sign::Added,
            text: HOSTILE.into(),
        }];
        no_markup(&dioxus_ssr::render_element(rsx! { Diff { lines } }));
        no_markup(&dioxus_ssr::render_element(line_view(
            0,
            Line::Reply(HOSTILE.into()),
        )));
        no_markup(&dioxus_ssr::render_element(line_view(
            1,
            Line::Tool(HOSTILE.into()),
        )));
        let mut row = one_span_row(HOSTILE, Some(Color::Indexed(1)), None);
        row.spans[0].bold = true;
        let html = dioxus_ssr::render_element(rsx! { TermRow { row, cursor: None } });
        no_markup(&html);
        assert!(html.contains("class=\"s b f1\""), "{html}");
    }
}
