/**
 * The harness as one executable file (Node SEA, apps/harness/scripts/sea.mjs): built into a scratch
 * directory, it prints its version and runs commands through a real registry, relay and executor in remote
 * mode, as the npm-installed harness does (tests/e2e/install.test.ts). It carries no native addon and no
 * package.json: the version is written in and the transport uses node:crypto.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { findProcesses, repoRoot, type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectExitCodeAndOutput, expectLargeOutput, type HarnessTarget } from './harness-checks.js';

const run = promisify(execFile);
const work = mkdtempSync(join(tmpdir(), 'tether-sea-'));
const sea = join(work, 'harness');
const environmentId = 'sea-e2e';
let stack: Stack;
const target = (): HarnessTarget => ({ stack, environmentId, work });

beforeAll(async () => {
  const { stdout } = await run(process.execPath, [
    join(repoRoot(), 'apps', 'harness', 'scripts', 'sea.mjs'),
    '--out',
    sea,
  ]);
  expect(stdout).toBe(`${sea}\n`);
  stack = await startStack();
  await stack.startExecutor('tether', environmentId);
}, 120_000);

afterAll(async () => {
  await stack?.close();
  expect(findProcesses({ cwdUnder: work })).toEqual([]);
  rmSync(work, { recursive: true, force: true });
});

describe('the single-executable harness', () => {
  it("prints package.json's version, from a directory with no package.json or node_modules above it", async () => {
    const { version } = JSON.parse(readFileSync(join(repoRoot(), 'apps', 'harness', 'package.json'), 'utf8'));
    expect((await run(sea, ['--version'], { cwd: '/' })).stdout).toBe(`${version}\n`);
  });

  it('passes output and the exit code through', async () => {
    await expectExitCodeAndOutput(sea, target());
  });

  it('a large output piped into sha256sum arrives whole', async () => {
    await expectLargeOutput(sea, target());
  });
});
