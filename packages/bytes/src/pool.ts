/**
 * Reusable buffers for large outbound messages. A message built into a leased buffer is handed to
 * `MessageTransport.send` with the lease's `release`; the transport calls it once it no longer reads the
 * bytes, and the buffer serves a later message. A lease that is never released is simply garbage.
 *
 * Why: every fresh buffer above Node's small-buffer pool is its own ArrayBuffer, counted by V8 as external
 * memory, and V8 starts a full mark-compact for roughly every 64 MiB of it. Streaming output at hundreds of
 * MB/s through fresh buffers spent most of the executor's GC time on those collections.
 *
 * A pool belongs to the connection or component that made it (ARCHITECTURE.md, "Who owns what"),
 * which hands it to what it builds and closes it when it closes: never a module-level singleton, so two
 * connections never share free slabs, and a closed owner holds no memory.
 */
export interface BufferLease {
  /** Exactly the requested size: a view of a pooled slab, or a plain buffer for small sizes. */
  readonly buffer: Buffer;
  /** Returns the slab to the pool; later calls do nothing. */
  release(): void;
}

export interface BufferPoolOptions {
  /** Slab sizes are multiples of this (default 16 KiB); smaller requests get plain buffers, unpooled. */
  step?: number;
  /** Free slabs kept, in bytes over all sizes (default 8 MiB); a slab released past it is dropped. */
  maxPooledBytes?: number;
}

const NOTHING_TO_RELEASE = () => {};

export class BufferPool {
  readonly #step: number;
  readonly #maxPooledBytes: number;
  /** Free slabs by size. */
  readonly #free = new Map<number, Buffer[]>();
  #pooledBytes = 0;
  #createdSlabs = 0;
  #closed = false;

  constructor(options: BufferPoolOptions = {}) {
    this.#step = options.step ?? 16 * 1024;
    this.#maxPooledBytes = options.maxPooledBytes ?? 8 * 1024 * 1024;
  }

  /** Bytes of free slabs held for reuse. */
  get pooledBytes(): number {
    return this.#pooledBytes;
  }

  /** Slabs allocated so far (each lease that found no free slab of its size allocated one). */
  get createdSlabs(): number {
    return this.#createdSlabs;
  }

  /** True once the owner closed the pool. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * The owner is done: free slabs are dropped, and slabs still leased (a frame in a socket's queue) are
   * dropped when they come back. Leasing still works (fresh buffers, unpooled), so a late message of a
   * closing connection is not an error.
   */
  close(): void {
    this.#closed = true;
    this.#free.clear();
    this.#pooledBytes = 0;
  }

  lease(size: number): BufferLease {
    if (size < this.#step || this.#closed) return { buffer: Buffer.allocUnsafe(size), release: NOTHING_TO_RELEASE };
    const slabSize = Math.ceil(size / this.#step) * this.#step;
    let slab = this.#free.get(slabSize)?.pop() ?? this.#larger(slabSize);
    if (slab) this.#pooledBytes -= slab.length;
    else {
      slab = Buffer.allocUnsafeSlow(slabSize);
      this.#createdSlabs++;
    }
    let held = true;
    const owned = slab;
    return {
      buffer: slab.subarray(0, size),
      release: () => {
        if (!held) return;
        held = false;
        this.#put(owned);
      },
    };
  }

  /**
   * Runs `build` with an allocator that leases from this pool (called at most once), and returns what it
   * built with the release of the leased buffer: for a message encoded straight into a pooled buffer and
   * handed to a `send` that gives it back.
   */
  build<T>(build: (allocate: (size: number) => Buffer) => T): { built: T; release: (() => void) | undefined } {
    let lease: BufferLease | undefined;
    const built = build((size) => {
      lease = this.lease(size);
      return lease.buffer;
    });
    return { built, release: (lease as BufferLease | undefined)?.release };
  }

  /**
   * The smallest free slab larger than `slabSize` and at most twice it, taken from the free list. Messages
   * built from reads of a pipe vary in size by a few steps: with exact sizes only, a free slab rarely fit the
   * next message, and a stream allocated a fresh slab for one message in 25 (the executor, 256 MiB
   * to a harness: 78 slabs per GiB in its output pool, each external memory to V8, which then ran a full
   * mark-compact about every 100 MiB). A few sizes are free at a time, so the search is short.
   */
  #larger(slabSize: number): Buffer | undefined {
    let best = 0;
    for (const [size, free] of this.#free) {
      if (size > slabSize && size <= 2 * slabSize && free.length > 0 && (best === 0 || size < best)) best = size;
    }
    return best === 0 ? undefined : this.#free.get(best)?.pop();
  }

  #put(slab: Buffer): void {
    if (this.#closed || this.#pooledBytes + slab.length > this.#maxPooledBytes) return;
    let free = this.#free.get(slab.length);
    if (!free) {
      free = [];
      this.#free.set(slab.length, free);
    }
    free.push(slab);
    this.#pooledBytes += slab.length;
  }
}

/**
 * The write callback for a message sent with a `release` (a transport's `send(message, release)`): gives the
 * buffer back, then runs the transport's own `afterWrite`. Without a release, `afterWrite` itself.
 */
export function releasingCallback(
  release: (() => void) | undefined,
  afterWrite: (err?: Error) => void,
): (err?: Error) => void {
  if (!release) return afterWrite;
  return (err?: Error) => {
    release();
    afterWrite(err);
  };
}

/**
 * Chunks a stream handed on (pushed to a Readable, emitted as 'data') with the release of the pooled buffer
 * each sits in, until their consumer gives one back (`giveBack`, with any view of it). Owned by that stream
 * and gone with it: keys are held weakly, so a chunk never given back is collected with its entry, and an
 * entry is deleted before its release runs, so a second `giveBack` does nothing.
 */
export class HandedChunks {
  readonly #releases = new WeakMap<ArrayBufferLike, () => void>();

  hand(chunk: Uint8Array, release: () => void): void {
    this.#releases.set(chunk.buffer, release);
  }

  /** The consumer is the bytes' last user: the buffer serves another message next. Others are ignored. */
  giveBack(view: Uint8Array): void {
    const release = this.#releases.get(view.buffer);
    if (!release) return;
    this.#releases.delete(view.buffer);
    release();
  }
}
