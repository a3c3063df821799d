import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { type PeerHandle, type Stack, startPeer, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from './cli.js';
import { parseLocation } from './target.js';

const work = mkdtempSync(join(tmpdir(), 'tether-harness-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

async function harness(
  args: string[],
  env: NodeJS.ProcessEnv,
  stdinText?: string,
  options: { stderrIsTTY?: boolean } = {},
): Promise<Outcome> {
  const stdin = new PassThrough();
  const stdout = new PassThrough();
  const stderr = Object.assign(new PassThrough(), { isTTY: options.stderrIsTTY ?? false });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  stdout.on('data', (chunk: Buffer) => out.push(chunk));
  stderr.on('data', (chunk: Buffer) => err.push(chunk));
  if (stdinText !== undefined) stdin.end(stdinText);
  const code = await run(args, { stdin, stdout, stderr, env });
  return { code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() };
}

describe('locations', () => {
  it('parses ENV:/path and local paths', () => {
    expect(parseLocation('dev-1:/tmp/x')).toEqual({ kind: 'remote', environmentId: 'dev-1', path: '/tmp/x' });
    expect(parseLocation('./file')).toEqual({ kind: 'local', path: './file' });
    expect(parseLocation('/abs/with:colon')).toEqual({ kind: 'local', path: '/abs/with:colon' });
    expect(() => parseLocation('dev-1:relative')).toThrow('must be absolute');
  });
});

describe('harness CLI through the registry and relay', () => {
  let stack: Stack;
  let peer: PeerHandle;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    // The real registry, relay and `executor --remote` processes.
    stack = await startStack();
    peer = await stack.startExecutor('tether', 'env-cli');
    env = {
      TETHER_REGISTRY_URL: stack.registryUrl,
      TETHER_ENVIRONMENT_ID: 'env-cli',
      TETHER_API_KEY: stack.keys.harness,
    };
  });
  afterAll(async () => {
    await peer?.close();
    await stack?.close();
  });

  it('exec streams output and returns the remote exit code', async () => {
    const result = await harness(['exec', '--cwd', work, '--', '/bin/sh', '-c', 'echo out; echo err >&2; exit 4'], env);
    expect(result).toEqual({ code: 4, stdout: 'out\n', stderr: 'err\n' });
  });

  it('exec -i forwards stdin until it ends', async () => {
    const result = await harness(['exec', '-i', '--', 'tr', 'a-z', 'A-Z'], env, 'shout please\n');
    expect(result.stdout).toBe('SHOUT PLEASE\n');
    expect(result.code).toBe(0);
  });

  it('exec -t runs in a terminal and -ti forwards keystrokes to it', async () => {
    const plain = await harness(['exec', '--', '/bin/sh', '-c', 'test -t 1 && echo tty || echo no-tty'], env);
    expect(plain.stdout).toBe('no-tty\n');
    const tty = await harness(['exec', '-t', '--', '/bin/sh', '-c', 'test -t 1 && echo tty || echo no-tty'], env);
    expect(tty.stdout).toBe('tty\r\n');
    const interactive = await harness(
      ['exec', '-t', '-i', '--', '/bin/sh', '-c', 'read line; echo "got:$line"'],
      env,
      'typed\n',
    );
    expect(interactive.stdout).toContain('got:typed');
    expect(interactive.code).toBe(0);
  });

  it('exec -i delivers a large stdin whole and in order', async () => {
    const input = Array.from({ length: 60_000 }, (_, i) => `line ${i}\n`).join('');
    const result = await harness(['exec', '-i', '--', 'sha256sum'], env, input);
    expect(result.code).toBe(0);
    expect(result.stdout.split(' ')[0]).toBe(createHash('sha256').update(input).digest('hex'));
  });

  it('exec -e sets variables; --clean-env starts empty', async () => {
    const result = await harness(['exec', '--clean-env', '-e', 'ONLY=1', '--', '/usr/bin/env'], env);
    expect(result.stdout).toBe('ONLY=1\n');
  });

  it('says what is missing when there is no registry or key', async () => {
    const noRegistry = await harness(['exec', '--', 'true'], { TETHER_API_KEY: 'x' });
    expect(noRegistry.code).toBe(2);
    expect(noRegistry.stderr).toContain('--registry');
    const noKey = await harness(['exec', '--', 'true'], { ...env, TETHER_API_KEY: '' });
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toContain('TETHER_API_KEY');
  });

  it('a wrong API key is reported without echoing it', async () => {
    const result = await harness(['exec', '--', 'true'], { ...env, TETHER_API_KEY: 'wrong-key-123' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('refused the harness API key');
    expect(result.stderr).not.toContain('wrong-key-123');
  });

  it('--help is available on every command', async () => {
    for (const command of [[], ['exec'], ['cp'], ['ls'], ['cat']]) {
      const result = await harness([...command, '--help'], {});
      expect(result.code).toBe(0);
      expect(result.stdout).toContain('Usage: harness');
    }
  });

  it('an unknown command is a usage error', async () => {
    const result = await harness(['frobnicate'], {});
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("unknown command 'frobnicate'");
  });

  it('cp copies a local file to a local path with a sha256 check', async () => {
    const source = join(work, 'local-src.bin');
    writeFileSync(source, randomBytes(100_000));
    const result = await harness(['cp', source, join(work, 'local-dst.bin')], {});
    expect(result.code).toBe(0);
    expect(result.stderr).toContain('sha256 verified');
    expect(readFileSync(join(work, 'local-dst.bin'))).toEqual(readFileSync(source));
  });

  it('cp draws progress on a terminal, and only there', async () => {
    const source = join(work, 'progress-src.bin');
    writeFileSync(source, randomBytes(2 * 1024 * 1024));
    const onTerminal = await harness(['cp', source, join(work, 'progress-a.bin')], {}, undefined, {
      stderrIsTTY: true,
    });
    expect(onTerminal.code).toBe(0);
    expect(onTerminal.stderr).toContain('progress-src.bin  100%');
    const piped = await harness(['cp', source, join(work, 'progress-b.bin')], {});
    expect(piped.stderr).not.toContain('%');
    const quiet = await harness(['cp', '-q', source, join(work, 'progress-c.bin')], {}, undefined, {
      stderrIsTTY: true,
    });
    expect(quiet.stderr).toBe('');
  });

  it('cp refuses a directory without -r', async () => {
    mkdirSync(join(work, 'a-dir'), { recursive: true });
    const result = await harness(['cp', join(work, 'a-dir'), join(work, 'b-dir')], {});
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('use -r');
  });

  it('cp up to the environment, back down, and a tree both ways: bytes and digests equal', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 17);
    const local = join(work, 'up.bin');
    writeFileSync(local, data);
    const remoteDir = mkdtempSync(join(tmpdir(), 'tether-remote-'));
    try {
      const up = await harness(['cp', local, `env-cli:${remoteDir}/up.bin`], env);
      expect(up.stderr).toContain('sha256 verified');
      expect(up.code).toBe(0);
      expect(readFileSync(join(remoteDir, 'up.bin')).equals(data)).toBe(true);

      const down = await harness(['cp', `env-cli:${remoteDir}/up.bin`, join(work, 'down.bin')], env);
      expect(down.code).toBe(0);
      const digest = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
      expect(digest(readFileSync(join(work, 'down.bin')))).toBe(digest(data));

      const tree = join(work, 'tree');
      mkdirSync(join(tree, 'nested', 'deeper'), { recursive: true });
      writeFileSync(join(tree, 'a.txt'), 'alpha\n');
      writeFileSync(join(tree, 'nested', 'b.txt'), 'beta\n');
      writeFileSync(join(tree, 'nested', 'deeper', 'c.bin'), randomBytes(70_000));
      const treeUp = await harness(['cp', '-r', tree, `env-cli:${remoteDir}`], env);
      expect(treeUp.code).toBe(0);
      expect(treeUp.stderr).toContain('copied 3 file(s)');
      expect(readFileSync(join(remoteDir, 'tree', 'nested', 'b.txt'), 'utf8')).toBe('beta\n');

      const listing = await harness(['ls', `env-cli:${remoteDir}/tree`], env);
      expect(listing.stdout).toBe('a.txt\nnested/\n');
      const cat = await harness(['cat', `env-cli:${remoteDir}/tree/a.txt`], env);
      expect(cat.stdout).toBe('alpha\n');

      const treeDown = await harness(['cp', '-r', `env-cli:${remoteDir}/tree`, join(work, 'tree-back')], env);
      expect(treeDown.code).toBe(0);
      expect(readFileSync(join(work, 'tree-back', 'nested', 'deeper', 'c.bin'))).toEqual(
        readFileSync(join(tree, 'nested', 'deeper', 'c.bin')),
      );
    } finally {
      rmSync(remoteDir, { recursive: true, force: true });
    }
  });

  it('cp over an existing, longer file leaves exactly the source, in the same file, both ways', async () => {
    const data = randomBytes(2 * 1024 * 1024 + 3);
    const source = join(work, 'over-src.bin');
    writeFileSync(source, data);
    for (const [from, to, path] of [
      [source, `env-cli:${work}/over-up.bin`, join(work, 'over-up.bin')],
      [`env-cli:${source}`, join(work, 'over-down.bin'), join(work, 'over-down.bin')],
    ] as const) {
      writeFileSync(path, randomBytes(5 * 1024 * 1024)); // longer than the copy, other bytes
      const inode = statSync(path).ino;
      const result = await harness(['cp', from, to], env);
      expect(result.code, result.stderr).toBe(0);
      expect(readFileSync(path).equals(data)).toBe(true);
      expect(statSync(path).ino).toBe(inode); // written in place, as scp does
    }
  });

  it('cp fails with the OS reason when the destination cannot be written, in both directions', async () => {
    const local = join(work, 'fail-src.bin');
    writeFileSync(local, randomBytes(2 * 1024 * 1024 + 5));
    // Up: the remote handle opens with the first block, into a directory that is not there.
    const up = await harness(['cp', local, `env-cli:${work}/no-such-dir/x.bin`], env);
    expect(up.code).toBe(1);
    expect(up.stderr).toMatch(/No such file|not found|ENOENT/i);
    // Down: the local file cannot be created; the remote read stream is stopped, nothing is left behind.
    const down = await harness(['cp', `env-cli:${local}`, join(work, 'no-such-dir', 'y.bin')], env);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/No such file|not found|ENOENT/i);
    // The connection's handles were all closed: a new copy over the same executor goes through.
    const again = await harness(['cp', local, `env-cli:${work}/fail-again.bin`], env);
    expect(again.code).toBe(0);
  });

  it('cat of a missing remote file fails with the OS reason', async () => {
    const result = await harness(['cat', `env-cli:${work}/does-not-exist`], env);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/No such file|not found|ENOENT/i);
  });
});

describe('harness CLI straight to an executor (--url)', () => {
  it('runs and lists through the executor WebSocket, no registry involved', async () => {
    const peer = await startPeer({ kind: 'tether', transport: 'ws' });
    try {
      const run = await harness(['exec', '--url', peer.url!, '--cwd', work, '--', 'echo', 'direct'], {});
      expect(run).toEqual({ code: 0, stdout: 'direct\n', stderr: '' });
      const fromEnv = await harness(['ls', `${'env-x'}:${work}`], { TETHER_EXECUTOR_URL: peer.url! });
      expect(fromEnv.code).toBe(2);
      expect(fromEnv.stderr).toContain('--registry');
    } finally {
      await peer.close();
    }
  });
});

describe('harness CLI connect timeout', () => {
  it('keeps trying an unreachable executor until --connect-timeout, then says why', async () => {
    // A port nothing listens on: every attempt is refused, which may pass, so it is retried.
    const { createServer } = await import('node:net');
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const started = Date.now();
    const run = await harness(['exec', '--url', `ws://127.0.0.1:${port}`, '--connect-timeout', '1', '--', 'true'], {});
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/could not connect within 1000 ms \(\d+ attempts\)/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    const bad = await harness(
      ['exec', '--url', `ws://127.0.0.1:${port}`, '--connect-timeout', 'soon', '--', 'true'],
      {},
    );
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('expected seconds');
    const badEnv = await harness(['exec', '--url', `ws://127.0.0.1:${port}`, '--', 'true'], {
      TETHER_CONNECT_TIMEOUT: '-1',
    });
    expect(badEnv.code).toBe(2);
    expect(badEnv.stderr).toContain('TETHER_CONNECT_TIMEOUT');
  });
});

describe('copy integrity', () => {
  it('fails when the destination does not hash like the source', async () => {
    const { copy } = await import('./copy.js');
    const { LocalFs } = await import('@tether/client');
    const { Transform } = await import('node:stream');
    const source = join(work, 'integrity-src.bin');
    writeFileSync(source, randomBytes(50_000));
    const real = new LocalFs();
    // A destination that flips one byte on its way to disk, as a faulty transport or disk would.
    const corrupting = Object.create(real) as InstanceType<typeof LocalFs>;
    corrupting.createWriteStream = (path: string) => {
      const sink = real.createWriteStream(path);
      let flipped = false;
      const flip = new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          if (!flipped) {
            chunk = Buffer.from(chunk);
            chunk[0] = (chunk[0] ?? 0) ^ 0xff;
            flipped = true;
          }
          callback(null, chunk);
        },
      });
      flip.pipe(sink);
      return flip;
    };
    const destination = join(work, 'integrity-dst.bin');
    await expect(
      copy(
        { fs: real, env: null, path: source, label: source },
        { fs: corrupting, env: null, path: destination, label: destination },
        { recursive: false },
      ),
    ).rejects.toThrow(/integrity check failed/);
  });

  it('trusts executor digests instead of reading the file again, and fails when one disagrees', async () => {
    const { copy } = await import('./copy.js');
    const { LocalFs } = await import('@tether/client');
    const { createHash } = await import('node:crypto');
    const { Readable, Writable } = await import('node:stream');
    type Fs = InstanceType<typeof LocalFs>;
    const data = randomBytes(70_000);
    const sha256 = createHash('sha256').update(data).digest('hex');
    const source = join(work, 'digest-src.bin');
    writeFileSync(source, data);
    const real = new LocalFs();
    // Stand-ins for remote endpoints: local files whose handles report the given digest when done.
    const reporting = (digest: string): Fs => {
      const fs = Object.create(real) as Fs;
      const report = (options: { onDigest?: (d: { sha256: string; bytes: number }) => void }) =>
        options.onDigest?.({ sha256: digest, bytes: data.length });
      fs.createReadStream = (path, options = {}) =>
        Readable.from(
          (async function* () {
            for await (const chunk of real.createReadStream(path)) yield chunk as Buffer;
            report(options); // before the stream ends, as RemoteFs does
          })(),
        );
      fs.createWriteStream = (path, options = {}) => {
        const sink = real.createWriteStream(path);
        return new Writable({
          write(chunk: Buffer, _encoding, callback) {
            sink.write(chunk, callback);
          },
          final(callback) {
            sink.end(() => {
              report(options);
              callback();
            });
          },
        });
      };
      return fs;
    };
    // An env whose `sha256sum` must not be needed.
    const noExec = { exec: () => Promise.reject(new Error('sha256sum should not run')) } as never;
    const destination = join(work, 'digest-dst.bin');
    const endpoint = (fs: Fs, path: string, env: unknown = null) => ({ fs, env: env as never, path, label: path });

    await expect(
      copy(endpoint(real, source), endpoint(reporting(sha256), destination, noExec), { recursive: false }),
    ).resolves.toMatchObject({ files: 1, bytes: data.length });
    await expect(
      copy(endpoint(reporting(sha256), source, noExec), endpoint(real, destination), { recursive: false }),
    ).resolves.toMatchObject({ files: 1, bytes: data.length });

    const wrong = 'f'.repeat(64);
    await expect(
      copy(endpoint(real, source), endpoint(reporting(wrong), destination, noExec), { recursive: false }),
    ).rejects.toThrow(`sha256 ${wrong} at the destination, ${sha256} read from the source`);
    await expect(
      copy(endpoint(reporting(wrong), source, noExec), endpoint(real, destination), { recursive: false }),
    ).rejects.toThrow(`sha256 ${sha256} received, ${wrong} read from the source`);
  });
});

describe('harness CLI registry transport security', () => {
  /** A registry stand-in on 127.0.0.1:0 that refuses every key (HTTP 401): reaching it is what is tested. */
  async function refusingRegistry(): Promise<{ port: number; requests: () => number; close: () => Promise<void> }> {
    const { createServer } = await import('node:http');
    let requests = 0;
    const server = createServer((req, res) => {
      requests++;
      req.resume();
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end('{"error":{"code":"unauthorized","message":"no"}}');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return {
      port: (server.address() as { port: number }).port,
      requests: () => requests,
      close: () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  }

  it('refuses a plain http:// registry off loopback unless --allow-insecure-registry or its variable', async () => {
    const registry = await refusingRegistry();
    try {
      // 0.0.0.0 is not a loopback address, yet on Linux a connection to it reaches this host's listener.
      const base = { TETHER_REGISTRY_URL: `http://0.0.0.0:${registry.port}`, TETHER_API_KEY: 'secret-harness-key' };
      const refused = await harness(['exec', '--environment-id', 'env-x', '--', 'true'], base);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toContain('refusing the plain http:// registry at 0.0.0.0');
      expect(refused.stderr).toContain('sent in clear');
      expect(refused.stderr).toContain('--allow-insecure-registry');
      expect(refused.stderr).not.toContain('secret-harness-key');
      expect(registry.requests()).toBe(0);

      for (const [args, env] of [
        [['--allow-insecure-registry'], base],
        [[], { ...base, TETHER_ALLOW_INSECURE_REGISTRY: '1' }],
      ] as const) {
        const allowed = await harness(['exec', ...args, '--environment-id', 'env-x', '--', 'true'], env);
        expect(allowed.code).toBe(1);
        expect(allowed.stderr).toContain('refused the harness API key');
      }
      expect(registry.requests()).toBe(2);
      // Loopback needs no flag.
      const loopback = await harness(['exec', '--environment-id', 'env-x', '--', 'true'], {
        ...base,
        TETHER_REGISTRY_URL: `http://127.0.0.1:${registry.port}`,
      });
      expect(loopback.stderr).toContain('refused the harness API key');
    } finally {
      await registry.close();
    }
  });

  it('--help names the flags', async () => {
    for (const command of [[], ['exec'], ['cp']]) {
      const result = await harness([...command, '--help'], {});
      expect(result.stdout).toContain(
        command.length === 0 ? 'TETHER_ALLOW_INSECURE_REGISTRY' : '--allow-insecure-registry',
      );
    }
    expect((await harness(['cp', '--help'], {})).stdout).toContain('--executor-key <file>');
  });

  it('--executor-key must name a readable public key file', async () => {
    const env = { TETHER_REGISTRY_URL: 'http://127.0.0.1:9', TETHER_API_KEY: 'k' };
    const missing = await harness(
      ['exec', '--environment-id', 'e1', '--executor-key', join(work, 'nope.json'), '--', 'true'],
      env,
    );
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('cannot read the executor key');
    const garbage = join(work, 'garbage-key.json');
    writeFileSync(garbage, '{"suite":"nope"}');
    const bad = await harness(['exec', '--environment-id', 'e1', '--executor-key', garbage, '--', 'true'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(`${garbage} is not an executor public key`);
  });

  it('--url serves one executor: a copy between two environments is refused', async () => {
    const result = await harness(['cp', '--url', 'ws://127.0.0.1:9', 'env-a:/x', 'env-b:/y'], {});
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--url reaches one executor');
  });
});
