/**
 * A separate owner process for reaper.test.ts, run as
 * `node --import tsx --conditions=tether-source reaper-owner.ts <mode>` so it uses this package's sources
 * through its public entry point.
 *
 * - `children`: starts a pipe child, a tty child and a shell with a backgrounded grandchild (all
 *   `sleep 1000`), prints `{"pids":[...],"reaper":<pid>}` and waits to be killed.
 * - `idle`: creates a reaper, prints `{"reaper":<pid>}` and returns: the process must exit by itself.
 * - `escaped` and `escaped-close`, with a subreaper: two commands leave `setsid sleep 1000` behind, one
 *   as its shell exits (a direct child's orphan), one from a subshell while the shell runs on (a deeper
 *   orphan: no SIGCHLD reaches the owner); two `child_process` sleeps are started beside them, one before
 *   the reaper and one after, which are the owner's own. Once both sleepers are adopted it prints
 *   `{"owner","reaper","subreaper","escaped":[...],"foreign":[...],"adopted":[...],"parents":[...]}`;
 *   `escaped` then waits to be killed, `escaped-close` shuts down, closes the reaper and prints
 *   `{"left":[...]}`: the escaped pids that still have a /proc entry (alive or zombie).
 * - `session`, with a subreaper: a subshell leaves a perl that moved to a group of its own (setpgid, same
 *   session) behind while the shell runs on; once adopted it prints `{"stray":<pid>}`, terminates the
 *   shell, and prints `{"reaped":<bool>}` when the stray is gone and reaped (or after 10 s).
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createReaper, noteChildProcess, ProcessTable } from '@tether/local-process';

const mode = process.argv[2];
const subreaper = mode === 'escaped' || mode === 'escaped-close' || mode === 'session';
const foreign = subreaper ? [spawn('sleep', ['1000'], { stdio: 'ignore' })] : [];
const reaper = createReaper({ subreaper });
if (subreaper) {
  // Spawned after adoption began: noted as the owner's own, as every spawner of such a process must.
  const late = spawn('sleep', ['1000'], { stdio: 'ignore' });
  noteChildProcess(reaper.adopter, late);
  foreign.push(late);
}
const base = { cwd: '/', env: { PATH: '/usr/local/bin:/usr/bin:/bin' }, pipeStdin: false, tty: false };

/** Reads a process's output until it holds a line. */
async function firstLine(table: ProcessTable, processId: string): Promise<string> {
  let output = '';
  let afterSeq = 0;
  while (!output.includes('\n')) {
    const result = await table.read(processId, { afterSeq, waitMs: 5_000 });
    for (const chunk of result.chunks) output += chunk.chunk.toString();
    afterSeq = result.nextSeq - 1;
  }
  return output.slice(0, output.indexOf('\n'));
}

/** Polls (bounded) until `done`, at most 10 s. */
async function until(done: () => boolean): Promise<boolean> {
  const deadline = Date.now() + 10_000;
  while (!done()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

if (mode === 'escaped' || mode === 'escaped-close') {
  const table = new ProcessTable({ reaper, adopter: reaper.adopter });
  const quiet = '>/dev/null 2>&1';
  await table.start({ ...base, processId: 'exits', argv: ['/bin/sh', '-c', `setsid sleep 1000 ${quiet} & echo $!`] });
  await table.start({
    ...base,
    processId: 'runs-on',
    argv: ['/bin/sh', '-c', `(setsid sleep 1000 ${quiet} & echo $!); exec sleep 1000`],
  });
  const escaped = [Number(await firstLine(table, 'exits')), Number(await firstLine(table, 'runs-on'))];
  await until(() => escaped.every((pid) => reaper.adopted.includes(pid)));
  process.stdout.write(
    `${JSON.stringify({
      owner: process.pid,
      reaper: reaper.pid,
      subreaper: reaper.subreaper,
      escaped,
      foreign: foreign.map((child) => child.pid),
      adopted: reaper.adopted,
      parents: escaped.map(parentOf),
    })}\n`,
  );
  if (mode === 'escaped-close') {
    await table.shutdown();
    await reaper.close();
    for (const child of foreign) child.kill('SIGKILL');
    process.stdout.write(`${JSON.stringify({ left: escaped.filter((pid) => existsSync(`/proc/${pid}`)) })}\n`);
  }
} else if (mode === 'session') {
  const table = new ProcessTable({ reaper, adopter: reaper.adopter });
  const script = `(perl -e 'setpgrp(0, 0); sleep 1000' >/dev/null 2>&1 & echo $!); exec sleep 1000`;
  await table.start({ ...base, processId: 'shell', argv: ['/bin/sh', '-c', script] });
  const stray = Number(await firstLine(table, 'shell'));
  await until(() => reaper.adopted.includes(stray));
  process.stdout.write(`${JSON.stringify({ stray, adopted: reaper.adopted.includes(stray) })}\n`);
  table.terminate('shell');
  const reaped = await until(() => !reaper.adopted.includes(stray) && !existsSync(`/proc/${stray}`));
  process.stdout.write(`${JSON.stringify({ reaped })}\n`);
  await table.shutdown();
  await reaper.close();
  for (const child of foreign) child.kill('SIGKILL');
} else if (mode === 'idle') {
  process.stdout.write(`${JSON.stringify({ reaper: reaper.pid })}\n`);
} else {
  const table = new ProcessTable({ reaper });
  const pids: number[] = [];
  pids.push((await table.start({ ...base, processId: 'plain', argv: ['sleep', '1000'], tty: false })).pid);
  pids.push((await table.start({ ...base, processId: 'tty', argv: ['sleep', '1000'], tty: true })).pid);
  const tree = await table.start({
    ...base,
    processId: 'tree',
    argv: ['/bin/sh', '-c', 'sleep 1000 & echo "$!"; wait'],
    tty: false,
  });
  pids.push(tree.pid);
  let output = '';
  let afterSeq = 0;
  while (!output.includes('\n')) {
    const result = await table.read('tree', { afterSeq, waitMs: 5_000 });
    for (const chunk of result.chunks) output += chunk.chunk.toString();
    afterSeq = result.nextSeq - 1;
  }
  pids.push(Number(output.trim()));
  process.stdout.write(`${JSON.stringify({ pids, reaper: reaper.pid })}\n`);
}
