import { loadNativePipe } from '@tether/native-pipe';

/** Linux's pipe capacity until someone raises it. */
export const DEFAULT_PIPE_BYTES = 64 * 1024;
/** What a bulk pipe is raised to (bench:path: 1 MiB measured no better than this). */
const BULK_PIPE_BYTES = 512 * 1024;
/** Raised pipes at once, per owner: 32 × 512 KiB = 16 MiB of the user's 64 MiB soft pipe budget. */
const MAX_RAISED_PIPES = 32;

export interface PipeGrowthOptions {
  /** Capacity a bulk pipe is raised to (default 512 KiB). */
  bytes?: number;
  /** Most pipes raised at once (default 32); past it a pipe keeps its 64 KiB. */
  maxPipes?: number;
}

/**
 * Raises the capacity of children's pipes that carry bulk data (output that fills a read, stdin written in
 * large pieces), within a budget. With Linux's 64 KiB a child streaming output hands over at most 64 KiB per
 * wakeup of ours and stalls whenever we are not scheduled at once; with 512 KiB both sides do an eighth of
 * the wakeups (bench:path, `exec -- head -c 256M /dev/zero`: the executor's and the relay's CPU per 256 MiB
 * fell by about a fifth together with the executor's 8-record output reads).
 *
 * Pipes count against the user's pipe budget (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB by default; past
 * it, every new pipe of that user gets a single page), so at most `maxPipes` are raised at once and each
 * gives its share back when it closes. A pipe the kernel refuses to raise (limits, not Linux, no
 * @tether/native-pipe) keeps its size: slower, never wrong.
 *
 * One per owner (the executor's server), shared by its process tables; never a module-level singleton.
 */
export class PipeGrowth {
  readonly bytes: number;
  readonly #maxPipes: number;
  #raised = 0;

  constructor(options: PipeGrowthOptions = {}) {
    this.bytes = options.bytes ?? BULK_PIPE_BYTES;
    this.#maxPipes = options.maxPipes ?? MAX_RAISED_PIPES;
  }

  /** Pipes raised now. */
  get raised(): number {
    return this.#raised;
  }

  /**
   * Raises the pipe `fd` is an end of; returns the function that gives its share back (call it when the
   * pipe closes; later calls do nothing), or null when it was not raised.
   */
  grow(fd: number): (() => void) | null {
    if (this.#raised >= this.#maxPipes) return null;
    let capacity = 0;
    try {
      capacity = loadNativePipe()?.growPipe(fd, this.bytes) ?? 0;
    } catch {
      // Closed meanwhile: nothing to raise.
    }
    if (capacity <= DEFAULT_PIPE_BYTES) return null;
    this.#raised++;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.#raised--;
    };
  }
}
