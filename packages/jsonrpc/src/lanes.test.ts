import { describe, expect, it } from 'vitest';
import { RequestLanes } from './lanes.js';

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('RequestLanes', () => {
  it('runs everything inline, in order, with concurrency 1', async () => {
    const lanes = new RequestLanes({ concurrency: 1 });
    const order: string[] = [];
    const gate = deferred();
    lanes.run('ordinary', async () => {
      await gate.promise;
      order.push('slow');
    });
    lanes.run('control', () => {
      order.push('control');
    });
    await tick();
    expect(order).toEqual([]);
    gate.resolve();
    await tick();
    await tick();
    expect(order).toEqual(['slow', 'control']);
  });

  it('keeps the control lane free while the ordinary lane is saturated', async () => {
    const lanes = new RequestLanes({ concurrency: 2 });
    const gate = deferred();
    const order: string[] = [];
    for (let i = 0; i < 3; i++) {
      lanes.run('ordinary', async () => {
        order.push(`start${i}`);
        await gate.promise;
      });
    }
    lanes.run('control', () => {
      order.push('control');
    });
    await tick();
    expect(order).toEqual(['start0', 'start1', 'control']);
    gate.resolve();
    await tick();
    await tick();
    expect(order).toContain('start2');
  });

  it('signals busy above the queue bound and idle below half of it', async () => {
    const events: string[] = [];
    const lanes = new RequestLanes({
      concurrency: 1,
      maxQueued: 2,
      onBusy: () => events.push('busy'),
      onIdle: () => events.push('idle'),
    });
    const gate = deferred();
    for (let i = 0; i < 4; i++) lanes.run('ordinary', () => gate.promise);
    expect(events).toEqual(['busy']);
    gate.resolve();
    for (let i = 0; i < 6; i++) await tick();
    expect(events).toEqual(['busy', 'idle']);
    expect(lanes.pending).toBe(0);
  });

  it('rejects a non-positive concurrency and clamps huge values', () => {
    expect(() => new RequestLanes({ concurrency: 0 })).toThrow(RangeError);
    expect(new RequestLanes({ concurrency: 1e9 }).concurrency).toBe(1024);
  });

  it('survives a throwing task', async () => {
    const lanes = new RequestLanes({ concurrency: 1 });
    const ran: number[] = [];
    lanes.run('ordinary', () => {
      throw new Error('boom');
    });
    lanes.run('ordinary', () => {
      ran.push(1);
    });
    await tick();
    await tick();
    expect(ran).toEqual([1]);
  });
});
