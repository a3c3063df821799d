/**
 * The whole product path, every part a real process: `harness cp` (the CLI bin) → registry bin (bundle) →
 * relay bin → our executor in remote mode, end-to-end encrypted. A 96 MiB file goes up and comes back
 * down; both copies hash the same, and neither the harness nor the executor holds the file in memory: each
 * one's peak resident set grows by less than half the file over what a 1 MiB copy took. (`pnpm bench`'s
 * `bench:cp` moves 256 MiB files the same way, timed beside scp, every copy's sha256 checked.)
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { harnessWithPeakRss, peakRssMib } from './harness-memory.js';
import { useExecutorStack } from './stack-suite.ts';

const ENVIRONMENT = 'env-cp-e2e';
const SIZE_MIB = 96;
/** Half the file: a client or executor that buffered it would grow past this over a small copy's peak. */
const RSS_GROWTH_BOUND_MIB = SIZE_MIB / 2;

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 4 * 1024 * 1024 })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

const harness = harnessWithPeakRss;

describe('harness cp through registry, relay and executor', () => {
  const suite = useExecutorStack(ENVIRONMENT, { dirPrefix: 'tether-cp-e2e-' });

  /** Up and back down, each copy's sha256 checked; the harness's peak RSS each way. */
  async function roundTrip(name: string, mib: number): Promise<{ up: number; down: number }> {
    const source = join(suite.dir, `${name}.bin`);
    const make = spawn('/bin/sh', ['-c', `head -c ${mib * 1024 * 1024} /dev/urandom > '${source}'`]);
    await new Promise((resolve) => make.once('exit', resolve));
    const expected = await sha256File(source);
    const up = await harness(['cp', '-q', source, `${ENVIRONMENT}:${suite.dir}/${name}.remote`], suite.env);
    expect(up.stderr).toBe('');
    expect(up.code).toBe(0);
    expect(await sha256File(join(suite.dir, `${name}.remote`))).toBe(expected);
    const down = await harness(
      ['cp', '-q', `${ENVIRONMENT}:${suite.dir}/${name}.remote`, join(suite.dir, `${name}.back`)],
      suite.env,
    );
    expect(down.stderr).toBe('');
    expect(down.code).toBe(0);
    expect(await sha256File(join(suite.dir, `${name}.back`))).toBe(expected);
    expect(up.peakMib).toBeGreaterThan(0);
    expect(down.peakMib).toBeGreaterThan(0);
    return { up: up.peakMib, down: down.peakMib };
  }

  it(`moves ${SIZE_MIB} MiB up and back with equal sha256 and bounded memory`, { timeout: 300_000 }, async () => {
    const small = await roundTrip('small', 1);
    const executorBase = peakRssMib(suite.executor.pid);
    expect(executorBase).toBeGreaterThan(0);
    const big = await roundTrip('big', SIZE_MIB);
    const executorPeak = peakRssMib(suite.executor.pid);
    console.log(
      `harness cp peak RSS (MiB): harness up ${small.up.toFixed(0)} → ${big.up.toFixed(0)}, down ${small.down.toFixed(0)} → ${big.down.toFixed(0)}; executor ${executorBase.toFixed(0)} → ${executorPeak.toFixed(0)}`,
    );
    expect(big.up - small.up, 'harness peak RSS growth uploading (MiB)').toBeLessThan(RSS_GROWTH_BOUND_MIB);
    expect(big.down - small.down, 'harness peak RSS growth downloading (MiB)').toBeLessThan(RSS_GROWTH_BOUND_MIB);
    expect(executorPeak - executorBase, 'executor peak RSS growth (MiB)').toBeLessThan(RSS_GROWTH_BOUND_MIB);
  });
});
