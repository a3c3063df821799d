import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';

/**
 * An xterm.js terminal in `host`, sized to it and refitted whenever the host's size changes (`onFit` is told
 * after each refit). No cursor blink: its redraws held the page's socket messages to frame boundaries.
 */
export class FittedTerminal {
  readonly terminal: Terminal;
  private readonly fit = new FitAddon();
  private readonly observer: ResizeObserver;
  private disposed = false;

  constructor(host: HTMLElement, options: { fontSize: number; convertEol?: boolean }, onFit?: () => void) {
    this.terminal = new Terminal({
      cursorBlink: false,
      scrollback: 5000,
      convertEol: options.convertEol ?? false,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
      fontSize: options.fontSize,
      theme: { background: '#101418', foreground: '#d8dee9' },
    });
    this.terminal.loadAddon(this.fit);
    this.terminal.open(host);
    this.fit.fit();
    this.observer = new ResizeObserver(() => {
      if (this.disposed) return;
      this.fit.fit();
      onFit?.();
    });
    this.observer.observe(host);
  }

  get size(): { rows: number; cols: number } {
    return { rows: this.terminal.rows, cols: this.terminal.cols };
  }

  /** The whole buffer, one line per row, right-trimmed. */
  text(): string {
    const buffer = this.terminal.buffer.active;
    const lines: string[] = [];
    for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i)?.translateToString(true) ?? '');
    while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
    return lines.join('\n');
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.observer.disconnect();
    this.terminal.dispose();
  }
}
