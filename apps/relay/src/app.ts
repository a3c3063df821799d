import type { KeyObject } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import {
  grantIdentity,
  REVOCATIONS_SIGNATURE_HEADER,
  type RelayGrant,
  verifyRelayRequest,
  verifyRevocations,
} from '@tether/relay-auth';
import { decodeFrame, encodeFrame, type Frame, peekHeaderParts, resetFrame, streamKey } from '@tether/relay-frames';
import { PROMETHEUS_CONTENT_TYPE, Telemetry, type TelemetryOptions } from '@tether/telemetry';
import { joinParts } from '@tether/user-read/websocket';
import pino, { type Logger } from 'pino';
import { type WebSocket, WebSocketServer } from 'ws';
import { TrustedProxies } from './client-address.js';
import { FastPath } from './fastpath.js';
import { type Heartbeat, startHeartbeat } from './heartbeat.js';
import { CLOSE, DEFAULT_LIMITS, type RelayLimits } from './limits.js';
import { ExpiringMap } from './memory.js';
import {
  type DropReason,
  type PushResult,
  type RefusalReason,
  RelayMetrics,
  type ResetReason,
  type RevocationSource,
} from './metrics.js';
import { PushSources } from './push-sources.js';
import {
  isRevocationsPath,
  MAX_CONCURRENT_PUSHES,
  MAX_PUSHES_PER_SOURCE,
  MAX_REVOCATION_BODY_BYTES,
  PUSH_BODY_TIMEOUT_MS,
  parseRevocationPush,
  type Revocation,
  readRequestLimited,
  revocationKey,
  wellFormedSignature,
} from './revocations.js';

/** Deadlines for a plain HTTP request's headers and for all of it (a revocation push's body included). */
export const HEADERS_TIMEOUT_MS = 10_000;
export const REQUEST_TIMEOUT_MS = 30_000;

export interface RelayOptions {
  /** The registry's Ed25519 public key: the only thing the relay needs to authenticate sockets. */
  publicKey: KeyObject;
  limits?: Partial<RelayLimits>;
  /** Default: silent. Never receives URLs (they carry signatures) or payloads. */
  logger?: Logger;
  /** Clock for signature expiry, epoch ms; default Date.now. */
  now?: () => number;
  /** Presence heartbeat, started by listen(); omitted → none (a registry without heartbeats routes to every node). */
  heartbeat?: HeartbeatConfig;
  /** Proxies whose `X-Forwarded-For` names the client (`--trust-proxy`); default none: the socket's peer. */
  trustProxy?: TrustedProxies;
  /**
   * The addresses revocation pushes are taken from (the registry's: `--revocation-push-from`, else `--registry`'s
   * host resolved); default any address.
   */
  pushSources?: PushSources;
  /** Observer of every forwarded WebSocket message (capture, debugging); must not keep the buffer mutable. */
  tap?: (direction: Direction, data: Buffer) => void;
  /**
   * Where the metrics go: a Telemetry (its owner shuts it down), or the options of one the relay makes and shuts
   * down (`relay serve`: OTLP from the OTEL_* variables, process metrics); default: Prometheus only.
   */
  telemetry?: Telemetry | TelemetryOptions;
}

export interface HeartbeatConfig {
  registryUrl: string;
  /** A `relay`-role API key of the registry (it can only heartbeat; an admin key works too). */
  token: string;
  /** This node's URL as the registry knows it; default the bound `ws://host:port`. */
  publicUrl?: string;
  /** Default 10 s (the registry counts a node live for 30 s after its last heartbeat). */
  intervalMs?: number;
}

export type Direction = 'to_environment' | 'to_harness';

export interface RelayStats {
  environments: number;
  harnessSockets: number;
  streams: number;
  /** Bytes queued by the relay in its sockets' write buffers, by destination role. */
  queuedBytes: { environment: number; harness: number };
  pausedHarnessSockets: number;
}

export interface Relay extends AsyncDisposable {
  readonly server: Server;
  /** Listens and resolves with the bound `ws://host:port`; starts the heartbeat if configured. */
  listen(host: string, port: number): Promise<string>;
  /**
   * Starts the presence heartbeat after listen(), for when the registry's address is known only then
   * (both on port 0); replaces a running one.
   */
  startHeartbeat(config: HeartbeatConfig): Promise<void>;
  /** Environment ids whose executor socket is connected here. */
  environments(): string[];
  stats(): RelayStats;
  /** Prometheus text exposition, as served on `/metrics`. */
  metricsText(): Promise<string>;
  /** Every counter series by its Prometheus name (`relay_resets_total{reason="idle_timeout"}`) and value. */
  counters(): Record<string, number>;
  /** Graceful: stop accepting, close every socket with 1001, stop timers; idempotent. */
  close(): Promise<void>;
}

const BINARY = Object.freeze({ binary: true });
const OPEN = 1;

interface EnvironmentPeer {
  readonly ws: WebSocket;
  readonly socket: Socket;
  readonly environmentId: string;
  readonly registrationId: string;
  /** The grant's registration epoch: a socket with a lower one for this environment is refused. */
  readonly epoch: number;
  /** stream key (stream_id bytes) → the harness socket that claimed it. */
  readonly streams: Map<string, HarnessPeer>;
  /** Harness sockets paused because this socket is above its high-water mark. */
  readonly paused: Set<HarnessPeer>;
  drainHooked: boolean;
  lastSeen: number;
}

/** The open sockets of one harness grant (one signed URL), counted from the upgrade to the socket's close. */
interface GrantSockets {
  readonly id: string;
  open: number;
  unclaimed: number;
}

/** One harness socket's place in its grant's counts; `unclaimed` until its stream is claimed or it starts closing. */
interface GrantHold {
  readonly grant: GrantSockets;
  unclaimed: boolean;
}

interface HarnessPeer {
  readonly ws: WebSocket;
  readonly hold: GrantHold;
  readonly environmentId: string;
  readonly registrationId: string;
  readonly createdAt: number;
  /** Set by the first frame (`Resume`). */
  streamId: string | null;
  key: string | null;
  env: EnvironmentPeer | null;
  /** The environment has sent a frame on this stream (the handshake stage is over). */
  answered: boolean;
  handshakeFrames: number;
  /** A Reset already crossed (either way) or was sent to the environment: no second one on close. */
  resetDone: boolean;
  paused: boolean;
  closing: boolean;
  graceTimer: NodeJS.Timeout | undefined;
  /** Armed by the claim, cleared by the environment's first answer or the end of the stream. */
  handshakeTimer: NodeJS.Timeout | undefined;
  lastActivity: number;
  lastSeen: number;
}

/** The relay's telemetry when none is given: Prometheus, no push, no process collectors (tests build many relays). */
const PROMETHEUS_ONLY: TelemetryOptions = { serviceName: 'tether-relay', prometheus: true };

/** Builds the relay (never listens): an HTTP server whose upgrades are authenticated before any WebSocket exists. */
export function createRelay(options: RelayOptions): Relay {
  const limits: RelayLimits = { ...DEFAULT_LIMITS, ...options.limits };
  const log = options.logger ?? pino({ level: 'silent' });
  const now = options.now ?? Date.now;
  const tap = options.tap;
  const trustProxy = options.trustProxy ?? TrustedProxies.none();
  const pushSources = options.pushSources ?? PushSources.any();
  const metrics = new RelayMetrics();
  // The counters are plain numbers from here on; the Telemetry reads them (and stats()) when it collects.
  const given = options.telemetry;
  const ownsTelemetry = !(given instanceof Telemetry);
  const telemetry = (
    given instanceof Telemetry ? Promise.resolve(given) : Telemetry.create(given ?? PROMETHEUS_ONLY)
  ).then((t) => {
    metrics.register(t, stats);
    return t;
  });

  const framesTo = {
    to_environment: metrics.counter('relay_forwarded_frames_total', { direction: 'to_environment' }),
    to_harness: metrics.counter('relay_forwarded_frames_total', { direction: 'to_harness' }),
  };
  const bytesTo = {
    to_environment: metrics.counter('relay_forwarded_bytes_total', { direction: 'to_environment' }),
    to_harness: metrics.counter('relay_forwarded_bytes_total', { direction: 'to_harness' }),
  };
  const resets = (reason: ResetReason) => metrics.counter('relay_resets_total', { reason }).inc();
  const drops = (reason: DropReason) => metrics.counter('relay_drops_total', { reason }).inc();
  const pauses = metrics.counter('relay_backpressure_pauses_total');
  const pushes = (result: PushResult) => metrics.counter('relay_revocation_pushes_total', { result }).inc();
  // This relay's slabs, read buffer and write batching: closed with the relay, shared with no other one.
  const fastPath = new FastPath();

  const environments = new Map<string, EnvironmentPeer>();
  const harnesses = new Set<HarnessPeer>();
  const connectionsByIp = new Map<string, number>();
  /** Open sockets of each harness grant with at least one (`maxSocketsPerUrl`, `maxUnclaimedPerUrl`). */
  const socketsByGrant = new Map<string, GrantSockets>();
  /** Every upgraded socket until it closes, both roles (`maxConnections`). */
  let openSockets = 0;
  // Highest environment-socket epoch seen per environment, kept after the socket leaves so a stale executor cannot
  // take the place of a briefly disconnected current one. A URL with a lower epoch was minted before the newer
  // registration existed, so it has expired once the entry has (urlLifetimeMs after it was last seen).
  const epochs = new ExpiringMap<number>(limits.maxRememberedRegistrations, limits.urlLifetimeMs);
  // Revoked registrations (revocationKey), refused until every URL naming them could have expired anyway.
  const revoked = new ExpiringMap<true>(limits.maxRememberedRegistrations, limits.urlLifetimeMs);
  /** Revocation pushes whose body is being read now, by source address (at most MAX_CONCURRENT_PUSHES in all). */
  const pushesReading = new Map<string, number>();
  let pushesReadingTotal = 0;
  let closing = false;
  let listening = false;
  let heartbeat: Heartbeat | null = null;
  let boundUrl = '';

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: limits.maxMessageBytes,
    perMessageDeflate: false,
    clientTracking: false,
    // Text messages are refused whole; their bytes are never read as UTF-8.
    skipUTF8Validation: true,
  });

  // Node's defaults let a client take 60 s to send its headers and 5 min for a whole request (and check only every
  // 30 s): short deadlines instead, as nothing here but a revocation push has a body. They end at the upgrade
  // (Node stops tracking an upgraded socket), so WebSockets are not affected.
  const server = createServer(
    { headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: REQUEST_TIMEOUT_MS, connectionsCheckingInterval: 1_000 },
    (req, res) => serveHttp(req, res),
  );
  server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => onUpgrade(req, socket, head));

  // HTTP ----------------------------------------------------------------------------------------

  function serveHttp(req: IncomingMessage, res: ServerResponse) {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/livez') return json(res, 200, { status: 'ok' });
    if (req.method === 'GET' && path === '/readyz') {
      const ready = listening && !closing;
      return json(res, ready ? 200 : 503, { status: ready ? 'ready' : 'not_ready' });
    }
    if (req.method === 'GET' && path === '/metrics') {
      metricsText().then(
        (text) => res.writeHead(200, { 'content-type': PROMETHEUS_CONTENT_TYPE }).end(text),
        (err: Error) => {
          log.warn({ err: err.message }, 'metrics collection failed');
          fail(res, 500, 'internal', 'the metrics could not be collected');
        },
      );
      return;
    }
    if (req.method === 'POST' && isRevocationsPath(path ?? '')) {
      onRevocationPush(req, res).catch((err: Error) => {
        log.warn({ err: err.message }, 'revocation push failed');
        if (!res.headersSent) fail(res, 500, 'internal', 'the revocation push could not be handled');
      });
      return;
    }
    return json(res, 404, { error: { code: 'not_found', message: 'no such route (WebSocket upgrades only)' } });
  }

  function json(res: ServerResponse, status: number, body: unknown) {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  }

  function fail(res: ServerResponse, status: number, code: string, message: string) {
    json(res, status, { error: { code, message } });
  }

  /**
   * The registry's push: a signed list of revoked registrations. The signature (by the key the relay verifies URLs
   * with) is checked over the exact body bytes before anything in it is parsed. Before a byte of the body is read:
   * the source must be one of the registry's addresses (when known), the signature header must be shaped like one,
   * and the source must not have a push being read already, nor may MAX_CONCURRENT_PUSHES be; the body must then
   * arrive within PUSH_BODY_TIMEOUT_MS.
   */
  async function onRevocationPush(req: IncomingMessage, res: ServerResponse) {
    // Every refusal before the body: it is not wanted, so the socket ends with the answer.
    const refuseUnread = (result: PushResult, status: number, message: string) => {
      pushes(result);
      res.once('finish', () => req.destroy());
      if (status === 503) res.setHeader('retry-after', '1');
      fail(res, status, result, message);
    };
    const source = trustProxy.clientAddress(req.socket.remoteAddress, req.headers['x-forwarded-for']);
    if (!pushSources.allows(source)) {
      return refuseUnread('forbidden_source', 403, 'revocations are taken from the registry’s addresses only');
    }
    const signature = req.headers[REVOCATIONS_SIGNATURE_HEADER];
    if (!wellFormedSignature(signature)) {
      return refuseUnread(
        'bad_signature',
        401,
        `${REVOCATIONS_SIGNATURE_HEADER} header required: a base64url Ed25519 signature (86 characters)`,
      );
    }
    const fromSource = pushesReading.get(source) ?? 0;
    if (fromSource >= MAX_PUSHES_PER_SOURCE) {
      return refuseUnread('source_busy', 503, `at most ${MAX_PUSHES_PER_SOURCE} revocation push per address at once`);
    }
    if (pushesReadingTotal >= MAX_CONCURRENT_PUSHES) {
      return refuseUnread('busy', 503, `at most ${MAX_CONCURRENT_PUSHES} revocation pushes are read at once`);
    }
    pushesReading.set(source, fromSource + 1);
    pushesReadingTotal += 1;
    let body: Buffer | null | 'timeout';
    try {
      body = await readRequestLimited(req, MAX_REVOCATION_BODY_BYTES, PUSH_BODY_TIMEOUT_MS);
    } finally {
      pushesReadingTotal -= 1;
      const left = (pushesReading.get(source) ?? 1) - 1;
      if (left <= 0) pushesReading.delete(source);
      else pushesReading.set(source, left);
    }
    if (body === 'timeout') {
      pushes('timeout');
      res.once('finish', () => req.destroy());
      return fail(res, 408, 'timeout', `a revocation body must arrive within ${PUSH_BODY_TIMEOUT_MS} ms`);
    }
    if (body === null) {
      pushes('too_large');
      res.once('finish', () => req.destroy());
      return fail(res, 413, 'too_large', `a revocation body is at most ${MAX_REVOCATION_BODY_BYTES} bytes`);
    }
    const text = body.toString('utf8');
    if (!verifyRevocations(text, signature, options.publicKey)) {
      pushes('bad_signature');
      return fail(res, 401, 'bad_signature', `${REVOCATIONS_SIGNATURE_HEADER} does not verify under the registry key`);
    }
    const push = parseRevocationPush(text);
    if (!push) {
      pushes('malformed');
      return fail(
        res,
        400,
        'malformed',
        'expected {"revoked_registrations":[{"environment_id","registration_id"}…],"issued_at":<epoch seconds>}',
      );
    }
    revoke(push.revocations, 'push');
    pushes('ok');
    json(res, 200, { status: 'ok' });
  }

  function refuse(socket: Socket, status: number, reason: RefusalReason) {
    metrics.counter('relay_upgrades_refused_total', { reason }).inc();
    // Counted always; logged at debug only, so a flood of bad upgrades cannot flood the logs.
    log.debug({ status, reason }, 'upgrade refused');
    socket.on('error', () => {});
    const body = `${reason}\n`;
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Type: text/plain\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      () => socket.destroy(),
    );
  }

  function onUpgrade(req: IncomingMessage, socket: Socket, head: Buffer) {
    if (closing) return refuse(socket, 503, 'shutting_down');
    if (openSockets >= limits.maxConnections) return refuse(socket, 503, 'connection_limit');
    // The per-IP limit counts the client behind a trusted proxy, not the proxy.
    const ip = trustProxy.clientAddress(socket.remoteAddress, req.headers['x-forwarded-for']);
    const count = connectionsByIp.get(ip) ?? 0;
    if (count >= limits.maxConnectionsPerIp) return refuse(socket, 429, 'ip_limit');
    const verdict = verifyRelayRequest(req.url ?? '/', options.publicKey, Math.floor(now() / 1000));
    if (!verdict.ok) return refuse(socket, verdict.status, verdict.reason);
    // ws completes this upgrade synchronously (no verifyClient), so nothing can change between here and attach.
    const standing = refusalFor(verdict.grant);
    if (standing) return refuse(socket, standing.status, standing.reason);
    const grant = verdict.grant;
    // A harness grant (one signed URL, told apart by its signed fields, nonce included) holds a few sockets at most,
    // so one URL replayed cannot fill this IP's allowance or the relay.
    let hold: GrantHold | null = null;
    if (grant.role === 'harness') {
      const id = grantIdentity(grant);
      const held = socketsByGrant.get(id);
      if (held && held.open >= limits.maxSocketsPerUrl) return refuse(socket, 429, 'url_limit');
      if (held && held.unclaimed >= limits.maxUnclaimedPerUrl) return refuse(socket, 429, 'url_unclaimed_limit');
      const sockets = held ?? { id, open: 0, unclaimed: 0 };
      if (!held) socketsByGrant.set(id, sockets);
      sockets.open += 1;
      sockets.unclaimed += 1;
      hold = { grant: sockets, unclaimed: true };
    }
    openSockets += 1;
    connectionsByIp.set(ip, count + 1);
    socket.once('close', () => {
      openSockets -= 1;
      const left = (connectionsByIp.get(ip) ?? 1) - 1;
      if (left <= 0) connectionsByIp.delete(ip);
      else connectionsByIp.set(ip, left);
      if (hold) {
        releaseUnclaimed(hold);
        hold.grant.open -= 1;
        if (hold.grant.open <= 0) socketsByGrant.delete(hold.grant.id);
      }
    });
    wss.handleUpgrade(req, socket, head, (ws) => {
      if (closing) {
        ws.close(CLOSE.GOING_AWAY, 'relay shutting down');
        return;
      }
      metrics.counter('relay_connections_total', { role: grant.role }).inc();
      if (grant.role === 'environment') attachEnvironment(ws, socket, grant);
      else attachHarness(ws, grant, hold as GrantHold);
    });
  }

  /** The socket no longer counts as its grant's unclaimed one (it claimed its stream, or it is closing). */
  function releaseUnclaimed(hold: GrantHold) {
    if (!hold.unclaimed) return;
    hold.unclaimed = false;
    hold.grant.unclaimed -= 1;
  }

  /** Why a grant whose signature verified is still refused: its registration was revoked, or superseded. */
  function refusalFor(grant: RelayGrant): { status: number; reason: RefusalReason } | null {
    if (revoked.get(revocationKey(grant.environmentId, grant.registrationId), now()) !== undefined) {
      return { status: 401, reason: 'registration_revoked' };
    }
    if (grant.role === 'environment' && grant.epoch < newestEpoch(grant.environmentId)) {
      // An older executor must not displace the current one (it would, as a newer socket, below).
      return { status: 409, reason: 'stale_registration' };
    }
    return null;
  }

  /** The highest epoch seen for the environment: its connected socket's, or remembered from an earlier one. */
  function newestEpoch(environmentId: string): number {
    const connected = environments.get(environmentId)?.epoch ?? -1;
    return Math.max(connected, epochs.get(environmentId, now()) ?? -1);
  }

  function rememberEpoch(environmentId: string, epoch: number) {
    const forgotten = epochs.set(environmentId, Math.max(epoch, epochs.get(environmentId, now()) ?? -1), now());
    if (forgotten > 0) metrics.counter('relay_forgotten_total', { table: 'epochs' }).inc(forgotten);
  }

  // Environment sockets -------------------------------------------------------------------------

  function attachEnvironment(ws: WebSocket, socket: Socket, grant: RelayGrant) {
    const env: EnvironmentPeer = {
      ws,
      socket,
      environmentId: grant.environmentId,
      registrationId: grant.registrationId,
      epoch: grant.epoch,
      streams: new Map(),
      paused: new Set(),
      drainHooked: false,
      lastSeen: Date.now(),
    };
    const previous = environments.get(env.environmentId);
    environments.set(env.environmentId, env);
    rememberEpoch(env.environmentId, env.epoch);
    if (previous) {
      log.info({ environmentId: env.environmentId }, 'environment socket replaced');
      endEnvironment(previous, 'environment_replaced');
      // Only a newer registration supersedes the executor for good (4001: it stops). A socket of the same
      // registration (its own reconnect, or a replayed URL) is told apart (4011), so that it reconnects.
      if (env.epoch > previous.epoch) previous.ws.close(CLOSE.REPLACED, 'replaced by a newer registration');
      else previous.ws.close(CLOSE.REPLACED_SAME_REGISTRATION, 'replaced by a socket of the same registration');
    } else {
      log.info({ environmentId: env.environmentId }, 'environment connected');
    }
    heartbeat?.kick();
    ws.on('message', (data: Buffer, isBinary: boolean) => onEnvironmentMessage(env, [data], data.length, isBinary));
    fastPath.install(
      ws,
      limits.maxMessageBytes,
      (parts, length) => onEnvironmentMessage(env, parts, length, true),
      !tap,
    );
    const envAlive = () => {
      env.lastSeen = Date.now();
    };
    ws.on('pong', envAlive);
    ws.on('ping', envAlive);
    ws.on('error', (err: Error & { code?: string }) => onSocketError(err));
    ws.once('close', () => {
      if (environments.get(env.environmentId) === env) {
        environments.delete(env.environmentId);
        // From now on only the remembered epoch keeps an older executor out: it starts a full lifetime here.
        rememberEpoch(env.environmentId, env.epoch);
        log.info({ environmentId: env.environmentId }, 'environment disconnected');
        heartbeat?.kick();
      }
      endEnvironment(env, 'environment_closed');
    });
  }

  /** Every harness of a gone (or replaced, or revoked) environment socket gets Reset and is closed. */
  function endEnvironment(env: EnvironmentPeer, reason: ResetReason, code: number = CLOSE.GOING_AWAY) {
    for (const harness of [...env.streams.values()]) {
      if (harness.closing) continue;
      resets(reason);
      sendReset(harness.ws, harness.streamId, reason);
      harness.resetDone = true;
      closeHarness(harness, code, reason);
    }
    env.streams.clear();
    env.paused.clear();
  }

  function onEnvironmentMessage(env: EnvironmentPeer, parts: Buffer[], length: number, isBinary: boolean) {
    env.lastSeen = Date.now();
    if (!isBinary) {
      drops('text_message');
      env.ws.close(CLOSE.TEXT, 'binary frames only');
      return;
    }
    const header = peekHeaderParts(parts, length);
    if (!header) return drops('malformed_frame');
    const harness = env.streams.get(header.streamKey);
    // A socket already closing (its close event pending) counts as gone: ws would only account the bytes.
    if (!harness || harness.closing || harness.ws.readyState !== OPEN) return drops('unknown_stream');
    if (!harness.answered) {
      harness.answered = true;
      clearTimeout(harness.handshakeTimer);
      harness.handshakeTimer = undefined;
    }
    harness.lastActivity = env.lastSeen;
    if (tap) tap('to_harness', joinParts(parts, length));
    fastPath.sendParts(harness.ws, parts, length);
    framesTo.to_harness.inc();
    bytesTo.to_harness.inc(length);
    if (header.kind === 'reset') {
      // The executor ended the stream: it is over at the relay too.
      harness.resetDone = true;
      closeHarness(harness, CLOSE.STREAM_RESET, 'stream reset by the environment');
    } else if (harness.ws.bufferedAmount > limits.harnessMaxBufferedBytes) {
      // This harness cannot keep up; it must not hold the environment's other streams hostage.
      resetStream(harness, 'relay_backpressure', CLOSE.BACKPRESSURE);
    }
  }

  // Harness sockets -----------------------------------------------------------------------------

  function attachHarness(ws: WebSocket, grant: RelayGrant, hold: GrantHold) {
    const at = Date.now();
    const harness: HarnessPeer = {
      ws,
      hold,
      environmentId: grant.environmentId,
      registrationId: grant.registrationId,
      createdAt: at,
      streamId: null,
      key: null,
      env: null,
      answered: false,
      handshakeFrames: 0,
      resetDone: false,
      paused: false,
      closing: false,
      graceTimer: undefined,
      handshakeTimer: undefined,
      lastActivity: at,
      lastSeen: at,
    };
    harnesses.add(harness);
    ws.on('message', (data: Buffer, isBinary: boolean) => onHarnessMessage(harness, [data], data.length, isBinary));
    fastPath.install(
      ws,
      limits.maxMessageBytes,
      (parts, length) => onHarnessMessage(harness, parts, length, true),
      !tap,
    );
    const harnessAlive = () => {
      harness.lastSeen = Date.now();
    };
    ws.on('pong', harnessAlive);
    ws.on('ping', harnessAlive);
    ws.on('error', (err: Error & { code?: string }) => onSocketError(err));
    ws.once('close', () => onHarnessClose(harness));
  }

  function onHarnessMessage(harness: HarnessPeer, parts: Buffer[], length: number, isBinary: boolean) {
    harness.lastSeen = Date.now();
    if (harness.closing) return;
    if (!isBinary) {
      drops('text_message');
      return resetStream(harness, 'protocol_error', CLOSE.TEXT);
    }
    if (harness.key === null) return claim(harness, parts, length);
    const env = harness.env as EnvironmentPeer;
    const header = peekHeaderParts(parts, length);
    if (!header || header.streamKey !== harness.key) {
      // A harness socket carries exactly its own stream; anything else is refused, never routed.
      drops('malformed_frame');
      return resetStream(harness, 'protocol_error', CLOSE.PROTOCOL);
    }
    if (!harness.answered && ++harness.handshakeFrames > limits.maxHandshakeFrames) {
      return resetStream(harness, 'handshake_limit', CLOSE.POLICY);
    }
    if (header.kind === 'reset') harness.resetDone = true;
    harness.lastActivity = harness.lastSeen;
    forwardToEnvironment(harness, env, parts, length);
  }

  function forwardToEnvironment(harness: HarnessPeer, env: EnvironmentPeer, parts: Buffer[], length: number) {
    if (env.ws.readyState !== OPEN) return; // the environment is going: its close event resets this stream
    if (tap) tap('to_environment', joinParts(parts, length));
    fastPath.sendParts(env.ws, parts, length);
    framesTo.to_environment.inc();
    bytesTo.to_environment.inc(length);
    if (env.ws.bufferedAmount > limits.environmentHighWaterBytes && !harness.paused) pause(harness, env);
  }

  /** The first frame must be `Resume`; it claims the stream id on the harness's environment. */
  function claim(harness: HarnessPeer, parts: Buffer[], length: number) {
    let frame: Frame;
    try {
      frame = decodeFrame(joinParts(parts, length), { maxBytes: limits.maxMessageBytes });
    } catch {
      drops('malformed_frame');
      return closeHarness(harness, CLOSE.PROTOCOL, 'invalid first frame');
    }
    if (frame.kind !== 'resume') {
      drops('malformed_frame');
      return closeHarness(harness, CLOSE.PROTOCOL, 'the first frame must be Resume');
    }
    harness.streamId = frame.streamId;
    const env = environments.get(harness.environmentId);
    const key = streamKey(frame.streamId);
    if (!env) return refuseStream(harness, 'environment_offline', CLOSE.TRY_AGAIN);
    if (env.registrationId !== harness.registrationId) {
      return refuseStream(harness, 'registration_mismatch', CLOSE.REGISTRATION_MISMATCH);
    }
    const holder = env.streams.get(key);
    if (holder && !holder.closing) return refuseStream(harness, 'duplicate_stream', CLOSE.DUPLICATE_STREAM);
    if (env.streams.size >= limits.maxStreamsPerEnvironment) {
      return refuseStream(harness, 'stream_limit', CLOSE.STREAM_LIMIT);
    }
    env.streams.set(key, harness);
    releaseUnclaimed(harness.hold);
    harness.key = key;
    harness.env = env;
    harness.handshakeFrames = 1;
    harness.lastActivity = harness.lastSeen;
    // An environment that never answers must not hold the stream (and its buffers) until the idle timeout.
    harness.handshakeTimer = setTimeout(() => onHandshakeTimeout(harness), limits.handshakeTimeoutMs);
    forwardToEnvironment(harness, env, parts, length);
  }

  function onHandshakeTimeout(harness: HarnessPeer) {
    harness.handshakeTimer = undefined;
    if (!harness.answered) resetStream(harness, 'handshake_timeout', CLOSE.TIMEOUT);
  }

  /** A claim the relay will not route: Reset to this harness only (the environment never saw it). */
  function refuseStream(harness: HarnessPeer, reason: ResetReason, code: number) {
    resets(reason);
    sendReset(harness.ws, harness.streamId, reason);
    harness.resetDone = true;
    closeHarness(harness, code, reason);
  }

  function onHarnessClose(harness: HarnessPeer) {
    clearTimeout(harness.graceTimer);
    harnesses.delete(harness);
    const env = harness.env;
    if (env && harness.key !== null && env.streams.get(harness.key) === harness && !harness.resetDone) {
      resets('harness_closed');
      sendReset(env.ws, harness.streamId, 'harness_closed');
    }
    unclaim(harness);
  }

  /** Relay-initiated end of a live stream: Reset to both sides, then close the harness socket. */
  function resetStream(harness: HarnessPeer, reason: ResetReason, code: number) {
    if (harness.closing) return;
    resets(reason);
    const env = harness.env;
    if (env && !harness.resetDone && harness.key !== null && env.streams.get(harness.key) === harness) {
      sendReset(env.ws, harness.streamId, reason);
    }
    if (harness.streamId !== null) sendReset(harness.ws, harness.streamId, reason);
    harness.resetDone = true;
    closeHarness(harness, code, reason);
  }

  function closeHarness(harness: HarnessPeer, code: number, reason: string) {
    if (harness.closing) return;
    harness.closing = true;
    releaseUnclaimed(harness.hold);
    unclaim(harness);
    if (harness.ws.readyState === OPEN) harness.ws.close(code, reason);
    // A peer that does not read never completes the close handshake; free its buffers after a grace.
    harness.graceTimer = setTimeout(() => harness.ws.terminate(), limits.closeGraceMs);
  }

  function unclaim(harness: HarnessPeer) {
    clearTimeout(harness.handshakeTimer);
    harness.handshakeTimer = undefined;
    const env = harness.env;
    if (!env) return;
    if (harness.key !== null && env.streams.get(harness.key) === harness) env.streams.delete(harness.key);
    if (harness.paused) {
      // Read again: a closing socket must be able to receive the peer's close frame (its data is ignored).
      env.paused.delete(harness);
      harness.paused = false;
      harness.ws.resume();
    }
  }

  function sendReset(ws: WebSocket, streamId: string | null, reason: ResetReason) {
    if (streamId === null || ws.readyState !== OPEN) return;
    ws.send(encodeFrame(resetFrame(streamId, reason)), BINARY);
  }

  // Revocation ----------------------------------------------------------------------------------

  /**
   * Ends every socket of each newly revoked registration (its environment socket, so every stream of it, and every
   * harness socket whose grant names it) and refuses its URLs from now on. Already known revocations are skipped:
   * the heartbeat repeats every revocation of the last URL lifetime.
   */
  function revoke(revocations: Revocation[], source: RevocationSource) {
    const at = now();
    const fresh = new Set<string>();
    for (const { environmentId, registrationId } of revocations) {
      const key = revocationKey(environmentId, registrationId);
      if (fresh.has(key) || revoked.get(key, at) !== undefined) continue;
      const forgotten = revoked.set(key, true, at);
      if (forgotten > 0) metrics.counter('relay_forgotten_total', { table: 'revocations' }).inc(forgotten);
      fresh.add(key);
    }
    if (fresh.size === 0) return;
    metrics.counter('relay_revocations_total', { source }).inc(fresh.size);
    log.info({ source, registrations: fresh.size }, 'registrations revoked');
    for (const env of [...environments.values()]) {
      if (fresh.has(revocationKey(env.environmentId, env.registrationId))) endRevokedEnvironment(env);
    }
    for (const harness of [...harnesses]) {
      if (harness.closing || !fresh.has(revocationKey(harness.environmentId, harness.registrationId))) continue;
      metrics.counter('relay_revoked_sockets_total', { role: 'harness' }).inc();
      resetStream(harness, 'registration_revoked', CLOSE.REGISTRATION_REVOKED);
    }
  }

  function endRevokedEnvironment(env: EnvironmentPeer) {
    environments.delete(env.environmentId);
    metrics.counter('relay_revoked_sockets_total', { role: 'environment' }).inc();
    log.info({ environmentId: env.environmentId }, 'environment socket closed: registration revoked');
    for (const harness of env.streams.values()) {
      if (!harness.closing) metrics.counter('relay_revoked_sockets_total', { role: 'harness' }).inc();
    }
    endEnvironment(env, 'registration_revoked', CLOSE.REGISTRATION_REVOKED);
    env.ws.close(CLOSE.REGISTRATION_REVOKED, 'registration_revoked');
    heartbeat?.kick();
  }

  // Backpressure --------------------------------------------------------------------------------

  function pause(harness: HarnessPeer, env: EnvironmentPeer) {
    harness.paused = true;
    harness.ws.pause();
    env.paused.add(harness);
    pauses.inc();
    if (env.drainHooked) return;
    env.drainHooked = true;
    // The write that crossed the high-water mark returned false, so the socket will emit 'drain'.
    env.socket.once('drain', () => {
      env.drainHooked = false;
      for (const paused of env.paused) {
        paused.paused = false;
        if (!paused.closing) paused.ws.resume();
      }
      env.paused.clear();
    });
  }

  function onSocketError(err: Error & { code?: string }) {
    if (err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') drops('oversize_message');
    else if (err.code?.startsWith('WS_ERR_')) drops('malformed_frame');
    // ws closes the socket itself (1009 for oversize, 1002 for protocol errors).
  }

  // Timers: ping/pong and idle streams ----------------------------------------------------------

  const pingTimer = setInterval(() => {
    const at = Date.now();
    const check = (ws: WebSocket, lastSeen: number) => {
      if (ws.readyState !== OPEN) return;
      if (at - lastSeen >= limits.pongTimeoutMs) {
        drops('pong_timeout');
        ws.terminate();
      } else {
        ws.ping();
      }
    };
    for (const env of environments.values()) check(env.ws, env.lastSeen);
    for (const harness of harnesses) if (!harness.closing) check(harness.ws, harness.lastSeen);
  }, limits.pingIntervalMs);

  const sweepMs = Math.max(10, Math.min(5_000, Math.floor(Math.min(limits.idleTimeoutMs, limits.claimTimeoutMs) / 4)));
  const sweepTimer = setInterval(() => {
    const at = Date.now();
    for (const harness of harnesses) {
      if (harness.closing) continue;
      if (harness.key === null) {
        if (at - harness.createdAt >= limits.claimTimeoutMs) {
          drops('claim_timeout');
          closeHarness(harness, CLOSE.TIMEOUT, 'no Resume frame in time');
        }
      } else if (at - harness.lastActivity >= limits.idleTimeoutMs) {
        resetStream(harness, 'idle_timeout', CLOSE.TIMEOUT);
      }
    }
  }, sweepMs);

  // Introspection -------------------------------------------------------------------------------

  function stats(): RelayStats {
    let streams = 0;
    let environmentQueue = 0;
    let harnessQueue = 0;
    let paused = 0;
    for (const env of environments.values()) {
      streams += env.streams.size;
      environmentQueue += env.ws.bufferedAmount;
      paused += env.paused.size;
    }
    for (const harness of harnesses) harnessQueue += harness.ws.bufferedAmount;
    return {
      environments: environments.size,
      harnessSockets: harnesses.size,
      streams,
      queuedBytes: { environment: environmentQueue, harness: harnessQueue },
      pausedHarnessSockets: paused,
    };
  }

  async function metricsText(): Promise<string> {
    return (await telemetry).prometheus();
  }

  // Lifecycle -----------------------------------------------------------------------------------

  async function listen(host: string, port: number): Promise<string> {
    server.listen(port, host);
    await once(server, 'listening');
    listening = true;
    const address = server.address();
    const bound = typeof address === 'object' && address ? address.port : port;
    const url = `ws://${host.includes(':') ? `[${host}]` : host}:${bound}`;
    boundUrl = url;
    if (options.heartbeat) await beginHeartbeat(options.heartbeat);
    return url;
  }

  async function beginHeartbeat(config: HeartbeatConfig): Promise<void> {
    if (!listening || closing) throw new Error('the relay must be listening to start its heartbeat');
    await heartbeat?.stop();
    heartbeat = startHeartbeat({
      registryUrl: config.registryUrl,
      token: config.token,
      publicUrl: config.publicUrl ?? boundUrl,
      intervalMs: config.intervalMs ?? 10_000,
      environments: () => [...environments.keys()],
      onResult: (ok) => metrics.counter('relay_heartbeats_total', { result: ok ? 'ok' : 'error' }).inc(),
      onRevocations: (revocations) => revoke(revocations, 'heartbeat'),
      log,
    });
  }

  let closed: Promise<void> | null = null;
  function close(): Promise<void> {
    closed ??= (async () => {
      closing = true;
      clearInterval(pingTimer);
      clearInterval(sweepTimer);
      await heartbeat?.stop();
      for (const env of environments.values()) for (const paused of env.paused) paused.ws.resume();
      const sockets: WebSocket[] = [...[...environments.values()].map((e) => e.ws), ...[...harnesses].map((h) => h.ws)];
      const gone = sockets.map((ws) =>
        ws.readyState === 3 ? Promise.resolve() : new Promise<void>((resolve) => ws.once('close', () => resolve())),
      );
      for (const ws of sockets) if (ws.readyState === OPEN) ws.close(CLOSE.GOING_AWAY, 'relay shutting down');
      const grace = setTimeout(() => {
        for (const ws of sockets) ws.terminate();
      }, limits.closeGraceMs);
      await Promise.all(gone);
      clearTimeout(grace);
      for (const harness of harnesses) {
        clearTimeout(harness.graceTimer);
        clearTimeout(harness.handshakeTimer);
      }
      wss.close();
      fastPath.close(); // every socket is gone: slabs still in a kernel write come back to nothing
      if (listening) {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeAllConnections();
        await stopped;
      }
      listening = false;
      if (ownsTelemetry) await (await telemetry).shutdown();
    })();
    return closed;
  }

  return {
    server,
    listen,
    startHeartbeat: beginHeartbeat,
    environments: () => [...environments.keys()],
    stats,
    metricsText,
    counters: () => metrics.snapshot(),
    close,
    [Symbol.asyncDispose]: close,
  };
}
