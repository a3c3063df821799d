/**
 * The executor's registry API key is out of its children's reach (issue 16, item 3), through the real
 * registry, relay, `executor --remote` and SDK: a child run by a harness walks its ancestors up to the
 * executor and reads each one's /proc/<pid>/environ; the key is in none of them. A key file must be
 * private, and a non-dumpable executor's environ and memory are closed to same-user children.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Environment } from '@tether/client';
import { peerMarkerEnv, runPeer, type Stack, startStack, tetherMainPath, waitUntil } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/** Walks from itself up through PPid until the executor (argv[1]) or pid 1; prints what each environ held. */
const WALKER = `
const fs = require('node:fs');
const executor = Number(process.argv[1]);
const chain = [];
let pid = process.pid;
for (let depth = 0; depth < 64; depth++) {
  const status = fs.readFileSync('/proc/' + pid + '/status', 'utf8');
  const ppid = Number(/^PPid:\\s*(\\d+)$/m.exec(status)[1]);
  const entry = { pid, ppid, name: /^Name:\\s*(.*)$/m.exec(status)[1] };
  try {
    entry.environ = fs.readFileSync('/proc/' + pid + '/environ', 'latin1');
  } catch (err) {
    entry.error = err.code;
  }
  try {
    fs.readFileSync('/proc/' + pid + '/mem');
  } catch (err) {
    entry.memError = err.code;
  }
  chain.push(entry);
  if (pid === executor || ppid <= 1) break;
  pid = ppid;
}
process.stdout.write(JSON.stringify(chain));
`;

interface Ancestor {
  pid: number;
  ppid: number;
  name: string;
  environ?: string;
  error?: string;
  memError?: string;
}

async function ancestorsOfAChild(stack: Stack, environmentId: string, executorPid: number): Promise<Ancestor[]> {
  const env = await Environment.connectRendezvous({
    registryUrl: stack.registryUrl,
    apiKey: stack.keys.harness,
    environmentId,
    clientName: 'executor-api-key-e2e',
  });
  try {
    const handle = await env.spawn([process.execPath, '-e', WALKER, String(executorPid)], { cwd: tmpdir() });
    let stdout = '';
    let stderr = '';
    for await (const event of handle) {
      if (event.kind !== 'output') continue;
      if (event.stream === 'stdout') stdout += event.chunk.toString();
      else stderr += event.chunk.toString();
    }
    const { exitCode } = await handle.completion;
    expect(stderr).toBe('');
    expect(exitCode).toBe(0);
    return JSON.parse(stdout) as Ancestor[];
  } finally {
    await env.close();
  }
}

function cmdline(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, -1);
}

describe('executor --registry keeps its API key from its children', () => {
  let stack: Stack;
  let dir: string;

  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'executor-api-key-e2e-'));
    chmodSync(dir, 0o755);
  });

  afterAll(async () => {
    await stack?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a key given in TETHER_EXECUTOR_API_KEY/CODEX_API_KEY is in no ancestor of a child (re-exec, key on a pipe)', async () => {
    // Dumpable, so that the child can read the executor's environ and show what is (not) in it.
    const executor = await stack.startExecutor('tether', 'env-key-env', { env: { TETHER_EXECUTOR_DUMPABLE: '1' } });
    const chain = await ancestorsOfAChild(stack, 'env-key-env', executor.pid);
    expect(chain.at(-1)?.pid, JSON.stringify(chain.map(({ pid, name }) => ({ pid, name })))).toBe(executor.pid);
    expect(chain.length).toBeGreaterThanOrEqual(2);
    for (const ancestor of chain) {
      expect(ancestor.error, `${ancestor.name} (${ancestor.pid})`).toBeUndefined();
      expect(ancestor.environ).toContain('PATH=');
      expect(ancestor.environ, `${ancestor.name} (${ancestor.pid}) holds the key`).not.toContain(stack.keys.executor);
      expect(ancestor.environ).not.toMatch(/(^|\0)(TETHER_EXECUTOR|TETHER|CODEX)_API_KEY=/);
    }
    // Same pid, re-executed with the key on a descriptor; the key is on no command line either.
    const args = cmdline(executor.pid);
    expect(args).toContain('--api-key-fd');
    expect(args.join(' ')).not.toContain(stack.keys.executor);
    expect(executor.exitStatus()).toBeUndefined();
  });

  it('--api-key-file takes a 0600 file (and no key reaches the environment); a 0644 file is refused', async () => {
    const keyFile = join(dir, 'executor.key');
    writeFileSync(keyFile, `${stack.keys.executor}\n`, { mode: 0o600 });
    const executor = await stack.startExecutor('tether', 'env-key-file', {
      args: ['--api-key-file', keyFile],
      env: { TETHER_EXECUTOR_API_KEY: '', TETHER_EXECUTOR_DUMPABLE: '1' },
    });
    const chain = await ancestorsOfAChild(stack, 'env-key-file', executor.pid);
    expect(chain.at(-1)?.pid).toBe(executor.pid);
    for (const ancestor of chain) expect(ancestor.environ).not.toContain(stack.keys.executor);

    const shared = join(dir, 'shared.key');
    writeFileSync(shared, `${stack.keys.executor}\n`, { mode: 0o644 });
    chmodSync(shared, 0o644);
    const run = await runPeer({
      kind: 'tether',
      args: ['--registry', stack.registryUrl, '--environment-id', 'env-key-shared', '--api-key-file', shared],
      env: { TETHER_EXECUTOR_API_KEY: '', TETHER_API_KEY: '', CODEX_API_KEY: '' },
      timeoutMs: 20_000,
    });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain(`--api-key-file ${shared}: mode 0644 lets group or others read it`);
    expect(run.stderr).not.toContain(stack.keys.executor);
  });

  it('is not dumpable: a same-user child cannot read its environ or memory (root children still could)', async () => {
    // Root reads any /proc/<pid>/environ; run the executor (and so its children) as an ordinary user.
    const uid = process.getuid?.() === 0 ? 65534 : (process.getuid?.() ?? 0);
    const gid = process.getuid?.() === 0 ? 65534 : (process.getgid?.() ?? 0);
    const home = mkdtempSync(join(dir, 'home-'));
    const keyFile = join(home, 'executor.key');
    writeFileSync(keyFile, `${stack.keys.executor}\n`, { mode: 0o600 });
    chownSync(home, uid, gid);
    chownSync(keyFile, uid, gid);
    const child: ChildProcess = spawn(
      process.execPath,
      [
        tetherMainPath(),
        '--registry',
        stack.registryUrl,
        '--environment-id',
        'env-not-dumpable',
        '--api-key-file',
        keyFile,
      ],
      {
        uid,
        gid,
        cwd: home,
        stdio: ['ignore', 'ignore', 'pipe'],
        env: {
          PATH: process.env.PATH ?? '/usr/bin:/bin',
          TETHER_HOME: home,
          TETHER_EXECUTOR_LOG_LEVEL: 'info',
          ...peerMarkerEnv(),
        },
      },
    );
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => {
      stderr += d;
    });
    try {
      // Its own log says when it is on the relay (the relay's socket count also moves with other tests' executors).
      await waitUntil(
        () => stderr.includes('relay link up'),
        'the non-dumpable executor to join the relay',
        20_000,
        50,
      ).catch((err: Error) => {
        throw new Error(`${err.message}; its stderr:\n${stderr}`);
      });
      const chain = await ancestorsOfAChild(stack, 'env-not-dumpable', child.pid!);
      const executor = chain.at(-1)!;
      expect(executor.pid).toBe(child.pid);
      expect(executor.error).toBe('EACCES');
      expect(executor.memError).toBe('EACCES');
      // Its child is an ordinary, dumpable process again (exec resets the flag).
      expect(chain[0]?.error).toBeUndefined();
    } finally {
      child.kill('SIGTERM');
      if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
    }
  });
  // Last: it revokes the executor key every executor of this stack uses.
  it('exits 1 with a clear message once its API key is revoked (no endless re-registration)', {
    timeout: 60_000,
  }, async () => {
    const executor = await stack.startExecutor('tether', 'env-key-revoked');
    const admin = { authorization: `Bearer ${stack.keys.admin}` };
    const listed = (await (await fetch(`${stack.registryUrl}/v1/environments`, { headers: admin })).json()) as {
      environments: Array<{ environment_id: string; owner_key_id: string | null }>;
    };
    const owner = listed.environments.find((e) => e.environment_id === 'env-key-revoked')?.owner_key_id;
    expect(owner).toBeTruthy();
    const revoked = await fetch(`${stack.registryUrl}/v1/keys/${owner}`, { method: 'DELETE', headers: admin });
    expect(revoked.status).toBe(200);
    const exit = await executor.exited;
    expect(exit, executor.stderr()).toEqual({ code: 1, signal: null });
    expect(executor.stderr()).toMatch(
      /executor: environment env-key-revoked lost its registration: the registry refused \/register with HTTP 40[13] .*; exiting/,
    );
    expect(executor.stderr()).not.toContain(stack.keys.executor);
  });
});
