// Reviewing Claude's edits in VS Code's own diff editor.
//
// Proposals (Claude Code's `openDiff`): the service's `window/showDocument`
// of a proposal document opens `vscode.diff` of the target's original text
// (a read-only document of our `moonkale-original:` scheme) against the
// proposal document (a real file, editable); Accept/Reject are buttons in
// the editor's title (package.json), Keep/Revert of each hunk are CodeLens
// on the proposal side, and `moonkale/proposalClosed` closes the tab.
//
// Change sets (edits Claude made without asking): "Moonkale: Review Claude's
// changes" picks a file of the newest pending set and opens its diff against
// the text before (`moonkale-before:`), each pending hunk of a changed file
// has "Undo this change" / "Keep" CodeLens, and an announced set (its turn
// just ended) is an information message.
//
// Wire: docs/protocol.md, "Proposals as diffs" and "Change sets: review
// after the fact".

import * as vscode from 'vscode';
import { LanguageClient } from 'vscode-languageclient/node';

const ORIGINAL_SCHEME = 'moonkale-original';
const BEFORE_SCHEME = 'moonkale-before';

interface LineRange {
  start: number;
  end: number;
}

interface ProposalHunk {
  index: number;
  original: LineRange;
  proposed: LineRange;
  removed: string;
  added: string;
  kept: boolean;
}

interface ProposalInfo {
  tabName: string;
  target: string;
  document: string;
  original: string;
  hunks: ProposalHunk[];
}

interface ChangeHunk {
  index: number;
  before: LineRange;
  after: LineRange;
  removed: string;
  added: string;
  state: 'pending' | 'kept' | 'undone';
}

interface FileSummary {
  uri: string;
  kind: 'created' | 'modified' | 'deleted';
  hunks: number;
  pending: number;
}

interface ChangeSetSummary {
  id: number;
  title: string;
  state: 'pending' | 'kept' | 'undone';
  files: FileSummary[];
}

interface FileChange {
  uri: string;
  kind: FileSummary['kind'];
  before: string | null;
  after: string | null;
  hunks: ChangeHunk[];
}

interface ShowResult {
  set: ChangeSetSummary;
  files: FileChange[];
}

// Proposal documents live in the service's runtime directory:
// `$XDG_RUNTIME_DIR/moonkale/proposals/…` or `/tmp/moonkale-<uid>/proposals/…`.
const PROPOSALS = /\/moonkale[^/]*\/proposals\//;

export function isProposal(uri: vscode.Uri): boolean {
  return uri.scheme === 'file' && PROPOSALS.test(uri.path);
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/// Read-only documents whose text we were given: the left side of a diff.
class Texts implements vscode.TextDocumentContentProvider {
  private readonly texts = new Map<string, string>();
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  set(uri: vscode.Uri, text: string): void {
    this.texts.set(uri.toString(), text);
    this.changed.fire(uri);
  }

  delete(uri: vscode.Uri): void {
    this.texts.delete(uri.toString());
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.toString()) ?? '';
  }
}

export class Review {
  private readonly originals = new Texts();
  private readonly befores = new Texts();
  private readonly lensesChanged = new vscode.EventEmitter<void>();
  /// The pending change sets, as the service last said.
  private sets: ChangeSetSummary[] = [];
  /// `moonkale/changes/show` of each pending set, fetched when a lens needs it.
  private shown = new Map<number, Promise<ShowResult | undefined>>();

  constructor(private readonly client: LanguageClient) {}

  register(): vscode.Disposable[] {
    const c = this.client;
    return [
      vscode.workspace.registerTextDocumentContentProvider(ORIGINAL_SCHEME, this.originals),
      vscode.workspace.registerTextDocumentContentProvider(BEFORE_SCHEME, this.befores),
      c.onNotification('moonkale/proposalClosed', (params: { uri: string }) =>
        void this.proposalClosed(c.protocol2CodeConverter.asUri(params.uri)),
      ),
      c.onNotification('moonkale/changes/changed', (params: { sets: ChangeSetSummary[]; announce?: number }) =>
        this.changesChanged(params),
      ),
      vscode.languages.registerCodeLensProvider({ scheme: 'file' }, {
        onDidChangeCodeLenses: this.lensesChanged.event,
        provideCodeLenses: (document) =>
          isProposal(document.uri) ? this.proposalLenses(document) : this.changeLenses(document),
      }),
      vscode.commands.registerCommand('moonkale.keepProposalHunk', (document: string, hunk: ProposalHunk) =>
        this.decideHunk('moonkale.keepHunk', document, hunk),
      ),
      vscode.commands.registerCommand('moonkale.revertProposalHunk', (document: string, hunk: ProposalHunk) =>
        this.decideHunk('moonkale.revertHunk', document, hunk),
      ),
      vscode.commands.registerCommand('moonkale.reviewChanges', () => this.reviewChanges()),
      vscode.commands.registerCommand('moonkale.undoThisChange', (set: number, uri: string, hunk: number) =>
        this.undo({ set, uri, hunk }),
      ),
      vscode.commands.registerCommand('moonkale.keepThisChange', (set: number, uri: string, hunk: number) =>
        this.keep({ set, uri, hunk }),
      ),
      this.lensesChanged,
    ];
  }

  /// The proposal document a command was run on: `uri` (a proposal, or the
  /// original side of its diff), else the active editor's.
  proposalDocument(uri?: vscode.Uri): string | undefined {
    const target = uri ?? vscode.window.activeTextEditor?.document.uri;
    if (target?.scheme === ORIGINAL_SCHEME) return target.query;
    return target && isProposal(target) ? this.client.code2ProtocolConverter.asUri(target) : undefined;
  }

  private async execute(command: string, args: unknown[]): Promise<void> {
    try {
      await this.client.sendRequest('workspace/executeCommand', { command, arguments: args });
    } catch (e) {
      vscode.window.showErrorMessage(`Moonkale: ${errorText(e)}`);
    }
  }

  /// Keeps or reverts `hunk` of a lens. Indices move as the proposal is
  /// edited and a lens can be older than the last edit, so the hunk is found
  /// again now by its lines.
  private async decideHunk(command: string, document: string, hunk: ProposalHunk): Promise<void> {
    try {
      const now = await this.proposal(this.client.protocol2CodeConverter.asUri(document));
      const same = now?.hunks.find((h) => h.removed === hunk.removed && h.added === hunk.added);
      if (!same) {
        void vscode.window.showWarningMessage('Moonkale: that change of the proposal was edited or decided since.');
        return;
      }
      await this.execute(command, [document, same.index]);
    } catch (e) {
      void vscode.window.showErrorMessage(`Moonkale: ${errorText(e)}`);
    }
  }

  private async proposal(document: vscode.Uri): Promise<ProposalInfo | undefined> {
    const { proposals } = await this.client.sendRequest<{ proposals: ProposalInfo[] }>('moonkale/proposals');
    const key = document.toString();
    return proposals.find((p) => this.client.protocol2CodeConverter.asUri(p.document).toString() === key);
  }

  /// Opens a proposal as a diff; false if it is no proposal, or the service
  /// cannot list proposals (then it opens as a plain document).
  async showProposal(uri: string): Promise<boolean> {
    const document = this.client.protocol2CodeConverter.asUri(uri);
    if (!isProposal(document)) return false;
    let proposal: ProposalInfo | undefined;
    try {
      proposal = await this.proposal(document);
    } catch {
      return false;
    }
    if (!proposal) return false;
    const target = this.client.protocol2CodeConverter.asUri(proposal.target);
    // The query names the proposal, for the title buttons on the left side.
    const original = target.with({ scheme: ORIGINAL_SCHEME, query: uri });
    this.originals.set(original, proposal.original);
    const name = vscode.workspace.asRelativePath(target);
    await vscode.commands.executeCommand('vscode.diff', original, document, `${name} (Claude Code's proposal)`);
    return true;
  }

  /// A decided proposal's file is gone; its diff tab would stay open on a
  /// deleted file, so it closes. Unsaved edits there are not lost: they were
  /// the answer (accepted, or rejected with it), so a dirty tab is reverted
  /// and closed rather than asking to save a file that no longer exists.
  private async proposalClosed(document: vscode.Uri): Promise<void> {
    const key = document.toString();
    const tabs = vscode.window.tabGroups.all
      .flatMap((group) => group.tabs)
      .filter((tab) => {
        const input = tab.input;
        return (
          (input instanceof vscode.TabInputText && input.uri.toString() === key) ||
          (input instanceof vscode.TabInputTextDiff && input.modified.toString() === key)
        );
      });
    this.lensesChanged.fire();
    await vscode.window.tabGroups.close(tabs.filter((tab) => !tab.isDirty));
    for (const tab of tabs.filter((t) => t.isDirty)) {
      const input = tab.input;
      const at = { viewColumn: tab.group.viewColumn, preview: false };
      if (input instanceof vscode.TabInputTextDiff) {
        await vscode.commands.executeCommand('vscode.diff', input.original, input.modified, tab.label, at);
      } else {
        await vscode.window.showTextDocument(document, at);
      }
      await vscode.commands.executeCommand('workbench.action.revertAndCloseActiveEditor');
    }
    for (const tab of tabs) {
      if (tab.input instanceof vscode.TabInputTextDiff) this.originals.delete(tab.input.original);
    }
  }

  /// Above the proposal, Accept and Reject of the whole (named: the title
  /// bar's buttons are bare icons); above each hunk, Keep and Revert.
  private async proposalLenses(document: vscode.TextDocument): Promise<vscode.CodeLens[]> {
    let proposal: ProposalInfo | undefined;
    try {
      proposal = await this.proposal(document.uri);
    } catch {
      return [];
    }
    if (!proposal) return [];
    const uri = proposal.document;
    const top = new vscode.Range(0, 0, 0, 0);
    const n = proposal.hunks.length;
    const whole = [
      new vscode.CodeLens(top, {
        title: `$(check) Accept Claude Code's edit (${n} ${n === 1 ? 'change' : 'changes'})`,
        command: 'moonkale.accept',
        arguments: [document.uri],
      }),
      new vscode.CodeLens(top, { title: '$(close) Reject it', command: 'moonkale.reject', arguments: [document.uri] }),
    ];
    return whole.concat(
      proposal.hunks
        .filter((h) => !h.kept)
        .flatMap((h) => {
          const at = new vscode.Range(h.proposed.start, 0, h.proposed.start, 0);
          return [
            new vscode.CodeLens(at, { title: 'Keep this change', command: 'moonkale.keepProposalHunk', arguments: [uri, h] }),
            new vscode.CodeLens(at, { title: 'Revert this change', command: 'moonkale.revertProposalHunk', arguments: [uri, h] }),
          ];
        }),
    );
  }

  // Change sets ------------------------------------------------------------

  /// After a `workspace/applyEdit`: a document it made equal to its file
  /// (an undo writes the file and sends the same text) is saved, which
  /// writes nothing new, so it does not show as unsaved.
  async settleEdited(edit: { changes?: Record<string, unknown>; documentChanges?: unknown[] }): Promise<void> {
    const uris = Object.keys(edit.changes ?? {});
    for (const change of edit.documentChanges ?? []) {
      const uri = (change as { textDocument?: { uri: string } }).textDocument?.uri;
      if (uri) uris.push(uri);
    }
    for (const uri of uris) {
      const file = this.client.protocol2CodeConverter.asUri(uri);
      const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === file.toString());
      if (!document?.isDirty || isProposal(file)) continue;
      try {
        const onDisk = new TextDecoder().decode(await vscode.workspace.fs.readFile(file));
        if (onDisk === document.getText()) await document.save();
      } catch {
        // Gone or unreadable: nothing to settle.
      }
    }
  }

  private changesChanged(params: { sets: ChangeSetSummary[]; announce?: number }): void {
    this.sets = params.sets;
    this.shown.clear();
    this.lensesChanged.fire();
    const set = params.announce === undefined ? undefined : this.sets.find((s) => s.id === params.announce);
    if (!set) return;
    const names = set.files.map((f) => vscode.workspace.asRelativePath(this.client.protocol2CodeConverter.asUri(f.uri)));
    void vscode.window
      .showInformationMessage(`Claude changed ${names.join(', ')}`, "Review Claude's changes")
      .then((picked) => picked && this.reviewChanges());
  }

  private show(set: number): Promise<ShowResult | undefined> {
    let shown = this.shown.get(set);
    if (!shown) {
      shown = this.client
        .sendRequest<ShowResult>('moonkale/changes/show', { set })
        .then(
          (r) => r,
          () => undefined,
        );
      this.shown.set(set, shown);
    }
    return shown;
  }

  private async changeLenses(document: vscode.TextDocument): Promise<vscode.CodeLens[]> {
    const key = document.uri.toString();
    const lenses: vscode.CodeLens[] = [];
    for (const summary of this.sets) {
      const file = summary.files.find((f) => this.client.protocol2CodeConverter.asUri(f.uri).toString() === key);
      if (!file || file.pending === 0) continue;
      const shown = await this.show(summary.id);
      const change = shown?.files.find((f) => f.uri === file.uri);
      for (const h of change?.hunks ?? []) {
        if (h.state !== 'pending') continue;
        const at = new vscode.Range(h.after.start, 0, h.after.start, 0);
        const args = [summary.id, file.uri, h.index];
        lenses.push(
          new vscode.CodeLens(at, { title: 'Undo this change', command: 'moonkale.undoThisChange', arguments: args }),
          new vscode.CodeLens(at, { title: 'Keep', command: 'moonkale.keepThisChange', arguments: args }),
        );
      }
    }
    return lenses;
  }

  /// "Moonkale: Review Claude's changes": a file of the newest pending set,
  /// opened as a diff of its text before the set against the file.
  async reviewChanges(): Promise<void> {
    let shown: ShowResult | undefined;
    try {
      const { sets } = await this.client.sendRequest<{ sets: ChangeSetSummary[] }>('moonkale/changes/list');
      const newest = sets.filter((s) => s.state === 'pending').pop();
      if (!newest) {
        void vscode.window.showInformationMessage('Claude has no pending changes.');
        return;
      }
      shown = await this.client.sendRequest<ShowResult>('moonkale/changes/show', { set: newest.id });
    } catch (e) {
      void vscode.window.showErrorMessage(`Moonkale: ${errorText(e)}`);
      return;
    }
    const items = shown.files.map((file) => {
      const uri = this.client.protocol2CodeConverter.asUri(file.uri);
      const pending = file.hunks.filter((h) => h.state === 'pending').length;
      return { label: vscode.workspace.asRelativePath(uri), description: `${file.kind}, ${pending} ${pending === 1 ? 'change' : 'changes'} pending`, file, uri };
    });
    const picked = await vscode.window.showQuickPick(items, { title: `Claude's changes: ${shown.set.title}` });
    if (!picked) return;
    const before = picked.uri.with({ scheme: BEFORE_SCHEME, query: String(shown.set.id) });
    this.befores.set(before, picked.file.before ?? '');
    await vscode.commands.executeCommand('vscode.diff', before, picked.uri, `${picked.label} (before Claude's change)`);
  }

  private async undo(params: { set: number; uri: string; hunk: number }): Promise<void> {
    try {
      await this.client.sendRequest('moonkale/changes/undo', params);
    } catch (e) {
      // Refused (the lines changed since Claude wrote them): the user's
      // text stays; the message names the file and lines.
      void vscode.window.showErrorMessage(`Moonkale: ${errorText(e)}`);
    }
  }

  private async keep(params: { set: number; uri: string; hunk: number }): Promise<void> {
    try {
      await this.client.sendRequest('moonkale/changes/keep', params);
    } catch (e) {
      void vscode.window.showErrorMessage(`Moonkale: ${errorText(e)}`);
    }
  }
}

/// Claude's changes still to decide, as the service publishes them
/// (diagnostics of source `claude`: a proposal's hunks, a change set's):
/// marked in the editors that show them (a bar beside the lines, a mark in
/// the overview ruler, the service's words on hover) rather than listed as
/// problems, which they are not.
export class PendingMarks implements vscode.Disposable {
  static readonly SOURCE = 'claude';
  private readonly byUri = new Map<string, vscode.Diagnostic[]>();
  private readonly look = vscode.window.createTextEditorDecorationType({
    isWholeLine: true,
    borderStyle: 'solid',
    borderWidth: '0 0 0 3px',
    borderColor: new vscode.ThemeColor('editorGutter.modifiedBackground'),
    overviewRulerColor: new vscode.ThemeColor('editorOverviewRuler.modifiedForeground'),
    overviewRulerLane: vscode.OverviewRulerLane.Left,
  });
  private readonly watch = vscode.window.onDidChangeVisibleTextEditors((editors) => editors.forEach((e) => this.paint(e)));

  set(uri: vscode.Uri, pending: vscode.Diagnostic[]): void {
    if (pending.length > 0) this.byUri.set(uri.toString(), pending);
    else this.byUri.delete(uri.toString());
    const key = uri.toString();
    vscode.window.visibleTextEditors.filter((e) => e.document.uri.toString() === key).forEach((e) => this.paint(e));
  }

  private paint(editor: vscode.TextEditor): void {
    const pending = this.byUri.get(editor.document.uri.toString()) ?? [];
    editor.setDecorations(
      this.look,
      pending.map((d) => {
        // Whole lines from column 0 to column 0 of the line after.
        const { start, end } = d.range;
        const last = end.line > start.line && end.character === 0 ? end.line - 1 : end.line;
        const hover = new vscode.MarkdownString();
        d.message.split('\n').forEach((line) => hover.appendText(line).appendMarkdown('  \n'));
        return { range: new vscode.Range(start.line, 0, last, 0), hoverMessage: hover };
      }),
    );
  }

  dispose(): void {
    this.watch.dispose();
    this.look.dispose();
  }
}
