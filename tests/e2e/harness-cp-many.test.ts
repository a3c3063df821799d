import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type PeerHandle, type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { harnessWithPeakRss, peakRssMib } from './harness-memory.js';

const ENVIRONMENT = 'env-cp-many';
const CODEX_ENVIRONMENT = 'env-cp-many-codex';
const FILES = 2000;
/** Far below what holding every file's bytes and bookkeeping at once would take with the tree 16× larger. */
const RSS_BOUND_MIB = 200;

const harness = harnessWithPeakRss;

/**
 * The source tree: FILES files spread over nested directories (three levels, up to 40 files each), sizes
 * from 0 to 9 KiB plus one of 300 KiB (past the batch limit: it streams) and one of 2 MiB; modes vary and
 * modification times are set to distinct past instants, to the millisecond.
 */
function makeTree(root: string, count: number): void {
  for (let i = 0; i < count; i++) {
    const directory = join(root, `a${i % 5}`, `b${Math.floor(i / 40) % 10}`, ...(i % 3 === 0 ? ['c'] : []));
    mkdirSync(directory, { recursive: true });
    const size = i === 7 ? 300 * 1024 : i === 11 ? 2 * 1024 * 1024 : i % 10 === 0 ? 0 : (i * 37) % (9 * 1024);
    const file = join(directory, `f${i}.bin`);
    writeFileSync(file, randomBytes(size));
    chmodSync(file, [0o644, 0o600, 0o755, 0o640, 0o700][i % 5] as number);
    const when = (1_600_000_000_000 + i * 1_234_567) / 1000;
    utimesSync(file, when, when);
  }
  mkdirSync(join(root, 'empty-dir', 'deeper'), { recursive: true });
  chmodSync(join(root, 'a1'), 0o750);
  utimesSync(join(root, 'a1'), 1_500_000_000.25, 1_500_000_000.25);
}

/** Every entry under `root` (relative, sorted) with its kind, and with `withMeta` its mode and mtime (ms). */
function describeTree(root: string, withMeta: boolean, prefix = ''): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(root, prefix)).sort()) {
    const relative = prefix ? `${prefix}/${name}` : name;
    const info = lstatSync(join(root, relative), { bigint: true });
    const meta = withMeta ? ` ${(Number(info.mode) & 0o7777).toString(8)} ${info.mtimeNs / 1_000_000n}` : '';
    out.push(`${info.isDirectory() ? 'd' : info.isFile() ? 'f' : '?'} ${relative}${meta}`);
    if (info.isDirectory()) out.push(...describeTree(root, withMeta, relative));
  }
  return out;
}

/** Throws unless both trees hold the same files with the same bytes. */
function expectSameBytes(source: string, copy: string): void {
  const files = describeTree(source, false)
    .filter((line) => line.startsWith('f '))
    .map((line) => line.slice(2));
  expect(describeTree(copy, false)).toEqual(describeTree(source, false));
  for (const file of files) {
    const same = readFileSync(join(source, file)).equals(readFileSync(join(copy, file)));
    if (!same) expect.fail(`${file} differs`);
  }
}

describe('harness cp -r of many small files through registry, relay and executor', () => {
  let stack: Stack;
  let executor: PeerHandle;
  let dir: string;
  let source: string;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tether-cp-many-e2e-'));
    source = join(dir, 'tree');
    makeTree(source, FILES);
    stack = await startStack();
    executor = await stack.startExecutor('tether', ENVIRONMENT);
    env = { TETHER_HARNESS_REGISTRY: stack.registryUrl, TETHER_HARNESS_API_KEY: stack.keys.harness };
  }, 120_000);

  afterAll(async () => {
    await stack?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(`moves ${FILES} files up and back, every byte equal, with bounded memory`, { timeout: 300_000 }, async () => {
    let executorPeak = 0;
    const sampler = setInterval(() => {
      executorPeak = Math.max(executorPeak, peakRssMib(executor.pid));
    }, 20);
    try {
      const up = await harness(['cp', '-r', source, `${ENVIRONMENT}:${dir}/up`], env);
      expect(up.stderr).toMatch(/^copied 2000 file\(s\) in \d+ dir\(s\), .* sha256 verified\n$/);
      expect(up.code).toBe(0);
      expectSameBytes(source, join(dir, 'up'));

      const down = await harness(['cp', '-q', '-r', `${ENVIRONMENT}:${dir}/up`, join(dir, 'down')], env);
      expect(down.stderr).toBe('');
      expect(down.code).toBe(0);
      expectSameBytes(source, join(dir, 'down'));

      expect(up.peakMib, 'harness peak RSS uploading (MiB)').toBeLessThan(RSS_BOUND_MIB);
      expect(down.peakMib, 'harness peak RSS downloading (MiB)').toBeLessThan(RSS_BOUND_MIB);
      expect(up.peakMib).toBeGreaterThan(0);
    } finally {
      clearInterval(sampler);
    }
    expect(executorPeak, 'executor peak RSS (MiB)').toBeLessThan(RSS_BOUND_MIB);
    expect(executorPeak).toBeGreaterThan(0);
  });

  it('with -p keeps every mode and modification time, files and directories, both ways', {
    timeout: 300_000,
  }, async () => {
    // Access times move when a file is read (relatime): each copy's is compared before anything reads it.
    const file = 'a2/b0/f2.bin';
    const atimeMs = (root: string) => statSync(join(root, file), { bigint: true }).atimeNs / 1_000_000n;
    const sourceAtime = atimeMs(source);
    const up = await harness(['cp', '-q', '-r', '-p', source, `${ENVIRONMENT}:${dir}/up-p`], env);
    expect(up.stderr).toBe('');
    expect(up.code).toBe(0);
    expect(describeTree(join(dir, 'up-p'), true)).toEqual(describeTree(source, true));
    const upAtime = atimeMs(join(dir, 'up-p'));
    expect(upAtime).toBe(sourceAtime);

    const down = await harness(['cp', '-q', '-r', '-p', `${ENVIRONMENT}:${dir}/up-p`, join(dir, 'down-p')], env);
    expect(down.stderr).toBe('');
    expect(down.code).toBe(0);
    expect(describeTree(join(dir, 'down-p'), true)).toEqual(describeTree(source, true));
    expect(atimeMs(join(dir, 'down-p'))).toBe(upAtime);
    expectSameBytes(source, join(dir, 'up-p'));
    expectSameBytes(source, join(dir, 'down-p'));

    // Without -p the times are the copy's own.
    const plain = await harness(['cp', '-q', '-r', source, `${ENVIRONMENT}:${dir}/plain`], env);
    expect(plain.code).toBe(0);
    expect(statSync(join(dir, 'plain', file)).mtimeMs).toBeGreaterThan(Date.now() - 3_600_000);
  });

  it('against codex exec-server (no fileBatch): still copies file by file; -p is refused with a clear error', {
    timeout: 300_000,
  }, async () => {
    await stack.startExecutor('codex', CODEX_ENVIRONMENT);
    const small = join(dir, 'small');
    makeTree(small, 120);
    const up = await harness(['cp', '-q', '-r', small, `${CODEX_ENVIRONMENT}:${dir}/codex-up`], env);
    expect(up.stderr).toBe('');
    expect(up.code).toBe(0);
    expectSameBytes(small, join(dir, 'codex-up'));
    const down = await harness(
      ['cp', '-q', '-r', `${CODEX_ENVIRONMENT}:${dir}/codex-up`, join(dir, 'codex-down')],
      env,
    );
    expect(down.stderr).toBe('');
    expect(down.code).toBe(0);
    expectSameBytes(small, join(dir, 'codex-down'));

    const refused = await harness(['cp', '-q', '-r', '-p', small, `${CODEX_ENVIRONMENT}:${dir}/codex-p`], env);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(
      `-p needs file modes and times from both sides, and ${CODEX_ENVIRONMENT}:${dir}/codex-p is on an executor without Tether's fileMetadata`,
    );
  });
});
