// infill-ls for VS Code: starts the server, shows its status, keeps its settings in sync.
import * as vscode from 'vscode';
import { DidChangeConfigurationNotification, LanguageClient, State, WorkDoneProgress } from 'vscode-languageclient/node';
import { STATUS_CHANGED, createClient } from './client';
import { Host, registerCommands } from './commands';
import { followCursor } from './cursor';
import { isExecutable, needsRestart, serverCommand, serverSettings } from './settings';
import { ServerStatus, StatusItem } from './status';

let client: LanguageClient | undefined;

/** Shows model-loading progress in the status bar instead of a notification. */
function followProgress(c: LanguageClient, status: StatusItem): void {
  c.onRequest('window/workDoneProgress/create', (params: { token: string | number }) => {
    c.onProgress(WorkDoneProgress.type, params.token, (value) => {
      if (value.kind === 'end') {
        status.loadingDone();
      } else {
        status.loading(value.percentage, value.message);
      }
    });
    return null;
  });
}

async function reportStartFailure(output: vscode.LogOutputChannel, status: StatusItem, message: string): Promise<void> {
  output.error(`could not start infill-ls: ${message}`);
  status.offline(message);
  const pick = await vscode.window.showErrorMessage(
    `infill: could not start the server (${message}). Set "infill.server.command" or "infill.server.pythonPath".`,
    'Open Settings',
  );
  if (pick) {
    void vscode.commands.executeCommand('workbench.action.openSettings', 'infill.server');
  }
}

async function start(output: vscode.LogOutputChannel, status: StatusItem): Promise<void> {
  status.starting();
  const { command } = serverCommand();
  if (!isExecutable(command)) {
    // Checked here so the user gets one message, not ours plus the language client's connection error.
    return reportStartFailure(output, status, `${command} not found or not executable`);
  }
  const c = createClient(output, () => client);
  client = c;
  c.onDidChangeState((e) => {
    if (e.newState === State.Stopped && client === c) {
      status.offline('the server stopped (see the "infill-ls" output)');
    }
  });
  try {
    await c.start();
  } catch (err) {
    return reportStartFailure(output, status, err instanceof Error ? err.message : String(err));
  }
  c.onNotification(STATUS_CHANGED, (s: ServerStatus) => status.update(s));
  followProgress(c, status);
  try {
    status.update((await c.sendRequest('workspace/executeCommand', { command: 'infill.status', arguments: [] })) as ServerStatus);
  } catch (err) {
    output.appendLine(`infill.status failed: ${String(err)}`);
  }
}

async function stop(): Promise<void> {
  const c = client;
  client = undefined;
  if (c && c.state !== State.Stopped) {
    await c.stop().catch(() => undefined);
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel('infill-ls', { log: true });
  const status = new StatusItem();
  const host: Host = {
    client: () => client,
    output,
    statusText: () => status.text(),
    restart: async () => {
      await stop();
      await start(output, status);
    },
  };
  context.subscriptions.push(output, status, ...registerCommands(host), followCursor(() => client));
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (needsRestart(event)) {
        await host.restart();
      } else if (event.affectsConfiguration('infill') && client?.isRunning()) {
        await client.sendNotification(DidChangeConfigurationNotification.type, { settings: { infill: serverSettings() } });
      }
    }),
  );
  await start(output, status);
}

export async function deactivate(): Promise<void> {
  await stop();
}
