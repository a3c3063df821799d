import { once } from 'node:events';
import { closeSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { loadNativePipe } from '@tether/native-pipe';
import { Deprecations } from '@tether/telemetry/cli';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { readApiKeyFd } from './api-key.js';
import {
  applyForwardFlags,
  type ExecutorOptions,
  type ExecutorPlatform,
  exposedListenerWarning,
  runExecutor,
} from './cli.js';
import type { ExecSupport } from './key-handover.js';
import { parseListenUrl } from './listen-url.js';
import { silentLogger } from './logger.js';

const KEY = 'treg_cli_test_secret';
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'executor-cli-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function cliIo(env: NodeJS.ProcessEnv = {}) {
  let stderr = '';
  const io = {
    stdin: new PassThrough(),
    stdout: new PassThrough(),
    stderr: {
      write: (text: string) => {
        stderr += text;
        return true;
      },
    } as unknown as NodeJS.WritableStream,
    env: { TETHER_HOME: scratch(), ...env },
  };
  return { io, stderr: () => stderr };
}

const noExec: ExecutorPlatform = { exec: {}, commandLine: () => ({ execPath: '/node', args: [], env: {} }) };

function options(extra: Partial<ExecutorOptions>): ExecutorOptions {
  return { strictConfig: false, environmentId: 'env-cli', ...extra };
}

/** `runExecutor` with `options(extra)` in `env`, logging nothing and never re-executing: its exit code and stderr. */
async function runQuiet(extra: Partial<ExecutorOptions>, env: NodeJS.ProcessEnv = {}) {
  const run = cliIo(env);
  const code = await runExecutor(options(extra), run.io, silentLogger(), noExec);
  return { code, stderr: run.stderr() };
}

/** A registry answering /register per `answer`, and a relay endpoint refusing upgrades with 403. */
async function fakeRegistry(answer: (count: number) => number): Promise<{ url: string; registers: number }> {
  const state = { url: '', registers: 0 };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      const status = answer(++state.registers);
      const body =
        status === 200
          ? {
              environment_id: 'env-cli',
              url: `${state.url.replace('http:', 'ws:')}/relay`,
              security_profile: 'noise_hybrid_ik_v1',
              executor_registration_id: `reg-${state.registers}`,
            }
          : { error: { code: 'unauthorized', message: 'API key revoked' } };
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
  });
  server.on('upgrade', (_req, socket: Socket) => {
    socket.on('error', () => undefined);
    socket.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  state.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return state;
}

describe('executor --registry: registry URL', () => {
  it('refuses an http:// registry on a host that is not loopback unless --allow-insecure-registry', async () => {
    const refused = await runQuiet({ registry: 'http://registry.example' }, { TETHER_EXECUTOR_API_KEY: KEY });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('--registry http://registry.example: plain http to a host that is not loopback');
    expect(refused.stderr).toContain('--allow-insecure-registry');
    // Allowed (and loopback hosts): the run gets as far as the API key, which is missing here.
    for (const extra of [
      { registry: 'http://registry.example', allowInsecureRegistry: true },
      { registry: 'http://127.0.0.1:1' },
      { registry: 'http://127.9.9.9:1' },
      { registry: 'http://localhost:1' },
      { registry: 'http://[::1]:1' },
      { registry: 'https://registry.example' },
    ]) {
      const run = await runQuiet(extra);
      expect(run.code, extra.registry).toBe(2);
      expect(run.stderr).toContain('--registry needs an API key: --api-key-file PATH (mode 0600), --api-key-fd N');
    }
  });

  it('warns that a WebSocket listener off loopback is unauthenticated', async () => {
    // Through runExecutor, on an address no interface has (TEST-NET-1): warned, then the bind fails, so the
    // test listens on nothing but loopback.
    const log = silentLogger();
    const warn = vi.spyOn(log, 'warn');
    const run = cliIo();
    const listen = parseListenUrl('ws://192.0.2.1:0');
    const quiet: ExecutorPlatform = { ...noExec, exec: { setCloexecAbove: () => 0 } };
    expect(await runExecutor({ strictConfig: false, listen }, run.io, log, quiet)).toBe(1);
    expect(run.stderr()).toContain('cannot listen on 192.0.2.1:0');
    expect(warn.mock.calls.map((call) => String(call[1]))).toEqual([
      expect.stringMatching(/listener on 192\.0\.2\.1 is unauthenticated/),
    ]);
    expect(exposedListenerWarning('127.0.0.1')).toBeNull();
    expect(exposedListenerWarning('::1')).toBeNull();
    expect(exposedListenerWarning('0.0.0.0')).toMatch(/listener on 0\.0\.0\.0 is unauthenticated/);
    expect(exposedListenerWarning('::')).toMatch(/unauthenticated/);
    expect(exposedListenerWarning('192.168.1.5')).toMatch(/unauthenticated/);
  });

  it('makes every inherited descriptor above 2 close-on-exec at start, or warns that it cannot', async () => {
    const listen = parseListenUrl('ws://192.0.2.1:0');
    const setCloexecAbove = vi.fn(() => 2);
    const marked = silentLogger();
    const info = vi.spyOn(marked, 'info');
    const markedRun = cliIo();
    await runExecutor({ strictConfig: false, listen }, markedRun.io, marked, { ...noExec, exec: { setCloexecAbove } });
    expect(setCloexecAbove.mock.calls).toEqual([[2]]);
    expect(info).toHaveBeenCalledWith({ descriptors: 2 }, 'inherited descriptors made close-on-exec');
    for (const [exec, reason] of [
      [{ unavailableReason: 'TETHER_NATIVE_PIPE=off' }, '@tether/native-pipe: TETHER_NATIVE_PIPE=off'],
      [
        {
          setCloexecAbove: () => {
            throw new Error('EPERM: operation not permitted, fcntl');
          },
        },
        'EPERM: operation not permitted, fcntl',
      ],
    ] as const) {
      const log = silentLogger();
      const warn = vi.spyOn(log, 'warn');
      const run = cliIo();
      // It still starts (here the bind fails afterwards: exit 1, not a refusal).
      expect(await runExecutor({ strictConfig: false, listen }, run.io, log, { ...noExec, exec })).toBe(1);
      expect(warn).toHaveBeenCalledWith(
        { reason },
        expect.stringMatching(/^cannot make inherited descriptors close-on-exec: .* sandboxed ones included/),
      );
    }
  });

  it('the key flags need --registry', async () => {
    const run = await runQuiet({ environmentId: undefined, apiKeyFile: '/k' });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--api-key-file needs --registry');
  });

  it('--noise-cipher needs --registry', async () => {
    const run = await runQuiet({ environmentId: undefined, noiseCipher: 'chachapoly' });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--noise-cipher needs --registry');
  });
});

describe('executor --registry: the API key never stays in its environment', () => {
  it('with the key in TETHER_EXECUTOR_API_KEY, re-executes itself without it (and any other key variable) and hands the key over on a pipe', async () => {
    const native = loadNativePipe();
    expect(native, 'the native pipe addon is built in CI').not.toBeNull();
    const cleared: number[] = [];
    let exec: { file: string; argv: string[]; env: Record<string, string>; key: string } | undefined;
    const support: ExecSupport = {
      pipe: () => native!.pipe(),
      clearCloexec: (fd) => cleared.push(fd),
      execve: (file, argv, env) => {
        exec = { file, argv, env, key: readApiKeyFd(Number(argv.at(-1))) };
        throw new Error('exec stand-in');
      },
    };
    const platform: ExecutorPlatform = {
      exec: support,
      commandLine: () => ({
        execPath: '/usr/bin/node',
        args: ['--enable-source-maps', '/app/main.js', '--registry', 'http://127.0.0.1:1'],
        env: { PATH: '/bin', TETHER_EXECUTOR_API_KEY: KEY, TETHER_API_KEY: 'x', CODEX_API_KEY: KEY, UNSET: undefined },
      }),
    };
    const run = cliIo({ TETHER_EXECUTOR_API_KEY: KEY, TETHER_API_KEY: 'x', CODEX_API_KEY: KEY });
    await expect(
      runExecutor(options({ registry: 'http://127.0.0.1:1' }), run.io, silentLogger(), platform),
    ).rejects.toThrow('exec stand-in');
    const fd = Number(exec?.argv.at(-1));
    expect(exec).toEqual({
      file: '/usr/bin/node',
      argv: [
        '/usr/bin/node',
        '--enable-source-maps',
        '/app/main.js',
        '--registry',
        'http://127.0.0.1:1',
        '--api-key-fd',
        String(fd),
      ],
      // The variable the key was in (a name, for messages) goes along; no key variable does.
      env: { PATH: '/bin', TETHER_EXECUTOR_API_KEY_ORIGIN: 'TETHER_EXECUTOR_API_KEY' },
      key: KEY,
    });
    expect(cleared).toEqual([fd]);
    // TETHER_API_KEY was not the key used: no word about it.
    expect(run.stderr()).toBe('');
  });

  it('a key variable set beside --api-key-file is dropped by re-executing with the same command line', async () => {
    let exec: { argv: string[]; env: Record<string, string> } | undefined;
    const platform: ExecutorPlatform = {
      exec: {
        pipe: () => {
          throw new Error('no pipe is needed');
        },
        clearCloexec: () => undefined,
        execve: (_file, argv, env) => {
          exec = { argv, env };
          throw new Error('exec stand-in');
        },
      },
      commandLine: () => ({
        execPath: '/node',
        args: ['/main.js', '--api-key-file', '/k'],
        env: { CODEX_API_KEY: KEY },
      }),
    };
    const run = cliIo({ CODEX_API_KEY: KEY });
    await expect(
      runExecutor(options({ registry: 'http://127.0.0.1:1', apiKeyFile: '/k' }), run.io, silentLogger(), platform),
    ).rejects.toThrow('exec stand-in');
    expect(exec).toEqual({ argv: ['/node', '/main.js', '--api-key-file', '/k'], env: {} });
  });

  it('refuses a key in the environment where it cannot re-execute, unless --allow-api-key-env (then warns)', async () => {
    const refused = await runQuiet({ registry: 'http://127.0.0.1:1' }, { TETHER_EXECUTOR_API_KEY: KEY });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(
      'the API key is in TETHER_EXECUTOR_API_KEY, where every child process can read it',
    );
    expect(refused.stderr).toContain('--allow-api-key-env');
    expect(refused.stderr).not.toContain(KEY);

    // A key variable beside the file the key comes from: said to be unused, not to be the key.
    const beside = await runQuiet({ registry: 'http://127.0.0.1:1', apiKeyFile: '/k' }, { TETHER_API_KEY: KEY });
    expect(beside.code).toBe(2);
    expect(beside.stderr).toBe(
      `executor: TETHER_API_KEY holds an API key (not the one used: that comes from --api-key-file) that every child process could read from /proc/${process.pid}/environ, and this executor cannot re-execute itself without it (missing: execve (Node < 22.15 and no native addon) and pipes that survive exec (the native addon)). Unset it, or accept the exposure with --allow-api-key-env\n`,
    );

    const registry = await fakeRegistry(() => 401);
    const allowed = await runQuiet({ registry: registry.url, allowApiKeyEnv: true }, { TETHER_EXECUTOR_API_KEY: KEY });
    expect(allowed.stderr).toContain('WARNING: TETHER_EXECUTOR_API_KEY stays readable by every child process');
    // It went on to use the key: the registry said no, and a 401 at start is final.
    expect(allowed.code).toBe(1);
    expect(allowed.stderr).toContain('(the API key was revoked or is wrong)');
    expect(allowed.stderr).not.toContain(KEY);
  });
});

describe('executor --registry: the deprecated shared key variables', () => {
  it('reads TETHER_API_KEY last, with one warning naming TETHER_EXECUTOR_API_KEY, and says so when the key is refused', async () => {
    const registry = await fakeRegistry(() => 403);
    const run = await runQuiet({ registry: registry.url, allowApiKeyEnv: true }, { TETHER_API_KEY: KEY });
    expect(run.code).toBe(1);
    const lines = run.stderr.split('\n');
    expect(lines[0]).toBe(
      'executor: warning: TETHER_API_KEY is deprecated; use TETHER_EXECUTOR_API_KEY (the harness reads it too, as its own)',
    );
    expect(run.stderr).toContain(
      "it came from TETHER_API_KEY, which the harness reads as its own key: is it a harness key? Give the executor's key in TETHER_EXECUTOR_API_KEY or --api-key-file",
    );
    expect(run.stderr).not.toContain(KEY);
    // The current names: no warning, no such hint.
    const current = await runQuiet(
      { registry: registry.url, allowApiKeyEnv: true },
      { TETHER_EXECUTOR_API_KEY: KEY, TETHER_API_KEY: 'harness-key' },
    );
    expect(current.code).toBe(1);
    expect(current.stderr).not.toContain('deprecated');
    expect(current.stderr).not.toContain('harness key');
  });

  it('reads TETHER_API_KEY_FILE after the current names, with one warning', async () => {
    const dir = scratch();
    const keyPath = join(dir, 'executor.key');
    writeFileSync(keyPath, `${KEY}\n`, { mode: 0o600 });
    const registry = await fakeRegistry(() => 401);
    const run = await runQuiet({ registry: registry.url }, { TETHER_API_KEY_FILE: keyPath });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(
      'executor: warning: TETHER_API_KEY_FILE is deprecated; use TETHER_EXECUTOR_API_KEY_FILE (the harness reads it too, as its own)\n',
    );
    expect(run.stderr).toContain('(the API key was revoked or is wrong)');
  });

  it('says the parse’s deprecations once: not in an image that re-executes itself for the key, then in the next', async () => {
    const native = loadNativePipe();
    expect(native, 'the native pipe addon is built in CI').not.toBeNull();
    const held = (io: ReturnType<typeof cliIo>['io']) => {
      const deprecations = new Deprecations('executor', (text) => io.stderr.write(text));
      deprecations.hold();
      deprecations.warn('TETHER_LOG', 'TETHER_EXECUTOR_LOG_LEVEL');
      return deprecations;
    };
    const platform: ExecutorPlatform = {
      exec: {
        pipe: () => native!.pipe(),
        clearCloexec: () => undefined,
        execve: (_file, argv) => {
          closeSync(Number(argv.at(-1)));
          throw new Error('exec stand-in');
        },
      },
      commandLine: () => ({ execPath: '/node', args: ['/main.js'], env: { TETHER_EXECUTOR_API_KEY: KEY } }),
    };
    const first = cliIo({ TETHER_EXECUTOR_API_KEY: KEY });
    await expect(
      runExecutor(
        options({ registry: 'http://127.0.0.1:1', deprecations: held(first.io) }),
        first.io,
        silentLogger(),
        platform,
      ),
    ).rejects.toThrow('exec stand-in');
    expect(first.stderr()).toBe('');
    // The re-executed image (no key variable left) says it.
    const next = cliIo();
    expect(
      await runExecutor(
        options({ registry: 'http://127.0.0.1:1', deprecations: held(next.io) }),
        next.io,
        silentLogger(),
        noExec,
      ),
    ).toBe(2);
    expect(next.stderr()).toMatch(/^executor: warning: TETHER_LOG is deprecated; use TETHER_EXECUTOR_LOG_LEVEL\n/);
  });
});

describe('executor --registry: a revoked key', () => {
  it('exits 1 with a clear message when the registry refuses the key on re-registration', async () => {
    const dir = scratch();
    const keyPath = join(dir, 'executor.key');
    writeFileSync(keyPath, `${KEY}\n`, { mode: 0o600 });
    // Registered once; the relay then refuses the URL, and the registry the key.
    const registry = await fakeRegistry((count) => (count === 1 ? 200 : 401));
    const dumpable: boolean[] = [];
    const platform: ExecutorPlatform = { ...noExec, exec: { setDumpable: (value) => dumpable.push(value) } };
    const run = cliIo();
    const code = await runExecutor(
      options({ registry: registry.url, apiKeyFile: keyPath }),
      run.io,
      silentLogger(),
      platform,
    );
    expect(code).toBe(1);
    expect(registry.registers).toBe(2);
    expect(run.stderr()).toMatch(
      /environment env-cli lost its registration: the registry refused \/register with HTTP 401 .*\(the API key was revoked or is wrong\); exiting/,
    );
    expect(run.stderr()).not.toContain(KEY);
    expect(dumpable).toEqual([false]);
    expect(readFileSync(keyPath, 'utf8')).toBe(`${KEY}\n`); // read, never changed
  });
});

describe('forwarding flags over the config file', () => {
  const fileSays = (forwardEnabled: boolean) => ({ forwardEnabled, forwardAllow: ['loopback'] as readonly string[] });

  it('--forward-allow turns forwarding on with its targets even where [forward] enabled = false', () => {
    const config = fileSays(false);
    expect(applyForwardFlags(config, { forwardAllow: ['10.0.0.0/8:5432'] })).toBeNull();
    expect(config).toEqual({ forwardEnabled: true, forwardAllow: ['10.0.0.0/8:5432'] });
  });

  it('--no-forward turns it off; without flags the file decides', () => {
    const off = fileSays(true);
    expect(applyForwardFlags(off, { forward: false })).toBeNull();
    expect(off.forwardEnabled).toBe(false);
    const untouched = fileSays(false);
    expect(applyForwardFlags(untouched, {})).toBeNull();
    expect(untouched).toEqual(fileSays(false));
  });

  it('--forward-allow with --no-forward is a usage problem', () => {
    expect(applyForwardFlags(fileSays(true), { forward: false, forwardAllow: ['any'] })).toMatch(/cannot be combined/);
  });
});
