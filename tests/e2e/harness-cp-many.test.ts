import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { harnessWithPeakRss, peakRssMib } from './harness-memory.js';
import { useExecutorStack } from './stack-suite.ts';

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
  const suite = useExecutorStack(ENVIRONMENT, { dirPrefix: 'tether-cp-many-e2e-' });
  let source: string;

  beforeAll(() => {
    source = join(suite.dir, 'tree');
    makeTree(source, FILES);
  });

  it(`moves ${FILES} files up and back, every byte equal, with bounded memory`, { timeout: 300_000 }, async () => {
    let executorPeak = 0;
    const sampler = setInterval(() => {
      executorPeak = Math.max(executorPeak, peakRssMib(suite.executor.pid));
    }, 20);
    try {
      const up = await harness(['cp', '-r', source, `${ENVIRONMENT}:${suite.dir}/up`], suite.env);
      expect(up.stderr).toMatch(/^copied 2000 file\(s\) in \d+ dir\(s\), .* sha256 verified\n$/);
      expect(up.code).toBe(0);
      expectSameBytes(source, join(suite.dir, 'up'));

      const down = await harness(
        ['cp', '-q', '-r', `${ENVIRONMENT}:${suite.dir}/up`, join(suite.dir, 'down')],
        suite.env,
      );
      expect(down.stderr).toBe('');
      expect(down.code).toBe(0);
      expectSameBytes(source, join(suite.dir, 'down'));

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
    const up = await harness(['cp', '-q', '-r', '-p', source, `${ENVIRONMENT}:${suite.dir}/up-p`], suite.env);
    expect(up.stderr).toBe('');
    expect(up.code).toBe(0);
    expect(describeTree(join(suite.dir, 'up-p'), true)).toEqual(describeTree(source, true));
    const upAtime = atimeMs(join(suite.dir, 'up-p'));
    expect(upAtime).toBe(sourceAtime);

    const down = await harness(
      ['cp', '-q', '-r', '-p', `${ENVIRONMENT}:${suite.dir}/up-p`, join(suite.dir, 'down-p')],
      suite.env,
    );
    expect(down.stderr).toBe('');
    expect(down.code).toBe(0);
    expect(describeTree(join(suite.dir, 'down-p'), true)).toEqual(describeTree(source, true));
    expect(atimeMs(join(suite.dir, 'down-p'))).toBe(upAtime);
    expectSameBytes(source, join(suite.dir, 'up-p'));
    expectSameBytes(source, join(suite.dir, 'down-p'));

    // Without -p the times are the copy's own.
    const plain = await harness(['cp', '-q', '-r', source, `${ENVIRONMENT}:${suite.dir}/plain`], suite.env);
    expect(plain.code).toBe(0);
    expect(statSync(join(suite.dir, 'plain', file)).mtimeMs).toBeGreaterThan(Date.now() - 3_600_000);
  });

  it('against codex exec-server (no fileBatch): still copies file by file; -p is refused with a clear error', {
    timeout: 300_000,
  }, async () => {
    await suite.stack.startExecutor('codex', CODEX_ENVIRONMENT);
    const small = join(suite.dir, 'small');
    makeTree(small, 120);
    const up = await harness(['cp', '-q', '-r', small, `${CODEX_ENVIRONMENT}:${suite.dir}/codex-up`], suite.env);
    expect(up.stderr).toBe('');
    expect(up.code).toBe(0);
    expectSameBytes(small, join(suite.dir, 'codex-up'));
    const down = await harness(
      ['cp', '-q', '-r', `${CODEX_ENVIRONMENT}:${suite.dir}/codex-up`, join(suite.dir, 'codex-down')],
      suite.env,
    );
    expect(down.stderr).toBe('');
    expect(down.code).toBe(0);
    expectSameBytes(small, join(suite.dir, 'codex-down'));

    const refused = await harness(
      ['cp', '-q', '-r', '-p', small, `${CODEX_ENVIRONMENT}:${suite.dir}/codex-p`],
      suite.env,
    );
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(
      `-p needs file modes and times from both sides, and ${CODEX_ENVIRONMENT}:${suite.dir}/codex-p is on an executor without Tether's fileMetadata`,
    );
  });
});
