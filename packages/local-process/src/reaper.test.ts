import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { isAlive, waitFor } from './__tests__/helpers.js';
import { createReaper, type ProcessReaper } from './reaper.js';

const FIXTURE = fileURLToPath(new URL('./__fixtures__/reaper-owner.ts', import.meta.url));

/** Everything a test started, killed afterwards whatever happened. */
const started: number[] = [];
const reapers: ProcessReaper[] = [];

afterEach(async () => {
  for (const pid of started.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already gone: the expected case.
    }
  }
  await Promise.all(reapers.splice(0).map((reaper) => reaper.close()));
});

/** A `sleep` leading its own process group (pgid = pid), like the children of a ProcessTable. */
function sleeperGroup(): ChildProcess & { pid: number } {
  const child = spawn('sleep', ['1000'], { detached: true, stdio: 'ignore' });
  started.push(child.pid!);
  return child as ChildProcess & { pid: number };
}

function reaper(): ProcessReaper {
  const created = createReaper();
  reapers.push(created);
  return created;
}

/** Whether every signal number in `signals` is ignored by `pid` (Linux /proc/<pid>/status SigIgn). */
function ignores(pid: number, signals: number[]): boolean {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((entry) => entry.startsWith('SigIgn:'));
  const mask = BigInt(`0x${line!.slice('SigIgn:'.length).trim()}`);
  return signals.every((signal) => (mask >> BigInt(signal - 1)) & 1n);
}

/** Starts the fixture owner and returns it with the JSON line it prints first. */
async function owner(mode: 'children' | 'idle'): Promise<{ child: ChildProcess; report: Record<string, unknown> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=tether-source', FIXTURE, mode], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  started.push(child.pid!);
  let output = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (text: string) => {
    output += text;
  });
  await waitFor(() => output.includes('\n'), 'the owner fixture to report', 15_000);
  return { child, report: JSON.parse(output.slice(0, output.indexOf('\n'))) };
}

describe('createReaper', () => {
  it('kills the groups still tracked when its pipe closes', async () => {
    const watchdog = reaper();
    const tracked = sleeperGroup();
    const forgotten = sleeperGroup();
    watchdog.track(tracked.pid);
    watchdog.track(forgotten.pid);
    watchdog.untrack(forgotten.pid);
    await watchdog.close();
    await waitFor(() => !isAlive(tracked.pid), 'the tracked group to die');
    expect(isAlive(forgotten.pid)).toBe(true);
    expect(isAlive(watchdog.pid!)).toBe(false);
  });

  it('untracks one registration at a time', async () => {
    const watchdog = reaper();
    const group = sleeperGroup();
    watchdog.track(group.pid);
    watchdog.track(group.pid);
    watchdog.untrack(group.pid);
    await watchdog.close();
    await waitFor(() => !isAlive(group.pid), 'the still-registered group to die');
  });

  it('ignores SIGTERM, SIGINT and SIGHUP, and close is idempotent', async () => {
    const watchdog = reaper();
    const group = sleeperGroup();
    watchdog.track(group.pid);
    // Signal it only once its traps are in place (the ignore mask in /proc shows them).
    await waitFor(() => ignores(watchdog.pid!, [1, 2, 15]), 'the watchdog to ignore HUP, INT and TERM');
    for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.kill(watchdog.pid!, signal);
    expect(isAlive(watchdog.pid!)).toBe(true);
    // Still alive: a tracked group is only killed when the pipe closes.
    watchdog.track(group.pid);
    const first = watchdog.close();
    expect(watchdog.close()).toBe(first);
    await first;
    await waitFor(() => !isAlive(group.pid), 'the group to die on close');
    expect(() => watchdog.track(1)).toThrow(RangeError);
  });

  it('does not keep its owner alive', async () => {
    const { child, report } = await owner('idle');
    if (child.exitCode === null) await once(child, 'exit');
    expect(child.exitCode).toBe(0);
    // The owner is gone, its pipe closed: the watchdog exits too.
    await waitFor(() => !isAlive(report.reaper as number), 'the watchdog to exit');
  });

  it('kills every child, grandchild and tty of an owner that was SIGKILLed', async () => {
    const { child, report } = await owner('children');
    const pids = report.pids as number[];
    started.push(...pids);
    expect(pids).toHaveLength(4);
    for (const pid of pids) expect(isAlive(pid)).toBe(true);
    child.kill('SIGKILL');
    await once(child, 'exit');
    for (const pid of pids) await waitFor(() => !isAlive(pid), `pid ${pid} to die after its owner`);
    await waitFor(() => !isAlive(report.reaper as number), 'the watchdog to exit');
  });
});
