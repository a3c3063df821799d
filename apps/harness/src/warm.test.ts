import { chmodSync, closeSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadNativePipe } from '@tether/native-pipe';
import { afterEach, describe, expect, it } from 'vitest';
import { runtimeIdentity, runWarm } from './warm.js';

const dirs: string[] = [];
const listeners: number[] = [];
afterEach(() => {
  for (const fd of listeners.splice(0)) closeSync(fd);
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('runtimeIdentity', () => {
  it('differs with a NODE_*, UV_* or TETHER_NATIVE_* variable, the bundle or main, and with nothing else', () => {
    const base = runtimeIdentity('cli-A.cjs', 'file:///main.js', { HOME: '/a', NODE_OPTIONS: '' });
    expect(runtimeIdentity('cli-A.cjs', 'file:///main.js', { HOME: '/b', NODE_OPTIONS: '' })).toBe(base);
    for (const env of [{ NODE_OPTIONS: '--no-warnings' }, { UV_THREADPOOL_SIZE: '8' }, { TETHER_NATIVE_PIPE: 'off' }]) {
      expect(runtimeIdentity('cli-A.cjs', 'file:///main.js', { HOME: '/a', NODE_OPTIONS: '', ...env })).not.toBe(base);
    }
    expect(runtimeIdentity('cli-B.cjs', 'file:///main.js', { HOME: '/a', NODE_OPTIONS: '' })).not.toBe(base);
    expect(runtimeIdentity('cli-A.cjs', 'file:///other.js', { HOME: '/a', NODE_OPTIONS: '' })).not.toBe(base);
  });
});

describe('runWarm', () => {
  const native = loadNativePipe();
  const saved = { ...process.env };
  afterEach(() => {
    for (const name of ['XDG_RUNTIME_DIR', 'TETHER_REUSE']) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
  });

  /** A warm socket that takes connections (the kernel's backlog) but never answers. */
  function silentWarmSocket(): number {
    const run = mkdtempSync(join(tmpdir(), 'warm-run-'));
    dirs.push(run);
    mkdirSync(join(run, 'tether'), { mode: 0o700 });
    const path = join(run, 'tether', 'x.warm.sock');
    const listener = native!.listenUnix(path);
    chmodSync(path, 0o600); // as a warm process leaves it: else it is not taken for the user's own
    listeners.push(listener);
    process.env.XDG_RUNTIME_DIR = run;
    return listener;
  }

  it('runs the command itself when the warm process does not answer in time', { timeout: 20_000 }, async () => {
    const listener = silentWarmSocket();
    process.env.TETHER_REUSE = 'use';
    expect(await runWarm(['exec', '--', 'true'], native, () => 'identity')).toBeNull();
    // It was offered (its connection waits in the backlog, its descriptors with it), not skipped by a check.
    const [watch, watchEnd] = native!.pipe();
    const offered = native!.acceptUnix(listener, watch) as number;
    const fd = native!.receiveFd(offered);
    expect(fd).not.toBeNull();
    for (const open of [watch, watchEnd, offered, fd as number]) closeSync(open);
  });

  it('looks for no warm process with TETHER_REUSE=no, for master commands, or without the addon', async () => {
    silentWarmSocket();
    const never = () => {
      throw new Error('no warm process should have been offered the command');
    };
    process.env.TETHER_REUSE = 'off';
    expect(await runWarm(['exec', '--', 'true'], native, never)).toBeNull();
    process.env.TETHER_REUSE = 'use';
    expect(await runWarm(['master', 'status'], native, never)).toBeNull();
    expect(await runWarm(['exec', '--', 'true'], null, never)).toBeNull();
  });
});
