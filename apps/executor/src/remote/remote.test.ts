import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { RpcClient, RpcConnection } from '@tether/jsonrpc';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import {
  dataFrame,
  decodeFrame,
  encodeFrame,
  type Frame,
  handshakeFrame,
  resetFrame,
  resumeFrame,
} from '@tether/relay-frames';
import { type FrameLink, type FrameLinkHandlers, SecureStream, SecureStreamError } from '@tether/secure-stream';
import { createLogger, Telemetry } from '@tether/telemetry';
import { afterEach, describe, expect, it } from 'vitest';
import { type WebSocket, WebSocketServer } from 'ws';
import { silentLogger } from '../logger.js';
import { ExecutorMetrics } from '../metrics.js';
import { keyPrincipal, type Principal, UNATTRIBUTED_PRINCIPAL } from '../principal.js';
import { ExecServer } from '../server.js';
import { BACKPRESSURE_RESET, HANDSHAKE_BUDGET_RESET, LIMIT_RESET, UNKNOWN_STREAM_RESET } from './multiplexer.js';
import { RegistryClient, RegistryError } from './registry-client.js';
import { RemoteLink, type RemoteLinkOptions } from './remote-link.js';

const ENVIRONMENT = 'env-remote-test';
const API_KEY = 'test-api-key-secret';

interface FakeRendezvous {
  url: string;
  registers: Array<Record<string, unknown>>;
  validations: Array<Record<string, unknown>>;
  /** Answer for `/validate`. */
  valid: boolean;
  /** The key (id, role) a yes to `/validate` names, by authorization (as a Tether registry's headers); none by default. */
  keys: Record<string, [string, string]>;
  /** Milliseconds each `/validate` takes. */
  validateDelayMs: number;
  /** Most `/validate` calls seen in flight at once. */
  peakValidations: number;
  /** When set, relay upgrades are refused with this status. */
  refuseUpgrades: number | null;
  /** When set, `/register` answers this status (a revoked key: 401). */
  refuseRegisters: number | null;
  /** When set, relay upgrades are cut before any answer: a node whose socket cannot be opened. */
  dropUpgrades: boolean;
  /** Upgrades cut so far. */
  droppedUpgrades: number;
  /** When set, relay upgrades are never answered: a node gone silent. */
  hangUpgrades: boolean;
  /** Upgrade requests seen. */
  upgrades: number;
  /** `upgrades` when each registration arrived. */
  upgradesAtRegister: number[];
  /** Environment sockets (server side), in connection order. */
  sockets: WebSocket[];
  nextSocket(): Promise<WebSocket>;
  close(): Promise<void>;
}

/** A registry (register/validate) and a relay endpoint where the test itself plays the harness side. */
async function fakeRendezvous(): Promise<FakeRendezvous> {
  const wss = new WebSocketServer({ noServer: true });
  const waiters: Array<(ws: WebSocket) => void> = [];
  const hung: Socket[] = [];
  let inFlight = 0;
  const state: FakeRendezvous = {
    url: '',
    registers: [],
    validations: [],
    valid: true,
    keys: {},
    validateDelayMs: 0,
    peakValidations: 0,
    refuseUpgrades: null,
    refuseRegisters: null,
    dropUpgrades: false,
    droppedUpgrades: 0,
    hangUpgrades: false,
    upgrades: 0,
    upgradesAtRegister: [],
    sockets: [],
    nextSocket: () => new Promise((resolve) => waiters.push(resolve)),
    close: async () => {
      for (const socket of hung) socket.destroy();
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
  const http: Server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString() || '{}') as Record<string, unknown>;
    const reply = (status: number, payload: unknown) =>
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(payload));
    if (req.headers.authorization !== `Bearer ${API_KEY}`) return reply(401, { error: { code: 'unauthorized' } });
    if (req.url === `/cloud/environment/${ENVIRONMENT}/register`) {
      if (state.refuseRegisters !== null) {
        return reply(state.refuseRegisters, { error: { code: 'unauthorized', message: 'API key revoked' } });
      }
      state.registers.push(body);
      state.upgradesAtRegister.push(state.upgrades);
      return reply(200, {
        environment_id: ENVIRONMENT,
        url: `${state.url.replace('http:', 'ws:')}/relay?role=environment&registration=${state.registers.length}`,
        security_profile: 'noise_hybrid_ik_v1',
        executor_registration_id: `reg-${state.registers.length}`,
      });
    }
    if (req.url === `/cloud/environment/${ENVIRONMENT}/validate`) {
      state.validations.push(body);
      inFlight++;
      state.peakValidations = Math.max(state.peakValidations, inFlight);
      if (state.validateDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, state.validateDelayMs));
      inFlight--;
      const key = state.valid ? state.keys[body.harness_key_authorization as string] : undefined;
      if (key) res.setHeader('x-tether-harness-key-id', key[0]).setHeader('x-tether-harness-key-role', key[1]);
      return reply(200, { valid: state.valid });
    }
    return reply(404, { error: { code: 'not_found' } });
  });
  http.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    socket.on('error', () => undefined); // the executor may reset a refused upgrade
    state.upgrades++;
    if (state.hangUpgrades) {
      hung.push(socket); // the executor's dial timeout ends it; close() ends what is left
      return;
    }
    if (state.dropUpgrades) {
      state.droppedUpgrades++;
      socket.destroy();
      return;
    }
    if (state.refuseUpgrades !== null) {
      socket.end(`HTTP/1.1 ${state.refuseUpgrades} Refused\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      ws.on('error', () => undefined); // resets are part of these tests
      state.sockets.push(ws);
      for (const wake of waiters.splice(0)) wake(ws);
    });
  });
  http.listen(0, '127.0.0.1');
  await once(http, 'listening');
  state.url = `http://127.0.0.1:${(http.address() as { port: number }).port}`;
  return state;
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup(options: Partial<RemoteLinkOptions> = {}) {
  const rendezvous = await fakeRendezvous();
  cleanups.push(() => rendezvous.close());
  const server = new ExecServer({ reaper: false });
  cleanups.push(() => server.close());
  const firstSocket = rendezvous.nextSocket();
  const link = new RemoteLink({
    registryUrl: rendezvous.url,
    environmentId: ENVIRONMENT,
    apiKey: API_KEY,
    logger: silentLogger(),
    minBackoffMs: 10,
    maxBackoffMs: 40,
    onStream: (stream) => server.serve(new RpcConnection(stream)),
    ...options,
  });
  cleanups.push(() => link.close());
  await link.start();
  const socket = await firstSocket;
  await link.whenConnected();
  return { rendezvous, server, link, socket };
}

/**
 * The harness side of one stream over the (server-side) environment socket, which every stream of a test
 * shares: closing the link stops listening, it never closes the socket (a harness's own socket would go).
 */
class SharedSocketLink implements FrameLink {
  private listener: ((data: Buffer) => void) | null = null;
  constructor(
    private readonly socket: WebSocket,
    private readonly streamId: string,
  ) {}
  get bufferedAmount(): number {
    return this.socket.bufferedAmount;
  }
  start(handlers: FrameLinkHandlers): void {
    this.listener = (data: Buffer) => {
      const frame = decodeFrame(data);
      if (frame.streamId === this.streamId) handlers.onFrame(frame);
    };
    this.socket.on('message', this.listener);
    this.socket.once('close', () => handlers.onClose('socket closed'));
  }
  send(frame: Frame): boolean {
    this.socket.send(encodeFrame(frame));
    return true;
  }
  pause(): void {}
  resume(): void {}
  close(): void {
    if (this.listener) this.socket.off('message', this.listener);
    this.listener = null;
  }
}

/** The harness side of one stream, played over the (server-side) environment socket. */
async function openStream(
  socket: WebSocket,
  link: RemoteLink,
  authorization = 'authorization-1',
  identity = generateIdentity(),
) {
  const stream = await openSecureStream(socket, link, authorization, identity);
  const client = new RpcClient(new RpcConnection(stream), { callTimeoutMs: 10_000 });
  cleanups.push(async () => client.close());
  return { client, identity, streamId: stream.streamId };
}

/** The same stream without a client on it (the test reads what the executor sends). */
async function openSecureStream(
  socket: WebSocket,
  link: RemoteLink,
  authorization = 'authorization-1',
  identity = generateIdentity(),
) {
  const streamId = randomUUID();
  const stream = await SecureStream.initiate({
    link: new SharedSocketLink(socket, streamId),
    streamId,
    environmentId: ENVIRONMENT,
    registrationId: link.registrationId!,
    staticKeys: identity,
    remoteStatic: link.identity.publicKey,
    authorization,
  });
  cleanups.push(async () => stream.close());
  return stream;
}

function framesOn(socket: WebSocket): Frame[] {
  const frames: Frame[] = [];
  socket.on('message', (data: Buffer) => frames.push(decodeFrame(data)));
  return frames;
}

async function waitFor(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('remote mode: registration and streams', () => {
  it('registers its key, and serves a stream the registry validates', async () => {
    const { rendezvous, link, socket } = await setup();
    expect(rendezvous.registers).toEqual([
      { security_profile: 'noise_hybrid_ik_v1', executor_public_key: publicKeyToJson(link.identity.publicKey) },
    ]);
    const { client, identity } = await openStream(socket, link);
    expect(rendezvous.validations).toEqual([
      {
        executor_registration_id: 'reg-1',
        harness_public_key: publicKeyToJson(identity.publicKey),
        harness_key_authorization: 'authorization-1',
      },
    ]);
    const init = await client.call<{ sessionId: string }>('initialize', { clientName: 'remote-test' });
    expect(init.sessionId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('serves many streams on one socket, each with its own session', async () => {
    const { link, socket } = await setup();
    const streams = await Promise.all([1, 2, 3].map((n) => openStream(socket, link, `authorization-${n}`)));
    const sessions = await Promise.all(
      streams.map(({ client }) => client.call<{ sessionId: string }>('initialize', { clientName: 'mux' })),
    );
    expect(new Set(sessions.map((s) => s.sessionId)).size).toBe(3);
  });

  it('resets a stream the registry refuses, without answering the handshake', async () => {
    const { rendezvous, link, socket } = await setup();
    rendezvous.valid = false;
    await expect(openStream(socket, link)).rejects.toMatchObject({ name: SecureStreamError.NAME, code: 'reset' });
    expect(rendezvous.validations).toHaveLength(1);
  });

  it('resets streams beyond its stream limit and keeps serving the others', async () => {
    const { link, socket } = await setup({ limits: { maxStreams: 1 } });
    const first = await openStream(socket, link);
    const frames = framesOn(socket);
    const refused = randomUUID();
    socket.send(encodeFrame(resumeFrame(refused)));
    socket.send(encodeFrame(handshakeFrame(refused, new Uint8Array(64).fill(1))));
    await waitFor(() => frames.some((f) => f.streamId === refused), 'the refusal');
    expect(frames.find((f) => f.streamId === refused)).toMatchObject({ kind: 'reset', reason: LIMIT_RESET });
    await expect(first.client.call('initialize', { clientName: 'still-served' })).resolves.toBeDefined();
  });

  it('queues handshakes beyond its validation limit instead of refusing them', async () => {
    const { rendezvous, link, socket } = await setup({ limits: { maxPendingValidations: 2 } });
    rendezvous.validateDelayMs = 50;
    const streams = await Promise.all([1, 2, 3, 4, 5, 6].map((n) => openStream(socket, link, `authorization-${n}`)));
    const sessions = await Promise.all(
      streams.map(({ client }) => client.call<{ sessionId: string }>('initialize', { clientName: 'burst' })),
    );
    expect(new Set(sessions.map((s) => s.sessionId)).size).toBe(6);
    expect(rendezvous.validations).toHaveLength(6);
    expect(rendezvous.peakValidations).toBe(2);
  });

  it('failed handshakes spend a budget that refills: while it is spent new streams are reset unread, the socket stays', async () => {
    let now = 0;
    const { link, socket, rendezvous } = await setup({
      limits: { failedHandshakeBurst: 3, failedHandshakeRefillMs: 1_000 },
      clock: () => now,
    });
    const healthy = await openStream(socket, link, 'before-the-garbage');
    const frames = framesOn(socket);
    const garbage = async (expectedReason: string) => {
      const streamId = randomUUID();
      socket.send(encodeFrame(handshakeFrame(streamId, new Uint8Array(40).fill(7))));
      await waitFor(() => frames.some((f) => f.streamId === streamId), 'the reset of a garbage handshake');
      expect(frames.find((f) => f.streamId === streamId)).toMatchObject({ kind: 'reset', reason: expectedReason });
    };
    for (let i = 0; i < 3; i++) await garbage('noise_relay_protocol_error');
    // Spent: garbage and a good harness alike are reset before any decryption; no /validate is asked.
    await garbage(HANDSHAKE_BUDGET_RESET);
    await expect(openStream(socket, link, 'during-the-spell')).rejects.toMatchObject({ code: 'reset' });
    expect(rendezvous.validations).toHaveLength(1);
    expect(link.streams).toBe(1);
    // The socket and the stream opened before are untouched.
    await expect(healthy.client.call('initialize', { clientName: 'still-served' })).resolves.toBeDefined();
    expect(rendezvous.sockets).toHaveLength(1);
    expect(socket.readyState).toBe(socket.OPEN);
    // One refill period later a handshake goes through again.
    now += 1_000;
    const after = await openStream(socket, link, 'after-the-spell');
    await expect(after.client.call('initialize', { clientName: 'after' })).resolves.toBeDefined();
  });

  it('rate-limits /validate per harness key: a key over its budget is refused without asking the registry', async () => {
    let now = 0;
    const { link, socket, rendezvous } = await setup({
      limits: { validationBurstPerKey: 2, validationRefillMs: 1_000 },
      clock: () => now,
    });
    const busy = generateIdentity();
    await openStream(socket, link, 'busy-1', busy);
    await openStream(socket, link, 'busy-2', busy);
    await expect(openStream(socket, link, 'busy-3', busy)).rejects.toMatchObject({ code: 'reset' });
    expect(rendezvous.validations.map((v) => v.harness_key_authorization)).toEqual(['busy-1', 'busy-2']);
    // Another harness key has its own budget; a refused handshake does not spend the socket's.
    await openStream(socket, link, 'other-1');
    expect(rendezvous.validations).toHaveLength(3);
    now += 1_000;
    await openStream(socket, link, 'busy-4', busy);
    expect(rendezvous.validations.map((v) => v.harness_key_authorization)).toEqual([
      'busy-1',
      'busy-2',
      'other-1',
      'busy-4',
    ]);
  });

  it('holds relay-stream messages to max_message_bytes: a larger one gets a clear error, the stream goes on', async () => {
    const limit = 256 * 1024;
    const { link, socket } = await setup({ maxMessageBytes: limit });
    const stream = await openSecureStream(socket, link);
    const received: Array<{ id?: unknown; result?: unknown; error?: { code: number; message: string } }> = [];
    stream.start({
      onMessage: (data) => received.push(JSON.parse(data.toString())),
      onClose: () => undefined,
      onDrain: () => undefined,
    });
    const initialize = (id: number, clientName: string) =>
      stream.send(JSON.stringify({ id, method: 'initialize', params: { clientName } }));
    initialize(1, 'x'.repeat(limit + 1));
    await waitFor(() => received.length >= 1, 'the refusal');
    expect(received[0]).toEqual({
      id: -1,
      error: {
        code: -32600,
        message: expect.stringMatching(/message of 262\d{3} bytes exceeds the limit of 262144 bytes$/),
      },
    });
    initialize(2, 'within-the-limit');
    await waitFor(() => received.length >= 2, 'the answer');
    expect(received[1]).toMatchObject({ id: 2, result: { sessionId: expect.any(String) } });
    expect(stream.status).toBe('open');
  });

  it('stops a relay-stream message while it arrives once its bytes are past max_message_bytes (no 64 MiB buffered)', async () => {
    const limit = 256 * 1024;
    const { link, socket } = await setup({ maxMessageBytes: limit });
    const stream = await openSecureStream(socket, link);
    const received: Array<{ id?: unknown; error?: { code: number; message: string } }> = [];
    let closed = '';
    stream.start({
      onMessage: (data) => received.push(JSON.parse(data.toString())),
      onClose: (reason) => {
        closed = reason;
      },
      onDrain: () => undefined,
    });
    // 8 MiB declared: far past the bound (limit + framing + one record + the reorder window ≈ 1.4 MiB).
    stream.send(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'x'.repeat(8 * 1024 * 1024) } }));
    await waitFor(() => closed !== '', 'the stream to be reset');
    expect(received).toEqual([
      {
        id: -1,
        error: {
          code: -32600,
          message: expect.stringMatching(/message of more than 262144 bytes \(still arriving\) exceeds the limit$/),
        },
      },
    ]);
    expect(link.streams).toBe(0);
  });

  it('ignores text messages, and answers Data for a stream it does not know with one Reset', async () => {
    const { link, socket } = await setup();
    const frames = framesOn(socket);
    socket.send('{"method":"initialize"}');
    socket.send(
      encodeFrame({
        kind: 'data',
        version: 1,
        streamId: 'nobody',
        ack: 0,
        ackBits: 0,
        seq: 0,
        segmentIndex: 0,
        segmentCount: 1,
        payload: new Uint8Array([1]),
      } as Frame),
    );
    const { client } = await openStream(socket, link);
    await expect(client.call('initialize', { clientName: 'after-noise' })).resolves.toBeDefined();
    expect(frames.filter((f) => f.streamId === 'nobody')).toEqual([
      expect.objectContaining({ kind: 'reset', reason: UNKNOWN_STREAM_RESET }),
    ]);
  });

  it('counts every frame it drops by reason, and logs Data for an unknown stream once per stream id', async () => {
    const telemetry = await Telemetry.create({ serviceName: 'executor-test', prometheus: true });
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger({
      name: 'executor',
      level: 'debug',
      destination: { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) },
    });
    const { link, socket } = await setup({ metrics: new ExecutorMetrics(telemetry), logger });
    const frames = framesOn(socket);
    socket.send('text');
    socket.send(Buffer.from([0xff, 0xff, 0xff]));
    for (let seq = 0; seq < 3; seq++) socket.send(encodeFrame(dataFrame('nobody', seq, new Uint8Array([seq + 1]))));
    socket.send(encodeFrame(dataFrame('nobody-else', 0, new Uint8Array([1]))));
    const { client } = await openStream(socket, link); // after the noise above, on the same socket
    await client.call('initialize', { clientName: 'after-drops' });
    await waitFor(() => frames.filter((f) => f.kind === 'reset').length >= 2, 'the resets');
    const text = await telemetry.prometheus();
    const series = (reason: string) =>
      Number(
        new RegExp(`^exec_server_remote_relay_frames_dropped_total\\{[^}]*reason="${reason}"[^}]*\\} (\\d+)`, 'm').exec(
          text,
        )?.[1],
      );
    expect({ unknown: series('unknown_stream'), invalid: series('invalid'), text: series('text') }).toEqual({
      unknown: 4,
      invalid: 1,
      text: 1,
    });
    const warned = lines.filter(
      (l) => l.msg === 'dropped relay data for a stream this socket does not know; resetting it',
    );
    expect(warned.map((l) => [l.level, l.streamId])).toEqual([
      [40, 'nobody'],
      [40, 'nobody-else'],
    ]);
  });

  it('frees a stream slot when the relay resets the stream (harness gone), however many times', async () => {
    const { link, socket } = await setup({ limits: { maxStreams: 2 } });
    for (let round = 0; round < 6; round++) {
      const { client, streamId } = await openStream(socket, link, `authorization-${round}`);
      await client.call('initialize', { clientName: `round-${round}` });
      // What the relay sends when a harness socket closes.
      socket.send(encodeFrame(resetFrame(streamId, 'harness_closed')));
      await waitFor(() => link.streams === 0, 'the slot to be freed');
    }
  });

  it('resets a stream whose consumer stopped taking frames once its queue passes the bound', async () => {
    const { link, socket } = await setup({
      limits: { maxQueuedBytesPerStream: 64 * 1024 },
      // The executor side stops reading this stream (as a JSON-RPC connection with full lanes does).
      onStream: (stream) => stream.pause(),
    });
    const { streamId } = await openStream(socket, link);
    const frames = framesOn(socket);
    for (let seq = 0; seq < 8; seq++) {
      socket.send(encodeFrame(dataFrame(streamId, seq, new Uint8Array(16 * 1024).fill(seq + 1))));
    }
    await waitFor(() => frames.some((f) => f.streamId === streamId && f.kind === 'reset'), 'the reset');
    expect(frames.find((f) => f.streamId === streamId && f.kind === 'reset')).toMatchObject({
      reason: BACKPRESSURE_RESET,
    });
    await waitFor(() => link.streams === 0, 'the slot to be freed');
  });

  it('keeps its own copy of what it queues for a paused stream (the socket reuses its receive buffers)', async () => {
    const server = new ExecServer({ reaper: false });
    cleanups.push(() => server.close());
    let resume = () => {};
    const { link, socket } = await setup({
      onStream: (stream) => {
        stream.pause(); // everything that arrives now is queued by the stream's link
        resume = () => stream.resume();
        server.serve(new RpcConnection(stream));
      },
    });
    const { client } = await openStream(socket, link);
    // Messages of several records each, whose slabs the socket reuses while the first ones wait.
    const big = 'n'.repeat(150_000);
    const calls = [
      client.call<{ sessionId: string }>('initialize', { clientName: `first-${big}` }),
      ...[1, 2, 3].map((i) => client.call('process/read', { processId: `p${i}-${big}` }).catch((e: Error) => e)),
    ];
    await new Promise((resolve) => setTimeout(resolve, 100));
    resume();
    const [init, ...rest] = await Promise.all(calls);
    expect(init).toMatchObject({ sessionId: expect.any(String) });
    // Each request arrived whole and decrypted: answered, on a stream that is still open.
    for (const answer of rest) expect(answer).toBeInstanceOf(Error);
    expect(link.streams).toBe(1);
  });

  it('refused or abandoned handshakes do not count as failures of the relay socket', async () => {
    const { rendezvous, link, socket } = await setup({ limits: { failedHandshakeBurst: 2 } });
    rendezvous.valid = false;
    for (let i = 0; i < 4; i++) {
      await expect(openStream(socket, link, `refused-${i}`)).rejects.toMatchObject({ code: 'reset' });
    }
    rendezvous.valid = true;
    const { client } = await openStream(socket, link);
    await expect(client.call('initialize', { clientName: 'still-connected' })).resolves.toBeDefined();
    expect(rendezvous.sockets).toHaveLength(1);
  });
});

describe('remote mode: who a stream acts for', () => {
  it('serves each stream for the key its /validate named (unattributed without one); a session resumes only for its key', async () => {
    const seen: Principal[] = [];
    const server = new ExecServer({ reaper: false });
    cleanups.push(() => server.close());
    const { rendezvous, link, socket } = await setup({
      onStream: (stream, principal) => {
        seen.push(principal);
        server.serve(new RpcConnection(stream), { principal });
      },
    });
    rendezvous.keys = { 'auth-alice': ['key_alice', 'harness'], 'auth-bob': ['key_bob', 'harness'] };
    const alice = await openStream(socket, link, 'auth-alice');
    const { sessionId } = await alice.client.call<{ sessionId: string }>('initialize', { clientName: 'alice' });
    await openStream(socket, link, 'auth-none');
    const bob = await openStream(socket, link, 'auth-bob');
    expect(seen).toEqual([
      keyPrincipal('key_alice', 'harness'),
      UNATTRIBUTED_PRINCIPAL,
      keyPrincipal('key_bob', 'harness'),
    ]);
    alice.client.close();
    await expect(bob.client.call('initialize', { clientName: 'bob', resumeSessionId: sessionId })).rejects.toThrow(
      `unknown session id ${sessionId}`,
    );
    const again = await openStream(socket, link, 'auth-alice');
    await expect
      .poll(() =>
        again.client
          .call<{ sessionId: string }>('initialize', { clientName: 'alice-again', resumeSessionId: sessionId })
          .then((answer) => answer.sessionId)
          .catch((err: Error) => err.message),
      )
      .toBe(sessionId);
  });
});

describe('remote mode: link loss', () => {
  it('redials after the relay drops the socket; the session resumes on a new stream', async () => {
    const { rendezvous, link, socket } = await setup();
    const first = await openStream(socket, link);
    const { sessionId } = await first.client.call<{ sessionId: string }>('initialize', { clientName: 'before-drop' });
    const next = rendezvous.nextSocket();
    socket.terminate();
    const socket2 = await next;
    await link.whenConnected();
    expect(rendezvous.registers).toHaveLength(1); // same signed URL, no re-registration
    const second = await openStream(socket2, link, 'authorization-2');
    const resumed = await second.client.call<{ sessionId: string }>('initialize', {
      clientName: 'after-drop',
      resumeSessionId: sessionId,
    });
    expect(resumed.sessionId).toBe(sessionId);
  });

  it('gives up (link.failed) when the registry refuses the key on re-registration, instead of retrying forever', async () => {
    const { rendezvous, link, socket } = await setup();
    rendezvous.refuseUpgrades = 403;
    rendezvous.refuseRegisters = 401;
    socket.terminate();
    const err = await link.failed;
    expect(err).toBeInstanceOf(RegistryError);
    expect(err).toMatchObject({ status: 401 });
    expect(err.message).toContain('authentication failed');
    expect(err.message).not.toContain(API_KEY);
    expect(link.state).toBe('closed');
  });

  it('registers again when the relay refuses the upgrade with a 4xx', async () => {
    const { rendezvous, link, socket } = await setup();
    rendezvous.refuseUpgrades = 403;
    socket.terminate();
    await waitFor(() => rendezvous.registers.length >= 2, 're-registration');
    rendezvous.refuseUpgrades = null;
    const socket2 = await rendezvous.nextSocket();
    expect(socket2).toBeDefined();
    await link.whenConnected();
    expect(link.registrationId).not.toBe('reg-1');
  });

  it('fails over: when its node cannot be dialled twice in a row it registers again, naming that node', async () => {
    const { rendezvous, link, socket } = await setup({ minBackoffMs: 20, maxBackoffMs: 40 });
    rendezvous.dropUpgrades = true;
    const moved = waitFor(() => rendezvous.registers.length >= 2, 're-registration');
    socket.terminate();
    await moved;
    expect(rendezvous.registers[0]).not.toHaveProperty('unreachable_relay_url');
    // The node's base URL, never the signed URL (its query is a credential).
    expect(rendezvous.registers[1]?.unreachable_relay_url).toBe(`${rendezvous.url.replace('http:', 'ws:')}/relay`);
    rendezvous.dropUpgrades = false;
    await rendezvous.nextSocket();
    await link.whenConnected();
    expect(link.registrationId).toBe('reg-2');
  });

  it('fails over after one dial that times out (a node gone silent), without a second try', async () => {
    const { rendezvous, link, socket } = await setup({ minBackoffMs: 20, maxBackoffMs: 40, connectTimeoutMs: 300 });
    rendezvous.hangUpgrades = true;
    const moved = waitFor(() => rendezvous.registers.length >= 2, 're-registration');
    socket.terminate();
    await moved;
    const [first, second] = rendezvous.upgradesAtRegister;
    expect(second! - first!, 'the first socket, then one dial that timed out').toBe(2);
    expect(rendezvous.registers[1]?.unreachable_relay_url).toBe(`${rendezvous.url.replace('http:', 'ws:')}/relay`);
    rendezvous.hangUpgrades = false;
    await link.whenConnected();
  });

  it('a single failed redial is not a failover: the same registration is dialled again', async () => {
    // Backoffs long enough that the test lets the second dial through before it is made.
    const { rendezvous, link, socket } = await setup({ minBackoffMs: 400, maxBackoffMs: 400 });
    rendezvous.dropUpgrades = true;
    socket.terminate();
    await waitFor(() => rendezvous.droppedUpgrades === 1, 'a failed redial');
    rendezvous.dropUpgrades = false;
    await rendezvous.nextSocket();
    await link.whenConnected();
    expect(rendezvous.registers).toHaveLength(1);
  });

  it('counts registrations, relay connects, drops and refusals in the remote metrics', async () => {
    const telemetry = await Telemetry.create({ serviceName: 'remote-test', prometheus: true });
    const metrics = new ExecutorMetrics(telemetry);
    const { rendezvous, link, socket } = await setup({ metrics });
    const served = await openStream(socket, link);
    await served.client.call('initialize', { clientName: 'metrics' });
    expect(metrics.snapshot().remoteWebsocketActive).toBe(1);

    rendezvous.refuseUpgrades = 403;
    socket.terminate();
    await waitFor(() => rendezvous.registers.length >= 2, 're-registration');
    rendezvous.refuseUpgrades = null;
    await rendezvous.nextSocket();
    await link.whenConnected();
    expect(metrics.snapshot().remoteWebsocketActive).toBe(1);

    const text = await telemetry.prometheus();
    expect(text).toMatch(/exec_server_remote_registration_total\{result="success"\} [2-9]\n/);
    expect(text).toMatch(/exec_server_remote_websocket_connect_total\{result="success"\} 2\n/);
    expect(text).toMatch(/exec_server_remote_websocket_connect_total\{result="rejected"\} [1-9]\d*\n/);
    expect(text).toContain('exec_server_remote_websocket_reconnects_total{reason="disconnected"} 1\n');
    expect(text).toMatch(/exec_server_remote_websocket_reconnects_total\{reason="rejected"\} [1-9]\d*\n/);
    expect(text).toContain('exec_server_remote_websocket_active 1\n');
    expect(text).toContain('exec_server_remote_registration_duration_seconds_count{result="success"}');
  });

  it('reports readiness from the relay link on /readyz', async () => {
    const { rendezvous, link, socket, server } = await setup();
    server.readinessCheck = () => link.ready;
    const url = (await server.listen('127.0.0.1', 0)).replace('ws:', 'http:');
    expect(await status(`${url}/readyz`)).toBe(200);
    rendezvous.refuseUpgrades = 503;
    socket.terminate();
    await waitFor(() => !link.ready, 'the link to go down');
    expect(await status(`${url}/readyz`)).toBe(503);
    expect(await status(`${url}/livez`)).toBe(200);
  });

  it('close() ends the socket with 1001 and stops redialing', async () => {
    const { rendezvous, link, socket } = await setup();
    const closed = once(socket, 'close');
    await link.close();
    const [code] = await closed;
    expect(code).toBe(1001);
    expect(link.state).toBe('closed');
    expect(rendezvous.sockets).toHaveLength(1);
  });
});

describe('registry client', () => {
  async function registryAnswering(status: number, body: unknown, headers: Record<string, string> = {}) {
    let calls = 0;
    const http = createServer((_req, res) => {
      calls++;
      res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
    });
    http.listen(0, '127.0.0.1');
    await once(http, 'listening');
    cleanups.push(async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    });
    return { url: `http://127.0.0.1:${(http.address() as { port: number }).port}`, calls: () => calls };
  }

  it('explains a 401 without echoing the key', async () => {
    const registry = await registryAnswering(401, { error: { code: 'unauthorized', message: 'unknown API key' } });
    const client = new RegistryClient({ baseUrl: registry.url, apiKey: API_KEY });
    const error = await client.register(ENVIRONMENT, generateIdentity().publicKey).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(RegistryError);
    expect((error as RegistryError).message).toBe(
      'the registry refused /register with HTTP 401 (authentication failed: check the API key) [unauthorized]: unknown API key',
    );
    expect((error as RegistryError).retryable).toBe(false);
    expect(String(error)).not.toContain(API_KEY);
  });

  it('does not follow redirects', async () => {
    const registry = await registryAnswering(302, {}, { location: 'http://127.0.0.1:1/elsewhere' });
    const client = new RegistryClient({ baseUrl: registry.url, apiKey: API_KEY });
    await expect(client.register(ENVIRONMENT, generateIdentity().publicKey)).rejects.toThrow(
      /HTTP 302 \(redirects are not followed\)/,
    );
    expect(registry.calls()).toBe(1);
  });

  it('rejects an answer for another environment or profile', async () => {
    const other = await registryAnswering(200, {
      environment_id: 'someone-else',
      url: 'ws://127.0.0.1:1/relay',
      security_profile: 'noise_hybrid_ik_v1',
      executor_registration_id: 'reg',
    });
    await expect(
      new RegistryClient({ baseUrl: other.url, apiKey: API_KEY }).register(ENVIRONMENT, generateIdentity().publicKey),
    ).rejects.toThrow('environment_id does not match');
    const profile = await registryAnswering(200, {
      environment_id: ENVIRONMENT,
      url: 'ws://127.0.0.1:1/relay',
      security_profile: 'cleartext',
      executor_registration_id: 'reg',
    });
    await expect(
      new RegistryClient({ baseUrl: profile.url, apiKey: API_KEY }).register(ENVIRONMENT, generateIdentity().publicKey),
    ).rejects.toThrow('security_profile is not noise_hybrid_ik_v1');
  });

  it('gives up at start after a few attempts when the registry cannot be reached', async () => {
    let attempts = 0;
    const link = new RemoteLink({
      registryUrl: 'http://127.0.0.1:1',
      environmentId: ENVIRONMENT,
      apiKey: API_KEY,
      logger: silentLogger(),
      minBackoffMs: 1,
      maxBackoffMs: 2,
      onStream: () => undefined,
      fetch: async () => {
        attempts++;
        throw new TypeError('fetch failed', { cause: { code: 'ECONNREFUSED' } });
      },
    });
    cleanups.push(() => link.close());
    await expect(link.start()).rejects.toThrow('cannot reach the registry at http://127.0.0.1:1: ECONNREFUSED');
    expect(attempts).toBe(6); // the first try and 5 retries
  });

  it('retries registration_conflict at start, then succeeds', async () => {
    let calls = 0;
    const http = createServer((_req, res) => {
      calls++;
      if (calls < 3) {
        res.writeHead(503).end(JSON.stringify({ error: { code: 'registration_conflict' } }));
        return;
      }
      res.writeHead(200).end(
        JSON.stringify({
          environment_id: ENVIRONMENT,
          url: 'ws://127.0.0.1:1/relay?role=environment',
          security_profile: 'noise_hybrid_ik_v1',
          executor_registration_id: 'reg-after-conflict',
        }),
      );
    });
    http.listen(0, '127.0.0.1');
    await once(http, 'listening');
    cleanups.push(async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    });
    const link = new RemoteLink({
      registryUrl: `http://127.0.0.1:${(http.address() as { port: number }).port}`,
      environmentId: ENVIRONMENT,
      apiKey: API_KEY,
      logger: silentLogger(),
      minBackoffMs: 5,
      maxBackoffMs: 10,
      onStream: () => undefined,
    });
    cleanups.push(() => link.close());
    await expect(link.start()).resolves.toMatchObject({ registrationId: 'reg-after-conflict' });
    expect(calls).toBe(3);
  });

  it('says no (without throwing) when /validate fails in any way', async () => {
    const broken = await registryAnswering(500, { error: { code: 'internal' } });
    const client = new RegistryClient({ baseUrl: broken.url, apiKey: API_KEY });
    const answer = await client.validate(ENVIRONMENT, {
      registrationId: 'reg',
      harnessKey: generateIdentity().publicKey,
      authorization: 'x',
    });
    expect(answer).toBe(false);
    const unreachable = new RegistryClient({ baseUrl: 'http://127.0.0.1:1', apiKey: API_KEY });
    await expect(
      unreachable.validate(ENVIRONMENT, {
        registrationId: 'r',
        harnessKey: generateIdentity().publicKey,
        authorization: 'x',
      }),
    ).resolves.toBe(false);
  });
});

function status(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request(url, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    })
      .on('error', reject)
      .end();
  });
}
