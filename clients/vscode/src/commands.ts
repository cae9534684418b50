// Commands: fill gap / fill all gaps (the server's commands, given the active editor), toggle, status, restart,
// and the accept command the server attaches to inline items (forwarded to the server, which counts it).
import * as vscode from 'vscode';
import { ExecuteCommandRequest, LanguageClient } from 'vscode-languageclient/node';
import { ACCEPT_COMMAND } from './client';
import { ServerStatus } from './status';

/** The parts of the extension the commands need. */
export interface Host {
  client(): LanguageClient | undefined;
  output: vscode.LogOutputChannel;
  statusText(): string;
  restart(): Promise<void>;
}

const MARKDOWN = new Set(['markdown', 'mdx', 'quarto', 'rmd']);

function editorTarget(needSelection: boolean): { uri: string; range: object } | string {
  const editor = vscode.window.activeTextEditor;
  if (!editor) {
    return 'open a file first';
  }
  const sel = editor.selection;
  if (needSelection && sel.isEmpty) {
    return 'select the gap to fill first';
  }
  const doc = editor.document;
  const range = needSelection ? sel : new vscode.Range(0, 0, doc.lineCount, 0);
  return {
    uri: doc.uri.toString(),
    range: {
      start: { line: range.start.line, character: range.start.character },
      end: { line: range.end.line, character: range.end.character },
    },
  };
}

/** Runs `command` on the server; undefined (after one message) when the server is not running. */
async function onServer(host: Host, command: string, args: unknown[]): Promise<unknown> {
  const client = host.client();
  if (!client || !client.isRunning()) {
    void vscode.window.showWarningMessage(`infill: the server is not running (${host.statusText()}).`, 'Restart').then(
      (pick) => pick && host.restart(),
    );
    return undefined;
  }
  return client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args });
}

/** Runs the server's infill.fillGap / infill.fillAllGaps for the active editor (the server applies the edit,
 * computed for the current version; the language client refuses it if the document changed meanwhile). */
async function runFill(host: Host, command: string, args: unknown[]): Promise<unknown> {
  const gaps = command === 'infill.fillAllGaps';
  if (args.length === 0) {
    if (gaps && !MARKDOWN.has(vscode.window.activeTextEditor?.document.languageId ?? '')) {
      void vscode.window.showWarningMessage('infill: Fill all gaps works in Markdown files only.');
      return undefined;
    }
    const target = editorTarget(!gaps);
    if (typeof target === 'string') {
      void vscode.window.showWarningMessage(`infill: ${target}.`);
      return undefined;
    }
    args = [target];
  }
  const title = gaps ? 'infill: filling all gaps…' : 'infill: filling the gap…';
  host.output.info(`${command} ${JSON.stringify(args)}`);
  const result = (await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title },
    () => onServer(host, command, args),
  )) as { applied?: boolean; reason?: string } | undefined;
  if (result && result.applied === false) {
    host.output.warn(`${command}: nothing filled: ${result.reason ?? 'no reason given'}`);
    void vscode.window.showWarningMessage(`infill: nothing filled: ${result.reason ?? 'no reason given'}`);
  }
  return result;
}

async function toggle(): Promise<void> {
  const config = vscode.workspace.getConfiguration('infill');
  const on = !config.get<boolean>('enabled', true);
  // Write where the effective value comes from: a workspace setting would otherwise override a user-level write.
  const where = config.inspect<boolean>('enabled');
  const target =
    where?.workspaceFolderValue !== undefined
      ? vscode.ConfigurationTarget.WorkspaceFolder
      : where?.workspaceValue !== undefined
        ? vscode.ConfigurationTarget.Workspace
        : vscode.ConfigurationTarget.Global;
  await config.update('enabled', on, target);
  void vscode.window.setStatusBarMessage(`infill: inline suggestions ${on ? 'on' : 'off'}`, 3000);
}

async function showStatus(host: Host): Promise<void> {
  const client = host.client();
  if (!client || !client.isRunning()) {
    host.output.appendLine(`status: ${host.statusText()} (server not running)`);
    host.output.show(true);
    void vscode.window.showWarningMessage('infill: the server is not running. See the "infill-ls" output.');
    return;
  }
  const status = (await client.sendRequest(ExecuteCommandRequest.type, {
    command: 'infill.status',
    arguments: [],
  })) as ServerStatus;
  host.output.appendLine(`status: ${JSON.stringify(status, null, 2)}`);
  const lat = status.latencies;
  const latency = lat && lat.count ? `, p50 ${lat.p50_ms?.toFixed(0)} ms, p95 ${lat.p95_ms?.toFixed(0)} ms` : '';
  const choice = await vscode.window.showInformationMessage(
    `infill: ${status.state} — ${status.label ?? status.backend ?? 'no backend'}${latency}`,
    'Show Output',
  );
  if (choice) {
    host.output.show(true);
  }
}

/** The item's accept command: the server counts the accept (fire and forget; nothing to show). */
function accepted(host: Host, args: unknown[]): void {
  const client = host.client();
  if (client?.isRunning()) {
    void client.sendRequest(ExecuteCommandRequest.type, { command: ACCEPT_COMMAND, arguments: args }).then(undefined, () => undefined);
  }
}

export function registerCommands(host: Host): vscode.Disposable[] {
  return [
    // The server's command ids; arguments from a code action are passed through, none means "the active editor".
    vscode.commands.registerCommand('infill.fillGap', (...args: unknown[]) => runFill(host, 'infill.fillGap', args)),
    vscode.commands.registerCommand('infill.fillAllGaps', (...args: unknown[]) =>
      runFill(host, 'infill.fillAllGaps', args),
    ),
    // Through the setting, so the choice persists and reaches the server as configuration.
    vscode.commands.registerCommand('infill.toggle', () => toggle()),
    vscode.commands.registerCommand('infill.status', () => onServer(host, 'infill.status', [])),
    vscode.commands.registerCommand('infill.showStatus', () => showStatus(host)),
    vscode.commands.registerCommand('infill.restart', () => host.restart()),
    vscode.commands.registerCommand(ACCEPT_COMMAND, (...args: unknown[]) => accepted(host, args)),
  ];
}
