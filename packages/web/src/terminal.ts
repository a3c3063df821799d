import type { Environment, ProcessHandle } from '@tether/client/browser';
import { ProcessInput } from './process-input.js';
import { FittedTerminal } from './xterm.js';

/** The login shell a terminal runs when no command is given: the account's shell, as ssh starts it. */
// biome-ignore lint/suspicious/noTemplateCurlyInString: a shell's parameter expansion, not a template
export const LOGIN_SHELL = ['/bin/sh', '-c', 'exec "${SHELL:-/bin/sh}" -l'];

/** How many keystroke-to-echo times are kept (the newest). */
const MAX_LATENCIES = 1000;

export interface TerminalSessionEvents {
  /** The process ended with this code (128 + n for a signal, as the executor reports it). */
  onExit(exitCode: number): void;
  /** Stdin or resize failed for good (the session is gone). */
  onError(error: Error): void;
}

/**
 * One process in a pseudo-terminal, shown in xterm.js: keystrokes go to its stdin as typed (raw, like
 * `harness exec -t`), its output is written as it arrives, the terminal's size follows the element's
 * (`process/resize`), and the time from a keystroke to the next output is recorded (echo latency).
 */
export class TerminalSession {
  private readonly view: FittedTerminal;
  private handle: ProcessHandle | null = null;
  /** Keystrokes and sizes to the process, once it started. */
  private sender: ProcessInput | null = null;
  private readonly latencies: number[] = [];
  private keystrokeAt: number | null = null;
  private disposed = false;

  constructor(
    private readonly element: HTMLElement,
    private readonly events: TerminalSessionEvents,
  ) {
    this.view = new FittedTerminal(element, { fontSize: 14 }, () => this.refit());
  }

  get size(): { rows: number; cols: number } {
    return this.view.size;
  }

  /** Starts `argv` in a pseudo-terminal of the current size and pumps it until it ends. */
  async start(env: Environment, argv: string[]): Promise<void> {
    const handle = await env.spawn(argv, {
      tty: true,
      size: this.size,
      env: { TERM: 'xterm-256color', COLORTERM: 'truecolor' },
    });
    this.handle = handle;
    this.sender = new ProcessInput(handle, {
      onStdinGone: () => undefined,
      onError: (error) => {
        if (!this.disposed) this.events.onError(error);
      },
    });
    this.view.terminal.onData((data) => this.input(data));
    // Focus moves to the terminal unless the user went to another field while the process started:
    // their typing stays where they put it.
    const active = document.activeElement;
    if (active === null || active === document.body || this.element.contains(active)) this.view.terminal.focus();
    void this.pump(handle);
  }

  /** Keystroke-to-echo times in ms (the newest `MAX_LATENCIES`). */
  echoLatencies(): number[] {
    return [...this.latencies];
  }

  /** The whole buffer, one line per row, right-trimmed. */
  text(): string {
    return this.view.text();
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.sender?.stop();
    this.handle?.dispose();
    this.view.dispose();
  }

  private async pump(handle: ProcessHandle): Promise<void> {
    try {
      for await (const event of handle) {
        if (event.kind === 'output') {
          if (this.keystrokeAt !== null) {
            this.latencies.push(performance.now() - this.keystrokeAt);
            if (this.latencies.length > MAX_LATENCIES) this.latencies.shift();
            this.keystrokeAt = null;
          }
          this.view.terminal.write(event.chunk);
        } else if (event.kind === 'exited') {
          this.events.onExit(event.exitCode);
        }
      }
    } catch (err) {
      if (!this.disposed) this.events.onError(err as Error);
    }
  }

  private input(data: string): void {
    this.keystrokeAt ??= performance.now();
    this.sender?.type(data);
  }

  private refit(): void {
    if (this.disposed) return;
    const { rows, cols } = this.size;
    this.sender?.size(rows, cols);
  }
}
