//! The tools of Claude Code's IDE protocol, typed: the closed [`IdeTool`]
//! enum with each tool's wire name, the one table of their descriptions and
//! input schemas ([`IdeTool::spec`] for the IDE server, [`EditorTool::spec`]
//! for the editor tools a hosted session offers its CLI), and the calls as
//! the hub takes them ([`IdeToolCall`], [`EditorToolCall`]), parsed once at
//! the adapter.
//!
//! **Invariant:** every IDE tool is an [`IdeTool`]; its name, description
//! and schema are written once, here.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A tool of Claude Code's IDE protocol (ide-protocol.md §4), in the order
/// the IDE server lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdeTool {
    OpenDiff,
    CloseTab,
    CloseAllDiffTabs,
    GetDiagnostics,
    OpenFile,
    GetCurrentSelection,
    GetLatestSelection,
    GetOpenEditors,
    GetWorkspaceFolders,
    CheckDocumentDirty,
    SaveDocument,
    ExecuteCode,
}

impl IdeTool {
    /// Every tool, in the order of the IDE server's `tools/list`.
    pub const ALL: [IdeTool; 12] = [
        IdeTool::OpenDiff,
        IdeTool::CloseTab,
        IdeTool::CloseAllDiffTabs,
        IdeTool::GetDiagnostics,
        IdeTool::OpenFile,
        IdeTool::GetCurrentSelection,
        IdeTool::GetLatestSelection,
        IdeTool::GetOpenEditors,
        IdeTool::GetWorkspaceFolders,
        IdeTool::CheckDocumentDirty,
        IdeTool::SaveDocument,
        IdeTool::ExecuteCode,
    ];

    /// The tool's name on the wire.
    pub const fn name(self) -> &'static str {
        match self {
            IdeTool::OpenDiff => "openDiff",
            IdeTool::CloseTab => "close_tab",
            IdeTool::CloseAllDiffTabs => "closeAllDiffTabs",
            IdeTool::GetDiagnostics => "getDiagnostics",
            IdeTool::OpenFile => "openFile",
            IdeTool::GetCurrentSelection => "getCurrentSelection",
            IdeTool::GetLatestSelection => "getLatestSelection",
            IdeTool::GetOpenEditors => "getOpenEditors",
            IdeTool::GetWorkspaceFolders => "getWorkspaceFolders",
            IdeTool::CheckDocumentDirty => "checkDocumentDirty",
            IdeTool::SaveDocument => "saveDocument",
            IdeTool::ExecuteCode => "executeCode",
        }
    }

    /// The tool of a wire name, if it is one.
    pub fn parse(name: &str) -> Option<IdeTool> {
        IdeTool::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Its entry in the IDE server's `tools/list`.
    pub const fn spec(self) -> ToolSpec {
        use Param as P;
        const TAB_NAME: Param = P::string("tab_name", "Name of the diff view").required();
        let (description, params): (&str, &[Param]) = match self {
            IdeTool::OpenDiff => (
                "Open a diff of a proposed change for the user to accept or reject in their editor.",
                const {
                    &[
                        P::string("old_file_path", "Path of the file to change").required(),
                        P::string("new_file_path", "Path of the file after the change").required(),
                        P::string("new_file_contents", "The whole proposed contents").required(),
                        TAB_NAME,
                    ]
                },
            ),
            IdeTool::CloseTab => ("Close a diff view by its name.", &[TAB_NAME]),
            IdeTool::CloseAllDiffTabs => ("Close every diff view opened for Claude Code.", &[]),
            IdeTool::GetDiagnostics => (
                "Get language diagnostics from the editor.",
                const {
                    &[P::string(
                        "uri",
                        "Optional file URI to get diagnostics for. If not provided, gets diagnostics for all files.",
                    )]
                },
            ),
            IdeTool::OpenFile => (
                "Open a file in the editor and optionally select a range of text.",
                const {
                    &[
                        P::string("filePath", "Path to the file to open").required(),
                        P::boolean("preview", "Open in preview mode"),
                        P::string(
                            "startText",
                            "Text pattern to find the start of the selection",
                        ),
                        P::string("endText", "Text pattern to find the end of the selection"),
                        P::boolean(
                            "selectToEndOfLine",
                            "Extend the selection to the end of the line",
                        ),
                        P::boolean("makeFrontmost", "Make the file the active editor tab"),
                    ]
                },
            ),
            IdeTool::GetCurrentSelection => {
                ("Get the current text selection in the active editor.", &[])
            }
            IdeTool::GetLatestSelection => ("Get the most recent text selection.", &[]),
            IdeTool::GetOpenEditors => ("Get the documents open in the editors.", &[]),
            IdeTool::GetWorkspaceFolders => ("Get the workspace folders.", &[]),
            IdeTool::CheckDocumentDirty => (
                "Check whether a document has unsaved changes.",
                const { &[P::string("filePath", "Path to the file to check").required()] },
            ),
            IdeTool::SaveDocument => (
                "Save a document with unsaved changes.",
                const { &[P::string("filePath", "Path to the file to save").required()] },
            ),
            IdeTool::ExecuteCode => (
                "Execute code in the editor (not supported by Moonkale).",
                const { &[P::string("code", "The code to execute").required()] },
            ),
        };
        ToolSpec {
            name: self.name(),
            description,
            params,
        }
    }
}

impl fmt::Display for IdeTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no tool of ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownTool(pub String);

impl FromStr for IdeTool {
    type Err = UnknownTool;

    fn from_str(name: &str) -> Result<IdeTool, UnknownTool> {
        IdeTool::parse(name).ok_or_else(|| UnknownTool(name.to_owned()))
    }
}

/// A tool of the editor-tools MCP server (`moonkale`) a hosted session
/// offers its CLI: some of the IDE tools, answered as for a CLI on the
/// host's IDE port, `openFile` by lines, and `readBuffer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EditorTool {
    GetOpenEditors,
    GetCurrentSelection,
    /// Answered, but not listed.
    GetLatestSelection,
    GetDiagnostics,
    GetWorkspaceFolders,
    ReadBuffer,
    /// `openFile`, selecting lines (1-based) rather than text.
    OpenFile,
}

impl EditorTool {
    /// The tools the server lists, in order.
    pub const LISTED: [EditorTool; 6] = [
        EditorTool::GetOpenEditors,
        EditorTool::GetCurrentSelection,
        EditorTool::GetDiagnostics,
        EditorTool::GetWorkspaceFolders,
        EditorTool::ReadBuffer,
        EditorTool::OpenFile,
    ];
    /// Every tool the server answers.
    pub const ALL: [EditorTool; 7] = [
        EditorTool::GetOpenEditors,
        EditorTool::GetCurrentSelection,
        EditorTool::GetLatestSelection,
        EditorTool::GetDiagnostics,
        EditorTool::GetWorkspaceFolders,
        EditorTool::ReadBuffer,
        EditorTool::OpenFile,
    ];

    /// The IDE tool it is, by name and answer (`readBuffer` is none).
    pub const fn ide(self) -> Option<IdeTool> {
        Some(match self {
            EditorTool::GetOpenEditors => IdeTool::GetOpenEditors,
            EditorTool::GetCurrentSelection => IdeTool::GetCurrentSelection,
            EditorTool::GetLatestSelection => IdeTool::GetLatestSelection,
            EditorTool::GetDiagnostics => IdeTool::GetDiagnostics,
            EditorTool::GetWorkspaceFolders => IdeTool::GetWorkspaceFolders,
            EditorTool::OpenFile => IdeTool::OpenFile,
            EditorTool::ReadBuffer => return None,
        })
    }

    /// The tool's name on the wire.
    pub const fn name(self) -> &'static str {
        match self.ide() {
            Some(tool) => tool.name(),
            None => "readBuffer",
        }
    }

    /// The tool of a wire name, if the server answers it.
    pub fn parse(name: &str) -> Option<EditorTool> {
        EditorTool::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Its entry in the server's `tools/list`: the model reads these, so
    /// they say more than the IDE server's, whose reader is the CLI.
    pub const fn spec(self) -> ToolSpec {
        use Param as P;
        const PATH: Param =
            P::string("filePath", "Absolute path of a file in the workspace").required();
        let (description, params): (&str, &[Param]) = match self {
            EditorTool::GetOpenEditors => (
                "The files open in the user's editors, with their unsaved-changes flag.",
                &[],
            ),
            EditorTool::GetCurrentSelection => (
                "The user's current selection (or cursor) in their active editor, with its text.",
                &[],
            ),
            EditorTool::GetLatestSelection => (
                "The user's most recent selection in their editors, with its text.",
                &[],
            ),
            EditorTool::GetDiagnostics => (
                "Diagnostics (errors, warnings) the user's editors show, for one file URI or all.",
                const { &[P::bare("uri", Kind::String)] },
            ),
            EditorTool::GetWorkspaceFolders => ("The workspace folder.", &[]),
            EditorTool::ReadBuffer => (
                "The text of a file as the user's editor holds it, including unsaved changes. Prefer this to reading the file from disk when the user is editing it.",
                &[PATH],
            ),
            EditorTool::OpenFile => (
                "Shows a file in the user's editor, optionally selecting lines (1-based, inclusive).",
                const {
                    &[
                        PATH,
                        P::bare("startLine", Kind::Integer),
                        P::bare("endLine", Kind::Integer),
                    ]
                },
            ),
        };
        ToolSpec {
            name: self.name(),
            description,
            params,
        }
    }
}

impl fmt::Display for EditorTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EditorTool {
    type Err = UnknownTool;

    fn from_str(name: &str) -> Result<EditorTool, UnknownTool> {
        EditorTool::parse(name).ok_or_else(|| UnknownTool(name.to_owned()))
    }
}

/// A tool's entry in a `tools/list`: its arguments are an object schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub params: &'static [Param],
}

/// One argument of a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    /// Said in the schema when there is one.
    pub description: Option<&'static str>,
    pub required: bool,
}

/// An argument's JSON type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    String,
    Boolean,
    Integer,
}

impl Kind {
    /// The JSON Schema `type`.
    pub const fn json_type(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Boolean => "boolean",
            Kind::Integer => "integer",
        }
    }
}

impl Param {
    const fn string(name: &'static str, description: &'static str) -> Param {
        Param {
            name,
            kind: Kind::String,
            description: Some(description),
            required: false,
        }
    }

    const fn boolean(name: &'static str, description: &'static str) -> Param {
        Param {
            kind: Kind::Boolean,
            ..Param::string(name, description)
        }
    }

    /// Without a description.
    const fn bare(name: &'static str, kind: Kind) -> Param {
        Param {
            name,
            kind,
            description: None,
            required: false,
        }
    }

    const fn required(self) -> Param {
        Param {
            required: true,
            ..self
        }
    }
}

/// An IDE tool call as the hub answers it: the arguments the CLI sent,
/// typed, with paths already confined by the adapter, plus what the
/// adapter read or wrote for it (the hub does no IO). `executeCode` never
/// reaches the hub: the adapter refuses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdeToolCall {
    OpenDiff(OpenDiff),
    CloseTab {
        tab_name: String,
    },
    CloseAllDiffTabs,
    GetDiagnostics {
        /// One file's, else every file's.
        uri: Option<String>,
    },
    OpenFile(OpenFile),
    GetCurrentSelection,
    GetLatestSelection,
    GetOpenEditors,
    GetWorkspaceFolders,
    CheckDocumentDirty {
        file_path: PathBuf,
    },
    SaveDocument {
        file_path: PathBuf,
    },
}

impl IdeToolCall {
    pub const fn tool(&self) -> IdeTool {
        match self {
            IdeToolCall::OpenDiff(_) => IdeTool::OpenDiff,
            IdeToolCall::CloseTab { .. } => IdeTool::CloseTab,
            IdeToolCall::CloseAllDiffTabs => IdeTool::CloseAllDiffTabs,
            IdeToolCall::GetDiagnostics { .. } => IdeTool::GetDiagnostics,
            IdeToolCall::OpenFile(_) => IdeTool::OpenFile,
            IdeToolCall::GetCurrentSelection => IdeTool::GetCurrentSelection,
            IdeToolCall::GetLatestSelection => IdeTool::GetLatestSelection,
            IdeToolCall::GetOpenEditors => IdeTool::GetOpenEditors,
            IdeToolCall::GetWorkspaceFolders => IdeTool::GetWorkspaceFolders,
            IdeToolCall::CheckDocumentDirty { .. } => IdeTool::CheckDocumentDirty,
            IdeToolCall::SaveDocument { .. } => IdeTool::SaveDocument,
        }
    }
}

/// `openDiff`: a proposed change for the user to decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenDiff {
    pub old_file_path: PathBuf,
    /// The file the proposal is for.
    pub new_file_path: PathBuf,
    pub new_file_contents: String,
    pub tab_name: String,
    /// The adapter's: the file's text now (empty for a new file).
    pub old_text: String,
    /// The adapter's: the proposal document it wrote (outside the
    /// workspace), which the editors are shown.
    pub proposal_path: PathBuf,
}

/// `openFile`: show a file, selecting the text from `start_text` to
/// `end_text` (empty ones count as absent, as old CLIs send them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenFile {
    pub file_path: PathBuf,
    pub start_text: Option<String>,
    pub end_text: Option<String>,
    pub select_to_end_of_line: bool,
    /// `false`: only describe the file (default `true`).
    pub make_frontmost: bool,
    /// The adapter's: the file's text on disk, searched when no editor
    /// holds it.
    pub file_text: String,
}

/// A call of the editor tools a hosted session offers its CLI, paths
/// confined by the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EditorToolCall {
    GetOpenEditors,
    GetCurrentSelection,
    GetLatestSelection,
    GetDiagnostics {
        uri: Option<String>,
    },
    GetWorkspaceFolders,
    ReadBuffer {
        file_path: PathBuf,
    },
    /// Shows a file, selecting lines `start_line..=end_line` (1-based).
    OpenFile {
        file_path: PathBuf,
        start_line: Option<u64>,
        end_line: Option<u64>,
    },
}

impl EditorToolCall {
    pub const fn tool(&self) -> EditorTool {
        match self {
            EditorToolCall::GetOpenEditors => EditorTool::GetOpenEditors,
            EditorToolCall::GetCurrentSelection => EditorTool::GetCurrentSelection,
            EditorToolCall::GetLatestSelection => EditorTool::GetLatestSelection,
            EditorToolCall::GetDiagnostics { .. } => EditorTool::GetDiagnostics,
            EditorToolCall::GetWorkspaceFolders => EditorTool::GetWorkspaceFolders,
            EditorToolCall::ReadBuffer { .. } => EditorTool::ReadBuffer,
            EditorToolCall::OpenFile { .. } => EditorTool::OpenFile,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_distinct() {
        for tool in IdeTool::ALL {
            assert_eq!(tool.name().parse(), Ok(tool));
            assert_eq!(tool.spec().name, tool.name());
        }
        for tool in EditorTool::ALL {
            assert_eq!(tool.name().parse(), Ok(tool));
            assert_eq!(tool.spec().name, tool.name());
        }
        let mut names: Vec<_> = IdeTool::ALL.iter().map(|t| t.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), IdeTool::ALL.len());
        assert_eq!(
            "noSuchTool".parse::<IdeTool>(),
            Err(UnknownTool("noSuchTool".into()))
        );
        assert_eq!(EditorTool::parse("saveDocument"), None);
    }
}
