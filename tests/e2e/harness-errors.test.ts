import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { type PeerKind, repoRoot, runToEnd, type Stack, startStack } from '@tether/test-kit';
import { beforeAll, describe, expect, it } from 'vitest';
import { useWork } from './stack-suite.ts';

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the harness bin to its end (stdin closed). */
async function harness(args: string[], env: NodeJS.ProcessEnv): Promise<Outcome> {
  const { code, stdout, stderr } = await runToEnd(
    process.execPath,
    [join(repoRoot(), 'apps', 'harness', 'dist', 'main.js'), ...args],
    {
      env: {
        ...process.env,
        TETHER_HARNESS_REGISTRY: '',
        TETHER_HARNESS_ENVIRONMENT_ID: '',
        TETHER_HARNESS_API_KEY: '',
        TETHER_REGISTRY_URL: '',
        TETHER_ENVIRONMENT_ID: '',
        TETHER_API_KEY: '',
        // Never the user's config file.
        TETHER_CONFIG: join(work, 'no-config.toml'),
        ...env,
      },
    },
  );
  return { code, stdout, stderr };
}

/** A loopback port that nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

let stack: Stack;
// Every remote command runs in `work`: none may be left.
const work = useWork('tether-harness-errors-', () => stack);

beforeAll(async () => {
  stack = await startStack();
  await stack.startExecutor('tether', 'errors-tether');
  await stack.startExecutor('codex', 'errors-codex');
  // An executable file the kernel cannot run: glibc's execvp would hand it to /bin/sh, which would run it.
  writeFileSync(join(work, 'data-file'), `touch ${join(work, 'ran-by-sh')}\n`, { mode: 0o755 });
  writeFileSync(join(work, 'not-executable'), '#!/bin/sh\necho ran\n', { mode: 0o644 });
  mkdirSync(join(work, 'bin'));
  writeFileSync(join(work, 'bin', 'data-on-path'), 'echo ran\n');
  chmodSync(join(work, 'bin', 'data-on-path'), 0o755);
}, 120_000);

const envFor = (id: string): NodeJS.ProcessEnv => ({
  TETHER_HARNESS_REGISTRY: stack.registryUrl,
  TETHER_HARNESS_ENVIRONMENT_ID: id,
  TETHER_HARNESS_API_KEY: stack.keys.harness,
});

describe.each<PeerKind>(['tether', 'codex'])('a command that cannot start (%s executor)', (kind) => {
  const id = `errors-${kind}`;
  const exec = (args: string[], tty = false) =>
    harness(['exec', ...(tty ? ['-t'] : []), '--cwd', work, '--', ...args], envFor(id));

  it('a missing program exits 127 and is named, by path or searched on PATH, with and without a terminal', async () => {
    for (const tty of [false, true]) {
      expect(await exec(['/no/such/prog'], tty)).toEqual({
        code: 127,
        stdout: '',
        stderr: 'harness: /no/such/prog: not found\n',
      });
      expect(await exec(['no-such-program-xyz'], tty)).toEqual({
        code: 127,
        stdout: '',
        stderr: 'harness: no-such-program-xyz: not found\n',
      });
    }
  });

  it('a file without execute permission exits 126 with the reason', async () => {
    const result = await exec([join(work, 'not-executable')]);
    expect(result).toEqual({
      code: 126,
      stdout: '',
      stderr: `harness: ${join(work, 'not-executable')}: Permission denied\n`,
    });
  });

  it('an executable file that is no program exits 126 and is not run by sh, by path or on PATH', async () => {
    for (const tty of [false, true]) {
      expect(await exec([join(work, 'data-file')], tty)).toEqual({
        code: 126,
        stdout: '',
        stderr: `harness: ${join(work, 'data-file')}: Exec format error\n`,
      });
      // Codex's terminal path (portable-pty) fails there in its own way (its forked child aborts).
      if (tty && kind === 'codex') continue;
      const onPath = await harness(
        ['exec', ...(tty ? ['-t'] : []), '--cwd', work, '-e', `PATH=${join(work, 'bin')}`, '--', 'data-on-path'],
        envFor(id),
      );
      expect(onPath).toEqual({ code: 126, stdout: '', stderr: 'harness: data-on-path: Exec format error\n' });
    }
    expect(existsSync(join(work, 'ran-by-sh'))).toBe(false);
  });

  it('a missing --cwd, or one that is a file, is named (126); the program is not blamed', async () => {
    const missing = await harness(['exec', '--cwd', join(work, 'nope'), '--', 'true'], envFor(id));
    expect(missing).toEqual({
      code: 126,
      stdout: '',
      stderr: `harness: --cwd ${join(work, 'nope')}: no such directory\n`,
    });
    const file = await harness(['exec', '--cwd', join(work, 'data-file'), '--', 'true'], envFor(id));
    expect(file.code).toBe(126);
    expect(file.stderr).toBe(`harness: --cwd ${join(work, 'data-file')}: not a directory\n`);
  });

  it("the command's own exit code passes through; a signal death is 128+N", async () => {
    expect((await exec(['/bin/sh', '-c', 'exit 3'])).code).toBe(3);
    expect((await exec(['/bin/sh', '-c', 'exit 127'])).code).toBe(127);
    expect((await exec(['/bin/sh', '-c', 'kill -TERM $$'])).code).toBe(143);
    expect((await exec(['/bin/sh', '-c', 'kill -KILL $$'])).code).toBe(137);
  });
});

describe('a connection that fails exits 255, as ssh does', () => {
  it('a registry nobody listens on', async () => {
    const port = await closedPort();
    const result = await harness(['exec', '--connect-timeout', '1', '--', 'true'], {
      ...envFor('errors-tether'),
      TETHER_HARNESS_REGISTRY: `http://127.0.0.1:${port}`,
    });
    expect(result.code).toBe(255);
    expect(result.stderr).toMatch(/^harness: .*registry/);
  });

  it('an environment with no executor connected', async () => {
    const result = await harness(['exec', '--connect-timeout', '1', '--', 'true'], envFor('errors-nobody'));
    expect(result.code).toBe(255);
    expect(result.stderr).toContain('errors-nobody');
  });

  it('an environment whose executor has gone away', async () => {
    const peer = await stack.startExecutor('tether', 'errors-gone');
    await peer.close();
    const result = await harness(['exec', '--connect-timeout', '1', '--', 'true'], envFor('errors-gone'));
    expect(result.stderr).toMatch(/^harness: /);
    expect(result.code).toBe(255);
  });

  it('a refused API key (not echoed)', async () => {
    const result = await harness(['exec', '--', 'true'], {
      ...envFor('errors-tether'),
      TETHER_HARNESS_API_KEY: 'wrong-key-456',
    });
    expect(result.code).toBe(255);
    expect(result.stderr).toContain('refused the harness API key');
    expect(result.stderr).not.toContain('wrong-key-456');
  });

  it('an executor that is not the pinned key (the handshake is refused)', async () => {
    const other = join(work, 'other-key.json');
    writeFileSync(other, JSON.stringify(publicKeyToJson(generateIdentity().publicKey)));
    const result = await harness(['exec', '--executor-key', other, '--', 'true'], envFor('errors-tether'));
    expect(result.stderr).toMatch(/^harness: /);
    expect(result.code).toBe(255);
  });

  it('an executor URL nobody listens on (--url)', async () => {
    const port = await closedPort();
    const result = await harness(
      ['exec', '--connect-timeout', '1', '--url', `ws://127.0.0.1:${port}`, '--', 'true'],
      {},
    );
    expect(result.code).toBe(255);
  });

  it('bad usage stays 2', async () => {
    expect((await harness(['exec', '--', 'true'], {})).code).toBe(2);
    expect((await harness(['exec', '--connect-timeout', 'soon', '--', 'true'], {})).code).toBe(2);
    expect((await harness(['frobnicate'], {})).code).toBe(2);
  });
});

describe('one spelling of each flag and variable, the older ones still read (issue 32)', () => {
  const key = () => ({ TETHER_HARNESS_API_KEY: stack.keys.harness });

  it('takes the connection flags before the command as after it', async () => {
    const flags = ['--registry', stack.registryUrl, '--environment-id', 'errors-tether'];
    for (const args of [
      [...flags, 'exec', '--', '/bin/echo', 'before'],
      ['exec', ...flags, '--', '/bin/echo', 'after'],
      ['--registry', stack.registryUrl, 'exec', '--environment-id', 'errors-tether', '--', '/bin/echo', 'both'],
      [
        `--registry=${stack.registryUrl}`,
        '--connect-timeout',
        '20s',
        'exec',
        '--environment-id=errors-tether',
        '--',
        '/bin/echo',
        'inline',
      ],
    ]) {
      const word = args.at(-1) as string;
      expect(await harness(args, key()), args.join(' ')).toEqual({ code: 0, stdout: `${word}\n`, stderr: '' });
    }
    // A flag no command has is refused as before.
    const unknown = await harness(['--no-such-flag', 'exec', '--', 'true'], key());
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown option '--no-such-flag'");
  });

  it('reads the older variables, each with one warning naming its replacement (never the key)', async () => {
    const result = await harness(['exec', '--', '/bin/echo', 'old'], {
      TETHER_REGISTRY_URL: stack.registryUrl,
      TETHER_ENVIRONMENT_ID: 'errors-tether',
      TETHER_API_KEY: stack.keys.harness,
      TETHER_CONNECT_TIMEOUT: '20',
    });
    expect(result.code).toBe(0);
    expect(result.stdout).toBe('old\n');
    expect(result.stderr.split('\n').sort()).toEqual(
      [
        '',
        'harness: warning: TETHER_API_KEY is deprecated; use TETHER_HARNESS_API_KEY (the executor read it too, as its own)',
        'harness: warning: TETHER_CONNECT_TIMEOUT is deprecated; use TETHER_HARNESS_CONNECT_TIMEOUT',
        'harness: warning: TETHER_ENVIRONMENT_ID is deprecated; use TETHER_HARNESS_ENVIRONMENT_ID',
        'harness: warning: TETHER_REGISTRY_URL is deprecated; use TETHER_HARNESS_REGISTRY',
      ].sort(),
    );
    expect(result.stderr).not.toContain(stack.keys.harness);
    // The new names win over the old ones, and then nothing is said.
    const both = await harness(['exec', '--', '/bin/echo', 'new'], {
      ...envFor('errors-tether'),
      TETHER_REGISTRY_URL: 'http://127.0.0.1:9',
      TETHER_ENVIRONMENT_ID: 'errors-nobody',
      TETHER_API_KEY: 'wrong-key',
    });
    expect(both).toEqual({ code: 0, stdout: 'new\n', stderr: '' });
  });
});
