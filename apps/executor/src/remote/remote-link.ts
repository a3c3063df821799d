import type { Agent, IncomingMessage } from 'node:http';
import type { MessageTransport } from '@tether/jsonrpc';
import { generateIdentity, type NoiseIdentity } from '@tether/noise';
import { DIRECT, outboundFetch, type ProxySettings, webSocketAgent } from '@tether/outbound';
import { relayNodeOf } from '@tether/relay-auth';
import { MAX_FRAME_BYTES, relaySocketMask } from '@tether/relay-frames';
import { WebSocket } from 'ws';
import type { Logger } from '../logger.js';
import { ExecutorMetrics, secondsSince } from '../metrics.js';
import type { Principal } from '../principal.js';
import { type MultiplexerLimits, RelayMultiplexer } from './multiplexer.js';
import { type Registration, RegistryClient, RegistryError } from './registry-client.js';
import type { Clock } from './token-bucket.js';

/** Attempts to reach an unreachable registry at start before giving up (backoff 1, 2, 4, 8, 16 s). */
const START_UNREACHABLE_RETRIES = 5;
/** The relay's close code for an environment socket another one (same or newer registration) took over. */
const RELAY_CLOSE_REPLACED = 4001;
/** The relay's answer to an upgrade whose registration is older than the environment's newest. */
const HTTP_STALE_REGISTRATION = 409;
/**
 * Failover: after this many dials in a row of the same relay node fail (the socket cannot be opened at all), the
 * node is taken for dead and the executor registers again, naming it, to be sent to a live node. With the 1 s and
 * 2 s backoffs before the two dials, a node that dies moves its executors within about 4 s of the socket's drop
 * plus one registration (docs/relay.md, "Several relay nodes").
 */
const FAILOVER_AFTER_FAILED_DIALS = 2;
/**
 * The relay socket is pinged this often and dropped when a ping goes unanswered until the next: a node that goes
 * silent (host down, partition) is noticed within two intervals. A dial that times out then counts as the node
 * being gone at once, so a silent node moves its executors within 2 × 5 s + 1 s + the 10 s dial timeout (≈ 21 s).
 */
const RELAY_PING_INTERVAL_MS = 5_000;
const RELAY_CONNECT_TIMEOUT_MS = 10_000;

export interface RemoteLinkOptions {
  registryUrl: string;
  environmentId: string;
  apiKey: string;
  /**
   * Serve JSON-RPC on a stream whose handshake completed (its messages held to `maxMessageBytes`), for the principal
   * the registry named (principal.ts).
   */
  onStream(stream: MessageTransport, principal: Principal): void;
  /** `max_message_bytes` for relay streams (default 16 MiB, as the config's). */
  maxMessageBytes?: number;
  logger: Logger;
  /** Generated in memory when absent (as codex does). */
  identity?: NoiseIdentity;
  /** How long a relay dial may take before the node counts as gone (default 10 s). */
  connectTimeoutMs?: number;
  /** Liveness pings on the relay socket (default 5 s; 0 turns them off, and with them the notice of a silent node). */
  pingIntervalMs?: number;
  /** Reconnect backoff: first delay, doubled per failure up to `maxBackoffMs`. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  limits?: Partial<MultiplexerLimits>;
  /** Time for the multiplexer's handshake and `/validate` budgets (tests drive it). */
  clock?: Clock;
  fetch?: typeof fetch;
  /**
   * The proxies of the registry calls and the relay socket (the CLI's come from HTTPS_PROXY, HTTP_PROXY,
   * ALL_PROXY and NO_PROXY); default none.
   */
  proxy?: ProxySettings;
  /** Registration and relay-socket metrics (default: recorded nowhere). */
  metrics?: ExecutorMetrics;
}

export type RemoteLinkState = 'registering' | 'connecting' | 'connected' | 'backoff' | 'closed';

/**
 * Remote mode (rendezvous.md §5): register the executor key with the registry, dial the signed relay
 * URL, and serve every harness stream the relay multiplexes onto that socket. When the socket drops the
 * streams end (their sessions detach and stay resumable) and the link redials with exponential backoff;
 * an HTTP 4xx on the upgrade (URL expired or revoked) means register again first.
 *
 * Superseded is final: when another executor registers the same environment, the relay hands it the
 * environment (its epoch is newer) and closes ours (4001), and refuses our URL from then on (409). Registering
 * again would take the environment back and the two would trade it forever, so the link gives up instead,
 * as a lease holder does when its lease is taken.
 */
export class RemoteLink {
  readonly identity: NoiseIdentity;
  private readonly environmentId: string;
  private readonly registry: RegistryClient;
  private readonly serveStream: RemoteLinkOptions['onStream'];
  /** The multiplexer's limits: its defaults under `limits`, under `maxMessageBytes`. */
  private readonly limits: Partial<MultiplexerLimits>;
  private readonly clock: Clock | undefined;
  private readonly proxy: ProxySettings;
  private readonly connectTimeoutMs: number;
  private readonly pingIntervalMs: number;
  private readonly minBackoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly logger: Logger;
  private readonly metrics: ExecutorMetrics;
  private registration: Registration | null = null;
  private ws: WebSocket | null = null;
  private mux: RelayMultiplexer | null = null;
  private stateValue: RemoteLinkState = 'registering';
  private stopping = false;
  private loop: Promise<void> | null = null;
  private wake: (() => void) | null = null;
  private connectWaiters: Array<() => void> = [];
  private fail!: (err: RegistryError) => void;
  /**
   * Settles when the link gave up for good after it started: the registry refused the API key (401/403)
   * on a re-registration, or a newer registration of the environment superseded this one (status 409, code
   * `superseded`). The executor must exit then; retrying would go on forever.
   */
  readonly failed: Promise<RegistryError> = new Promise((resolve) => {
    this.fail = resolve;
  });

  constructor(options: RemoteLinkOptions) {
    this.identity = options.identity ?? generateIdentity();
    this.environmentId = options.environmentId;
    this.serveStream = options.onStream;
    this.limits = {
      ...options.limits,
      ...(options.maxMessageBytes !== undefined ? { maxMessageBytes: options.maxMessageBytes } : {}),
    };
    this.clock = options.clock;
    this.proxy = options.proxy ?? DIRECT;
    this.connectTimeoutMs = options.connectTimeoutMs ?? RELAY_CONNECT_TIMEOUT_MS;
    this.pingIntervalMs = options.pingIntervalMs ?? RELAY_PING_INTERVAL_MS;
    this.minBackoffMs = options.minBackoffMs ?? 1000;
    this.maxBackoffMs = options.maxBackoffMs ?? 30_000;
    this.logger = options.logger;
    this.metrics = options.metrics ?? new ExecutorMetrics();
    this.metrics.remoteModeStarted();
    this.registry = new RegistryClient({
      baseUrl: options.registryUrl,
      apiKey: options.apiKey,
      fetch: options.fetch ?? outboundFetch(this.proxy),
    });
  }

  get state(): RemoteLinkState {
    return this.stateValue;
  }

  /** True while the relay socket is up: what `/readyz` reports in remote mode. */
  get ready(): boolean {
    return this.stateValue === 'connected';
  }

  /** Streams open or handshaking on the current relay socket. */
  get streams(): number {
    return this.mux?.stats.streams ?? 0;
  }

  get registrationId(): string | null {
    return this.registration?.registrationId ?? null;
  }

  /**
   * Registers (a refusal is fatal and thrown: a wrong key or environment will not fix itself), then
   * keeps the relay link up in the background until `close()`. Resolves once registered.
   */
  async start(): Promise<Registration> {
    const registration = await this.register(true);
    this.loop = this.run();
    return registration;
  }

  /** Resolves when the relay socket is connected (for tests and readiness waits). */
  whenConnected(): Promise<void> {
    if (this.stopping || this.stateValue === 'connected') return Promise.resolve();
    return new Promise((resolve) => this.connectWaiters.push(resolve));
  }

  private wakeConnectWaiters(): void {
    for (const resolve of this.connectWaiters.splice(0)) resolve();
  }

  async close(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    this.mux?.close('executor shutting down');
    if (this.ws && this.ws.readyState !== WebSocket.CLOSED) this.ws.close(1001, 'executor shutting down');
    await this.loop;
    this.stateValue = 'closed';
    this.wakeConnectWaiters();
  }

  private async register(initial: boolean, unreachableRelay?: string): Promise<Registration> {
    this.stateValue = 'registering';
    let delay = this.minBackoffMs;
    let unreachable = 0;
    for (;;) {
      const attemptAt = performance.now();
      try {
        this.registration = await this.registry.register(this.environmentId, this.identity.publicKey, unreachableRelay);
        this.metrics.registration('success', secondsSince(attemptAt));
        this.logger.info(
          {
            environmentId: this.environmentId,
            registrationId: this.registration.registrationId,
            relayNode: relayNodeOf(this.registration.url),
          },
          'registered with the registry',
        );
        return this.registration;
      } catch (err) {
        this.metrics.registration('error', secondsSince(attemptAt));
        if (!(err instanceof RegistryError)) throw err;
        // At start only the retryable answers are retried, and an unreachable registry a few times (it may
        // be starting beside us); later, every failure is (the link must come back).
        if (initial && err.status === null && ++unreachable > START_UNREACHABLE_RETRIES) throw err;
        if ((initial && !err.retryable) || this.stopping) throw err;
        if (isKeyRefusal(err)) {
          this.logger.error({ err: err.message }, 'the registry refused the API key: giving up');
          throw err;
        }
        this.logger.warn({ err: err.message, retryInMs: delay }, 'registration failed; retrying');
        await this.sleep(jitter(delay));
        if (this.stopping) throw err;
        delay = Math.min(delay * 2, this.maxBackoffMs);
      }
    }
  }

  private async run(): Promise<void> {
    let delay = this.minBackoffMs;
    // Dials of the current registration's node that failed in a row, and the node to leave when registering again.
    let failedDials = 0;
    let leaving: string | undefined;
    while (!this.stopping) {
      if (!this.registration) {
        try {
          await this.register(false, leaving);
          failedDials = 0;
          leaving = undefined;
        } catch (err) {
          // Stopping, or the key was refused: the latter ends the executor.
          if (!this.stopping && err instanceof RegistryError) this.fail(err);
          this.stateValue = 'closed';
          return;
        }
      }
      const outcome = await this.connectOnce(this.registration!);
      if (this.stopping) return;
      this.metrics.websocketReconnect(
        outcome === 'connected' ? 'disconnected' : outcome === 'rejected' ? 'rejected' : 'connect_failed',
      );
      if (outcome === 'superseded') {
        this.logger.error(
          { environmentId: this.environmentId },
          'another executor registered this environment and took its relay socket: giving up',
        );
        this.fail(
          new RegistryError(
            'another executor registered this environment since (its registration is newer)',
            HTTP_STALE_REGISTRATION,
            'superseded',
            false,
          ),
        );
        this.stateValue = 'closed';
        return;
      }
      if (outcome === 'connected') delay = this.minBackoffMs;
      if (outcome === 'rejected') this.registration = null;
      failedDials = outcome === 'timed_out' ? FAILOVER_AFTER_FAILED_DIALS : outcome === 'failed' ? failedDials + 1 : 0;
      if (failedDials >= FAILOVER_AFTER_FAILED_DIALS && this.registration) {
        // The node is gone (its socket cannot even be opened): register again at once, away from it.
        leaving = relayNodeOf(this.registration.url) ?? undefined;
        this.logger.warn({ relayNode: leaving, failedDials }, 'relay node unreachable; registering again to move');
        this.registration = null;
        failedDials = 0;
        delay = this.minBackoffMs;
        continue;
      }
      this.stateValue = 'backoff';
      this.logger.info({ retryInMs: delay }, 'relay link down; reconnecting');
      await this.sleep(jitter(delay));
      delay = Math.min(delay * 2, this.maxBackoffMs);
    }
  }

  /** One physical connection: resolves when it ends. */
  private async connectOnce(
    registration: Registration,
  ): Promise<'connected' | 'failed' | 'timed_out' | 'rejected' | 'superseded'> {
    this.stateValue = 'connecting';
    const connectAt = performance.now();
    // The URL is a credential: say what is wrong, never what it is. A fresh registration may fix it.
    const unusableUrl = () => {
      this.logger.error('the registry gave a relay URL that cannot be dialled; registering again');
      return 'rejected' as const;
    };
    let agent: Agent | undefined;
    try {
      // A CONNECT tunnel when a proxy applies to the relay (undefined: ws dials directly).
      agent = await webSocketAgent(new URL(registration.url), this.proxy);
    } catch {
      return unusableUrl();
    }
    // close() during that wait saw no socket of this attempt to close.
    if (this.stopping) return 'failed';
    return new Promise((resolve) => {
      let opened = false;
      let rejected = false;
      let superseded = false;
      let ws: WebSocket;
      try {
        ws = new WebSocket(registration.url, {
          maxPayload: MAX_FRAME_BYTES, // one relay frame per WebSocket message (rendezvous.md §3.1)
          perMessageDeflate: false,
          generateMask: relaySocketMask, // frames are ciphertext: no mask needed (relay-frames/socket-mask.ts)
          handshakeTimeout: this.connectTimeoutMs,
          agent,
        });
      } catch {
        resolve(unusableUrl());
        return;
      }
      this.ws = ws;
      ws.on('unexpected-response', (_req, res: IncomingMessage) => {
        const status = res.statusCode ?? 0;
        rejected = status >= 400 && status < 500;
        superseded = status === HTTP_STALE_REGISTRATION;
        this.logger.warn({ status }, 'relay refused the upgrade');
        res.resume();
        ws.terminate();
      });
      let timedOut = false;
      ws.on('error', (err) => {
        if (opened) return;
        // ws's own words when `handshakeTimeout` passes (checked against ws 8.23).
        if (/handshake has timed out/i.test(err.message)) timedOut = true;
        this.logger.warn({ err: err.message }, 'cannot reach the relay');
      });
      let pingTimer: NodeJS.Timeout | null = null;
      let alive = true;
      ws.on('pong', () => {
        alive = true;
      });
      ws.once('open', () => {
        opened = true;
        this.metrics.websocketConnect('success', secondsSince(connectAt));
        this.metrics.websocketUp();
        this.stateValue = 'connected';
        this.logger.info({ environmentId: registration.environmentId }, 'relay link up');
        this.mux = new RelayMultiplexer(ws, {
          environmentId: registration.environmentId,
          registrationId: registration.registrationId,
          identity: this.identity,
          authorize: ({ remoteStatic, authorization }) =>
            this.registry.validate(registration.environmentId, {
              registrationId: registration.registrationId,
              harnessKey: remoteStatic,
              authorization,
            }),
          onStream: this.serveStream,
          logger: this.logger,
          metrics: this.metrics,
          limits: this.limits,
          ...(this.clock ? { clock: this.clock } : {}),
        });
        const interval = this.pingIntervalMs;
        pingTimer =
          interval <= 0
            ? null
            : setInterval(() => {
                if (!alive) {
                  this.logger.warn('relay did not answer pings: dropping the link');
                  ws.terminate();
                  return;
                }
                alive = false;
                ws.ping();
              }, interval);
        pingTimer?.unref();
        this.wakeConnectWaiters();
      });
      ws.once('close', (code: number) => {
        if (pingTimer) clearInterval(pingTimer);
        if (opened && code === RELAY_CLOSE_REPLACED) superseded = true;
        this.mux?.close(`relay socket closed (${code})`);
        this.mux = null;
        this.ws = null;
        if (opened) {
          this.metrics.websocketDown();
          this.logger.warn({ code }, 'relay link closed');
        } else {
          this.metrics.websocketConnect(rejected ? 'rejected' : 'error', secondsSince(connectAt));
        }
        resolve(
          superseded ? 'superseded' : opened ? 'connected' : rejected ? 'rejected' : timedOut ? 'timed_out' : 'failed',
        );
      });
    });
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }
}

function jitter(ms: number): number {
  return Math.round(ms * (0.8 + Math.random() * 0.4));
}

/** A refusal that no retry can fix: the registry no longer accepts the API key (revoked, or wrong). */
export function isKeyRefusal(err: RegistryError): boolean {
  return err.status === 401 || err.status === 403;
}
