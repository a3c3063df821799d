import type { Socket } from 'node:net';
import { KEEP_READ_AT_BYTES, type ReadBufferPool } from '@tether/bytes';
import { readIntoUserBuffers } from '@tether/user-read';

/**
 * What an idle stream holds: a stream waits with a buffer for its next read, so a full 64 KiB buffer per
 * stream made a thousand quiet processes hold 128 MiB (two streams each). A stream starts with a small
 * buffer of its own and moves to the pool's only while its reads fill what it has.
 */
const IDLE_READ_BUFFER_BYTES = 8 * 1024;

/**
 * Switches a pipe socket that has not delivered anything yet to reads into `pool`'s buffers (or, while
 * its reads are short, one small buffer of its own, copied out of); each read is passed to `onChunk`.
 * 'end', 'close', pause() and resume() behave as before. Returns false (and changes nothing) when the
 * socket cannot be switched; the caller then listens to 'data' as usual.
 */
export function readIntoPool(socket: Socket, pool: ReadBufferPool, onChunk: (chunk: Buffer) => void): boolean {
  let small: Buffer | null = null;
  const idle = () => {
    small ??= Buffer.allocUnsafe(IDLE_READ_BUFFER_BYTES);
    return small;
  };
  let bulk = false;
  return readIntoUserBuffers(socket, {
    first: idle,
    next: () => (bulk ? pool.acquire() : idle()),
    onRead: (length, buffer) => {
      // A read that filled the small buffer, or most of a pooled one, says more is waiting.
      bulk = buffer === small ? length === buffer.length : length >= KEEP_READ_AT_BYTES;
      // The small buffer is copied out of (it is shorter than KEEP_READ_AT_BYTES) and reused.
      onChunk(pool.chunkOf(buffer, length));
      return undefined;
    },
  });
}
