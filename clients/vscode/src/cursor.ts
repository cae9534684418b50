// Tells the server where the cursor is when it moves to another line (or another editor is shown), so that the
// server warms the prompt there in the background before anyone types; any keystroke cancels that warm.
import * as vscode from 'vscode';
import { LanguageClient } from 'vscode-languageclient/node';

export const CURSOR_MOVED = 'infill/didMoveCursor';
const SETTLE_MS = 150; // a cursor that keeps moving (scrolling with the arrow keys) is sent once it rests

/** Sends `infill/didMoveCursor` for the active editor when its cursor rests on another line than last sent. */
export function followCursor(getClient: () => LanguageClient | undefined): vscode.Disposable {
  let sent: { uri: string; line: number } | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const send = (editor: vscode.TextEditor | undefined): void => {
    const client = getClient();
    if (!editor || !client?.isRunning()) {
      return;
    }
    const uri = editor.document.uri.toString();
    const position = editor.selection.active;
    if (sent?.uri === uri && sent.line === position.line) {
      return;
    }
    sent = { uri, line: position.line };
    void client.sendNotification(CURSOR_MOVED, {
      textDocument: { uri },
      position: { line: position.line, character: position.character },
    });
  };
  const later = (editor: vscode.TextEditor | undefined): void => {
    if (timer !== undefined) {
      clearTimeout(timer);
    }
    timer = setTimeout(() => send(editor), SETTLE_MS);
  };
  const subscriptions = [
    vscode.window.onDidChangeActiveTextEditor((editor) => later(editor)),
    vscode.window.onDidChangeTextEditorSelection((event) => {
      // Moves the person made (keys, mouse, a command); the moves of typing come with the edit, which warms too.
      if (event.kind !== undefined) {
        later(event.textEditor);
      }
    }),
  ];
  later(vscode.window.activeTextEditor);
  return new vscode.Disposable(() => {
    if (timer !== undefined) {
      clearTimeout(timer);
    }
    subscriptions.forEach((s) => s.dispose());
  });
}
