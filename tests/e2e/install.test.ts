/**
 * The packed CLIs install and run on a fresh prefix: `scripts/pack.mjs` packs @tether/harness and
 * @tether/executor, `npm install -g --prefix DIR --offline` installs both tarballs with an empty npm cache
 * (so nothing can come from a registry: the workspace packages are bundled, and the executor's optional
 * native addons, node-pty and bufferutil, are left out as on a machine that cannot fetch or build them), and
 * then the INSTALLED `executor --remote` serves a real registry and relay while the INSTALLED `harness exec`
 * runs commands through them. Our own native addons ship prebuilt for this host and are optional: with
 * their files removed from the install, both CLIs fall back to their JavaScript paths and still work. Last,
 * node-pty put where `npm install -g node-pty` would put it gives a new executor its terminals.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import {
  b64,
  connectRemote,
  decodeB64Text,
  fileUri,
  findProcesses,
  initialize,
  peerMarkerEnv,
  repoRoot,
  type Stack,
  startStack,
  waitUntil,
} from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectExitCodeAndOutput, expectLargeOutput, type HarnessTarget, runWithTarget } from './harness-checks.js';

const run = promisify(execFile);
const work = mkdtempSync(join(tmpdir(), 'tether-install-'));
const prefix = join(work, 'prefix');
const bin = (name: string) => join(prefix, 'bin', name);
const installed = (app: string) => join(prefix, 'lib', 'node_modules', '@tether', app);
const version = (app: string): string =>
  JSON.parse(readFileSync(join(repoRoot(), 'apps', app, 'package.json'), 'utf8')).version;

/** Runs the installed harness (or `command`) with its variables naming `environmentId` of the stack. */
const runHarness = (args: string[], environmentId: string, command = bin('harness')) =>
  runWithTarget(command, args, target(environmentId));
const target = (environmentId: string): HarnessTarget => ({ stack, environmentId, work });

interface InstalledExecutor {
  child: ChildProcess;
  stderr(): string;
  close(): Promise<void>;
}

const executors: InstalledExecutor[] = [];

/** The installed `executor --remote` for `environmentId`, once the relay counts `expectedOnRelay` environments. */
async function startInstalledExecutor(
  environmentId: string,
  expectedOnRelay: number,
  extraArgs: string[] = [],
): Promise<InstalledExecutor> {
  const home = mkdtempSync(join(work, 'executor-home-'));
  const keyFile = join(home, 'api-key');
  writeFileSync(keyFile, stack.keys.executor, { mode: 0o600 });
  const args = [
    '--registry',
    stack.registryUrl,
    '--environment-id',
    environmentId,
    '--api-key-file',
    keyFile,
    ...extraArgs,
  ];
  const child = spawn(bin('executor'), args, {
    env: { ...process.env, TETHER_HOME: home, ...peerMarkerEnv() },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    if (stderr.length < 64 * 1024) stderr += d;
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const executor: InstalledExecutor = {
    child,
    stderr: () => stderr,
    async close() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
  executors.push(executor);
  await waitUntil(
    async () => {
      if (child.exitCode !== null) throw new Error(`the installed executor exited ${child.exitCode}: ${stderr}`);
      const line = (await stack.relayMetrics())
        .split('\n')
        .find((l) => l.startsWith('relay_sockets{role="environment"}'));
      return Number(line?.split(' ')[1] ?? 0) >= expectedOnRelay;
    },
    `${environmentId} to join the relay`,
    20_000,
    50,
  );
  return executor;
}

let stack: Stack;

beforeAll(async () => {
  const packed = join(work, 'packed');
  const { stdout } = await run(process.execPath, [join(repoRoot(), 'scripts', 'pack.mjs'), '--out', packed], {
    cwd: repoRoot(),
  });
  const tarballs = stdout.trim().split('\n');
  expect(tarballs).toEqual([
    join(packed, `tether-harness-${version('harness')}.tgz`),
    join(packed, `tether-executor-${version('executor')}.tgz`),
  ]);
  mkdirSync(prefix);
  await run(
    'npm',
    [
      'install',
      '-g',
      '--prefix',
      prefix,
      '--offline',
      '--cache',
      join(work, 'npm-cache'),
      '--no-audit',
      '--no-fund',
      ...tarballs,
    ],
    { env: { ...process.env, npm_config_update_notifier: 'false' } },
  );
  stack = await startStack();
}, 120_000);

afterAll(async () => {
  for (const executor of executors.splice(0)) await executor.close();
  await stack?.close();
  // Every remote command ran under `work`: none may be left.
  expect(findProcesses({ cwdUnder: work })).toEqual([]);
  rmSync(work, { recursive: true, force: true });
});

describe('the installed packages', () => {
  it('hold every workspace package they use and none of the optional third-party addons', () => {
    for (const app of ['harness', 'executor']) {
      const modules = readdirSync(join(installed(app), 'node_modules', '@tether')).sort();
      expect(modules).toEqual(['native-crypto', 'native-pipe']);
      expect(readFileSync(join(installed(app), 'LICENSE'), 'utf8')).toBe(
        readFileSync(join(repoRoot(), 'LICENSE'), 'utf8'),
      );
    }
    expect(existsSync(join(installed('executor'), 'node_modules', 'node-pty'))).toBe(false);
    const manifest = JSON.parse(readFileSync(join(installed('executor'), 'package.json'), 'utf8'));
    expect(manifest.optionalDependencies).toEqual({ 'node-pty': expect.any(String), bufferutil: expect.any(String) });
    expect(manifest.private).toBeUndefined();
    expect(manifest.license).toBe('Apache-2.0');
  });

  it('harness --version and executor --version print package.json versions; --help runs', async () => {
    expect((await run(bin('harness'), ['--version'])).stdout).toBe(`${version('harness')}\n`);
    expect((await run(bin('executor'), ['--version'])).stdout).toBe(`${version('executor')}\n`);
    expect((await run(bin('executor'), ['--help'])).stdout).toMatch(/^Usage: executor /);
    expect((await run(bin('harness'), ['--help'])).stdout).toMatch(/^Usage: harness /);
  });
});

describe('through the installed executor --remote', () => {
  const id = 'install-e2e';
  beforeAll(async () => {
    await startInstalledExecutor(id, 1);
  }, 30_000);

  it('passes output and the exit code through', async () => {
    await expectExitCodeAndOutput(bin('harness'), target(id));
  });

  it('a large output piped into sha256sum arrives whole', async () => {
    await expectLargeOutput(bin('harness'), target(id));
  });

  it('a terminal without node-pty installed fails with an error that says so', async () => {
    const result = await runHarness(['exec', '-t', '--cwd', work, '--', 'true'], id);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(
      /^harness: process\/start: a terminal needs node-pty, which cannot be loaded \(Cannot find package 'node-pty'.*npm install -g node-pty/,
    );
    expect(result.code).toBe(1);
  });

  it('a command confined to named hosts runs behind the packaged sandbox relay: the allowed origin through it, nothing else', async () => {
    const origin = createServer((_req, res) => res.end('origin says hi\n'));
    await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
    const port = (origin.address() as AddressInfo).port;
    try {
      const script = `curl -sS -m 10 http://127.0.0.1:${port}/; curl -s -m 5 --noproxy '*' -o /dev/null http://127.0.0.1:${port}/; echo "direct=$?"`;
      const result = await runHarness(
        [
          'exec',
          '--sandbox',
          'workspace-write',
          '--cwd',
          work,
          '--network-allow',
          '127.0.0.1',
          '--',
          'sh',
          '-c',
          script,
        ],
        id,
      );
      expect(result).toMatchObject({ code: 0, stdout: 'origin says hi\ndirect=7\n' });
    } finally {
      origin.closeAllConnections();
      origin.close();
    }
  });

  /** A profile that lets the call see the workspace and nothing else: the helper needs its own runtime. */
  const workspaceOnly = (root: string) => ({
    permissions: {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [{ path: { type: 'special', value: { kind: 'project_roots' } }, access: 'read' }],
      },
      network: 'restricted',
    },
    cwd: fileUri(root),
    workspaceRoots: [fileUri(root)],
    windowsSandboxLevel: 'disabled',
    useLegacyLandlock: false,
  });

  it('fs calls under a sandbox run in the packaged confined helper: the workspace readable, nothing else, no writes', async () => {
    const root = mkdtempSync(join(work, 'workspace-'));
    writeFileSync(join(root, 'inside.txt'), 'inside\n');
    const outside = join(work, 'outside.txt');
    writeFileSync(outside, 'outside\n');
    const client = await connectRemote({ registryUrl: stack.registryUrl, harnessKey: stack.keys.harness }, id);
    try {
      await initialize(client);
      const sandbox = workspaceOnly(root);
      const read = await client.call<{ dataBase64: string }>('fs/readFile', {
        path: fileUri(join(root, 'inside.txt')),
        sandbox,
      });
      expect(decodeB64Text(read.dataBase64)).toBe('inside\n');
      const hidden = await client.request('fs/readFile', { path: fileUri(outside), sandbox });
      expect(hidden.error?.message).toMatch(/No such file or directory/);
      const write = await client.request('fs/writeFile', {
        path: fileUri(join(root, 'new.txt')),
        dataBase64: b64('x'),
        sandbox,
      });
      expect(write.error?.message).toMatch(/Read-only file system/);
      expect(existsSync(join(root, 'new.txt'))).toBe(false);
    } finally {
      await client.close();
    }
  });
});

describe('without the native addons, logging pretty', () => {
  const id = 'install-e2e-js';
  beforeAll(async () => {
    // As on a platform the prebuilt addons do not fit: their files are gone, the loaders remain.
    for (const app of ['harness', 'executor']) {
      for (const addon of ['native-crypto', 'native-pipe']) {
        rmSync(join(installed(app), 'node_modules', '@tether', addon, 'native'), { recursive: true, force: true });
      }
    }
    // Its logs pretty (pino-pretty, bundled and loaded on first use) as on a terminal.
    await startInstalledExecutor(id, 2, ['--log-format', 'pretty']);
  }, 30_000);

  it('the executor says (pretty) which fallback it uses and serves a command through the JavaScript paths', async () => {
    const result = await runHarness(['exec', '--cwd', work, '--', 'sh', '-c', 'echo fallback; exit 5'], id);
    expect(result).toEqual({ code: 5, stdout: 'fallback\n', stderr: '' });
    const executor = executors.at(-1) as InstalledExecutor;
    expect(executor.stderr()).toMatch(/^\[[\d:.]+\] WARN: .*\n(?:\s.*\n)*?\s+reason: "@tether\/native-pipe: /m);
    // The first executor, with the addons in place, had no reason to say so.
    expect(executors[0]?.stderr()).not.toContain('@tether/native-pipe');
  });
});

describe('node-pty installed later, beside the executor', () => {
  const id = 'install-e2e-pty';
  beforeAll(async () => {
    // Where `npm install -g --prefix PREFIX node-pty` puts it; the workspace's build stands in for npm's
    // (which compiles it with node-gyp on Linux). The executor finds it up its module path on first use.
    const nodePty = dirname(
      createRequire(join(repoRoot(), 'packages', 'local-process', 'package.json')).resolve('node-pty/package.json'),
    );
    for (const part of ['package.json', 'lib', join('build', 'Release')]) {
      cpSync(join(nodePty, part), join(prefix, 'lib', 'node_modules', 'node-pty', part), { recursive: true });
    }
    await startInstalledExecutor(id, 3);
  }, 30_000);

  it('a terminal works', async () => {
    const result = await runHarness(
      ['exec', '-t', '--cwd', work, '--', 'sh', '-c', 'test -t 0 && test -t 1 && echo on-a-tty; exit 4'],
      id,
    );
    expect(result).toEqual({ code: 4, stdout: 'on-a-tty\r\n', stderr: '' });
  });
});
