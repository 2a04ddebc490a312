// Moonkale for VS Code: attaches VS Code to moonkale-service through
// `moonkale-shim` (stdio) and tells the service what VS Code's language
// client does not send on its own: the live selection (every change at once,
// with its direction) and the diagnostics of the user's other language servers.
// Claude Code's proposals open in VS Code's diff editor (review.ts), decided
// there, and Claude's change sets are reviewed there too; the changes still
// to decide are marked in the editor, not listed as problems. The rest
// (documents, questions with buttons) is plain LSP that
// vscode-languageclient already handles. Wire format: docs/protocol.md.

import * as vscode from 'vscode';
import {
  DocumentSelector,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
} from 'vscode-languageclient/node';
import { PendingMarks, Review, isProposal } from './review';

const DOCUMENTS: DocumentSelector = [{ scheme: 'file' }, { scheme: 'untitled' }];

let client: LanguageClient | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const config = vscode.workspace.getConfiguration('moonkale');
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  const shim = config.get<string>('shimPath') || process.env.MOONKALE_SHIM || 'moonkale-shim';
  const serverOptions: ServerOptions = {
    command: shim,
    args: folder ? ['--workspace', folder] : [],
    options: { cwd: folder },
  };
  const fromService = new FromService();
  const marks = new PendingMarks();
  context.subscriptions.push(marks);
  // The client exists only after the options are made; the proposal view
  // asks it for the proposal's original text.
  let review: Review | undefined;
  const clientOptions: LanguageClientOptions = {
    documentSelector: DOCUMENTS,
    outputChannelName: 'Moonkale',
    // The extension tells of finished change sets itself, and decides
    // proposals in their diff editor: the service sends no Accept/Reject
    // notification (it would outlive the decision) and no edit of an
    // accepted file VS Code holds unmodified (VS Code reloads it once Claude
    // Code wrote it; an edit would leave it unsaved).
    initializationOptions: { moonkaleReview: true, moonkaleProposals: true },
    middleware: {
      workspace: {
        // An undo of Claude's change writes the file and sends VS Code the
        // same text; the document then equals the file but shows as unsaved.
        handleApplyEdit: async (params, next) => {
          const result = await next(params, new vscode.CancellationTokenSource().token);
          await review?.settleEdited(params.edit);
          return result;
        },
      },
      window: {
        // A proposal opens as a diff (original | proposal) instead of a
        // plain editor.
        showDocument: async (params, token, next) =>
          (await review?.showProposal(params.uri)) ? { success: true } : next(params, token),
      },
      // What the service hands back (other editors' diagnostics) must not be
      // forwarded again as if VS Code's own servers had found it.
      // Claude's changes still to decide (source `claude`) are no
      // problems: they are marked in the editor instead of being listed.
      handleDiagnostics: (uri, diagnostics, next) => {
        const pending = diagnostics.filter((d) => d.source === PendingMarks.SOURCE);
        const problems = diagnostics.filter((d) => d.source !== PendingMarks.SOURCE);
        marks.set(uri, pending);
        fromService.remember(uri, problems);
        next(uri, problems);
      },
      provideDiagnostics: async (document, previousResultId, token, next) => {
        const report = await next(document, previousResultId, token);
        if (report && report.kind === 'full') {
          const uri = document instanceof vscode.Uri ? document : document.uri;
          fromService.remember(uri, report.items);
        }
        return report;
      },
    },
  };
  client = new LanguageClient('moonkale', 'Moonkale', serverOptions, clientOptions);
  const started = client;
  await started.start();

  review = new Review(started);
  context.subscriptions.push(...review.register());

  const selection = new SelectionSender(started);
  const diagnostics = new DiagnosticsForwarder(started, fromService);
  context.subscriptions.push(
    selection,
    vscode.window.onDidChangeTextEditorSelection((e) => selection.changed(e.textEditor)),
    vscode.window.onDidChangeActiveTextEditor((editor) => editor && selection.changed(editor)),
    vscode.languages.onDidChangeDiagnostics((e) => diagnostics.changed(e.uris)),
    // The proposal of the editor whose title button was pressed (either
    // side of its diff), else (palette) the newest one.
    vscode.commands.registerCommand('moonkale.accept', (uri?: vscode.Uri) =>
      execute(started, 'moonkale.acceptProposal', [review?.proposalDocument(uri)].filter(Boolean)),
    ),
    vscode.commands.registerCommand('moonkale.reject', (uri?: vscode.Uri) =>
      execute(started, 'moonkale.rejectProposal', [review?.proposalDocument(uri)].filter(Boolean)),
    ),
    vscode.commands.registerCommand('moonkale.sendSelection', async () => {
      // The live selection may still wait for the end of this tick: send it
      // first, so the service mentions what the user sees selected.
      const editor = vscode.window.activeTextEditor;
      if (editor) await selection.sendNow(editor);
      await execute(started, 'moonkale.sendToClaude', []);
    }),
    vscode.commands.registerCommand('moonkale.claudeTerminal', () => {
      const service =
        config.get<string>('servicePath') || process.env.MOONKALE_SERVICE_BIN || 'moonkale-service';
      const terminal = vscode.window.createTerminal({
        name: 'Claude Code',
        shellPath: service,
        shellArgs: folder ? ['claude', '--workspace', folder] : ['claude'],
        cwd: folder,
      });
      terminal.show();
    }),
  );
  if (vscode.window.activeTextEditor) selection.changed(vscode.window.activeTextEditor);
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}

async function execute(client: LanguageClient, command: string, args: unknown[]): Promise<void> {
  try {
    await client.sendRequest('workspace/executeCommand', { command, arguments: args });
  } catch (e) {
    vscode.window.showErrorMessage(`Moonkale: ${e instanceof Error ? e.message : String(e)}`);
  }
}

function isOurs(document: vscode.TextDocument): boolean {
  return vscode.languages.match(DOCUMENTS as vscode.DocumentSelector, document) > 0;
}

// Sends `moonkale/selectionChanged` for every selection change at once
// (the service paces what reaches Claude Code): the changes of one
// event-loop tick share one send of the newest state, and only when it
// differs from what was sent last.
class SelectionSender implements vscode.Disposable {
  private pending: vscode.TextEditor | undefined;
  private tick: NodeJS.Immediate | undefined;
  private last = '';

  constructor(private readonly client: LanguageClient) {}

  changed(editor: vscode.TextEditor): void {
    if (!isOurs(editor.document)) return;
    this.pending = editor;
    this.tick ??= setImmediate(() => {
      this.tick = undefined;
      const newest = this.pending;
      this.pending = undefined;
      if (newest) void this.sendNow(newest);
    });
  }

  async sendNow(editor: vscode.TextEditor): Promise<void> {
    this.pending = undefined;
    if (!isOurs(editor.document)) return;
    // VS Code positions count UTF-16 code units, as the client negotiated.
    const s = editor.selection;
    const params = {
      textDocument: { uri: this.client.code2ProtocolConverter.asUri(editor.document.uri) },
      selection: {
        start: { line: s.start.line, character: s.start.character },
        end: { line: s.end.line, character: s.end.character },
      },
      cursor: { line: s.active.line, character: s.active.character },
    };
    const key = JSON.stringify(params);
    if (key === this.last) return;
    this.last = key;
    await this.client.sendNotification('moonkale/selectionChanged', params);
  }

  dispose(): void {
    if (this.tick) clearImmediate(this.tick);
  }
}

function diagnosticKey(d: vscode.Diagnostic): string {
  const r = d.range;
  return `${d.source ?? ''}|${r.start.line}:${r.start.character}-${r.end.line}:${r.end.character}|${d.message}`;
}

// The diagnostics the service gave VS Code, per document.
class FromService {
  private readonly keys = new Map<string, Set<string>>();

  remember(uri: vscode.Uri, diagnostics: readonly vscode.Diagnostic[]): void {
    this.keys.set(uri.toString(), new Set(diagnostics.map(diagnosticKey)));
  }

  has(uri: vscode.Uri, d: vscode.Diagnostic): boolean {
    return this.keys.get(uri.toString())?.has(diagnosticKey(d)) ?? false;
  }
}

// Forwards the diagnostics VS Code shows (from its other language servers
// and linters) as `moonkale/publishDiagnostics`, one publish per source; a
// source that has gone gets an empty list, which removes it.
class DiagnosticsForwarder {
  private readonly sent = new Map<string, Set<string>>();

  constructor(
    private readonly client: LanguageClient,
    private readonly fromService: FromService,
  ) {}

  changed(uris: readonly vscode.Uri[]): void {
    for (const uri of uris) {
      if (uri.scheme !== 'file' && uri.scheme !== 'untitled') continue;
      if (isProposal(uri)) continue;
      const bySource = new Map<string, object[]>();
      for (const d of vscode.languages.getDiagnostics(uri)) {
        if (this.fromService.has(uri, d)) continue;
        const source = d.source || 'vscode';
        const list = bySource.get(source) ?? [];
        list.push(this.client.code2ProtocolConverter.asDiagnostic(d));
        bySource.set(source, list);
      }
      const key = uri.toString();
      const protocolUri = this.client.code2ProtocolConverter.asUri(uri);
      for (const gone of this.sent.get(key) ?? []) {
        if (!bySource.has(gone)) bySource.set(gone, []);
      }
      for (const [source, diagnostics] of bySource) {
        void this.client.sendNotification('moonkale/publishDiagnostics', {
          uri: protocolUri,
          source,
          diagnostics,
        });
      }
      this.sent.set(key, new Set([...bySource].filter(([, d]) => d.length > 0).map(([s]) => s)));
    }
  }
}
