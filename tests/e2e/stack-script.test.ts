/**
 * The README's main job: `scripts/stack.mjs` (what `npm run quickstart` runs after building) starts registry,
 * relay and executor, prints how to reach the environment, serves the harness, and stops all three on SIGTERM.
 * It forgives (issue 32): a port in use or a stack already running from the data directory is said with its
 * fix before anything is started or any file touched, by stack.mjs and by quickstart.mjs before it installs;
 * it leaves data/env.sh to source; and however it is stopped (SIGINT, SIGTERM, SIGHUP, to it, to npm or to
 * the old Node it was re-run from, or SIGKILL), no service is left holding its ports.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { findProcesses, freePort, portFree, repoRoot, runToEnd, waitUntil } from '@tether/test-kit';
import { afterAll, expect, it } from 'vitest';

const dir = mkdtempSync(join(tmpdir(), 'tether-stack-script-'));
/** Every stack started here, and the ports given to each: what afterAll makes sure is gone. */
const stacks: ChildProcess[] = [];
const portPairs: Array<[number, number]> = [];

/** Services of the stacks started here: their command lines name the data directory or both ports. */
function leftServices() {
  return findProcesses({ commandIncludes: [dir, ...portPairs.map(([registry]) => `127.0.0.1:${registry}`)] }).filter(
    ({ cmdline }) =>
      cmdline.includes(dir) ||
      portPairs.some(
        ([registry, relay]) => cmdline.includes(`127.0.0.1:${registry}`) && cmdline.includes(`127.0.0.1:${relay}`),
      ),
  );
}

afterAll(async () => {
  // A test that failed half-way may leave its stack running: stopped as Ctrl-C would, then anything still on
  // its ports is killed.
  for (const child of stacks) if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  await waitUntil(
    () => stacks.every((child) => child.exitCode !== null || child.signalCode !== null),
    'stacks to exit',
    10_000,
  ).catch(() => undefined);
  for (const child of stacks) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  const left = leftServices();
  for (const { pid } of left) process.kill(pid, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
  expect(left.map(({ cmdline }) => cmdline)).toEqual([]);
});

/** Runs the harness bin to its end: its exit code and stdout (its stderr goes to the test's). */
async function harness(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string }> {
  const { code, stdout, stderr } = await runToEnd(
    process.execPath,
    [join(repoRoot(), 'apps', 'harness', 'bin', 'harness.js'), ...args],
    { env: { ...process.env, ...env } },
  );
  process.stderr.write(stderr);
  return { code, stdout };
}

/** Runs `scripts/SCRIPT` with `args` to its end (it is expected to end quickly). */
async function runScript(script: 'stack.mjs' | 'quickstart.mjs', args: string[]) {
  const { code, stdout, stderr } = await runToEnd(process.execPath, [join(repoRoot(), 'scripts', script), ...args], {
    timeoutMs: 20_000,
  });
  return { code, stdout, stderr };
}

/** Listens on a free 127.0.0.1 port until `close()`: a port in use. */
async function takePort(): Promise<{ port: number; close: () => Promise<void> }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return { port, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/**
 * How a stack is started: `node scripts/stack.mjs`, `node scripts/quickstart.mjs`, `npm run quickstart`, or
 * quickstart.mjs on a Node below the floor (`old`, which runs itself again on the pinned Node 24). Quickstart
 * skips install and build here (TETHER_QUICKSTART_SKIP_BUILD): rebuilding the checkout would pull files from
 * under the tests running beside this one.
 */
type Launcher = { kind: 'stack' | 'quickstart' | 'npm' } | { kind: 'old'; node: string; cache: string };

/**
 * Starts a stack on `data` and waits until it says it is running; `output()` is all it printed. It runs in a
 * process group of its own, so that a test can signal the group as a terminal does.
 */
async function startScript(
  data: string,
  environmentId: string,
  launcher: Launcher = { kind: 'stack' },
  cwd = repoRoot(),
) {
  const [registryPort, relayPort] = [await freePort(), await freePort()];
  portPairs.push([registryPort, relayPort]);
  const flags = [
    '--data-dir',
    data,
    '--registry-port',
    String(registryPort),
    '--relay-port',
    String(relayPort),
    '--environment-id',
    environmentId,
  ];
  const script = (name: string) => join(repoRoot(), 'scripts', name);
  const env: NodeJS.ProcessEnv = { ...process.env, TETHER_QUICKSTART_SKIP_BUILD: '1' };
  let command = process.execPath;
  let args: string[];
  switch (launcher.kind) {
    case 'stack':
      args = [script('stack.mjs'), ...flags];
      break;
    case 'quickstart':
      args = [script('quickstart.mjs'), ...flags];
      break;
    case 'npm':
      // npm's `node` is this one, as on a machine whose Node is new enough.
      command = 'npm';
      args = ['run', '--silent', 'quickstart', '--', ...flags];
      env.PATH = `${dirname(process.execPath)}:${process.env.PATH ?? ''}`;
      break;
    case 'old':
      command = launcher.node;
      args = [script('quickstart.mjs'), ...flags];
      env.TETHER_RUNTIME_CACHE = launcher.cache;
      break;
  }
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], cwd, env, detached: true });
  stacks.push(child);
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d;
  });
  child.stderr!.on('data', (d: Buffer) => {
    out += d;
  });
  await waitUntil(() => out.includes('Ctrl-C stops everything.'), 'the stack to report it is running', 40_000);
  return { child, registryPort, relayPort, data: resolve(cwd, data), output: () => out };
}

type Stack = Awaited<ReturnType<typeof startScript>>;

/** The stack's registry, relay and executor: each names the registry's address on its command line. */
function services(stack: Stack) {
  const registry = new RegExp(`127\\.0\\.0\\.1:${stack.registryPort}( |$)`);
  return findProcesses({ commandIncludes: [`127.0.0.1:${stack.registryPort}`] }).filter(
    ({ cmdline }) => registry.test(cmdline) && /(registry|relay|executor)[/]dist[/]main[.]js/.test(cmdline),
  );
}

/** Nothing of the stack left: no service, no script naming its data directory, and both its ports free. */
async function gone(stack: Stack): Promise<boolean> {
  return (
    services(stack).length === 0 &&
    findProcesses({ commandIncludes: [stack.data] }).length === 0 &&
    (await portFree(stack.registryPort)) &&
    (await portFree(stack.relayPort))
  );
}

/** Resolves with the exit code, or the signal that ended it. */
function exited(child: ChildProcess): Promise<number | string | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode ?? child.signalCode);
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)));
}

/** `fn` for each item, at most `width` at a time (each starts a stack; the machine has two cores). */
async function inBatches<T>(items: T[], width: number, fn: (item: T) => Promise<void>) {
  for (let i = 0; i < items.length; i += width) await Promise.all(items.slice(i, i + width).map(fn));
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

it('started again with other ports and another environment id, makes keys for them (a relay key is bound to its URL) and keeps the last logs as NAME.log.1', {
  timeout: 60_000,
}, async () => {
  const data = join(dir, 'data');
  expect(existsSync(join(data, 'relay.key')), 'the first start left its keys').toBe(true);
  const logs = ['registry', 'relay', 'executor'].map((name) => readFileSync(join(data, `${name}.log`), 'utf8'));
  const { child, registryPort, relayPort } = await startScript(data, 'quickstart-2');
  // The first start's logs are kept as NAME.log.1, not truncated.
  expect(['registry', 'relay', 'executor'].map((name) => readFileSync(join(data, `${name}.log.1`), 'utf8'))).toEqual(
    logs,
  );
  expect(logs[0]).not.toBe('');
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

it('says a port in use with its fix, before starting anything or touching a file', { timeout: 60_000 }, async () => {
  const taken = await takePort();
  try {
    const free = await freePort();
    const data = join(dir, 'port-in-use');
    const cases: Array<['stack.mjs' | 'quickstart.mjs', string[], string]> = [
      ['stack.mjs', ['--registry-port', String(taken.port), '--relay-port', String(free)], '--registry-port'],
      ['stack.mjs', ['--registry-port', String(free), '--relay-port', String(taken.port)], '--relay-port'],
      // quickstart.mjs says it before it installs or builds anything.
      ['quickstart.mjs', ['--registry-port', String(taken.port), '--relay-port', String(free)], '--registry-port'],
    ];
    for (const [script, ports, flag] of cases) {
      const started = Date.now();
      const run = await runScript(script, ['--data-dir', data, ...ports]);
      const name = script.replace('.mjs', '');
      expect(run, `${script} ${ports.join(' ')}`).toEqual({
        code: 1,
        stdout: '',
        stderr: `${name}: 127.0.0.1:${taken.port} is in use (another stack? stop it, or pass ${flag} N)\n`,
      });
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(existsSync(data), 'the data directory is not even made').toBe(false);
      expect(findProcesses({ commandIncludes: [`127.0.0.1:${free}`, `127.0.0.1:${taken.port}`] })).toEqual([]);
    }
  } finally {
    await taken.close();
  }
});

it('a second start beside a running stack says so at once and touches none of its files', {
  timeout: 60_000,
}, async () => {
  const data = join(dir, 'locked');
  const { child, registryPort, relayPort } = await startScript(data, 'locked');
  const files = () =>
    readdirSync(data, { recursive: true, encoding: 'utf8' }).filter((name) => statSync(join(data, name)).isFile());
  const before = new Map(files().map((name) => [name, readFileSync(join(data, name))]));
  expect(readFileSync(join(data, 'stack.pid'), 'utf8')).toBe(`${child.pid}\n`);
  const said = (name: string) =>
    `${name}: a stack is already running from ${data} (pid ${child.pid}); stop it first or use --data-dir\n`;
  // On other ports (the data directory is what is in use) and on the same ones (said before the ports).
  for (const script of ['stack.mjs', 'quickstart.mjs'] as const) {
    const other = ['--registry-port', String(await freePort()), '--relay-port', String(await freePort())];
    const same = ['--registry-port', String(registryPort), '--relay-port', String(relayPort)];
    for (const ports of [other, same]) {
      const run = await runScript(script, ['--data-dir', data, ...ports, '--environment-id', 'other']);
      expect(run, `${script} ${ports.join(' ')}`).toEqual({
        code: 1,
        stdout: '',
        stderr: said(script.replace('.mjs', '')),
      });
    }
  }
  // Nothing added, removed or rewritten: keys, scopes and the lock are as they were; the running stack's logs
  // only grew (it keeps logging).
  expect(files().sort()).toEqual([...before.keys()].sort());
  for (const [name, bytes] of before) {
    if (name.startsWith('registry.db')) continue;
    const now = readFileSync(join(data, name));
    if (name.endsWith('.log')) expect(now.subarray(0, bytes.length).equals(bytes), name).toBe(true);
    else expect(now.equals(bytes), name).toBe(true);
  }
  const env = {
    TETHER_HARNESS_REGISTRY: `http://127.0.0.1:${registryPort}`,
    TETHER_HARNESS_ENVIRONMENT_ID: 'locked',
    TETHER_HARNESS_API_KEY: readFileSync(join(data, 'harness.key'), 'utf8').trim(),
  };
  expect(await harness(['exec', '--', 'echo', 'still-here'], env)).toEqual({ code: 0, stdout: 'still-here\n' });
  expect(await stop(child)).toBe(0);
  expect(existsSync(join(data, 'stack.pid')), 'the lock goes with its stack').toBe(false);
});

it('leaves data/env.sh: sourced in a shell, it puts harness on PATH (on the Node that runs the stack) and points it at the stack', {
  timeout: 60_000,
}, async () => {
  const where = join(dir, 'env-sh');
  mkdirSync(where);
  const stack = await startScript('data', 'env-sh', { kind: 'quickstart' }, where);
  // The hint names it as typed from where quickstart was started.
  expect(stack.output()).toMatch(/^ {2}source data\/env\.sh$/m);
  expect(stack.output()).toMatch(/^ {2}harness exec -- uname -a$/m);
  const home = join(dir, 'env-sh-home');
  mkdirSync(home);
  // A bare environment: no Node on PATH but the system's (too old for the harness on some machines), no config
  // file, and a stale key that env.sh must clear.
  const env = { HOME: home, PATH: '/usr/bin:/bin', TETHER_API_KEY: 'stale-key-from-another-stack' };
  for (const [shell, line] of [
    ['bash', 'source data/env.sh'],
    ['sh', '. data/env.sh'],
  ] as const) {
    const run = spawnSync(shell, ['-c', `${line} && command -v harness && harness exec -- echo hi`], {
      cwd: where,
      env,
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect({ shell, status: run.status, stdout: run.stdout, stderr: run.stderr }).toEqual({
      shell,
      status: 0,
      stdout: `${join(stack.data, 'bin', 'harness')}\nhi\n`,
      stderr: '',
    });
  }
  const envSh = readFileSync(join(stack.data, 'env.sh'), 'utf8');
  expect(envSh).toContain(`export TETHER_HARNESS_REGISTRY='http://127.0.0.1:${stack.registryPort}'`);
  expect(envSh).toContain("export TETHER_HARNESS_ENVIRONMENT_ID='env-sh'");
  expect(envSh).toContain(`export TETHER_HARNESS_API_KEY_FILE='${join(stack.data, 'harness.key')}'`);
  expect(readFileSync(join(stack.data, 'bin', 'harness'), 'utf8')).toContain(`exec '${process.execPath}' `);
  expect(await stop(stack.child)).toBe(0);
});

it('stopped by SIGINT, SIGTERM or SIGHUP (its terminal closed), quickstart stops its services before it exits', {
  timeout: 90_000,
}, async () => {
  await inBatches(['SIGINT', 'SIGTERM', 'SIGHUP'] as const, 3, async (signal) => {
    const stack = await startScript(join(dir, `quickstart-${signal}`), 'signals', { kind: 'quickstart' });
    expect(services(stack).length, signal).toBe(3);
    stack.child.kill(signal);
    expect(await exited(stack.child), signal).toBe(0);
    // Stopped, not left behind: nothing on either port the moment it has exited, and its lock gone.
    expect(await gone(stack), signal).toBe(true);
    expect(existsSync(join(stack.data, 'stack.pid')), signal).toBe(false);
  });
});

it('npm run quickstart: SIGINT, SIGTERM or SIGHUP to npm alone, or to its process group as a terminal sends them, stops the services', {
  timeout: 120_000,
}, async () => {
  const cases = [
    ['SIGTERM', 'npm'],
    ['SIGINT', 'npm'],
    ['SIGHUP', 'npm'],
    ['SIGINT', 'group'],
    ['SIGHUP', 'group'],
  ] as const;
  await inBatches([...cases], 3, async ([signal, to]) => {
    const what = `${signal} to ${to}`;
    const stack = await startScript(join(dir, `npm-${signal}-${to}`), 'npm', { kind: 'npm' });
    expect(services(stack).length, what).toBe(3);
    const npm = stack.child.pid!;
    process.kill(to === 'group' ? -npm : npm, signal);
    await exited(stack.child);
    if (to === 'npm' && signal !== 'SIGHUP') {
      // npm passes SIGINT and SIGTERM on and waits: when it returns, the ports are free.
      expect(await gone(stack), what).toBe(true);
    } else {
      // npm does not pass SIGHUP on: quickstart sees npm gone and stops.
      await waitUntil(() => gone(stack), `${what}: the services to stop`, 10_000);
    }
  });
});

it('killed outright (SIGKILL), a stack leaves no service on its ports, and the next start takes its lock over', {
  timeout: 120_000,
}, async () => {
  const [direct, viaNpm] = await Promise.all([
    startScript(join(dir, 'killed'), 'killed'),
    startScript(join(dir, 'killed-npm'), 'killed', { kind: 'npm' }),
  ]);
  for (const stack of [direct, viaNpm]) {
    expect(services(stack).length).toBe(3);
    stack.child.kill('SIGKILL');
  }
  await waitUntil(async () => (await gone(direct)) && (await gone(viaNpm)), 'the services to stop', 15_000);
  // The killed stack could not remove its lock; the next start sees its process gone and takes the lock.
  expect(readFileSync(join(direct.data, 'stack.pid'), 'utf8')).toBe(`${direct.child.pid}\n`);
  const again = await startScript(direct.data, 'killed');
  expect(readFileSync(join(direct.data, 'stack.pid'), 'utf8')).toBe(`${again.child.pid}\n`);
  expect(await stop(again.child)).toBe(0);
  expect(await gone(again)).toBe(true);
});

/**
 * A Node below the floor on this machine (Debian's Node 20, say), and the cache holding the pinned Node 24 it
 * would run quickstart on (this test never downloads one): null when either is missing.
 */
async function oldNode(): Promise<{ node: string; cache: string } | null> {
  const { RUNTIMES, PRIMARY, FLOOR } = await import(join(repoRoot(), 'scripts', 'runtime.mjs'));
  const caches = [process.env.TETHER_RUNTIME_CACHE, dirname(dirname(dirname(process.execPath)))];
  const cache = caches.find((dir) => dir && existsSync(join(dir, `node-${RUNTIMES[PRIMARY].version}`, 'bin', 'node')));
  const candidates = [...(process.env.PATH ?? '').split(':').map((dir) => join(dir, 'node')), '/usr/bin/node'];
  const node = candidates.find((file) => {
    if (!existsSync(file)) return false;
    const version = spawnSync(file, ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout?.trim() ?? '';
    return /^[0-9]+[.]/.test(version) && Number(version.split('.')[0]) < FLOOR;
  });
  return node && cache ? { node, cache } : null;
}

const old = await oldNode();

it.skipIf(old === null)(
  'on a Node below the floor, quickstart runs itself on the pinned Node 24, and SIGTERM, or the old Node killed, stops the services',
  { timeout: 120_000 },
  async () => {
    const launcher = { kind: 'old' as const, ...old! };
    await inBatches(['SIGTERM', 'SIGKILL'] as const, 2, async (signal) => {
      const stack = await startScript(join(dir, `old-${signal}`), 'old', launcher);
      expect(stack.output(), signal).toContain("below Tether's floor");
      expect(services(stack).length, signal).toBe(3);
      stack.child.kill(signal);
      const code = await exited(stack.child);
      if (signal === 'SIGTERM') {
        expect(code).toBe(0);
        expect(await gone(stack), signal).toBe(true);
      } else {
        // The stack on Node 24 sees the old Node gone and stops.
        await waitUntil(() => gone(stack), `${signal}: the services to stop`, 10_000);
      }
    });
  },
);
