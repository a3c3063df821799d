/**
 * Security promises held through the real registry, relay, `executor --remote` and harness processes
 * (SECURITY.md points here): revocation ends a live session and `/connect` says why; a newer registration of
 * an environment keeps it (the older executor stops instead of taking it back); a child that escapes its
 * process group with setsid still dies with the executor; an authorization dies with the harness key that minted it;
 * the relay bounds the sockets of one signed harness URL and of the whole relay, and its revocation push endpoint
 * cannot be starved by senders that are not the registry.
 */
import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { connect as connectTcp, type Socket } from 'node:net';
import { join } from 'node:path';
import { Environment } from '@tether/client';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { encodeFrame, resumeFrame } from '@tether/relay-frames';
import { pidExists, repoRoot, runToEnd, type Stack, startStack, waitUntil } from '@tether/test-kit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';

const HARNESS = join(repoRoot(), 'apps/harness/bin/harness.js');

let stack: Stack;

beforeAll(async () => {
  stack = await startStack();
}, 60_000);

afterAll(async () => {
  await stack?.close();
});

/** The harness CLI against the stack: exit code, stdout and stderr. */
async function harness(environmentId: string, args: string[]) {
  const { code, stdout, stderr } = await runToEnd(process.execPath, [HARNESS, ...args], {
    env: {
      ...process.env,
      TETHER_HARNESS_REGISTRY: stack.registryUrl,
      TETHER_HARNESS_API_KEY: stack.keys.harness,
      TETHER_HARNESS_ENVIRONMENT_ID: environmentId,
      TETHER_HARNESS_CONNECT_TIMEOUT: '10',
    },
  });
  return { code, stdout, stderr };
}

function connect(environmentId: string, onStatus?: (status: string, detail: string) => void) {
  return Environment.connectRendezvous({
    registryUrl: stack.registryUrl,
    apiKey: stack.keys.harness,
    environmentId,
    clientName: 'tether-security-e2e',
    ...(onStatus ? { onStatus } : {}),
  });
}

/** The parent pid of `pid` from /proc, or null once it is gone. */
function parentOf(pid: number): number | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return Number(/^PPid:\s+(\d+)/m.exec(status)?.[1]);
  } catch {
    return null;
  }
}

describe('security through the real stack', () => {
  it('a newer registration keeps the environment: the older executor stops instead of taking it back', {
    timeout: 60_000,
  }, async () => {
    const environmentId = 'env-sec-epoch';
    const first = await stack.startExecutor('tether', environmentId, { env: { TETHER_SEC_MARK: 'first' } });
    const before = await harness(environmentId, ['exec', '--', 'sh', '-c', 'echo $TETHER_SEC_MARK']);
    expect(before, before.stderr).toMatchObject({ code: 0, stdout: 'first\n' });

    const second = await stack.startExecutor('tether', environmentId, { env: { TETHER_SEC_MARK: 'second' } });
    // The relay gave the environment to the newer registration and refuses the older one's URL from now
    // on; the older executor gives up rather than register again (which would take the environment back).
    const exit = await first.exited;
    expect(exit, first.stderr()).toEqual({ code: 1, signal: null });
    expect(first.stderr()).toMatch(/another executor registered this environment/);
    expect(second.exitStatus()).toBeUndefined();
    for (let i = 0; i < 3; i++) {
      const after = await harness(environmentId, ['exec', '--', 'sh', '-c', 'echo $TETHER_SEC_MARK']);
      expect(after, after.stderr).toMatchObject({ code: 0, stdout: 'second\n' });
    }
    await second.close();
  });

  it('a child that leaves its group with setsid dies with the executor (a subreaper adopted it)', {
    timeout: 60_000,
  }, async () => {
    const environmentId = 'env-sec-setsid';
    const executor = await stack.startExecutor('tether', environmentId);
    // The shell starts a sleeper in a session of its own and exits: the sleeper is an orphan at once.
    const started = await harness(environmentId, [
      'exec',
      '--',
      'sh',
      '-c',
      'setsid sleep 1000 >/dev/null 2>&1 & echo $!',
    ]);
    expect(started.code, started.stderr).toBe(0);
    const sleeper = Number(started.stdout.trim());
    expect(sleeper).toBeGreaterThan(1);
    try {
      // Without a subreaper the orphan would go to init (or to the nearest subreaper above us).
      await waitUntil(() => parentOf(sleeper) === executor.pid, 'the executor to adopt the setsid sleeper', 10_000);
      expect((await executor.close()).code).toBe(0);
      await waitUntil(() => !pidExists(sleeper), 'the setsid sleeper to die with the executor', 10_000);
    } finally {
      if (pidExists(sleeper)) process.kill(sleeper, 'SIGKILL');
    }
  });

  // Last: it revokes the executor key every executor of this stack shares.
  it('revoking the executor key ends its live sessions at once and /connect says the registration was revoked', {
    timeout: 60_000,
  }, async () => {
    const environmentId = 'env-sec-revoke';
    const executor = await stack.startExecutor('tether', environmentId);
    const statuses: string[] = [];
    const env = await connect(environmentId, (status, detail) => statuses.push(`${status}: ${detail}`));
    try {
      await env.spawn(['sleep', '1000']);
      const admin = { authorization: `Bearer ${stack.keys.admin}` };
      const listed = (await (await fetch(`${stack.registryUrl}/v1/environments`, { headers: admin })).json()) as {
        environments: Array<{ environment_id: string; owner_key_id: string | null }>;
      };
      const owner = listed.environments.find((e) => e.environment_id === environmentId)?.owner_key_id;
      expect(owner).toBeTruthy();
      const revoked = await fetch(`${stack.registryUrl}/v1/keys/${owner}`, { method: 'DELETE', headers: admin });
      expect(revoked.status).toBe(200);

      // The relay closes the registration's sockets when the registry's push arrives: the session drops.
      await waitUntil(() => statuses.some((s) => s.startsWith('disconnected')), 'the session to drop', 10_000);
      // Resuming asks the registry for a bundle, which says revoked: the session is given up at once, not
      // retried until the resume deadline (25 s).
      await waitUntil(
        () => statuses.some((s) => s.startsWith('lost') && /revoked/.test(s)),
        'the session to be given up as revoked',
        10_000,
      );
      await waitUntil(
        async () => !(await stack.relayMetrics()).match(/^relay_sockets\{role="environment"\} [1-9]/m),
        'the relay to hold no environment socket',
        10_000,
      );
      // The executor learns it when it registers again, and exits instead of retrying forever.
      expect((await executor.exited).code).toBe(1);
      // A new connect is refused by the registry itself, with the reason, not by a failed handshake later.
      const after = await harness(environmentId, ['exec', '--', 'true']);
      expect(after.code).not.toBe(0);
      expect(after.stderr).toMatch(/revoked/);
      expect(after.stderr).not.toContain(stack.keys.harness);
    } finally {
      await env.close().catch(() => undefined);
    }
  });
  it('a harness key revoked after /connect: the executor key’s /validate of its authorization says invalid', {
    timeout: 60_000,
  }, async () => {
    const environmentId = 'env-sec-harness-revoke';
    // Its own executor key: the test above revokes the stack's.
    const executorKey = await stack.createKey('executor', environmentId);
    const executor = await stack.startExecutor('tether', environmentId, {
      env: { CODEX_API_KEY: executorKey, TETHER_EXECUTOR_API_KEY: executorKey },
    });
    try {
      const harnessKey = publicKeyToJson(generateIdentity().publicKey);
      const post = async (path: string, key: string, body: object) =>
        fetch(`${stack.registryUrl}/cloud/environment/${environmentId}/${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const bundle = async (key: string) => {
        const res = await post('connect', key, { harness_public_key: harnessKey });
        expect(res.status).toBe(200);
        return (await res.json()) as { executor_registration_id: string; harness_key_authorization: string };
      };
      const validate = async (b: Awaited<ReturnType<typeof bundle>>) =>
        (await post('validate', executorKey, {
          executor_registration_id: b.executor_registration_id,
          harness_public_key: harnessKey,
          harness_key_authorization: b.harness_key_authorization,
        }).then((r) => r.json())) as { valid: boolean };
      const doomed = await stack.createKey('harness', '*');
      const doomedBundle = await bundle(doomed);
      const keptBundle = await bundle(stack.keys.harness);
      // `registry keys create` names a key key_ + the first 16 hex digits of its token's SHA-256.
      const id = `key_${createHash('sha256').update(doomed).digest('hex').slice(0, 16)}`;
      const revoked = await fetch(`${stack.registryUrl}/v1/keys/${id}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${stack.keys.admin}` },
      });
      expect(revoked.status).toBe(200);
      expect(await validate(doomedBundle)).toEqual({ valid: false });
      expect(await validate(keptBundle)).toEqual({ valid: true });
    } finally {
      await executor.close();
    }
  });
});

/** An executor of the shared stack with an executor key of its own (a test above revokes the stack's). */
async function ownExecutor(environmentId: string) {
  const executorKey = await stack.createKey('executor', environmentId);
  return stack.startExecutor('tether', environmentId, {
    env: { CODEX_API_KEY: executorKey, TETHER_EXECUTOR_API_KEY: executorKey },
  });
}

/** A harness bundle's signed relay URL from the registry's `/connect` (a fresh grant each time). */
async function bundleUrl(on: Stack, environmentId: string): Promise<string> {
  const res = await fetch(`${on.registryUrl}/cloud/environment/${environmentId}/connect`, {
    method: 'POST',
    headers: { authorization: `Bearer ${on.keys.harness}`, 'content-type': 'application/json' },
    body: JSON.stringify({ harness_public_key: publicKeyToJson(generateIdentity().publicKey) }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { url: string }).url;
}

const opened: Array<WebSocket | Socket> = [];
afterEach(() => {
  for (const socket of opened.splice(0)) {
    if (socket instanceof WebSocket) socket.terminate();
    else socket.destroy();
  }
});

/** Opens a WebSocket on `url`: the socket once open, or the HTTP status and body it was refused with. */
function openRelaySocket(url: string): Promise<{ ws: WebSocket } | { status: number; body: string }> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  opened.push(ws);
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ ws }));
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.once('error', reject);
  });
}

async function mustOpen(url: string): Promise<WebSocket> {
  const result = await openRelaySocket(url);
  if (!('ws' in result)) throw new Error(`refused ${result.status} ${result.body.trim()}`);
  return result.ws;
}

/** The value of one series in Prometheus text (0 when absent). */
function series(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? 0);
}

/**
 * A revocation push as a hostile sender makes it, from `localAddress` (127.0.0.2… are other sources on loopback):
 * a signature header of the right shape (which will not verify) and a 1 MiB body announced, of which only a few
 * bytes are sent. Resolves once the relay has said anything: `100 Continue` (it is reading) or its answer.
 */
async function slowPush(relayUrl: string, localAddress: string) {
  const { hostname, port } = new URL(relayUrl);
  const socket = connectTcp({ host: hostname, port: Number(port), localAddress });
  opened.push(socket);
  let received = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    received += chunk;
  });
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  await once(socket, 'connect');
  socket.write(
    `POST /v1/revocations HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n` +
      `x-tether-signature: ${'A'.repeat(86)}\r\nContent-Length: ${1024 * 1024}\r\nExpect: 100-continue\r\n\r\n`,
  );
  await waitUntil(() => received.length > 0, `an answer to the push from ${localAddress}`, 10_000);
  // Node writes `100 Continue` as it hands the request over, and a refusal in that same turn: one more round trip
  // to the relay and a refusal would be here too.
  await fetch(`${relayUrl.replace('ws:', 'http:')}/livez`).then((r) => r.text());
  socket.write('{"revoked_registrations":[');
  return { received: () => received, closed };
}

/** What a push the relay is reading has received: `100 Continue` and nothing more. */
const READING = 'HTTP/1.1 100 Continue\r\n\r\n';

describe('relay bounds through the real registry and relay', () => {
  it('one signed harness URL holds at most 4 sockets (2 unclaimed): more are refused 429, a fresh /connect still works', {
    timeout: 60_000,
  }, async () => {
    const environmentId = 'env-sec-url-bound';
    const executor = await ownExecutor(environmentId);
    try {
      const url = await bundleUrl(stack, environmentId);
      const before = await stack.relayMetrics();
      // Two sockets claim streams (the executor waits for their handshakes), two more stay unclaimed.
      const claimed = [await mustOpen(url), await mustOpen(url)];
      for (const ws of claimed) {
        ws.send(encodeFrame(resumeFrame(randomUUID(), 0)), { binary: true });
      }
      await waitUntil(
        async () => series(await stack.relayMetrics(), 'relay_streams') >= series(before, 'relay_streams') + 2,
        'both streams to be claimed',
      );
      await mustOpen(url);
      await mustOpen(url);
      expect(await openRelaySocket(url)).toEqual({ status: 429, body: 'url_limit\n' });
      // The per-IP allowance (1 024) is not what stopped it, and the next bundle is a grant of its own: a harness
      // from the same address runs a command.
      const run = await harness(environmentId, ['exec', '--', 'echo', 'still reachable']);
      expect(run, run.stderr).toMatchObject({ code: 0, stdout: 'still reachable\n' });
      const after = await stack.relayMetrics();
      expect(series(after, 'relay_upgrades_refused_total{reason="url_limit"}')).toBe(
        series(before, 'relay_upgrades_refused_total{reason="url_limit"}') + 1,
      );
      expect(series(after, 'relay_upgrades_refused_total{reason="ip_limit"}')).toBe(0);
    } finally {
      await executor.close();
    }
  });

  it('a second URL of the same registration gets its own unclaimed allowance: 2 unclaimed, then 429', {
    timeout: 60_000,
  }, async () => {
    const environmentId = 'env-sec-url-unclaimed';
    const executor = await ownExecutor(environmentId);
    try {
      const [first, second] = [await bundleUrl(stack, environmentId), await bundleUrl(stack, environmentId)];
      expect(first).not.toBe(second);
      await mustOpen(first);
      await mustOpen(first);
      expect(await openRelaySocket(first)).toEqual({ status: 429, body: 'url_unclaimed_limit\n' });
      await mustOpen(second);
    } finally {
      await executor.close();
    }
  });

  it('the relay refuses sockets beyond --max-connections with 503 connection_limit, counted, and takes them again once some close', {
    timeout: 60_000,
  }, async () => {
    const capped = await startStack({ relayArgs: ['--max-connections', '3'] });
    try {
      const environmentId = 'env-sec-cap';
      await capped.startExecutor('tether', environmentId);
      // The executor's socket and two harness sockets (each of its own bundle) fill the relay.
      const held = [
        await mustOpen(await bundleUrl(capped, environmentId)),
        await mustOpen(await bundleUrl(capped, environmentId)),
      ];
      expect(await openRelaySocket(await bundleUrl(capped, environmentId))).toEqual({
        status: 503,
        body: 'connection_limit\n',
      });
      expect(series(await capped.relayMetrics(), 'relay_upgrades_refused_total{reason="connection_limit"}')).toBe(1);
      for (const ws of held) ws.close(1000);
      await Promise.all(held.map((ws) => once(ws, 'close')));
      const cli = spawn(process.execPath, [HARNESS, 'exec', '--', 'echo', 'room again'], {
        env: {
          ...process.env,
          TETHER_HARNESS_REGISTRY: capped.registryUrl,
          TETHER_HARNESS_API_KEY: capped.keys.harness,
          TETHER_HARNESS_ENVIRONMENT_ID: environmentId,
          TETHER_HARNESS_CONNECT_TIMEOUT: '10',
        },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let stdout = '';
      cli.stdout.on('data', (d: Buffer) => {
        stdout += d;
      });
      const [code] = (await once(cli, 'exit')) as [number | null];
      expect({ code, stdout }).toEqual({ code: 0, stdout: 'room again\n' });
    } finally {
      await capped.close();
    }
  });
});

describe('revocation push endpoint through the real relay (and registry)', () => {
  it('one source holds one slot, a slow body is cut (408), and another source still gets a slot', {
    timeout: 60_000,
  }, async () => {
    // The shared stack's relay does not know its registry's address: pushes are taken from any address.
    const hog = await slowPush(stack.relayUrl, '127.0.0.2');
    expect(hog.received()).toBe(READING);
    for (let i = 0; i < 3; i++) {
      const more = await slowPush(stack.relayUrl, '127.0.0.2');
      expect(more.received()).toMatch(/HTTP\/1\.1 503 [\s\S]*"source_busy"/);
    }
    // Another source is read (and its signature, checked over the body, refused).
    const other = await slowPush(stack.relayUrl, '127.0.0.3');
    expect(other.received()).toBe(READING);
    await waitUntil(() => /HTTP\/1\.1 408 [\s\S]*"timeout"/.test(hog.received()), 'the slow push to be cut', 20_000);
    await hog.closed;
    const metrics = await stack.relayMetrics();
    expect(series(metrics, 'relay_revocation_pushes_total{result="timeout"}')).toBeGreaterThanOrEqual(1);
    expect(series(metrics, 'relay_revocation_pushes_total{result="source_busy"}')).toBe(3);
  });

  it('pushes from addresses other than the registry’s are refused unread, and the registry’s revocation arrives at once', {
    timeout: 60_000,
  }, async () => {
    // The relay knows its registry by host name (resolved to loopback); nothing connects to that port: the key
    // comes from the file, and without a token there is no heartbeat, so the push is the only way a revocation
    // reaches this relay.
    const known = await startStack({ relayArgs: ['--registry', 'http://localhost:1'] });
    const environmentId = 'env-sec-push';
    const statuses: string[] = [];
    let env: Environment | undefined;
    try {
      const executor = await known.startExecutor('tether', environmentId);
      env = await Environment.connectRendezvous({
        registryUrl: known.registryUrl,
        apiKey: known.keys.harness,
        environmentId,
        clientName: 'tether-security-e2e',
        onStatus: (status, detail) => statuses.push(`${status}: ${detail}`),
      });
      await env.spawn(['sleep', '1000']);
      // Four senders take what they can before the revocation: every one is refused before its body is read.
      const hogs = await Promise.all(
        ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5'].map((a) => slowPush(known.relayUrl, a)),
      );
      for (const hog of hogs) expect(hog.received()).toMatch(/HTTP\/1\.1 403 [\s\S]*"forbidden_source"/);
      const admin = { authorization: `Bearer ${known.keys.admin}` };
      const listed = (await (await fetch(`${known.registryUrl}/v1/environments`, { headers: admin })).json()) as {
        environments: Array<{ environment_id: string; owner_key_id: string | null }>;
      };
      const owner = listed.environments.find((e) => e.environment_id === environmentId)?.owner_key_id;
      const revoked = await fetch(`${known.registryUrl}/v1/keys/${owner}`, { method: 'DELETE', headers: admin });
      expect(revoked.status).toBe(200);
      await waitUntil(() => statuses.some((s) => s.startsWith('disconnected')), 'the session to drop', 10_000);
      const metrics = await known.relayMetrics();
      expect(series(metrics, 'relay_revocations_total{source="push"}')).toBe(1);
      expect(series(metrics, 'relay_revocation_pushes_total{result="forbidden_source"}')).toBe(4);
      expect((await executor.exited).code).toBe(1);
    } finally {
      await env?.close().catch(() => undefined);
      await known.close();
    }
  });
});
