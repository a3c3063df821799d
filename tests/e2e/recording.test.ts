/**
 * `executor --record-dir`: sessions recorded where they run, through the real binaries. A PTY session driven by the
 * SDK through the registry and relay leaves an asciicast v2 file that `harness recording verify` accepts and `play`
 * replays, and a changed byte fails at its event; a recording that cannot be written follows `--record-failure`
 * (`open`: the process goes on; `closed`: it is ended, and a start whose recording cannot be opened is refused).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Environment } from '@tether/client';
import { findProcesses, type PeerHandle, repoRoot, type Stack, startPeer, startStack } from '@tether/test-kit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

const ENVIRONMENT = 'recording-e2e';
const harnessBin = join(repoRoot(), 'apps', 'harness', 'dist', 'main.js');
const work = mkdtempSync(join(tmpdir(), 'tether-recording-'));
const recordDir = join(work, 'recordings');
let stack: Stack;

function harness(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [harnessBin, ...args], { encoding: 'utf8', timeout: 30_000 });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** The recordings in `dir`, oldest first, once each ends with its final seal (written after the process closes). */
async function recordings(dir: string, count: number): Promise<string[]> {
  for (let attempt = 0; ; attempt++) {
    const files = readdirSync(dir)
      .filter((name) => name.endsWith('.cast'))
      .sort()
      .map((name) => join(dir, name));
    const done = files.filter((file) =>
      /"tether\.exit".*\n.*"tether\.seal"[^\n]*\n$/s.test(readFileSync(file, 'utf8')),
    );
    if (done.length >= count) return done;
    if (attempt > 200) throw new Error(`expected ${count} finished recordings in ${dir}, found ${files.length}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

beforeAll(async () => {
  stack = await startStack();
  await stack.startExecutor('tether', ENVIRONMENT, { args: ['--record-dir', recordDir] });
}, 120_000);

afterAll(async () => {
  await stack?.close();
  expect(findProcesses({ cwdUnder: work })).toEqual([]);
  rmSync(work, { recursive: true, force: true });
});

describe('executor --record-dir, through the registry and relay', { timeout: 60_000 }, () => {
  it('a PTY session with input, output and a resize plays back and verifies; one changed byte fails at its event', async () => {
    const env = await Environment.connectRendezvous({
      registryUrl: stack.registryUrl,
      apiKey: stack.keys.harness,
      environmentId: ENVIRONMENT,
      clientName: 'recording-e2e',
    });
    try {
      const handle = await env.spawn(['/bin/sh', '-c', 'read line; stty size; echo "got:$line"'], {
        cwd: work,
        tty: true,
        size: { rows: 24, cols: 80 },
      });
      await handle.resize(30, 100);
      await handle.write('secret-free input\n');
      const result = await handle.collect();
      expect(result.exitCode).toBe(0);
      expect(result.pty.toString()).toContain('got:secret-free input');
    } finally {
      await env.close();
    }
    const [file] = await recordings(recordDir, 1);
    expect(statSync(file!).mode & 0o777).toBe(0o600);
    const lines = readFileSync(file!, 'utf8').trimEnd().split('\n');
    expect(JSON.parse(lines[0]!)).toMatchObject({
      version: 2,
      width: 80,
      height: 24,
      tether: { argv: ['/bin/sh', '-c', 'read line; stty size; echo "got:$line"'], tty: true },
    });
    const events = lines.slice(1).map((line) => JSON.parse(line) as [number, string, string]);
    const of = (type: string) => events.filter((event) => event[1] === type).map((event) => event[2]);
    expect(of('r')).toEqual(['100x30']);
    expect(of('i')).toEqual(['secret-free input\n']);
    // Who typed it: the harness key's id, never the key itself.
    expect(of('tether.from')).toEqual([expect.stringMatching(/^key:harness:\S+$/)]);
    expect(lines.join('\n')).not.toContain(stack.keys.harness);
    expect(of('o').join('')).toContain('30 100');
    expect(of('o').join('')).toContain('got:secret-free input');
    expect(of('tether.exit')).toEqual(['0']);

    const verified = harness(['recording', 'verify', file!]);
    expect(verified).toMatchObject({ code: 0, stderr: '' });
    expect(verified.stdout).toMatch(
      /: intact: \d+ events, \d+ seals, signed by ed25519:\S+ \(.*recording-key\.pub\)\n$/,
    );
    // The key the executor published, given explicitly.
    const key = readFileSync(join(recordDir, 'recording-key.pub'), 'utf8').trim();
    expect(harness(['recording', 'verify', '--key', key, file!]).code).toBe(0);
    const played = harness(['recording', 'play', '--speed', '100', file!]);
    expect(played.code).toBe(0);
    expect(played.stdout).toContain('got:secret-free input');
    // asciinema itself plays it (Tether's own event types are skipped, as the format lets players do).
    const asciinema = spawnSync('asciinema', ['play', '--speed', '100', file!], { encoding: 'utf8', timeout: 30_000 });
    expect(asciinema.stderr).toBe('');
    expect(asciinema.status).toBe(0);
    expect(asciinema.stdout).toContain('got:secret-free input');

    // One byte of the input event changed, in a copy beside the original (so its key is found the same way).
    const at = lines.findIndex((line) => line.includes('"i"'));
    const changed = [...lines];
    changed[at] = changed[at]!.replace('secret-free', 'secret-frez');
    const tampered = join(recordDir, 'tampered.cast.txt');
    writeFileSync(tampered, `${changed.join('\n')}\n`);
    const refused = harness(['recording', 'verify', tampered]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      `harness: ${tampered}: line ${at + 1} (event ${at}): not what was recorded (changed, or an event before it was removed or moved)\n`,
    );
    rmSync(tampered);
  });
});

describe('--record-failure', { timeout: 60_000 }, () => {
  let peer: PeerHandle | undefined;
  afterEach(async () => {
    await peer?.close();
    peer = undefined;
  });

  /** An executor recording into a fresh directory whose files may grow to `limit` bytes (prlimit --fsize). */
  async function executor(policy: 'open' | 'closed', dir: string, limit?: number): Promise<Environment> {
    peer = await startPeer({
      kind: 'tether',
      transport: 'ws',
      args: ['--record-dir', dir, '--record-failure', policy],
    });
    if (limit !== undefined) {
      const set = spawnSync('prlimit', [`--fsize=${limit}`, '--pid', String(peer.pid)], { encoding: 'utf8' });
      expect(set.status, set.stderr).toBe(0);
    }
    return Environment.connectWebSocket(peer.url!);
  }

  /** More output than the recording may hold (64 KiB), then a while for the policy to act, then the end. */
  const LOUD = ['sh', '-c', 'head -c 400000 /dev/zero | tr "\\0" x; echo; sleep 3; echo done'];

  it('open: a recording that cannot be written leaves the process running to its end, and says so', async () => {
    const dir = join(work, 'open');
    const env = await executor('open', dir, 64 * 1024);
    try {
      const result = await env.exec(LOUD);
      expect(result.exitCode).toBe(0);
      expect(result.stdout.toString().endsWith('done\n')).toBe(true);
      expect(result.stdout.length).toBe(400_006);
    } finally {
      await env.close();
    }
    expect(await metric(peer!, 'tether_recording_failures_total{policy="open",cause="write"}')).toBe(1);
  });

  it('closed: the process whose recording fails is ended; a start whose recording cannot be opened is refused', async () => {
    const dir = join(work, 'closed');
    const env = await executor('closed', dir, 64 * 1024);
    try {
      const result = await env.exec(LOUD);
      expect(result.exitCode).not.toBe(0);
      expect(result.stdout.toString()).not.toContain('done');
      // The directory gone and a file in its place: nothing can be recorded, so nothing starts.
      rmSync(dir, { recursive: true, force: true });
      writeFileSync(dir, 'not a directory');
      await expect(env.exec(['true'])).rejects.toThrow(new RegExp(`cannot record process .* in ${dir}: ENOTDIR`));
    } finally {
      await env.close();
    }
    expect(await metric(peer!, 'tether_recording_failures_total{policy="closed",cause="write"}')).toBe(1);
    expect(await metric(peer!, 'tether_recording_failures_total{policy="closed",cause="open"}')).toBe(1);
  });

  it('a record dir that cannot be made stops the executor before it serves, naming it', () => {
    const blocker = join(work, 'blocker');
    writeFileSync(blocker, '');
    const result = spawnSync(
      process.execPath,
      [
        join(repoRoot(), 'apps', 'executor', 'dist', 'main.js'),
        '--listen',
        'ws://127.0.0.1:0',
        '--record-dir',
        join(blocker, 'x'),
      ],
      { encoding: 'utf8', timeout: 20_000 },
    );
    expect(result.status).toBe(1);
    expect(result.stderr).toContain(`executor: --record-dir ${join(blocker, 'x')}: ENOTDIR`);
  });
});

/** A counter's value on the executor's /metrics (its WebSocket listener serves them). */
async function metric(peer: PeerHandle, series: string): Promise<number> {
  const url = peer.url!.replace(/^ws:/, 'http:').replace(/\/?$/, '/metrics');
  const text = await (await fetch(url)).text();
  const line = text.split('\n').find((entry) => entry.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.split(' ')[1]);
}
