import type { WriteStatus } from '@tether/client/browser';

/** Where keystrokes and sizes go: a spawned process's handle, or an attached one's. */
export interface InputTarget {
  write(data: string): Promise<WriteStatus>;
  resize(rows: number, cols: number): Promise<void>;
}

export interface ProcessInputEvents {
  /** Stdin is closed, or the process is gone: nothing more is written. */
  onStdinGone(status: 'stdinClosed' | 'unknownProcess'): void;
  /** A write failed (the session is gone); nothing more is written. */
  onError(error: Error): void;
}

/**
 * A terminal's keystrokes and sizes on their way to one process, in order: one write in flight (keystrokes typed
 * meanwhile go together in the next) and one resize in flight (sizes that come meanwhile collapse into the
 * latest). A failed resize is left to the output's pump, which reports the end.
 */
export class ProcessInput {
  private pending = '';
  private writing = false;
  private resizing = false;
  private wantedSize: { rows: number; cols: number } | null = null;
  private stopped = false;

  constructor(
    private readonly target: InputTarget,
    private readonly events: ProcessInputEvents,
  ) {}

  type(data: string): void {
    if (this.stopped) return;
    this.pending += data;
    void this.flush();
  }

  size(rows: number, cols: number): void {
    if (this.stopped) return;
    this.wantedSize = { rows, cols };
    void this.sendSize();
  }

  /** Nothing more goes out (what is pending is dropped). */
  stop(): void {
    this.stopped = true;
    this.pending = '';
    this.wantedSize = null;
  }

  private async flush(): Promise<void> {
    if (this.writing) return;
    this.writing = true;
    try {
      while (this.pending !== '' && !this.stopped) {
        const data = this.pending;
        this.pending = '';
        const status = await this.target.write(data);
        if (status === 'stdinClosed' || status === 'unknownProcess') {
          this.stop();
          this.events.onStdinGone(status);
        }
      }
    } catch (err) {
      if (!this.stopped) {
        this.stop();
        this.events.onError(err as Error);
      }
    } finally {
      this.writing = false;
    }
  }

  private async sendSize(): Promise<void> {
    if (this.resizing) return;
    this.resizing = true;
    try {
      while (this.wantedSize !== null && !this.stopped) {
        const { rows, cols } = this.wantedSize;
        this.wantedSize = null;
        await this.target.resize(rows, cols);
      }
    } catch {
      // The process ended: its pump says how.
    } finally {
      this.resizing = false;
    }
  }
}
