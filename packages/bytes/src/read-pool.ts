import { BufferPool, HandedChunks } from './pool.js';

/** Read buffer size: what libuv asks for per read of a pipe. */
export const READ_BUFFER_BYTES = 64 * 1024;
/** A read this long says more is waiting (half a default buffer: a shorter one is copied out, see chunkOf). */
export const KEEP_READ_AT_BYTES = 32 * 1024;
/** Free read buffers kept per pool, in bytes over both sizes (64 buffers of the default size). */
const MAX_FREE_BYTES = 64 * READ_BUFFER_BYTES;
/** Free bulk buffers kept per pool (`bulkBufferBytes`), when that is more than MAX_FREE_BYTES. */
const MAX_FREE_BULK_BUFFERS = 16;

/**
 * Read buffers for child output pipes, reused instead of allocated per read.
 *
 * Node allocates a fresh ArrayBuffer for every read of a pipe, and V8 counts each as external memory:
 * streaming a child's output at hundreds of MB/s then costs a full mark-compact for roughly every 64 MiB.
 * With a pool, a long read keeps its buffer as the chunk (a view of it), and the buffer comes back when the
 * chunk is no longer needed (`release`, called when retention drops the chunk); a short read is copied to a
 * buffer of its own size so a small chunk never pins 64 KiB.
 *
 * The same release rule as every other pooled buffer: each read buffer is a `BufferPool` lease, released
 * at most once, and a closed pool takes nothing back. A chunk travels on its own (the process table keeps
 * chunks, not leases), so the lease's release is found again by the chunk's memory (`HandedChunks`).
 *
 * Contract for users of recycled chunks: a chunk may be overwritten by a later read once it is released,
 * so whoever holds a chunk must be done with it before releasing it (the executor encodes each chunk
 * synchronously when it is emitted or read, and releases it only when retention drops it).
 */
export class ReadBufferPool {
  readonly #pool: BufferPool;
  readonly #handed = new HandedChunks();
  /** Bytes of each buffer (one read at most). */
  readonly bufferBytes: number;
  /** Bytes of a bulk buffer, for a pipe raised past its 64 KiB (PipeGrowth): one read at most. */
  readonly bulkBufferBytes: number;

  /**
   * `bufferBytes` (default READ_BUFFER_BYTES) bounds one read: a consumer that frames each chunk into a
   * record of its own (the executor, for the relay's secure stream) sizes it so a chunk and its header fit.
   * `bulkBufferBytes` (default the same) bounds one read of a raised pipe (the executor: eight records).
   */
  constructor(options: { bufferBytes?: number; bulkBufferBytes?: number } = {}) {
    this.bufferBytes = options.bufferBytes ?? READ_BUFFER_BYTES;
    this.bulkBufferBytes = Math.max(this.bufferBytes, options.bulkBufferBytes ?? this.bufferBytes);
    // Sixteen free bulk buffers where those are larger: a raised pipe's stream keeps about its flow window (4
    // MiB: eight bulk buffers) retained until acknowledged, and they come back a quarter window at a time.
    this.#pool = new BufferPool({
      step: this.bufferBytes,
      maxPooledBytes: Math.max(MAX_FREE_BYTES, MAX_FREE_BULK_BUFFERS * this.bulkBufferBytes),
    });
  }

  /** Free buffers held for reuse (counted in buffers of the default size). */
  get freeBuffers(): number {
    return this.#pool.pooledBytes / this.bufferBytes;
  }

  /** Buffers allocated so far (each read that found no free one allocated one). */
  get createdBuffers(): number {
    return this.#pool.createdSlabs;
  }

  /** A buffer for one read: `bufferBytes`, or `bulkBufferBytes` for a raised pipe. */
  acquire(bulk = false): Buffer {
    const lease = this.#pool.lease(bulk ? this.bulkBufferBytes : this.bufferBytes);
    this.#handed.hand(lease.buffer, lease.release);
    return lease.buffer;
  }

  /** Gives back the buffer under `chunk` if it is one of this pool's and still out; anything else is ignored. */
  release(chunk: Buffer): void {
    this.#handed.giveBack(chunk);
  }

  /** The owner is done: free buffers are dropped, and those still out are dropped when they come back. */
  close(): void {
    this.#pool.close();
  }

  /**
   * The chunk for `length` bytes just read into `buffer`: a view of it, or a copy of a read shorter than
   * KEEP_READ_AT_BYTES or than half the buffer (so that a kept buffer is at least half used, whichever its
   * size). A buffer of the caller's own that is reused for every read (shorter than KEEP_READ_AT_BYTES) is
   * therefore always copied out of.
   */
  chunkOf(buffer: Buffer, length: number): Buffer {
    if (length >= KEEP_READ_AT_BYTES && length * 2 >= buffer.length) return buffer.subarray(0, length);
    const copy = Buffer.from(buffer.subarray(0, length));
    this.release(buffer);
    return copy;
  }
}
