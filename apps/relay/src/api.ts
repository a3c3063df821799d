import type { KeyObject } from 'node:crypto';
import type { Server } from 'node:http';
import type { Telemetry, TelemetryOptions } from '@tether/telemetry';
import type { Logger } from 'pino';
import type { TrustedProxies } from './client-address.js';
import type { Clock } from './clock.js';
import type { RelayLimits } from './limits.js';
import type { Direction, RelayStats } from './pairing.js';
import type { PushSources } from './push-sources.js';

export type { Direction, RelayStats } from './pairing.js';

export interface RelayOptions {
  /** The registry's Ed25519 public key: the only thing the relay needs to authenticate sockets. */
  publicKey: KeyObject;
  limits?: Partial<RelayLimits>;
  /** Default: silent. Never receives URLs (they carry signatures) or payloads. */
  logger?: Logger;
  /**
   * The relay's one clock, epoch ms: signature expiry, the bounded memories, liveness and stream deadlines;
   * default the system clock.
   */
  now?: Clock;
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
