/**
 * Black box, every part a real process: the `registry` and `relay` bins (built `dist/`) and an unmodified
 * `codex exec-server --remote`. Our harness-side code takes a bundle from `/connect`, dials the relay, runs the
 * Noise handshake and drives JSON-RPC; the relay only forwards.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RpcClient, RpcConnection } from '@tether/jsonrpc';
import { generateIdentity, parsePublicKey, publicKeyToJson } from '@tether/noise';
import { SecureStream, WebSocketFrameLink } from '@tether/secure-stream';
import { type PeerHandle, repoRoot, startPeer, waitUntil } from '@tether/test-kit';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { WebSocket } from 'ws';

const ENVIRONMENT = 'env-relay-bins';
const children: ChildProcess[] = [];
let dir: string;
let codex: PeerHandle | undefined;

/** Starts a built bin; resolves with the first stdout line (its URL or a token) and the process. */
async function run(app: 'registry' | 'relay', args: string[]): Promise<{ line: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [join(repoRoot(), 'apps', app, 'dist', 'main.js'), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TETHER_REGISTRY_LOG_LEVEL: 'warn', TETHER_RELAY_LOG_LEVEL: 'warn' },
  });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stderr?.on('data', (d) => (stderr += d));
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout?.on('data', (d) => {
      stdout += d;
      if (stdout.includes('\n')) resolve(stdout.split('\n')[0] as string);
    });
    child.once('exit', (code) => reject(new Error(`${app} ${args[0]} exited ${code}: ${stderr}`)));
  });
  return { line, child };
}

let registryUrl: string;
let relayUrl: string;
const tokens: Record<'executor' | 'harness', string> = { executor: '', harness: '' };

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'relay-bins-'));
  // One Ed25519 key: the registry signs relay URLs with it, the relay verifies with it (public half derived).
  const keyFile = join(dir, 'signing.pem');
  writeFileSync(keyFile, generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }), {
    mode: 0o600,
  });
  const database = `sqlite:${join(dir, 'registry.db')}`;
  for (const role of ['executor', 'harness'] as const) {
    const { line, child } = await run('registry', ['keys', 'create', '--database', database, '--role', role]);
    tokens[role] = line;
    if (child.exitCode === null) await once(child, 'exit');
  }
  relayUrl = (await run('relay', ['serve', '--listen', '127.0.0.1:0', '--registry-key-file', keyFile])).line;
  registryUrl = (
    await run('registry', [
      'serve',
      '--listen',
      '127.0.0.1:0',
      '--database',
      database,
      '--signing-key-file',
      keyFile,
      '--relay-url',
      relayUrl,
    ])
  ).line;
  codex = await startPeer({
    kind: 'codex',
    transport: 'remote',
    args: ['--remote', registryUrl, '--environment-id', ENVIRONMENT],
    env: { CODEX_API_KEY: tokens.executor },
  });
  // The relay's metrics show the executor's socket once codex has registered and dialled it.
  await waitUntil(
    async () =>
      (await (await fetch(`${relayUrl.replace('ws:', 'http:')}/metrics`)).text())
        .split('\n')
        .includes('relay_sockets{role="environment"} 1'),
    'the codex executor to join the relay',
    20_000,
    100,
  );
});

afterAll(async () => {
  await codex?.close();
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await once(child, 'exit');
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

it('a harness reaches the real codex executor through the relay bin with a bundle from the registry bin', async () => {
  const identity = generateIdentity();
  const response = await fetch(`${registryUrl}/cloud/environment/${ENVIRONMENT}/connect`, {
    method: 'POST',
    headers: { authorization: `Bearer ${tokens.harness}`, 'content-type': 'application/json' },
    body: JSON.stringify({ harness_public_key: publicKeyToJson(identity.publicKey) }),
  });
  expect(response.status).toBe(200);
  const bundle = (await response.json()) as {
    url: string;
    environment_id: string;
    executor_registration_id: string;
    executor_public_key: Record<string, unknown>;
    harness_key_authorization: string;
  };
  expect(bundle.url.startsWith(`${relayUrl}/ws/environment/${ENVIRONMENT}?role=harness`)).toBe(true);
  const ws = new WebSocket(bundle.url, { perMessageDeflate: false });
  await once(ws, 'open');
  const streamId = randomUUID();
  const secure = await SecureStream.initiate({
    link: new WebSocketFrameLink(ws, streamId),
    streamId,
    environmentId: bundle.environment_id,
    registrationId: bundle.executor_registration_id,
    staticKeys: identity,
    remoteStatic: parsePublicKey(bundle.executor_public_key),
    authorization: bundle.harness_key_authorization,
  });
  const closed: string[] = [];
  const client = new RpcClient(new RpcConnection(secure), {
    onNotification: (method, params) => {
      if (method === 'process/closed') closed.push((params as { processId: string }).processId);
    },
    callTimeoutMs: 15_000,
  });
  try {
    const init = await client.call<{ sessionId: string }>('initialize', { clientName: 'tether-relay-bins' });
    expect(init.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    client.notify('initialized', {});
    await client.call('process/start', {
      processId: 'p1',
      argv: ['printf', 'relayed'],
      cwd: 'file:///tmp',
      env: {},
      tty: false,
    });
    await expect.poll(() => closed, { timeout: 15_000 }).toEqual(['p1']);
    const read = await client.call<{ chunks: Array<{ chunk: string }>; exitCode: number }>('process/read', {
      processId: 'p1',
    });
    expect(read.chunks.map((c) => Buffer.from(c.chunk, 'base64').toString()).join('')).toBe('relayed');
    expect(read.exitCode).toBe(0);
  } finally {
    client.close();
  }
  // A URL the registry did not sign is refused at the upgrade.
  const forged = bundle.url.replace(/sig=[^&]+/, 'sig=forged');
  const refused = new WebSocket(forged);
  refused.on('error', () => {}); // terminate() below, before the (refused) connection was established
  const [, res] = (await once(refused, 'unexpected-response')) as [unknown, { statusCode: number }];
  expect(res.statusCode).toBe(401);
  refused.terminate();
});
