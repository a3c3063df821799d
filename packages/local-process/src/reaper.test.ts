import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadNativePipe } from '@tether/native-pipe';
import { afterEach, describe, expect, it } from 'vitest';
import { isAlive, waitFor } from './__tests__/helpers.js';
import { createReaper, type ProcessReaper, type ReaperOptions } from './reaper.js';

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

function reaper(options?: ReaperOptions): ProcessReaper {
  const created = createReaper(options);
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

type Report = Record<string, unknown>;

/**
 * Starts the fixture owner and returns it with the JSON line it prints first; `next()` waits for the
 * following one.
 */
async function owner(
  mode: 'children' | 'idle' | 'escaped' | 'escaped-close' | 'session',
): Promise<{ child: ChildProcess; report: Report; next: () => Promise<Report> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=tether-source', FIXTURE, mode], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  started.push(child.pid!);
  let output = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (text: string) => {
    output += text;
  });
  let read = 0;
  const next = async (): Promise<Report> => {
    await waitFor(() => output.split('\n').length > read + 1, 'the owner fixture to report', 15_000);
    return JSON.parse(output.split('\n')[read++]!) as Report;
  };
  return { child, report: await next(), next };
}

/** Whether /proc still has `pid`, alive or a zombie nobody reaped. */
const hasProcEntry = (pid: number) => existsSync(`/proc/${pid}`);

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

  it('adopts nothing and is no subreaper unless asked to', () => {
    const watchdog = reaper();
    expect(watchdog.subreaper).toBe(false);
    expect(watchdog.adopted).toEqual([]);
  });
});

describe('createReaper({ subreaper: true })', () => {
  it('is one per process, and close makes the process no subreaper again', async () => {
    const first = reaper({ subreaper: true });
    expect(first.subreaper).toBe(true);
    expect(loadNativePipe()!.isChildSubreaper()).toBe(true);
    // A second would take the first one's orphans for its own.
    expect(reaper({ subreaper: true }).subreaper).toBe(false);
    await first.close();
    expect(loadNativePipe()!.isChildSubreaper()).toBe(false);
  });

  it('adopts descendants that escaped with setsid, reaps them as they exit, and they die with an owner that was SIGKILLed', async () => {
    const { child, report } = await owner('escaped');
    const escaped = report.escaped as number[];
    const foreign = report.foreign as number[];
    started.push(...escaped, ...foreign);
    expect(report.subreaper).toBe(true);
    // Both orphans, the one whose shell exited and the one whose subshell did, are the owner's children
    // now, and adopted; the owner's own child_process children (spawned before and after) are not.
    expect(report.parents).toEqual([report.owner, report.owner]);
    expect(report.adopted).toEqual(expect.arrayContaining(escaped));
    for (const pid of foreign) expect(report.adopted).not.toContain(pid);
    // An adopted orphan that exits is reaped by the owner: no zombie is left in /proc.
    process.kill(escaped[0]!, 'SIGKILL');
    await waitFor(() => !hasProcEntry(escaped[0]!), `the owner to reap ${escaped[0]}`);
    // The other dies with the owner, through the watchdog, though it is in no group the table knew.
    expect(isAlive(escaped[1]!)).toBe(true);
    child.kill('SIGKILL');
    await once(child, 'exit');
    await waitFor(() => !isAlive(escaped[1]!), `the escaped pid ${escaped[1]} to die after its owner`);
    await waitFor(() => !isAlive(report.reaper as number), 'the watchdog to exit');
  });

  it('close kills and reaps every adopted orphan', async () => {
    const { child, report, next } = await owner('escaped-close');
    const escaped = report.escaped as number[];
    started.push(...escaped, ...(report.foreign as number[]));
    expect(report.subreaper).toBe(true);
    // Gone before the owner exits, and not as zombies: the owner reaped them.
    expect(await next()).toEqual({ left: [] });
    if (child.exitCode === null) await once(child, 'exit');
    expect(child.exitCode).toBe(0);
  });

  it('terminating a process kills the adopted orphans of its session (left its group with setpgid)', async () => {
    const { child, report, next } = await owner('session');
    started.push(report.stray as number);
    expect(report.adopted).toBe(true);
    expect(await next()).toEqual({ reaped: true });
    if (child.exitCode === null) await once(child, 'exit');
    expect(child.exitCode).toBe(0);
  });
});
