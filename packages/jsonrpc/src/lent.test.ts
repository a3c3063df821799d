import { BufferPool } from '@tether/bytes';
import { describe, expect, it } from 'vitest';
import { giveBack, lendBuffer } from './lent.js';

describe('lendBuffer', () => {
  it('lends buffers that any view of them gives back, once; other buffers are ignored', () => {
    const pool = new BufferPool({ step: 1024 });
    const lent = lendBuffer(pool, 3000);
    expect(lent.length).toBe(3000);
    giveBack(lent.subarray(100, 200)); // a view (an attachment) returns the whole slab
    expect(pool.pooledBytes).toBe(3072);
    giveBack(lent); // already back: nothing
    expect(pool.pooledBytes).toBe(3072);
    const again = lendBuffer(pool, 3000);
    expect(again.buffer).toBe(lent.buffer);
    giveBack(Buffer.alloc(3000)); // never lent
    giveBack(Buffer.alloc(10));
    expect(pool.pooledBytes).toBe(0);
  });
});
