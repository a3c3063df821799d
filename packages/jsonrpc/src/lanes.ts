/**
 * Request scheduling per connection (spec §7.5, `--concurrent-requests`).
 * - concurrency 1: every task runs inline, one after another in arrival order.
 * - concurrency N ≥ 2: two lanes (control, ordinary), each with N permits, so health and cleanup requests
 *   keep working while N ordinary requests (e.g. long polls) are blocked. Tasks marked inline (the
 *   handshake, before `initialized`) still run strictly in order.
 * The number of queued tasks is bounded: above `maxQueued` the owner is told to pause its transport.
 */
export type Lane = 'inline' | 'control' | 'ordinary';

export interface LanesOptions {
  concurrency: number;
  maxQueued?: number;
  onBusy?: () => void;
  onIdle?: () => void;
}

/** Upper bound of `--concurrent-requests`; larger values are clamped. */
export const MAX_CONCURRENT_REQUESTS = 1024;

class Semaphore {
  private available: number;
  private readonly waiters: Array<() => void> = [];
  constructor(permits: number) {
    this.available = permits;
  }
  acquire(): Promise<void> | null {
    if (this.available > 0) {
      this.available--;
      return null;
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }
  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.available++;
  }
}

export class RequestLanes {
  readonly concurrency: number;
  private readonly maxQueued: number;
  private readonly onBusy: (() => void) | undefined;
  private readonly onIdle: (() => void) | undefined;
  private inlineTail: Promise<void> = Promise.resolve();
  private readonly control: Semaphore;
  private readonly ordinary: Semaphore;
  private queued = 0;
  private busy = false;

  constructor(options: LanesOptions) {
    if (!Number.isInteger(options.concurrency) || options.concurrency < 1) {
      throw new RangeError('concurrency must be a positive integer');
    }
    this.concurrency = Math.min(options.concurrency, MAX_CONCURRENT_REQUESTS);
    this.maxQueued = options.maxQueued ?? 1024;
    this.onBusy = options.onBusy;
    this.onIdle = options.onIdle;
    this.control = new Semaphore(this.concurrency);
    this.ordinary = new Semaphore(this.concurrency);
  }

  /** Tasks queued or running. */
  get pending(): number {
    return this.queued;
  }

  /** Schedules a task; errors must be handled by the task itself. */
  run(lane: Lane, task: () => Promise<void> | void): void {
    this.enter();
    if (this.concurrency === 1 || lane === 'inline') {
      this.inlineTail = this.inlineTail.then(() => this.invoke(task));
      return;
    }
    const semaphore = lane === 'control' ? this.control : this.ordinary;
    const wait = semaphore.acquire();
    const go = async () => {
      try {
        await this.invoke(task);
      } finally {
        semaphore.release();
      }
    };
    // Concurrent tasks still start after the inline tasks queued before them (the handshake).
    const ready = wait ? Promise.all([wait, this.inlineTail]) : this.inlineTail;
    void ready.then(go);
  }

  private async invoke(task: () => Promise<void> | void): Promise<void> {
    try {
      await task();
    } catch {
      // Tasks report their own errors; a throw here must not break the chain.
    } finally {
      this.leave();
    }
  }

  private enter(): void {
    this.queued++;
    if (!this.busy && this.queued > this.maxQueued) {
      this.busy = true;
      this.onBusy?.();
    }
  }

  private leave(): void {
    this.queued--;
    if (this.busy && this.queued <= this.maxQueued / 2) {
      this.busy = false;
      this.onIdle?.();
    }
  }
}
