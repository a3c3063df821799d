import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { encodeFrame, peekHeader, resetFrame, streamIdOfKey } from '@tether/relay-frames';
import { type WebSocket, WebSocketServer } from 'ws';

/**
 * A minimal registry + relay for tests, enough for an unmodified `codex exec-server --remote`:
 * `/register`, `/connect`, `/validate` (rendezvous.md §1) and a 1:1 relay that forwards every WebSocket
 * message verbatim: harness sockets each carry the one stream their first frame names, environment
 * frames go to the harness that owns their `stream_id`, and a harness that leaves is announced to the
 * environment with a `Reset`. Every message is recorded so a test can check that nothing readable
 * crosses it. Not the product registry or relay: no persistence, no signatures, no limits.
 */
export interface Registration {
  environmentId: string;
  registrationId: string;
  /** The executor's `executor_public_key` JSON exactly as it was sent. */
  publicKey: Record<string, unknown>;
  securityProfile: string;
}

export interface RelayedMessage {
  direction: 'to-environment' | 'to-harness';
  data: Buffer;
  isBinary: boolean;
}

export interface Bundle {
  environment_id: string;
  url: string;
  security_profile: string;
  executor_registration_id: string;
  executor_public_key: Record<string, unknown>;
  harness_key_authorization: string;
}

export interface TestRendezvous extends AsyncDisposable {
  /** `http://127.0.0.1:PORT`, for `codex exec-server --remote`. */
  readonly registryUrl: string;
  /** The bearer token the registry accepts (give it to codex as CODEX_API_KEY). */
  readonly apiKey: string;
  /** Resolves once an executor has registered `environmentId`. */
  registration(environmentId: string, timeoutMs?: number): Promise<Registration>;
  /** Resolves once the environment's relay socket is connected. */
  environmentOnline(environmentId: string, timeoutMs?: number): Promise<void>;
  /** What `/connect` returns for this harness key (also reachable over HTTP). */
  connect(environmentId: string, harnessPublicKey: Record<string, unknown>): Bundle;
  /** Every `/validate` call with the answer given. */
  readonly validations: Array<{ environmentId: string; body: Record<string, unknown>; valid: boolean }>;
  /** Every message the relay forwarded. */
  readonly relayed: RelayedMessage[];
  /** Abruptly drops every harness socket of the environment (a network failure, as the harness sees it). */
  dropHarnessSockets(environmentId: string): void;
  close(): Promise<void>;
}

const PROFILE = 'noise_hybrid_ik_v1';
const MAX_MESSAGE = 256 * 1024;

export async function startTestRendezvous(): Promise<TestRendezvous> {
  const apiKey = `test-key-${randomBytes(8).toString('hex')}`;
  const registrations = new Map<string, Registration>();
  const registrationWaiters = new Map<string, Array<(r: Registration) => void>>();
  const environments = new Map<string, WebSocket>();
  const onlineWaiters = new Map<string, Array<() => void>>();
  /** Harness sockets by environment, then by the stream id their first frame claimed. */
  const harnesses = new Map<string, Map<string, WebSocket>>();
  const streamsOf = (environmentId: string) => {
    let streams = harnesses.get(environmentId);
    if (!streams) {
      streams = new Map();
      harnesses.set(environmentId, streams);
    }
    return streams;
  };
  const authorizations = new Map<string, { environmentId: string; registrationId: string; harnessKey: string }>();
  const validations: TestRendezvous['validations'] = [];
  const relayed: RelayedMessage[] = [];
  let registrationCount = 0;
  let base = '';

  const relayUrl = (environmentId: string, role: 'environment' | 'harness') =>
    `${base.replace('http://', 'ws://')}/relay/${encodeURIComponent(environmentId)}?role=${role}`;

  const bundle = (environmentId: string, harnessPublicKey: Record<string, unknown>): Bundle => {
    const registration = registrations.get(environmentId);
    if (!registration) throw new Error(`environment ${environmentId} has no registered executor`);
    const authorization = randomBytes(24).toString('base64url');
    authorizations.set(authorization, {
      environmentId,
      registrationId: registration.registrationId,
      harnessKey: JSON.stringify(harnessPublicKey),
    });
    return {
      environment_id: environmentId,
      url: relayUrl(environmentId, 'harness'),
      security_profile: PROFILE,
      executor_registration_id: registration.registrationId,
      executor_public_key: registration.publicKey,
      harness_key_authorization: authorization,
    };
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const reply = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    const match = /^\/cloud\/environment\/([A-Za-z0-9_-]+)\/(register|connect|validate)$/.exec(req.url ?? '');
    if (req.method !== 'POST' || !match) return reply(404, { error: { code: 'not_found', message: 'no such route' } });
    if (req.headers.authorization !== `Bearer ${apiKey}`) {
      return reply(401, { error: { code: 'unauthorized', message: 'bad bearer token' } });
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString() || '{}');
    } catch {
      return reply(400, { error: { code: 'bad_json', message: 'body is not JSON' } });
    }
    const [, environmentId = '', action] = match;
    if (action === 'register') {
      const registration: Registration = {
        environmentId,
        registrationId: `reg-${++registrationCount}`,
        publicKey: body.executor_public_key as Record<string, unknown>,
        securityProfile: String(body.security_profile),
      };
      registrations.set(environmentId, registration);
      for (const wake of registrationWaiters.get(environmentId)?.splice(0) ?? []) wake(registration);
      return reply(200, {
        environment_id: environmentId,
        url: relayUrl(environmentId, 'environment'),
        security_profile: PROFILE,
        executor_registration_id: registration.registrationId,
      });
    }
    if (action === 'connect') {
      try {
        return reply(200, bundle(environmentId, body.harness_public_key as Record<string, unknown>));
      } catch (err) {
        return reply(404, { error: { code: 'environment_not_found', message: (err as Error).message } });
      }
    }
    const token = String(body.harness_key_authorization ?? '');
    const issued = authorizations.get(token);
    const valid =
      issued !== undefined &&
      issued.environmentId === environmentId &&
      issued.registrationId === body.executor_registration_id &&
      issued.harnessKey === JSON.stringify(body.harness_public_key);
    if (valid) authorizations.delete(token); // single use
    validations.push({ environmentId, body, valid });
    return reply(200, { valid });
  };

  const http = createServer((req, res) => {
    handle(req, res).catch((err) => res.writeHead(500).end(String(err)));
  });
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE });
  http.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://relay');
    const match = /^\/relay\/([^/]+)$/.exec(url.pathname);
    const role = url.searchParams.get('role');
    socket.on('error', () => undefined);
    if (!match || (role !== 'environment' && role !== 'harness')) {
      socket.end('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    const environmentId = decodeURIComponent(match[1]!);
    wss.handleUpgrade(req, socket, head, (ws) => {
      if (role === 'environment') {
        const previous = environments.get(environmentId);
        environments.set(environmentId, ws);
        previous?.close(1001, 'replaced');
        for (const wake of onlineWaiters.get(environmentId)?.splice(0) ?? []) wake();
        ws.on('message', (data: Buffer, isBinary: boolean) => {
          relayed.push({ direction: 'to-harness', data, isBinary });
          const streamId = isBinary ? safePeek(data) : null;
          if (streamId !== null) streamsOf(environmentId).get(streamId)?.send(data, { binary: true });
        });
        ws.on('close', () => {
          if (environments.get(environmentId) !== ws) return;
          environments.delete(environmentId);
          for (const harness of streamsOf(environmentId).values()) harness.close(1001, 'environment gone');
        });
      } else {
        let streamId: string | null = null;
        ws.on('message', (data: Buffer, isBinary: boolean) => {
          relayed.push({ direction: 'to-environment', data, isBinary });
          if (streamId === null && isBinary) {
            streamId = safePeek(data);
            if (streamId !== null) streamsOf(environmentId).set(streamId, ws);
          }
          environments.get(environmentId)?.send(data, { binary: isBinary });
        });
        ws.on('close', () => {
          if (streamId === null) return;
          const streams = streamsOf(environmentId);
          if (streams.get(streamId) === ws) streams.delete(streamId);
          environments.get(environmentId)?.send(encodeFrame(resetFrame(streamId, 'harness_closed')), { binary: true });
        });
      }
    });
  });
  http.listen(0, '127.0.0.1');
  await once(http, 'listening');
  const { port } = http.address() as { port: number };
  base = `http://127.0.0.1:${port}`;

  const waitFor = <T>(
    ready: () => T | undefined,
    waiters: Map<string, Array<(v: T) => void>>,
    id: string,
    ms: number,
    what: string,
  ) =>
    new Promise<T>((resolve, reject) => {
      const now = ready();
      if (now !== undefined) return resolve(now);
      const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
      const list = waiters.get(id) ?? [];
      list.push((value) => {
        clearTimeout(timer);
        resolve(value);
      });
      waiters.set(id, list);
    });

  let closed: Promise<void> | null = null;
  const close = () => {
    closed ??= (async () => {
      for (const client of wss.clients) client.terminate();
      wss.close();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    })();
    return closed;
  };

  return {
    registryUrl: base,
    apiKey,
    registration: (environmentId, timeoutMs = 15_000) =>
      waitFor(
        () => registrations.get(environmentId),
        registrationWaiters,
        environmentId,
        timeoutMs,
        `${environmentId} to register`,
      ),
    environmentOnline: (environmentId, timeoutMs = 15_000) =>
      waitFor(
        () => (environments.has(environmentId) ? true : undefined),
        onlineWaiters as unknown as Map<string, Array<(v: true) => void>>,
        environmentId,
        timeoutMs,
        `${environmentId} to join the relay`,
      ).then(() => undefined),
    connect: bundle,
    dropHarnessSockets: (environmentId) => {
      for (const ws of streamsOf(environmentId).values()) ws.terminate();
    },
    validations,
    relayed,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** The frame's stream id by the relay's own header peek (null: it names none, so the relay would not route it). */
function safePeek(data: Buffer): string | null {
  const header = peekHeader(data);
  return header === null ? null : streamIdOfKey(header.streamKey);
}
