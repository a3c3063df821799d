import { describe, expect, it } from 'vitest';
import { ProcessInput } from './process-input.js';

/** A target whose calls resolve when the test says (one at a time), recording what it was given. */
function target(statuses: Array<'accepted' | 'stdinClosed'> = []) {
  const calls: string[] = [];
  const pending: Array<() => void> = [];
  return {
    calls,
    release: () => pending.shift()?.(),
    write: (data: string) =>
      new Promise<'accepted' | 'stdinClosed'>((resolve) => {
        calls.push(`write ${data}`);
        pending.push(() => resolve(statuses.shift() ?? 'accepted'));
      }),
    resize: (rows: number, cols: number) =>
      new Promise<void>((resolve) => {
        calls.push(`resize ${rows}x${cols}`);
        pending.push(resolve);
      }),
  };
}

const turn = () => new Promise((resolve) => setTimeout(resolve, 0));

describe('ProcessInput', () => {
  it('keeps one write in flight, keystrokes typed meanwhile going together in the next, in order', async () => {
    const t = target();
    const input = new ProcessInput(t, { onStdinGone: () => undefined, onError: () => undefined });
    input.type('a');
    input.type('b');
    input.type('c');
    expect(t.calls).toEqual(['write a']);
    t.release();
    await turn();
    expect(t.calls).toEqual(['write a', 'write bc']);
  });

  it('collapses sizes that come while one is in flight into the latest', async () => {
    const t = target();
    const input = new ProcessInput(t, { onStdinGone: () => undefined, onError: () => undefined });
    input.size(10, 20);
    input.size(11, 21);
    input.size(12, 22);
    t.release();
    await turn();
    expect(t.calls).toEqual(['resize 10x20', 'resize 12x22']);
  });

  it('stops at a closed stdin and says so once; nothing goes out after stop()', async () => {
    const t = target(['stdinClosed']);
    const gone: string[] = [];
    const input = new ProcessInput(t, { onStdinGone: (status) => gone.push(status), onError: () => undefined });
    input.type('x');
    input.type('y');
    t.release();
    await turn();
    input.type('z');
    expect(gone).toEqual(['stdinClosed']);
    expect(t.calls).toEqual(['write x']);
    const other = target();
    const stopped = new ProcessInput(other, { onStdinGone: () => undefined, onError: () => undefined });
    stopped.stop();
    stopped.type('q');
    stopped.size(1, 1);
    expect(other.calls).toEqual([]);
  });

  it('reports a failed write once and writes nothing more', async () => {
    const errors: string[] = [];
    const input = new ProcessInput(
      { write: () => Promise.reject(new Error('session gone')), resize: () => Promise.resolve() },
      { onStdinGone: () => undefined, onError: (error) => errors.push(error.message) },
    );
    input.type('x');
    await turn();
    input.type('y');
    await turn();
    expect(errors).toEqual(['session gone']);
  });
});
