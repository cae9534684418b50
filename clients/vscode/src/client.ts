// Builds the LanguageClient for infill-ls: stdio transport, settings, inline-completion and command middleware.
import * as vscode from 'vscode';
import {
  DynamicFeature,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  Middleware,
  ServerOptions,
  StaticFeature,
  TransportKind,
} from 'vscode-languageclient/node';
import { serverCommand, serverSettings } from './settings';

export const STATUS_CHANGED = 'infill/statusChanged';
/** The accept command the server puts on every inline item (Copilot's shape); VS Code runs it on accept. */
export const ACCEPT_COMMAND = 'infill.didAcceptCompletion';
export const DID_SHOW = 'textDocument/didShowCompletion';

/** A LanguageClient that leaves the server's command ids (infill.fillGap, ...) to this extension: it registers them
 * itself, so they exist (with a clear message) even when the server is not running, and never clash. */
class InfillLanguageClient extends LanguageClient {
  public override registerFeature(feature: StaticFeature | DynamicFeature<unknown>): void {
    const registration = (feature as Partial<DynamicFeature<unknown>>).registrationType;
    if (registration?.method === ExecuteCommandRequest.method) {
      return;
    }
    super.registerFeature(feature);
  }
}

/** Reports each returned item as shown (textDocument/didShowCompletion, Copilot's shape). VS Code's stable API
 * says nothing about what it draws, so this is an upper bound: an item returned is counted as shown. */
function inlineMiddleware(getClient: () => LanguageClient | undefined): Middleware['provideInlineCompletionItems'] {
  return async (document, position, context, token, next) => {
    const result = await next(document, position, context, token);
    const items = Array.isArray(result) ? result : result?.items;
    if (!items || items.length === 0 || token.isCancellationRequested) {
      return result;
    }
    for (const item of items) {
      const text = typeof item.insertText === 'string' ? item.insertText : item.insertText.value;
      const command = item.command ? { title: item.command.title, command: item.command.command, arguments: item.command.arguments } : undefined;
      void getClient()?.sendNotification(DID_SHOW, { item: { insertText: text, command } });
    }
    return result;
  };
}

export function createClient(output: vscode.LogOutputChannel, getClient: () => LanguageClient | undefined): LanguageClient {
  const { command, args } = serverCommand();
  const serverOptions: ServerOptions = { command, args, transport: TransportKind.stdio };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    outputChannel: output,
    initializationOptions: serverSettings(),
    middleware: {
      provideInlineCompletionItems: inlineMiddleware(getClient),
      workspace: {
        // The server asks for section "infill": answer with the keys it knows, not the client-only ones.
        configuration: (params, token, next) =>
          params.items.every((item) => item.section === 'infill')
            ? params.items.map(() => serverSettings())
            : next(params, token),
      },
    },
  };
  output.appendLine(`starting: ${command} ${args.join(' ')}`);
  return new InfillLanguageClient('infill', 'infill-ls', serverOptions, clientOptions);
}
