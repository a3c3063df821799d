/**
 * Lossless output through the whole product path, every part a real process: the harness CLI bin →
 * registry bin (bundle) → relay bin → our executor in remote mode, end to end encrypted. Output far larger
 * than what an executor retains per process (1 MiB) arrives byte for byte, to a fast consumer and to a
 * throttled one (flow control then blocks the child instead of dropping output), through pipes and a PTY.
 * Throughput at 256 MiB, beside ssh and with every byte counted, is `pnpm bench`'s (`bench:path`).
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot, runToEnd } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { useExecutorStack } from './stack-suite.ts';

const ENVIRONMENT = 'env-stream-e2e';
const MiB = 1024 * 1024;

/**
 * A position-coded pattern the remote side prints: word i is written at offset 4i (binary, big-endian),
 * or, for a terminal, as 8 hex digits at offset 8i (printable, no newline, so the PTY passes it unchanged).
 */
const GENERATOR = [
  'const [total, mode] = [Number(process.argv[1]), process.argv[2]];',
  'const width = mode === "hex" ? 8 : 4; const block = Buffer.alloc(1 << 20); let w = 0; let sent = 0;',
  '(function next() { while (sent < total) {',
  '  const n = Math.min(block.length, total - sent);',
  '  for (let i = 0; i < n; i += width, w++) {',
  '    if (width === 4) block.writeUInt32BE(w >>> 0, i); else block.write((w >>> 0).toString(16).padStart(8, "0"), i, "latin1"); }',
  '  sent += n; if (!process.stdout.write(block.subarray(0, n))) return process.stdout.once("drain", next); } })();',
].join(' ');

function expectedSha256(total: number, mode: 'bin' | 'hex'): string {
  const hash = createHash('sha256');
  const width = mode === 'hex' ? 8 : 4;
  const block = Buffer.alloc(MiB);
  let w = 0;
  for (let sent = 0; sent < total; ) {
    const n = Math.min(block.length, total - sent);
    for (let i = 0; i < n; i += width, w++) {
      if (width === 4) block.writeUInt32BE(w >>> 0, i);
      else block.write((w >>> 0).toString(16).padStart(8, '0'), i, 'latin1');
    }
    hash.update(block.subarray(0, n));
    sent += n;
  }
  return hash.digest('hex');
}

interface Run {
  code: number | null;
  bytes: number;
  sha256: string;
  stderr: string;
}

/**
 * `harness exec [-t] -- node -e GENERATOR total mode`, its stdout hashed as it comes; a throttled consumer
 * reads 1 MiB and then stops reading for `pauseMs` (so the CLI's stdout pipe fills and it stops taking).
 */
function harnessExec(
  env: NodeJS.ProcessEnv,
  options: { total: number; mode: 'bin' | 'hex'; tty: boolean; pauseMs?: number },
): Promise<Run> {
  const args = ['exec', ...(options.tty ? ['-t'] : []), '--', process.execPath, '-e', GENERATOR];
  args.push(String(options.total), options.mode);
  const child = spawn(process.execPath, [`${repoRoot()}/apps/harness/dist/main.js`, ...args], {
    env: { ...process.env, ...env, TETHER_HARNESS_ENVIRONMENT_ID: ENVIRONMENT },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const hash = createHash('sha256');
  let bytes = 0;
  let sincePause = 0;
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    if (stderr.length < 16 * 1024) stderr += d;
  });
  child.stdout.on('data', (chunk: Buffer) => {
    hash.update(chunk);
    bytes += chunk.length;
    sincePause += chunk.length;
    if (options.pauseMs !== undefined && sincePause >= MiB) {
      sincePause = 0;
      child.stdout.pause();
      setTimeout(() => child.stdout.resume(), options.pauseMs);
    }
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, bytes, sha256: hash.digest('hex'), stderr }));
  });
}

describe('streaming through registry, relay and executor (harness CLI)', () => {
  const suite = useExecutorStack(ENVIRONMENT);

  const cases = [
    { name: '48 MiB through pipes to a fast consumer', total: 48 * MiB, mode: 'bin', tty: false },
    { name: '64 MiB through pipes to a throttled consumer', total: 64 * MiB, mode: 'bin', tty: false, pauseMs: 15 },
    { name: '64 MiB through a PTY to a fast consumer', total: 64 * MiB, mode: 'hex', tty: true },
    { name: '16 MiB through a PTY to a throttled consumer', total: 16 * MiB, mode: 'hex', tty: true, pauseMs: 15 },
  ] as const;

  it('64 MiB of stdin through `harness exec -i`: exit 0, byte-exact', { timeout: 240_000 }, async () => {
    const input = Buffer.alloc(64 * MiB);
    for (let i = 0; i < input.length; i += 4) input.writeUInt32BE(i / 4, i);
    const { code, stdout, stderr } = await runToEnd(
      process.execPath,
      [`${repoRoot()}/apps/harness/dist/main.js`, 'exec', '-i', '--', 'sha256sum'],
      { env: { ...process.env, ...suite.env, TETHER_HARNESS_ENVIRONMENT_ID: ENVIRONMENT }, input, timeoutMs: 240_000 },
    );
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(stdout.split(' ')[0]).toBe(createHash('sha256').update(input).digest('hex'));
  });

  it('a file on stdin (`harness exec -i -- sha256sum < file`, read in large pieces): exit 0, byte-exact', {
    timeout: 240_000,
  }, async () => {
    // Not a multiple of the read size, so the last piece is short; the remote reader is slow at first, so
    // stdin pauses at the window and the held pieces are sent when answers come.
    const input = randomBytes(40 * MiB + 12_345);
    const dir = mkdtempSync(join(tmpdir(), 'tether-stdin-file-'));
    const file = join(dir, 'input.bin');
    writeFileSync(file, input);
    const fd = openSync(file, 'r');
    try {
      const { code, stdout, stderr } = await runToEnd(
        process.execPath,
        [`${repoRoot()}/apps/harness/dist/main.js`, 'exec', '-i', '--', 'sh', '-c', 'sleep 1; sha256sum'],
        {
          env: { ...process.env, ...suite.env, TETHER_HARNESS_ENVIRONMENT_ID: ENVIRONMENT },
          stdinFd: fd,
          timeoutMs: 240_000,
        },
      );
      expect(stderr).toBe('');
      expect(code).toBe(0);
      expect(stdout.split(' ')[0]).toBe(createHash('sha256').update(input).digest('hex'));
    } finally {
      closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const c of cases) {
    it(`${c.name}: exit 0, byte-exact`, { timeout: 240_000 }, async () => {
      const run = await harnessExec(suite.env, c);
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      expect(run.bytes).toBe(c.total);
      expect(run.sha256).toBe(expectedSha256(c.total, c.mode));
      expect(suite.executor.exitStatus()).toBeUndefined();
    });
  }
});
