// The status-bar item: loading (with progress), ready, fallback, off, error, offline.
import * as vscode from 'vscode';

/** The `infill.status` / `infill/statusChanged` payload (fields this extension reads). */
export interface ServerStatus {
  ready?: boolean;
  state?: 'loading' | 'ready' | 'error' | string;
  model?: string | null;
  backend?: string | null;
  kind?: string | null;
  device?: string | null;
  dtype?: string | null;
  isFallback?: boolean | null;
  label?: string | null;
  enabled?: boolean;
  error?: string | null;
  fallback?: { backend?: string; label?: string | null } | null;
  fallbackError?: string | null;
  latencies?: { p50_ms?: number; p95_ms?: number; count?: number };
}

export class StatusItem implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private status: ServerStatus | undefined;
  private progress: string | undefined;
  private offlineReason: string | undefined;

  constructor() {
    this.item = vscode.window.createStatusBarItem('infill.status', vscode.StatusBarAlignment.Right, 100);
    this.item.name = 'infill-ls';
    this.item.command = 'infill.showStatus';
    this.starting();
    this.item.show();
  }

  /** The server process is starting; nothing heard yet. */
  starting(): void {
    this.offlineReason = undefined;
    this.status = undefined;
    this.render();
  }

  /** The server could not be started or stopped for good. */
  offline(reason: string): void {
    this.offlineReason = reason;
    this.render();
  }

  update(status: ServerStatus): void {
    this.status = status;
    this.offlineReason = undefined;
    if (status.state !== 'loading') {
      this.progress = undefined;
    }
    this.render();
  }

  /** Work-done progress of model loading: a percentage and/or a message. */
  loading(percentage: number | undefined, message: string | undefined): void {
    const parts = [percentage !== undefined ? `${percentage}%` : undefined, message].filter((p) => p);
    this.progress = parts.join(' ');
    this.render();
  }

  loadingDone(): void {
    this.progress = undefined;
    this.render();
  }

  current(): ServerStatus | undefined {
    return this.status;
  }

  /** The text shown in the status bar right now (tests read it from the DOM). */
  text(): string {
    return this.item.text;
  }

  private render(): void {
    const s = this.status;
    this.item.backgroundColor = undefined;
    if (this.offlineReason !== undefined) {
      this.item.text = '$(debug-disconnect) infill: offline';
      this.item.tooltip = `infill-ls is not running: ${this.offlineReason}`;
      this.item.backgroundColor = new vscode.ThemeColor('statusBarItem.errorBackground');
    } else if (s === undefined || s.state === 'loading') {
      this.item.text = `$(sync~spin) infill: loading${this.progress ? ' ' + this.progress : ''}`;
      this.item.tooltip = `infill-ls is loading ${s?.model ?? 'the model'}`;
    } else if (s.state === 'error') {
      this.item.text = '$(error) infill: error';
      this.item.tooltip = `infill-ls: ${s.error ?? 'unknown error'}`;
      this.item.backgroundColor = new vscode.ThemeColor('statusBarItem.errorBackground');
    } else if (s.enabled === false) {
      this.item.text = '$(circle-slash) infill: off';
      this.item.tooltip = 'Inline suggestions are off (Infill: Toggle Inline Suggestions)';
    } else if (s.isFallback) {
      this.item.text = '$(sparkle) infill: fallback';
      this.item.tooltip = `infill-ls ready with the offline fallback: ${s.label ?? s.backend ?? ''}`;
      this.item.backgroundColor = new vscode.ThemeColor('statusBarItem.warningBackground');
    } else {
      this.item.text = '$(sparkle) infill: ready';
      this.item.tooltip = `infill-ls ready: ${s.label ?? s.backend ?? ''}${behind(s)}`;
    }
  }

  dispose(): void {
    this.item.dispose();
  }
}

/** What answers when the model's fill is rejected, as the tooltip says it. */
function behind(s: ServerStatus): string {
  if (s.fallback) {
    return `; fallback: ${s.fallback.label || s.fallback.backend || ''}`;
  }
  return s.fallbackError ? `; no fallback: ${s.fallbackError}` : '';
}
