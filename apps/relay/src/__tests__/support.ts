import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { nonceForGrant, type RelayRole, type SigningKey, signRelayUrl, signRevocations } from '@tether/relay-auth';
import { dataFrame, decodeFrame, encodeFrame, type Frame, peekHeader, resumeFrame } from '@tether/relay-frames';
import { SecureStream, WebSocketFrameLink } from '@tether/secure-stream';
import { afterEach } from 'vitest';
import { WebSocket } from 'ws';
import { createRelay, type Relay, type RelayOptions } from '../app.js';
import type { RelayLimits } from '../limits.js';

const pair = generateKeyPairSync('ed25519');
export const signingKey: SigningKey = { privateKey: pair.privateKey, publicKey: pair.publicKey };

/** The registry's public key as the PEM file a relay operator is given (`--registry-key-file`), in `dir`. */
export function publicKeyFile(dir: string): string {
  const path = join(dir, 'registry.pub.pem');
  writeFileSync(path, signingKey.publicKey.export({ type: 'spki', format: 'pem' }) as string);
  return path;
}

const relays: Relay[] = [];
const sockets: WebSocket[] = [];
const servers: Array<() => Promise<void>> = [];

/** Every relay, client socket and fake registry a test opened is closed after it; close() waits for sockets. */
afterEach(async () => {
  for (const ws of sockets.splice(0)) ws.terminate();
  await Promise.all(relays.splice(0).map((relay) => relay.close()));
  await Promise.all(servers.splice(0).map((close) => close()));
});

export async function startRelay(
  limits: Partial<RelayLimits> = {},
  extra: Partial<RelayOptions> = {},
): Promise<{ relay: Relay; url: string }> {
  const relay = createRelay({ publicKey: signingKey.publicKey, limits, ...extra });
  relays.push(relay);
  const url = await relay.listen('127.0.0.1', 0);
  return { relay, url };
}

/**
 * A URL signed as the registry signs it: a harness URL carries a fresh nonce (each bundle is its own grant) unless
 * `nonce` says otherwise (`null`: none, as an older registry's).
 */
export function signedUrl(
  base: string,
  role: RelayRole,
  environmentId: string,
  options: {
    registrationId?: string;
    epoch?: number;
    expiresAt?: number;
    key?: SigningKey;
    nonce?: string | null;
  } = {},
): string {
  const nonce = options.nonce === undefined ? (role === 'harness' ? nonceForGrant() : null) : options.nonce;
  return signRelayUrl(
    base,
    {
      role,
      environmentId,
      registrationId: options.registrationId ?? 'reg-1',
      epoch: options.epoch ?? 1,
      expiresAt: options.expiresAt ?? Math.floor(Date.now() / 1000) + 3600,
      ...(nonce === null ? {} : { nonce }),
    },
    options.key ?? signingKey,
  );
}

export interface Closed {
  code: number;
  reason: string;
}

/** A fake endpoint: a raw WebSocket that records every frame it receives, decoded. */
export class Endpoint {
  readonly frames: Frame[] = [];
  readonly raw: Buffer[] = [];
  readonly closed: Promise<Closed>;
  /** Data frames received, also counted when `storeData` is off (bulk tests keep no copies). */
  dataFrames = 0;
  private waiters: Array<() => void> = [];

  private constructor(
    readonly ws: WebSocket,
    private readonly storeData: boolean,
  ) {
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      // A bulk endpoint counts data frames and stores every other kind.
      const isData = isBinary && peekHeader(data)?.kind === 'data';
      if (isData) this.dataFrames++;
      if (isBinary && (this.storeData || !isData)) {
        this.raw.push(data);
        this.frames.push(decodeFrame(data));
      }
      for (const wake of this.waiters.splice(0)) wake();
    });
    this.closed = new Promise((resolve) => {
      ws.once('close', (code: number, reason: Buffer) => {
        resolve({ code, reason: reason.toString() });
        for (const wake of this.waiters.splice(0)) wake();
      });
    });
  }

  static async open(url: string, options: { autoPong?: boolean; storeData?: boolean } = {}): Promise<Endpoint> {
    const { storeData = true, ...wsOptions } = options;
    const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 1024 * 1024, ...wsOptions });
    sockets.push(ws);
    ws.on('error', () => {});
    await once(ws, 'open');
    return new Endpoint(ws, storeData);
  }

  /** Waits until `count` data frames arrived in total. */
  async dataCount(count: number): Promise<void> {
    while (this.dataFrames < count) {
      if (this.ws.readyState === WebSocket.CLOSED)
        throw new Error(`closed with ${this.dataFrames}/${count} data frames`);
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  send(frame: Frame): void {
    this.ws.send(encodeFrame(frame), { binary: true });
  }

  /** Resolves with the first recorded frame matching, waiting for more as they arrive. */
  async next(match: (frame: Frame) => boolean, what = 'a frame'): Promise<Frame> {
    for (;;) {
      const found = this.frames.find(match);
      if (found) return found;
      if (this.ws.readyState === WebSocket.CLOSED) {
        throw new Error(`socket closed before ${what} arrived (${this.frames.length} frames)`);
      }
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  /** Waits until at least `count` frames matching arrived. */
  async count(match: (frame: Frame) => boolean, count: number): Promise<Frame[]> {
    for (;;) {
      const found = this.frames.filter(match);
      if (found.length >= count) return found;
      if (this.ws.readyState === WebSocket.CLOSED) throw new Error(`closed with ${found.length}/${count} frames`);
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }
}

/** A harness's end-to-end stream through the relay: a socket to its signed `url`, SecureStream.initiate over it. */
export async function harnessStream(
  url: string,
  options: Omit<Parameters<typeof SecureStream.initiate>[0], 'link' | 'streamId'>,
): Promise<{ streamId: string; secure: SecureStream }> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  await once(ws, 'open');
  const streamId = randomUUID();
  const secure = await SecureStream.initiate({ link: new WebSocketFrameLink(ws, streamId), streamId, ...options });
  return { streamId, secure };
}

/** A Reset of `streamId` (with `reason`, when given). */
export const isReset = (streamId: string, reason?: string) => (f: Frame) =>
  f.kind === 'reset' && f.streamId === streamId && (reason === undefined || f.reason === reason);

/** `env` (of `registrationId`) serves: a new stream from a harness reaches it, and its data comes back. */
export async function expectServing(url: string, env: Endpoint, environmentId: string, registrationId: string) {
  const harness = await Endpoint.open(signedUrl(url, 'harness', environmentId, { registrationId }));
  const streamId = randomUUID();
  harness.send(resumeFrame(streamId, 0));
  await env.next((f) => f.kind === 'resume' && f.streamId === streamId, 'the Resume');
  env.send(dataFrame(streamId, 0, Buffer.from('served')));
  await harness.next((f) => f.kind === 'data', 'data');
}

/** The HTTP status an upgrade to `url` is refused with (throws if it is accepted). */
export async function refusal(url: string): Promise<{ status: number; body: string }> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  sockets.push(ws);
  return new Promise((resolve, reject) => {
    ws.once('open', () => reject(new Error('the upgrade was accepted')));
    ws.once('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
    });
    ws.once('error', (err) => reject(err));
  });
}

/** A counter's value (`relay_resets_total{reason="idle_timeout"}`), 0 when the series is absent. */
export function metric(relay: Relay, series: string): number {
  return relay.counters()[series] ?? 0;
}

/**
 * A stand-in registry that answers `POST /v1/relay/heartbeat` with `answer` (settable at any time) and records each
 * heartbeat's headers; every other request is a 404.
 */
export async function startFakeRegistry(answer = '{"status":"ok"}') {
  const state = { answer, heartbeats: [] as IncomingHttpHeaders[] };
  const server = createServer((req, res) => {
    req.resume();
    if (req.method !== 'POST' || req.url !== '/v1/relay/heartbeat') return void res.writeHead(404).end();
    req.once('end', () => {
      state.heartbeats.push(req.headers);
      res.writeHead(200, { 'content-type': 'application/json' }).end(state.answer);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  servers.push(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, state };
}

/** POSTs `body` to the relay's `/v1/revocations`, signed by `key` unless a signature (or none) is given. */
export async function pushRevocations(
  relayUrl: string,
  body: string,
  options: { signature?: string | null; key?: SigningKey } = {},
): Promise<{ status: number; body: unknown }> {
  const signature =
    options.signature === undefined ? signRevocations(body, options.key ?? signingKey) : options.signature;
  const response = await fetch(`${relayUrl.replace(/^ws/, 'http')}/v1/revocations`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(signature === null ? {} : { 'x-tether-signature': signature }) },
    body,
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** A revocation body as the registry sends it. */
export function revocationBody(entries: Array<[environmentId: string, registrationId: string]>): string {
  return JSON.stringify({
    revoked_registrations: entries.map(([environment_id, registration_id]) => ({ environment_id, registration_id })),
    issued_at: Math.floor(Date.now() / 1000),
  });
}
