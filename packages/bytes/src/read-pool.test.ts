import { describe, expect, it } from 'vitest';
import { READ_BUFFER_BYTES, ReadBufferPool } from './read-pool.js';

describe('ReadBufferPool', () => {
  it('hands a long read over as a view and copies a short one, reusing its buffer at once', () => {
    const pool = new ReadBufferPool();
    const buffer = pool.acquire();
    expect(buffer.length).toBe(READ_BUFFER_BYTES);
    const long = pool.chunkOf(buffer, 40 * 1024);
    expect(long.buffer).toBe(buffer.buffer);
    expect(long.length).toBe(40 * 1024);

    const other = pool.acquire();
    other.fill(7, 0, 10);
    const short = pool.chunkOf(other, 10);
    expect(short.buffer).not.toBe(other.buffer);
    expect([...short]).toEqual(Array(10).fill(7));
    expect(pool.freeBuffers).toBe(1); // `other` came back
    expect(pool.acquire().buffer).toBe(other.buffer);
  });

  it('keeps at most 64 free buffers (4 MiB); one released past that is dropped', () => {
    const pool = new ReadBufferPool();
    const buffers = Array.from({ length: 65 }, () => pool.acquire());
    for (const buffer of buffers) pool.release(buffer);
    expect(pool.freeBuffers).toBe(64);
    pool.release(buffers[64] as Buffer); // dropped, so no longer the pool's: still 64
    expect(pool.freeBuffers).toBe(64);
  });

  it('hands out bulk buffers on request and keeps a read only when it fills half of its buffer', () => {
    const pool = new ReadBufferPool({ bufferBytes: 60 * 1024, bulkBufferBytes: 240 * 1024 });
    const bulk = pool.acquire(true);
    expect(bulk.length).toBe(240 * 1024);
    expect(pool.acquire().length).toBe(60 * 1024);
    // 100 KiB would pin 240: copied out, and the buffer comes back for the next bulk read.
    const copied = pool.chunkOf(bulk, 100 * 1024);
    expect(copied.buffer).not.toBe(bulk.buffer);
    const again = pool.acquire(true);
    expect(again.buffer).toBe(bulk.buffer);
    const kept = pool.chunkOf(again, 120 * 1024);
    expect(kept.buffer).toBe(again.buffer);
  });

  it('copies every read shorter than KEEP_READ_AT_BYTES, however full its buffer (a reader’s own reused one)', () => {
    const pool = new ReadBufferPool();
    const own = Buffer.alloc(8 * 1024, 3);
    const chunk = pool.chunkOf(own, own.length);
    expect(chunk.buffer).not.toBe(own.buffer);
    own.fill(4);
    expect(chunk.every((byte) => byte === 3)).toBe(true);
  });

  it('bounds its free buffers in bytes over both sizes: 16 free bulk buffers of 256 KiB fill it', () => {
    const pool = new ReadBufferPool({ bulkBufferBytes: 256 * 1024 });
    const buffers = Array.from({ length: 17 }, () => pool.acquire(true));
    for (const buffer of buffers) pool.release(buffer);
    expect(pool.freeBuffers).toBe(64); // 4 MiB, counted in default-size buffers
    const small = pool.acquire();
    pool.release(small);
    expect(pool.freeBuffers).toBe(64); // the bound holds: the small one was dropped
  });

  it('keeps 16 free bulk buffers where those are larger than 4 MiB over 16 (a raised pipe’s stream)', () => {
    const pool = new ReadBufferPool({ bulkBufferBytes: 512 * 1024 });
    const buffers = Array.from({ length: 17 }, () => pool.acquire(true));
    for (const buffer of buffers) pool.release(buffer);
    expect(pool.freeBuffers).toBe(128); // 8 MiB: sixteen of 512 KiB, counted in default-size buffers
    const again = Array.from({ length: 16 }, () => pool.acquire(true));
    expect(pool.createdBuffers).toBe(17); // all sixteen came from the free list
    expect(new Set(again.map((buffer) => buffer.buffer)).size).toBe(16);
  });

  it('takes back only its own buffers, and each once', () => {
    const pool = new ReadBufferPool();
    pool.release(Buffer.alloc(READ_BUFFER_BYTES));
    expect(pool.freeBuffers).toBe(0);
    const chunk = pool.chunkOf(pool.acquire(), READ_BUFFER_BYTES);
    pool.release(chunk);
    pool.release(chunk);
    expect(pool.freeBuffers).toBe(1);
    const a = pool.acquire();
    const b = pool.acquire();
    expect(a.buffer).not.toBe(b.buffer);
    expect(pool.createdBuffers).toBe(2);
  });
});

describe('ReadBufferPool.close', () => {
  it('drops its free buffers and takes nothing back once closed, while reads still get buffers', () => {
    const pool = new ReadBufferPool({ bufferBytes: 1024 });
    const out = pool.acquire();
    pool.release(pool.acquire());
    expect(pool.freeBuffers).toBe(1);
    pool.close();
    expect(pool.freeBuffers).toBe(0);
    pool.release(out);
    expect(pool.freeBuffers).toBe(0);
    expect(pool.acquire().length).toBe(1024);
  });
});
