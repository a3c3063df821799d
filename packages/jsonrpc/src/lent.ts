import type { BufferPool } from '@tether/bytes';

/**
 * Slabs lent out by `lendBuffer`, by their memory, until `giveBack`. The one module-level map left of the
 * buffer machinery, kept because `giveBack` is public API the SDK re-exports (harness `cp` gives chunks
 * back by their view alone). It shares nothing between connections: each entry is one slab's own release,
 * which returns it to the pool of the connection that lent it (a closed one drops it), the keys are held
 * weakly (a slab never given back is collected with its entry), and an entry is deleted before its release
 * runs, so a second `giveBack` of the same memory does nothing. What it cannot check is that the caller
 * is the bytes' last user; an explicit `release()` on the inbound message would make that visible.
 */
const lent = new WeakMap<ArrayBufferLike, () => void>();

/**
 * A buffer of `size` bytes from `pool` that is handed on (an inbound message) rather than returned by the
 * code that took it: whoever ends up holding the bytes, and knows nobody else does, may `giveBack` any
 * view of it (an attachment, say). A buffer never given back is simply garbage, as a fresh one would be.
 */
export function lendBuffer(pool: BufferPool, size: number): Buffer {
  const lease = pool.lease(size);
  lent.set(lease.buffer.buffer, lease.release);
  return lease.buffer;
}

/**
 * Returns the lent buffer `view` is part of to its pool; nothing for any other buffer. The caller must be
 * the bytes' last user: the memory serves another message next.
 */
export function giveBack(view: Uint8Array): void {
  const release = lent.get(view.buffer);
  if (!release) return;
  lent.delete(view.buffer);
  release();
}
