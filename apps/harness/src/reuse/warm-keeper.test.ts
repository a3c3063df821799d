import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
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

  it('tells each warm process its spec first on fd 3, and follows what it says of its channel', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warm-keeper-'));
    dirs.push(dir);
    // Stands in for a warm process: echoes the spec's socket into a file, then says ready, unready, ready.
    const script = `
      const fs = require('node:fs');
      const net = require('node:net');
      const pipe = new net.Socket({ fd: 3 });
      let text = '';
      pipe.setEncoding('utf8');
      pipe.on('data', (chunk) => {
        text += chunk;
        if (!text.includes('\\n')) return;
        fs.writeFileSync(process.env.TETHER_WARM_SOCKET + '.spec', text);
        pipe.write('ready\\n');
        setTimeout(() => pipe.write('unready\\n'), 100);
        setTimeout(() => pipe.write('ready\\n'), 300);
      });
      pipe.on('close', () => process.exit(0));`;
    const socketPath = join(dir, 'x.warm.sock');
    let asked = 0;
    const keeper = new WarmKeeper({
      socketPath,
      log: () => undefined,
      command: { file: process.execPath, args: ['-e', script] },
      spec: () => ({ socket: `/run/${++asked}.sock` }),
    });
    expect(keeper.channelReady).toBe(false);
    keeper.start();
    await waitFor(() => keeper.channelReady);
    expect(JSON.parse(readFileSync(`${socketPath}.spec`, 'utf8'))).toEqual({ socket: '/run/1.sock' });
    await waitFor(() => !keeper.channelReady);
    await waitFor(() => keeper.channelReady);
    keeper.close();
    expect(keeper.channelReady).toBe(false);
  });
});
