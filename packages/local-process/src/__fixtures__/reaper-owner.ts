/**
 * A separate owner process for reaper.test.ts, run as
 * `node --import tsx --conditions=tether-source reaper-owner.ts <mode>` so it uses this package's sources
 * through its public entry point.
 *
 * - `children`: starts a pipe child, a tty child and a shell with a backgrounded grandchild (all
 *   `sleep 1000`), prints `{"pids":[...],"reaper":<pid>}` and waits to be killed.
 * - `idle`: creates a reaper, prints `{"reaper":<pid>}` and returns: the process must exit by itself.
 */
import { createReaper, ProcessTable } from '@tether/local-process';

const mode = process.argv[2];
const reaper = createReaper();

if (mode === 'idle') {
  process.stdout.write(`${JSON.stringify({ reaper: reaper.pid })}\n`);
} else {
  const table = new ProcessTable({ reaper });
  const base = { cwd: '/', env: { PATH: '/usr/local/bin:/usr/bin:/bin' }, pipeStdin: false };
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
