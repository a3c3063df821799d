import { once } from 'node:events';
import { Telemetry, type TelemetryOptions } from '@tether/telemetry';
import pino from 'pino';
import { Admission } from './admission.js';
import type { HeartbeatConfig, Relay, RelayOptions } from './api.js';
import { TrustedProxies } from './client-address.js';
import { systemClock } from './clock.js';
import { FastPath } from './fastpath.js';
import { type Heartbeat, startHeartbeat } from './heartbeat.js';
import { createHttpServer } from './http.js';
import { DEFAULT_LIMITS, type RelayLimits } from './limits.js';
import { RelayMetrics } from './metrics.js';
import { PairingTable } from './pairing.js';
import { PushSources } from './push-sources.js';

export type { Direction, HeartbeatConfig, Relay, RelayOptions, RelayStats } from './api.js';
export { HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS } from './http.js';

/** The relay's telemetry when none is given: Prometheus, no push, no process collectors (tests build many relays). */
const PROMETHEUS_ONLY: TelemetryOptions = { serviceName: 'tether-relay', prometheus: true };

/**
 * Builds the relay (never listens) from its parts: the HTTP server (http.ts) whose upgrades are authenticated before
 * any WebSocket exists (admission.ts), the pairing table of environments, harnesses and their streams (pairing.ts),
 * each socket a peer (peer.ts), and the presence heartbeat (heartbeat.ts).
 */
export function createRelay(options: RelayOptions): Relay {
  const limits: RelayLimits = { ...DEFAULT_LIMITS, ...options.limits };
  const log = options.logger ?? pino({ level: 'silent' });
  const clock = options.now ?? systemClock;
  const trustProxy = options.trustProxy ?? TrustedProxies.none();
  const metrics = new RelayMetrics();
  // The counters are plain numbers from here on; the Telemetry reads them (and stats()) when it collects.
  const given = options.telemetry;
  const ownsTelemetry = !(given instanceof Telemetry);
  const telemetry = (
    given instanceof Telemetry ? Promise.resolve(given) : Telemetry.create(given ?? PROMETHEUS_ONLY)
  ).then((t) => {
    metrics.register(t, () => table.stats());
    return t;
  });
  const metricsText = async () => (await telemetry).prometheus();
  let closing = false;
  let listening = false;
  let heartbeat: Heartbeat | null = null;
  let boundUrl = '';

  // This relay's slabs, read buffer and write batching: closed with the relay, shared with no other one.
  const fastPath = new FastPath();
  const table: PairingTable = new PairingTable({
    limits,
    clock,
    log,
    metrics,
    tap: options.tap,
    peers: {
      clock,
      fastPath,
      maxMessageBytes: limits.maxMessageBytes,
      fast: !options.tap,
      onError: (err) => table.onSocketError(err),
    },
    onEnvironmentsChanged: () => heartbeat?.kick(),
  });
  const admission = new Admission({
    publicKey: options.publicKey,
    limits,
    clock,
    log,
    metrics,
    trustProxy,
    table,
    closing: () => closing,
  });
  const server = createHttpServer({
    publicKey: options.publicKey,
    log,
    metrics,
    trustProxy,
    pushSources: options.pushSources ?? PushSources.any(),
    ready: () => listening && !closing,
    metricsText,
    revoke: (revocations, source) => table.revoke(revocations, source),
  });
  server.on('upgrade', admission.onUpgrade);

  async function listen(host: string, port: number): Promise<string> {
    server.listen(port, host);
    await once(server, 'listening');
    listening = true;
    const address = server.address();
    const bound = typeof address === 'object' && address ? address.port : port;
    boundUrl = `ws://${host.includes(':') ? `[${host}]` : host}:${bound}`;
    if (options.heartbeat) await beginHeartbeat(options.heartbeat);
    return boundUrl;
  }

  async function beginHeartbeat(config: HeartbeatConfig): Promise<void> {
    if (!listening || closing) throw new Error('the relay must be listening to start its heartbeat');
    await heartbeat?.stop();
    heartbeat = startHeartbeat({
      registryUrl: config.registryUrl,
      token: config.token,
      publicUrl: config.publicUrl ?? boundUrl,
      intervalMs: config.intervalMs ?? 10_000,
      environments: () => table.environmentIds(),
      onResult: (ok) => metrics.counter('relay_heartbeats_total', { result: ok ? 'ok' : 'error' }).inc(),
      onRevocations: (revocations) => table.revoke(revocations, 'heartbeat'),
      log,
    });
  }

  let closed: Promise<void> | null = null;
  function close(): Promise<void> {
    closed ??= (async () => {
      closing = true;
      await heartbeat?.stop();
      await table.close();
      admission.close();
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
    environments: () => table.environmentIds(),
    stats: () => table.stats(),
    metricsText,
    counters: () => metrics.snapshot(),
    close,
    [Symbol.asyncDispose]: close,
  };
}
