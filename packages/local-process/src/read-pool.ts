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
 *
 * `raise`, when given, is called once a read fills a whole pooled buffer (the writer outpaces us: its 64 KiB
 * pipe is full); when it says the pipe was raised (PipeGrowth), full reads go on in the pool's bulk buffers.
 */
export function readIntoPool(
  socket: Socket,
  pool: ReadBufferPool,
  onChunk: (chunk: Buffer) => void,
  raise?: () => boolean,
): boolean {
  let small: Buffer | null = null;
  const idle = () => {
    small ??= Buffer.allocUnsafe(IDLE_READ_BUFFER_BYTES);
    return small;
  };
  let bulk = false;
  /** Whether the pipe was raised (asked once: `raise` is undefined after). */
  let raised = false;
  let tryRaise = raise;
  let large = false;
  return readIntoUserBuffers(socket, {
    first: idle,
    next: () => (bulk ? pool.acquire(large) : idle()),
    onRead: (length, buffer) => {
      // A read that filled the small buffer, or most of a pooled one, says more is waiting.
      bulk = buffer === small ? length === buffer.length : length >= KEEP_READ_AT_BYTES;
      if (buffer !== small && length === buffer.length && tryRaise !== undefined) {
        raised = tryRaise();
        tryRaise = undefined;
      }
      // Bulk buffers while reads fill a default one; a quieter stream goes back to the default size.
      large = raised && length >= pool.bufferBytes;
      // The small buffer is copied out of (it is shorter than KEEP_READ_AT_BYTES) and reused.
      onChunk(pool.chunkOf(buffer, length));
      return undefined;
    },
  });
}
