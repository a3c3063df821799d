/**
 * A harness's `/connect` request id follows it to the executor's validation, through the real registry,
 * relay and `executor --remote` processes: the SDK sends the id it was given, the registry echoes it and logs
 * it on the connect, keeps it with the authorization, logs it again on the `/validate` that consumes it and
 * tells the executor, which logs it on its "harness validated" line.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Environment } from '@tether/client';
import { repoRoot, waitUntil } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ENVIRONMENT = 'env-request-id';

interface Running {
  child: ChildProcess;
  firstLine: Promise<string>;
  stderr: () => string;
}

/** A built app as a process with a clean TETHER_ environment; resolves its first stdout line. */
function start(children: ChildProcess[], app: string, args: string[], env: Record<string, string> = {}): Running {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('TETHER_')));
  const child = spawn(process.execPath, [join(repoRoot(), 'apps', app, 'bin', `${app}.js`), ...args], {
    env: { ...clean, [`TETHER_${app.toUpperCase()}_LOG_FORMAT`]: 'json', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d;
  });
  const firstLine = new Promise<string>((resolve, reject) => {
    child.stdout?.on('data', (d: Buffer) => {
      stdout += d;
      if (stdout.includes('\n')) resolve(stdout.split('\n')[0] as string);
    });
    child.once('exit', (code) => reject(new Error(`${app} exited ${code}: ${stderr}`)));
  });
  firstLine.catch(() => {});
  return { child, firstLine, stderr: () => stderr };
}

/** The JSON log lines of a process whose `msg` is this. */
function lines(stderr: string, msg: string): Array<Record<string, unknown>> {
  return stderr
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => line.msg === msg);
}

describe('request ids from /connect to the executor', () => {
  const children: ChildProcess[] = [];
  let dir: string;
  let registryUrl: string;
  let registry: Running;
  let executor: Running;
  const keys: Record<string, string> = {};

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'request-id-e2e-'));
    const keyFile = join(dir, 'signing.pem');
    writeFileSync(keyFile, generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }), {
      mode: 0o600,
    });
    const database = `sqlite:${join(dir, 'registry.db')}`;
    for (const role of ['executor', 'harness']) {
      const create = start(children, 'registry', [
        'keys',
        'create',
        '--database',
        database,
        '--role',
        role,
        '--environments',
        '*',
      ]);
      keys[role] = await create.firstLine;
      if (create.child.exitCode === null) await once(create.child, 'exit');
    }
    const relay = start(children, 'relay', ['serve', '--listen', '127.0.0.1:0', '--registry-key-file', keyFile]);
    const relayUrl = await relay.firstLine;
    registry = start(children, 'registry', ['serve', '--listen', '127.0.0.1:0', '--relay-url', relayUrl], {
      TETHER_REGISTRY_DATABASE: database,
      TETHER_REGISTRY_SIGNING_KEY_FILE: keyFile,
    });
    registryUrl = await registry.firstLine;
    executor = start(children, 'executor', ['--registry', registryUrl, '--environment-id', ENVIRONMENT], {
      TETHER_EXECUTOR_API_KEY: keys.executor as string,
    });
    await waitUntil(
      async () => lines(executor.stderr(), 'relay link up').length > 0,
      'the executor on the relay',
      20_000,
      50,
    );
  });

  afterAll(async () => {
    for (const child of children.splice(0).reverse()) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the id given to the SDK is on the registry’s connect and validate lines and the executor’s', async () => {
    const requestId = `e2e-${process.pid}-connect`;
    const env = await Environment.connectRendezvous({
      registryUrl,
      apiKey: keys.harness as string,
      environmentId: ENVIRONMENT,
      clientName: 'request-id-e2e',
      requestId,
    });
    try {
      const { exitCode } = await env.exec(['/bin/sh', '-c', 'exit 3']);
      expect(exitCode).toBe(3);
    } finally {
      await env.close();
    }
    expect(lines(registry.stderr(), 'harness bundle issued')).toEqual([
      expect.objectContaining({ component: 'registry', reqId: requestId, environmentId: ENVIRONMENT }),
    ]);
    expect(lines(registry.stderr(), 'harness key validation')).toEqual([
      expect.objectContaining({ component: 'registry', valid: true, connectRequestId: requestId }),
    ]);
    expect(lines(executor.stderr(), 'harness validated')).toEqual([
      expect.objectContaining({ component: 'executor', connectRequestId: requestId }),
    ]);
  });

  it('the registry echoes a well-formed x-request-id and replaces any other with its own', async () => {
    const connect = (id: string) =>
      fetch(`${registryUrl}/cloud/environment/${ENVIRONMENT}/connect`, {
        method: 'POST',
        headers: { authorization: 'Bearer not-a-key', 'content-type': 'application/json', 'x-request-id': id },
        body: '{}',
      });
    const good = await connect('abc-123.x:y_z');
    expect(good.status).toBe(401);
    expect(good.headers.get('x-request-id')).toBe('abc-123.x:y_z');
    for (const bad of ['has space', 'x'.repeat(129), 'semi;colon']) {
      const answer = await connect(bad);
      expect(answer.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    }
  });
});
