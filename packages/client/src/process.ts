import { DEFAULT_HIGH_WATER_BYTES, PROCESS_READ_MAX_BYTES } from '@tether/bytes';
import { ReceiveCredit } from '@tether/exec-protocol';
import type { ProcessBackend, ProcessEvent, StartedProcess } from './backend.js';
import { TetherError } from './errors.js';
import type { NetworkDecision } from './network.js';
import { ProcessEvents } from './process-events.js';

export type { ProcessResult } from './process-events.js';

/** Long-poll of a pull that found nothing new (short: with one request lane it holds up other calls). */
const PULL_WAIT_MS = 100;

export interface ProcessHandleOptions {
  /** Without flow control: above this many undelivered bytes the handle pulls at its consumer's pace. */
  highWaterBytes?: number;
  /**
   * Credit-based flow control where the backend offers it (default true): a slow consumer blocks the
   * child and no output is dropped. `false` keeps Codex's semantics (the executor retains 1 MiB per
   * process; a consumer that falls further behind gets `output_lost`).
   */
  flowControl?: boolean;
  /** Each decision of the process's managed network proxy (with `network`; network.ts). */
  onNetworkDecision?: (decision: NetworkDecision) => void;
}

type Mode = 'push' | 'pull';

/** How long a consumer that caught up waits before it acknowledges what it took (see `took`). */
const IDLE_ACK_MS = 20;

/**
 * A running (or finished) process of an environment. Its events arrive in seq order exactly once,
 * however they travel: pushed notifications while the consumer keeps up; `process/read` polling at the
 * consumer's pace when it falls behind, when a pushed seq is missing, or after a reconnect. Memory is
 * bounded by the high-water mark either way: a slow consumer slows the reads, never grows a buffer.
 *
 * With flow control (where the backend offers it) the handle acknowledges what its consumer has taken,
 * and the executor reads the child only while less than the window is unacknowledged: a slow consumer
 * then blocks the child, as an SSH channel does, and no output is ever dropped. The queue is bounded by
 * the window instead of the high-water mark, and pulling serves only gaps (a reconnect, a missing seq).
 *
 * `completion` resolves only once every event has been consumed (or the consumer gave up the iterator,
 * in which case the rest are drained internally): a caller that awaits it never misses the exit status
 * that follows buffered output.
 */
export class ProcessHandle extends ProcessEvents {
  private mode: Mode = 'push';
  private switches = 0;
  private reads = 0;
  /** Flow control: what the consumer took since the last acknowledgement; null without flow control. */
  private credit: ReceiveCredit | null;
  /** Highest seq the consumer has taken (what an acknowledgement names). */
  private consumedSeq = 0;
  /** An acknowledgement of what a consumer that caught up has taken, due IDLE_ACK_MS after it caught up. */
  private idleAck: ReturnType<typeof setTimeout> | null = null;
  /** The start was answered: the executor has the process, so `process/read` may be sent. */
  private startAnswered = false;
  /** Switched to pulling before the start was answered: the reads begin once it is. */
  private pullWhenStarted = false;

  constructor(processId: string, backend: ProcessBackend, options: ProcessHandleOptions = {}) {
    super(processId, backend, options.highWaterBytes ?? DEFAULT_HIGH_WATER_BYTES);
    // Until the start is answered, the window asked for (the executor grants it or none).
    const window = options.flowControl === false ? null : backend.flowWindowBytes;
    this.credit = window === null ? null : new ReceiveCredit(window);
    this.unsubscribe.push(
      backend.subscribe((event) => {
        if (event.processId === this.processId) this.onPushed(event);
      }),
      backend.onReconnect(() => {
        // An acknowledgement sent while the connection was going may be lost: say it again.
        if (this.credit !== null && this.consumedSeq > 0) this.backend.ack(this.processId, this.consumedSeq);
        this.switchToPull();
      }),
      // A backend that is gone can deliver nothing more: fail instead of waiting forever.
      backend.onClosed((error) => this.fail(error)),
    );
    const onDecision = options.onNetworkDecision;
    if (onDecision && backend.onNetworkDecision) {
      this.unsubscribe.push(backend.onNetworkDecision(processId, onDecision));
    }
  }

  /** The flow window in force, or null when the process is not flow-controlled. */
  get flowWindowBytes(): number | null {
    return this.credit?.windowBytes ?? null;
  }

  /** `push` while notifications are consumed as they come, `pull` while reading at the consumer's pace. */
  get deliveryMode(): Mode {
    return this.mode;
  }

  /** How often the handle switched to pulling, and how many `process/read` calls it made. */
  get deliveryStats(): { switchesToPull: number; reads: number } {
    return { switchesToPull: this.switches, reads: this.reads };
  }

  override dispose(): void {
    if (this.idleAck !== null) clearTimeout(this.idleAck);
    this.idleAck = null;
    super.dispose();
  }

  /** @internal The start was answered: the flow window granted (it may be none, or smaller than asked). */
  started(answer: StartedProcess): void {
    this.startAnswered = true;
    const granted = answer.flowWindowBytes;
    if (granted === null) this.credit = null;
    else if (granted !== this.credit?.windowBytes) {
      const pending = this.credit?.pending ?? 0;
      this.credit = new ReceiveCredit(granted);
      if (pending > 0 && this.credit.consumed(pending)) this.sendAck();
    }
    if (this.pullWhenStarted) {
      this.pullWhenStarted = false;
      this.pull().catch((err: Error) => this.fail(err));
    }
  }

  /** @internal The start request failed: nothing will come. */
  startFailed(error: Error): void {
    this.fail(error);
    this.dispose();
  }

  // Delivery -------------------------------------------------------------------------------------

  private onPushed(event: ProcessEvent): void {
    if (this.ended || event.seq <= this.cursor) return;
    if (this.mode === 'pull') {
      this.keepAside(event);
      return;
    }
    // With flow control the executor holds back what the queue cannot take; only a gap needs reading.
    const behind = this.credit === null && this.queuedBytes > this.highWater;
    if (event.seq !== this.cursor + 1 || behind) {
      // A seq went missing (a dropped stream) or the consumer is behind: read from the server instead.
      this.switchToPull();
      this.keepAside(event);
      return;
    }
    this.enqueue(event);
  }

  private switchToPull(): void {
    if (this.mode === 'pull' || this.ended) return;
    this.mode = 'pull';
    this.switches++;
    this.clearAside();
    // Until the start is answered the process may not exist yet: a start cut by a dropped connection is
    // sent again after the resume, and a read sent before it would be told `unknown process id`.
    if (this.startAnswered) this.pull().catch((err: Error) => this.fail(err));
    else this.pullWhenStarted = true;
  }

  /** Flow control bounds what can be pushed while pulling by the window. */
  protected override asideBound(): number {
    return Math.max(this.highWater, this.credit?.windowBytes ?? 0);
  }

  /** After a read found nothing new: back to push if what was kept aside continues the sequence. */
  private resumePush(answer: { exited: boolean; closed: boolean }): boolean {
    if (this.abandoned || this.asideOverflowed) {
      // Events were dropped while reading: start keeping them again, and try after the next empty read.
      this.asideOverflowed = false;
      this.clearAside();
      return false;
    }
    const pending = this.aside.filter((event) => event.seq > this.cursor).sort((a, b) => a.seq - b.seq);
    if (pending.length === 0 && ((answer.exited && this.exitCode === null) || answer.closed)) return false;
    let next = this.cursor + 1;
    for (const event of pending) {
      if (event.seq !== next) return false;
      next++;
    }
    this.mode = 'push';
    this.clearAside();
    for (const event of pending) this.enqueue(event);
    return true;
  }

  private async pull(): Promise<void> {
    while (!this.ended && !this.settled) {
      await this.waitForRoom();
      if (this.settled) return;
      this.reads++;
      const answer = await this.backend.read(this.processId, this.cursor, {
        maxBytes: PROCESS_READ_MAX_BYTES,
        waitMs: PULL_WAIT_MS,
      });
      if (answer.failure) {
        throw new TetherError('output_lost', `output of ${this.processId} is no longer retained: ${answer.failure}`);
      }
      for (const chunk of answer.chunks) {
        if (chunk.seq <= this.cursor) continue;
        const gap = chunk.seq - this.cursor - 1;
        if (gap === 1 && answer.exited && this.exitCode === null && answer.exitCode !== null) {
          // Output after exit: the one missing seq is the exit itself.
          this.enqueue({ kind: 'exited', processId: this.processId, seq: this.cursor + 1, exitCode: answer.exitCode });
        } else if (gap > 0 && !this.abandoned) {
          throw new TetherError(
            'output_lost',
            `output of ${this.processId} after seq ${this.cursor} is no longer retained by the executor (next retained: ${chunk.seq}); the consumer fell too far behind`,
          );
        }
        this.enqueueOutput(chunk);
      }
      if (answer.chunks.length > 0) continue;
      if (this.resumePush(answer)) return;
      // Recovered by polling, the exit and close have no seqs of their own here: close is the last seq
      // the server handed out, the exit the one before it.
      if (answer.exited && this.exitCode === null && answer.exitCode !== null) {
        this.enqueue({
          kind: 'exited',
          processId: this.processId,
          seq: Math.max(this.cursor + 1, answer.nextSeq - 2),
          exitCode: answer.exitCode,
        });
      }
      if (answer.closed) {
        this.enqueue({
          kind: 'closed',
          processId: this.processId,
          seq: Math.max(this.cursor + 1, answer.nextSeq - 1),
        });
      }
    }
  }

  /** The consumer took `event` (or it was discarded for a consumer that gave up): credit it back. */
  protected override took(event: ProcessEvent): void {
    this.consumedSeq = Math.max(this.consumedSeq, event.seq);
    const credit = this.credit;
    if (credit === null) return;
    const due = credit.consumed(event.kind === 'output' ? event.chunk.byteLength : 0);
    // A quarter window consumed; or the close, after which the executor needs to keep nothing.
    if (due || (event.kind === 'closed' && credit.pending > 0)) this.sendAck();
    // The consumer has caught up: say so soon, so that the executor frees a small output now instead of
    // keeping it until the process is evicted. Not at once: a consumer faster than the output catches up
    // after every chunk, and an acknowledgement per chunk (a request sealed, relayed and opened) cost a
    // download of 256 MiB a third of the harness's CPU (0.37 of 1.1 s); the quarter-window ones above keep
    // the output flowing meanwhile.
    else if (this.queue.length === 0 && credit.pending > 0 && this.idleAck === null) {
      this.idleAck = setTimeout(() => {
        this.idleAck = null;
        if ((this.credit?.pending ?? 0) > 0) this.sendAck();
      }, IDLE_ACK_MS);
      // A browser's timers are numbers; in Node the handle's consumer keeps the process alive, not this.
      (this.idleAck as { unref?: () => void }).unref?.();
    }
  }

  private sendAck(): void {
    if (this.idleAck !== null) {
      clearTimeout(this.idleAck);
      this.idleAck = null;
    }
    this.credit?.ackSent();
    this.backend.ack(this.processId, this.consumedSeq);
  }
}
