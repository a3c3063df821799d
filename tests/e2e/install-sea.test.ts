/**
 * The harness as one executable file (Node SEA, apps/harness/scripts/sea.mjs): built into a scratch
 * directory, it prints its version and runs commands through a real registry, relay and executor in remote
 * mode, as the npm-installed harness does (tests/e2e/install.test.ts). It carries no native addon and no
 * package.json: the version is written in and the transport uses node:crypto.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { findProcesses, isAlive, repoRoot, type Stack, startStack, waitUntil } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectExitCodeAndOutput, expectLargeOutput, type HarnessTarget, runWithTarget } from './harness-checks.js';

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

  it('starts a connection master (itself, again) that serves a command, and stops it', async () => {
    const runtime = join(work, 'run');
    mkdirSync(runtime, { mode: 0o700 });
    const reuse = { ...target(), env: { XDG_RUNTIME_DIR: runtime, TETHER_REUSE: '' } };
    const start = await runWithTarget(sea, ['master', 'start'], reuse);
    expect(start).toMatchObject({ code: 0, stderr: '' });
    const status = await runWithTarget(sea, ['master', 'status'], reuse);
    const pid = Number(/master pid (\d+)/.exec(status.stdout)?.[1]);
    expect(pid).toBeGreaterThan(0);
    try {
      expect(await runWithTarget(sea, ['exec', '--', 'sh', '-c', 'echo via-master; exit 6'], reuse)).toEqual({
        code: 6,
        stdout: 'via-master\n',
        stderr: '',
      });
      const logs = readdirSync(join(runtime, 'tether')).filter((name) => name.endsWith('.log'));
      const log = logs.map((name) => readFileSync(join(runtime, 'tether', name), 'utf8')).join('');
      expect(log).toContain('channel handed out');
      expect((await runWithTarget(sea, ['master', 'stop'], reuse)).code).toBe(0);
      await waitUntil(() => !isAlive(pid), 'the master to exit', 20_000, 50);
    } finally {
      if (isAlive(pid)) process.kill(pid, 'SIGKILL');
    }
  });
});
