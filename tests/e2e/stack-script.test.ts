/**
 * The README's main job: `scripts/stack.mjs` (what `npm run quickstart` runs after building) starts registry,
 * relay and executor, prints how to reach the environment, serves the harness, and stops all three on SIGTERM.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findProcesses, freePort, repoRoot, waitUntil } from '@tether/test-kit';
import { afterAll, expect, it } from 'vitest';

const dir = mkdtempSync(join(tmpdir(), 'tether-stack-script-'));
let stack: ChildProcess | null = null;

afterAll(() => {
  if (stack && stack.exitCode === null) stack.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function harness(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string }> {
  const child = spawn(process.execPath, [join(repoRoot(), 'apps', 'harness', 'bin', 'harness.js'), ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d;
  });
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code, stdout })));
}

it('runs the local stack, serves the harness, and stops everything on SIGTERM', { timeout: 60_000 }, async () => {
  const [registryPort, relayPort] = [await freePort(), await freePort()];
  const data = join(dir, 'data');
  stack = spawn(
    process.execPath,
    [
      join(repoRoot(), 'scripts', 'stack.mjs'),
      '--data-dir',
      data,
      '--registry-port',
      String(registryPort),
      '--relay-port',
      String(relayPort),
      '--environment-id',
      'quickstart',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  stack.stdout!.on('data', (d: Buffer) => {
    out += d;
  });
  stack.stderr!.on('data', (d: Buffer) => {
    out += d;
  });
  await waitUntil(() => out.includes('Ctrl-C stops everything.'), 'the stack to report it is running', 40_000);
  expect(out).toContain(`registry  http://127.0.0.1:${registryPort}`);
  expect(out).toContain(`relay     ws://127.0.0.1:${relayPort}`);

  const keyFile = join(data, 'harness.key');
  expect(statSync(keyFile).mode & 0o777).toBe(0o600);
  const env = {
    TETHER_REGISTRY_URL: `http://127.0.0.1:${registryPort}`,
    TETHER_ENVIRONMENT_ID: 'quickstart',
    TETHER_API_KEY: readFileSync(keyFile, 'utf8').trim(),
  };
  const run = await harness(['exec', '--', 'echo', 'from-the-quickstart'], env);
  expect(run).toEqual({ code: 0, stdout: 'from-the-quickstart\n' });

  // registry (--listen P1), relay (--listen P2, --registry …:P1) and executor (--remote …:P1).
  const services = () => findProcesses({ commandIncludes: [`127.0.0.1:${registryPort}`, `127.0.0.1:${relayPort}`] });
  expect(services().length).toBe(3);
  stack.kill('SIGTERM');
  const code = await new Promise<number | null>((resolve) => stack!.once('exit', (exitCode) => resolve(exitCode)));
  expect(code).toBe(0);
  await waitUntil(() => services().length === 0, 'every service to exit');
  // A second start reuses the same data (keys and database are not recreated).
  expect(existsSync(join(data, 'registry.db'))).toBe(true);
});

it('started again with other ports and another environment id, makes keys for them (a relay key is bound to its URL)', {
  timeout: 60_000,
}, async () => {
  const data = join(dir, 'data');
  expect(existsSync(join(data, 'relay.key')), 'the first start left its keys').toBe(true);
  const [registryPort, relayPort] = [await freePort(), await freePort()];
  stack = spawn(
    process.execPath,
    [
      join(repoRoot(), 'scripts', 'stack.mjs'),
      '--data-dir',
      data,
      '--registry-port',
      String(registryPort),
      '--relay-port',
      String(relayPort),
      '--environment-id',
      'quickstart-2',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  stack.stdout!.on('data', (d: Buffer) => {
    out += d;
  });
  stack.stderr!.on('data', (d: Buffer) => {
    out += d;
  });
  await waitUntil(() => out.includes('Ctrl-C stops everything.'), 'the stack to report it is running', 40_000);
  const env = {
    TETHER_REGISTRY_URL: `http://127.0.0.1:${registryPort}`,
    TETHER_ENVIRONMENT_ID: 'quickstart-2',
    TETHER_API_KEY: readFileSync(join(data, 'harness.key'), 'utf8').trim(),
  };
  expect(await harness(['exec', '--', 'echo', 'again'], env)).toEqual({ code: 0, stdout: 'again\n' });
  // The relay heartbeats with a key for its new URL (one for the old URL would be refused, 403).
  const relayMetrics = async () => (await fetch(`http://127.0.0.1:${relayPort}/metrics`)).text();
  await waitUntil(
    async () => /^relay_heartbeats_total\{result="(ok|error)"\} [1-9]/m.test(await relayMetrics()),
    'the relay to heartbeat',
    10_000,
  );
  expect(await relayMetrics()).not.toMatch(/^relay_heartbeats_total\{result="error"\} [1-9]/m);
  expect(readFileSync(join(data, 'relay.log'), 'utf8')).not.toContain('refused the heartbeat');
  stack.kill('SIGTERM');
  expect(await new Promise<number | null>((resolve) => stack!.once('exit', (exitCode) => resolve(exitCode)))).toBe(0);
});
