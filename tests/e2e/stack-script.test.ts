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

/** Starts `scripts/stack.mjs` on `data` and waits until it says it is running; `output()` is all it printed. */
async function startScript(data: string, environmentId: string) {
  const [registryPort, relayPort] = [await freePort(), await freePort()];
  const child = spawn(
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
      environmentId,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  stack = child;
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d;
  });
  child.stderr!.on('data', (d: Buffer) => {
    out += d;
  });
  await waitUntil(() => out.includes('Ctrl-C stops everything.'), 'the stack to report it is running', 40_000);
  return { child, registryPort, relayPort, output: () => out };
}

/** SIGTERM, and the exit code. */
function stop(child: ChildProcess): Promise<number | null> {
  child.kill('SIGTERM');
  return new Promise((resolve) => child.once('exit', (exitCode) => resolve(exitCode)));
}

it('runs the local stack, serves the harness, and stops everything on SIGTERM', { timeout: 60_000 }, async () => {
  const data = join(dir, 'data');
  const { child, registryPort, relayPort, output } = await startScript(data, 'quickstart');
  expect(output()).toContain(`registry  http://127.0.0.1:${registryPort}`);
  expect(output()).toContain(`relay     ws://127.0.0.1:${relayPort}`);

  const keyFile = join(data, 'harness.key');
  expect(statSync(keyFile).mode & 0o777).toBe(0o600);
  const env = {
    TETHER_HARNESS_REGISTRY: `http://127.0.0.1:${registryPort}`,
    TETHER_HARNESS_ENVIRONMENT_ID: 'quickstart',
    TETHER_HARNESS_API_KEY: readFileSync(keyFile, 'utf8').trim(),
  };
  const run = await harness(['exec', '--', 'echo', 'from-the-quickstart'], env);
  expect(run).toEqual({ code: 0, stdout: 'from-the-quickstart\n' });

  // The browser terminal it prints: the registry serves the page, and `harness login --web` links to it.
  expect(output()).toContain('login --web');
  const login = await harness(['login', '--web'], env);
  expect(login.code).toBe(0);
  const link = new URL(login.stdout.trim());
  expect(`${link.origin}${link.pathname}`).toBe(`http://127.0.0.1:${registryPort}/ui/`);
  expect(link.hash).toMatch(/^#env=quickstart&grant=/);
  const page = await fetch(`${link.origin}${link.pathname}`);
  expect(page.status).toBe(200);
  expect(await page.text()).toContain('<script type="module" src="app.js"></script>');

  // registry (--listen P1), relay (--listen P2, --registry …:P1) and executor (--registry …:P1).
  const services = () => findProcesses({ commandIncludes: [`127.0.0.1:${registryPort}`, `127.0.0.1:${relayPort}`] });
  expect(services().length).toBe(3);
  expect(await stop(child)).toBe(0);
  await waitUntil(() => services().length === 0, 'every service to exit');
  // A second start reuses the same data (keys and database are not recreated).
  expect(existsSync(join(data, 'registry.db'))).toBe(true);
});

it('started again with other ports and another environment id, makes keys for them (a relay key is bound to its URL)', {
  timeout: 60_000,
}, async () => {
  const data = join(dir, 'data');
  expect(existsSync(join(data, 'relay.key')), 'the first start left its keys').toBe(true);
  const { child, registryPort, relayPort } = await startScript(data, 'quickstart-2');
  const env = {
    TETHER_HARNESS_REGISTRY: `http://127.0.0.1:${registryPort}`,
    TETHER_HARNESS_ENVIRONMENT_ID: 'quickstart-2',
    TETHER_HARNESS_API_KEY: readFileSync(join(data, 'harness.key'), 'utf8').trim(),
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
  expect(await stop(child)).toBe(0);
});
