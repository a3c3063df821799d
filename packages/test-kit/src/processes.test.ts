import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { isAlive, pidExists } from './processes.js';

/** The process's state letter in /proc (Z: ended, not yet reaped). */
const state = (pid: number) => /\) (\w) /.exec(readFileSync(`/proc/${pid}/stat`, 'utf8'))?.[1];

describe('pidExists and isAlive', () => {
  it('tell a zombie (ended, not yet reaped) from a live process and from one reaped', async () => {
    expect([pidExists(process.pid), isAlive(process.pid)]).toEqual([true, true]);
    const child = spawn('sh', ['-c', 'exit 0'], { stdio: 'ignore' });
    const pid = child.pid as number;
    const exited = once(child, 'exit');
    // Node reaps a child from its event loop: while this thread waits here, the ended child stays a zombie.
    const sleep = new Int32Array(new SharedArrayBuffer(4));
    for (let i = 0; i < 400 && state(pid) !== 'Z'; i++) Atomics.wait(sleep, 0, 0, 5);
    expect(state(pid)).toBe('Z');
    expect([pidExists(pid), isAlive(pid)]).toEqual([true, false]);
    await exited;
    expect([pidExists(pid), isAlive(pid)]).toEqual([false, false]);
  });
});
