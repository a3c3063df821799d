import { describe, expect, it } from 'vitest';
import { BufferPool } from './pool.js';

describe('BufferPool', () => {
  it('leases exactly the requested size and reuses a released slab of the same class', () => {
    const pool = new BufferPool({ step: 1024 });
    const first = pool.lease(1500);
    expect(first.buffer.length).toBe(1500);
    const slab = first.buffer.buffer;
    first.release();
    expect(pool.pooledBytes).toBe(2048);
    const second = pool.lease(2000); // same 2 KiB class
    expect(second.buffer.length).toBe(2000);
    expect(second.buffer.buffer).toBe(slab);
    expect(pool.pooledBytes).toBe(0);
    const third = pool.lease(2000); // the slab is out: a new one
    expect(third.buffer.buffer).not.toBe(slab);
  });

  it('lends the smallest free slab up to twice the size asked when none of its own size is free', () => {
    const pool = new BufferPool({ step: 1024 });
    const leases = [pool.lease(3 * 1024), pool.lease(5 * 1024), pool.lease(9 * 1024)];
    const [three, five, nine] = leases.map((lease) => lease.buffer.buffer);
    for (const lease of leases) lease.release();
    const created = pool.createdSlabs;
    const a = pool.lease(2 * 1024); // no 2 KiB slab: the 3 KiB one (the 5 and 9 KiB ones would do too, but are larger)
    expect([a.buffer.length, a.buffer.buffer]).toEqual([2048, three]);
    const b = pool.lease(2 * 1024); // 5 KiB is more than twice 2 KiB: a new slab
    expect(b.buffer.buffer).not.toBe(five);
    expect(pool.createdSlabs).toBe(created + 1);
    const c = pool.lease(5 * 1024);
    expect(c.buffer.buffer).toBe(five);
    a.release(); // back to its own 3 KiB class
    expect(pool.lease(3 * 1024).buffer.buffer).toBe(three);
    expect(pool.pooledBytes).toBe(9 * 1024);
    expect(pool.lease(8 * 1024).buffer.buffer).toBe(nine);
  });

  it('ignores a second release of the same lease (a slab is never handed out twice)', () => {
    const pool = new BufferPool({ step: 1024 });
    const lease = pool.lease(1024);
    lease.release();
    lease.release();
    expect(pool.pooledBytes).toBe(1024);
    const a = pool.lease(1024);
    const b = pool.lease(1024);
    expect(a.buffer.buffer).not.toBe(b.buffer.buffer);
  });

  it('gives small sizes plain buffers and keeps no more free slabs than its bound', () => {
    const pool = new BufferPool({ step: 1024, maxPooledBytes: 3 * 1024 });
    const small = pool.lease(100);
    small.release();
    expect(pool.pooledBytes).toBe(0);
    const leases = [pool.lease(1024), pool.lease(1024), pool.lease(2048)];
    for (const lease of leases) lease.release();
    expect(pool.pooledBytes).toBe(2048); // the two 1 KiB slabs; the 2 KiB one would pass the 3 KiB bound
  });

  it('build: what was built, with the release of the buffer it leased (none when it leased nothing)', () => {
    const pool = new BufferPool({ step: 1024 });
    const first = pool.build((allocate) => allocate(1500).fill(1));
    expect(first.built.length).toBe(1500);
    first.release?.();
    expect(pool.pooledBytes).toBe(2048);
    const second = pool.build((allocate) => allocate(2000));
    expect(second.built.buffer).toBe(first.built.buffer); // the slab came back and was reused
    expect(pool.build(() => 'no buffer').release).toBeUndefined();
  });

  it('close: drops the free slabs, drops slabs that come back later, and still leases (unpooled)', () => {
    const pool = new BufferPool({ step: 1024 });
    const held = pool.lease(2048);
    const lent = pool.lease(3000);
    pool.lease(4096).release();
    expect(pool.pooledBytes).toBe(4096);
    pool.close();
    expect(pool.closed).toBe(true);
    expect(pool.pooledBytes).toBe(0);
    held.release(); // a message still in a socket's queue when its owner closed
    lent.release();
    expect(pool.pooledBytes).toBe(0);
    const late = pool.lease(2048);
    expect(late.buffer.length).toBe(2048);
    late.release();
    expect(pool.pooledBytes).toBe(0);
  });
});
