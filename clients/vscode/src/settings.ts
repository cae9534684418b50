// Reads the `infill.*` settings: how to start the server, and the settings object the server understands.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';

/** The keys of the server's settings (initializationOptions and workspace/configuration section "infill"). */
export const SERVER_SETTING_KEYS = [
  'model',
  'offlineModel',
  'offlineModelKeystrokes',
  'device',
  'dtype',
  'loadFormat',
  'quantization',
  'enabled',
  'inlineBudgetMs',
  'invokedBudgetMs',
  'codeActionBudgetMs',
  'fillCandidates',
  'explicitBudgetMs',
  'debounceMs',
  'maxMiddleTokens',
  'denoisingSteps',
  'maxDocumentChars',
  'enabledLanguages',
  'fallback',
  'fallbackEndpoint',
  'fallbackModel',
  'remoteEndpoint',
  'remoteModel',
  'remoteProtocol',
  'completionLog',
  'relatedFiles',
] as const;

export type ServerSettings = Record<(typeof SERVER_SETTING_KEYS)[number], unknown>;

export interface ServerCommand {
  command: string;
  args: string[];
}

/** The settings object sent to the server: only keys it knows, with the user's (or default) values. */
export function serverSettings(config = vscode.workspace.getConfiguration('infill')): ServerSettings {
  const settings = {} as ServerSettings;
  for (const key of SERVER_SETTING_KEYS) {
    settings[key] = config.get(key);
  }
  return settings;
}

/** `<pythonPath> -m server.cli --stdio <args>` when a Python is configured, else `<command> --stdio <args>`. */
export function serverCommand(config = vscode.workspace.getConfiguration('infill')): ServerCommand {
  const pythonPath = (config.get<string>('server.pythonPath') ?? '').trim();
  const extra = (config.get<string[]>('server.args') ?? []).filter((a) => typeof a === 'string');
  if (pythonPath !== '') {
    return { command: pythonPath, args: ['-m', 'server.cli', '--stdio', ...extra] };
  }
  const command = (config.get<string>('server.command') ?? '').trim() || 'infill-ls';
  return { command, args: ['--stdio', ...extra] };
}

/** Whether a configuration change needs a server restart (rather than a settings push). */
export function needsRestart(event: vscode.ConfigurationChangeEvent): boolean {
  return event.affectsConfiguration('infill.server');
}

/** Whether `command` names an executable file (absolute/relative path, or found on PATH). */
export function isExecutable(command: string): boolean {
  const runnable = (file: string): boolean => {
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return fs.statSync(file).isFile();
    } catch {
      return false;
    }
  };
  if (command.includes('/') || command.includes('\\')) {
    return runnable(command);
  }
  const exts = process.platform === 'win32' ? (process.env.PATHEXT ?? '.EXE;.CMD;.BAT').split(';') : [''];
  return (process.env.PATH ?? '')
    .split(path.delimiter)
    .filter((dir) => dir !== '')
    .some((dir) => exts.some((ext) => runnable(path.join(dir, command + ext))));
}
