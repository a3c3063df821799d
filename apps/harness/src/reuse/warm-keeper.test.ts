import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WarmKeeper } from './warm-keeper.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function waitFor(check: () => boolean, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('WarmKeeper', () => {
  it('gives up after three warm processes that end without serving a command, and says so', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warm-keeper-'));
    dirs.push(dir);
    const lines: string[] = [];
    const keeper = new WarmKeeper({
      socketPath: join(dir, 'x.warm.sock'),
      log: (line) => lines.push(line),
      command: { file: process.execPath, args: ['-e', 'process.exit(3)'] },
    });
    keeper.start();
    await waitFor(() => lines.some((line) => line.includes('keep failing')));
    expect(lines.filter((line) => /ended \(exit 3\) before serving a command/.test(line))).toHaveLength(3);
    expect(keeper.pid).toBeNull();
    keeper.close();
  });

  it('starts the next when one is taken, and ends the waiting one on close (its fd 3 hangs up)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warm-keeper-'));
    dirs.push(dir);
    const lines: string[] = [];
    // Stands in for a warm process: says `taken` once, then waits on fd 3 as a real one does.
    const script = `
      const fs = require('node:fs');
      if (process.env.TETHER_WARM_SOCKET && !fs.existsSync(process.env.TETHER_WARM_SOCKET + '.first')) {
        fs.writeFileSync(process.env.TETHER_WARM_SOCKET + '.first', '');
        fs.writeSync(3, 'taken\\n');
        setTimeout(() => {}, 200);
      } else {
        const net = require('node:net');
        new net.Socket({ fd: 3 }).on('close', () => process.exit(0)).resume();
      }`;
    const keeper = new WarmKeeper({
      socketPath: join(dir, 'x.warm.sock'),
      log: (line) => lines.push(line),
      command: { file: process.execPath, args: ['-e', script] },
    });
    keeper.start();
    const first = keeper.pid;
    expect(first).not.toBeNull();
    await waitFor(() => keeper.pid !== null && keeper.pid !== first);
    const second = keeper.pid as number;
    keeper.close();
    expect(keeper.pid).toBeNull();
    await waitFor(() => {
      try {
        process.kill(second, 0);
        return false;
      } catch {
        return true;
      }
    });
    expect(lines).toEqual([]);
  });
});
