import { DEFAULT_FLOW_WINDOW_BYTES } from '@tether/exec-protocol';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ProcessBackend, ProcessEvent } from './backend.js';
import { ProcessHandle } from './process.js';

/** One side only: a backend that pushes what the test says and records acknowledgements. */
function backend() {
  const listeners = new Set<(event: ProcessEvent) => void>();
  const acks: number[] = [];
  const fake: ProcessBackend = {
    flowWindowBytes: DEFAULT_FLOW_WINDOW_BYTES,
    start: async () => ({ flowWindowBytes: DEFAULT_FLOW_WINDOW_BYTES }),
    ack: (_processId, seq) => void acks.push(seq),
    read: async () => ({ chunks: [], nextSeq: 1, exited: false, exitCode: null, closed: false, failure: null }),
    write: async () => 'accepted',
    closeStdin: async () => 'accepted',
    signal: async () => {},
    terminate: async () => {},
    resize: async () => {},
    subscribe: (listener) => {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    onReconnect: () => () => {},
    onClosed: () => () => {},
  };
  const push = (event: ProcessEvent) => {
    for (const listener of listeners) listener(event);
  };
  return { fake, acks, push };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('ProcessHandle flow control acknowledgements', () => {
  it('a consumer that catches up after every chunk acknowledges once it has been idle a moment, not per chunk', async () => {
    vi.useFakeTimers();
    const { fake, acks, push } = backend();
    const handle = new ProcessHandle('p1', fake);
    handle.started({ flowWindowBytes: DEFAULT_FLOW_WINDOW_BYTES });
    const events = handle[Symbol.asyncIterator]();
    const chunk = Buffer.alloc(16 * 1024);
    for (let seq = 1; seq <= 32; seq++) {
      push({ kind: 'output', processId: 'p1', seq, stream: 'stdout', chunk });
      await events.next(); // caught up again
    }
    // 512 KiB, below a quarter window: no acknowledgement yet, where one per chunk went before.
    expect(acks).toEqual([]);
    await vi.advanceTimersByTimeAsync(50);
    expect(acks).toEqual([32]);
    // Chunks a millisecond apart: one acknowledgement per idle delay, not one per chunk.
    for (let seq = 33; seq <= 72; seq++) {
      push({ kind: 'output', processId: 'p1', seq, stream: 'stdout', chunk });
      await events.next();
      await vi.advanceTimersByTimeAsync(1);
    }
    await vi.advanceTimersByTimeAsync(50);
    expect(acks.length).toBeLessThanOrEqual(4);
    expect(acks.at(-1)).toBe(72);
    // A quarter window consumed is acknowledged at once.
    const quarter = Buffer.alloc(DEFAULT_FLOW_WINDOW_BYTES / 4);
    push({ kind: 'output', processId: 'p1', seq: 73, stream: 'stdout', chunk: quarter });
    await events.next();
    expect(acks.at(-1)).toBe(73);
    handle.dispose();
  });
});
