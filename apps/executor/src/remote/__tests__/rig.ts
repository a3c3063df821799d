/** A fake registry and relay for the remote link's tests, and the executor set up against them. Its afterEach runs the cleanups. */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { RpcClient, RpcConnection } from '@tether/jsonrpc';
import { generateIdentity } from '@tether/noise';
import { decodeFrame, encodeFrame, type Frame } from '@tether/relay-frames';
import { type FrameLink, type FrameLinkHandlers, SecureStream } from '@tether/secure-stream';
import { afterEach } from 'vitest';
import { type WebSocket, WebSocketServer } from 'ws';
import { silentLogger } from '../../logger.js';
import { ExecServer } from '../../server.js';
import { RemoteLink, type RemoteLinkOptions } from '../remote-link.js';

export const ENVIRONMENT = 'env-remote-test';
export const API_KEY = 'test-api-key-secret';

export interface FakeRendezvous {
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
export async function fakeRendezvous(): Promise<FakeRendezvous> {
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

export const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

export async function setup(options: Partial<RemoteLinkOptions> = {}) {
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
export class SharedSocketLink implements FrameLink {
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
export async function openStream(
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
export async function openSecureStream(
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

export function framesOn(socket: WebSocket): Frame[] {
  const frames: Frame[] = [];
  socket.on('message', (data: Buffer) => frames.push(decodeFrame(data)));
  return frames;
}

export async function waitFor(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

export function status(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request(url, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    })
      .on('error', reject)
      .end();
  });
}
