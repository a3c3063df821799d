import { MIN_FLOW_WINDOW_BYTES } from '@tether/exec-protocol';

/** Unacknowledged output an executor holds for all its flow-controlled processes together, by default. */
export const DEFAULT_OUTPUT_BUDGET_BYTES = 64 * 1024 * 1024;

/**
 * Bounds the memory that flow control can hold across many processes (and sessions). Each flow-controlled
 * process may have unacknowledged at most its own window or its fair share of the budget, whichever is
 * smaller, and never less than the smallest window (64 KiB): one busy stream still gets its whole window,
 * a thousand get 64 KiB each. A share floor rather than a shared pool is what keeps it free of deadlock:
 * every blocked process has output in flight that its consumer can take and acknowledge, whatever order a
 * consumer reads its processes in. One budget per executor, given to every process table it owns.
 */
export class OutputBudget {
  readonly totalBytes: number;
  #members = 0;
  readonly #loosened = new Set<() => void>();

  constructor(totalBytes: number = DEFAULT_OUTPUT_BUDGET_BYTES) {
    this.totalBytes = totalBytes;
  }

  /** Flow-controlled processes that hold a share now. */
  get members(): number {
    return this.#members;
  }

  /** What one process may have unacknowledged now (before its own window applies). */
  get share(): number {
    return Math.max(MIN_FLOW_WINDOW_BYTES, Math.floor(this.totalBytes / Math.max(1, this.#members)));
  }

  /** A process takes a share; the returned function gives it back (once), which may unblock others. */
  join(): () => void {
    this.#members++;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.#members--;
      for (const listener of [...this.#loosened]) listener();
    };
  }

  /** Called whenever shares grew (a member left); returns an unsubscribe. */
  onLoosened(listener: () => void): () => void {
    this.#loosened.add(listener);
    return () => this.#loosened.delete(listener);
  }
}
