import type { ObservedInstrument, Telemetry } from '@tether/telemetry';

/** Why a stream was reset by the relay (sent as `Reset.reason`; all ≤ 256 bytes, non-empty). */
export const RESET_REASONS = [
  'harness_closed',
  'environment_closed',
  'environment_replaced',
  'environment_offline',
  'relay_backpressure',
  'stream_limit',
  'duplicate_stream',
  'registration_mismatch',
  'handshake_limit',
  'handshake_timeout',
  'registration_revoked',
  'idle_timeout',
  'protocol_error',
  'relay_shutdown',
] as const;
export type ResetReason = (typeof RESET_REASONS)[number];

/** Why the relay dropped a frame or a socket without a Reset. */
export const DROP_REASONS = [
  'unknown_stream',
  'malformed_frame',
  'text_message',
  'oversize_message',
  'pong_timeout',
  'claim_timeout',
] as const;
export type DropReason = (typeof DROP_REASONS)[number];

/** Why an upgrade was refused (each with its HTTP status in apps/relay/README.md, "Backpressure and limits"). */
export const REFUSAL_REASONS = [
  'malformed_url',
  'missing_signature',
  'bad_signature',
  'expired',
  'forbidden_role',
  'registration_revoked',
  'stale_registration',
  'ip_limit',
  'connection_limit',
  'url_limit',
  'url_unclaimed_limit',
  'shutting_down',
] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/** How a revocation reached the relay. */
export const REVOCATION_SOURCES = ['heartbeat', 'push'] as const;
export type RevocationSource = (typeof REVOCATION_SOURCES)[number];

/** What became of a `POST /v1/revocations`. */
export const PUSH_RESULTS = [
  'ok',
  'bad_signature',
  'malformed',
  'too_large',
  'busy',
  'source_busy',
  'timeout',
  'forbidden_source',
] as const;
export type PushResult = (typeof PUSH_RESULTS)[number];

/** The relay's bounded memories: an entry forgotten to stay within `maxRememberedRegistrations`. */
export const MEMORY_TABLES = ['revocations', 'epochs'] as const;
export type MemoryTable = (typeof MEMORY_TABLES)[number];

type Labels = Readonly<Record<string, string>>;

/** A counter series resolved once: `inc` adds to a plain number (no allocation, no lookup). */
export interface CounterSeries {
  inc(by?: number): void;
  value(): number;
}

interface Family {
  readonly description: string;
  readonly label: string;
  /** One attributes object per label value, built once and handed to every collection. */
  readonly attributes: readonly Labels[];
  readonly values: Float64Array;
}

/** What the gauges are read from, once per collection. */
export type RelayGaugeSource = () => {
  environments: number;
  harnessSockets: number;
  streams: number;
  queuedBytes: { environment: number; harness: number };
  pausedHarnessSockets: number;
};

/** The position of `labels`' series in its family, or -1 when the family has no such series. */
function seriesIndex(family: Family, labels: Labels): number {
  const keys = Object.keys(labels);
  if (family.label === '') return keys.length === 0 ? 0 : -1;
  if (keys.length !== 1 || keys[0] !== family.label) return -1;
  return family.attributes.findIndex((attributes) => attributes[family.label] === labels[family.label]);
}

const ENVIRONMENT = { role: 'environment' };
const HARNESS = { role: 'harness' };

/**
 * The relay's counters and gauges. Counters are plain numbers the hot path adds to through a series resolved
 * once (`counter()`); `register()` hands them and the gauges to a Telemetry, which reads them all in one
 * callback when it collects (a `/metrics` scrape, an OTLP export). Every label value is pre-registered, so a
 * reason without a series fails at startup rather than appearing later.
 */
export class RelayMetrics {
  readonly #families = new Map<string, Family>();

  constructor() {
    this.#define('relay_forwarded_frames_total', 'Frames forwarded, by direction.', 'direction', [
      'to_environment',
      'to_harness',
    ]);
    this.#define('relay_forwarded_bytes_total', 'Bytes forwarded (WebSocket payloads), by direction.', 'direction', [
      'to_environment',
      'to_harness',
    ]);
    this.#define('relay_resets_total', 'Streams reset by the relay, by reason.', 'reason', RESET_REASONS);
    this.#define('relay_drops_total', 'Frames or sockets dropped without a Reset, by reason.', 'reason', DROP_REASONS);
    this.#define('relay_upgrades_refused_total', 'WebSocket upgrades refused, by reason.', 'reason', REFUSAL_REASONS);
    this.#define('relay_connections_total', 'WebSocket connections accepted, by role.', 'role', [
      'environment',
      'harness',
    ]);
    this.#define('relay_backpressure_pauses_total', 'Times a harness socket was paused for its environment.', '', []);
    this.#define('relay_heartbeats_total', 'Presence heartbeats sent to the registry, by result.', 'result', [
      'ok',
      'error',
    ]);
    this.#define(
      'relay_revocations_total',
      'Executor registrations newly revoked here, by how the revocation arrived.',
      'source',
      REVOCATION_SOURCES,
    );
    this.#define('relay_revocation_pushes_total', 'POST /v1/revocations requests, by result.', 'result', PUSH_RESULTS);
    this.#define('relay_revoked_sockets_total', 'Sockets closed because their registration was revoked.', 'role', [
      'environment',
      'harness',
    ]);
    this.#define(
      'relay_forgotten_total',
      'Entries dropped from a full table (revocations, epochs) before their lifetime ended.',
      'table',
      MEMORY_TABLES,
    );
  }

  #define(name: string, description: string, label: string, values: readonly string[]) {
    const attributes = label === '' ? [{}] : values.map((value) => ({ [label]: value }));
    this.#families.set(name, { description, label, attributes, values: new Float64Array(attributes.length) });
  }

  /** The counter's series for one label value, resolved once so the hot path only adds. */
  counter(name: string, labels: Labels = {}): CounterSeries {
    const family = this.#families.get(name);
    const index = family ? seriesIndex(family, labels) : -1;
    if (family === undefined || index < 0) throw new Error(`unregistered metric ${name}${JSON.stringify(labels)}`);
    const values = family.values;
    return {
      inc: (by = 1) => {
        values[index] = (values[index] as number) + by;
      },
      value: () => values[index] as number,
    };
  }

  /** Every counter series by its Prometheus name, e.g. `relay_resets_total{reason="idle_timeout"}` (diagnostics, tests). */
  snapshot(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [name, family] of this.#families) {
      family.attributes.forEach((attributes, i) => {
        const label = family.label === '' ? '' : `{${family.label}="${attributes[family.label]}"}`;
        out[`${name}${label}`] = family.values[i] as number;
      });
    }
    return out;
  }

  /** Hands the counters, and the gauges read from `gauges`, to `telemetry` (read at each collection). */
  register(telemetry: Telemetry, gauges: RelayGaugeSource): void {
    const counters = Object.fromEntries(
      [...this.#families].map(([name, { description }]) => [name, { kind: 'counter', description }]),
    ) as Record<string, ObservedInstrument>;
    telemetry.observe(counters, (report) => {
      for (const [name, family] of this.#families) {
        for (let i = 0; i < family.attributes.length; i++) {
          report(name, family.values[i] as number, family.attributes[i]);
        }
      }
    });
    telemetry.observe(
      {
        relay_sockets: { kind: 'gauge', description: 'Open WebSocket connections, by role.' },
        relay_streams: { kind: 'gauge', description: 'Claimed streams (paired harness sockets).' },
        relay_queued_bytes: {
          kind: 'gauge',
          description: 'Bytes queued in the relay’s socket write buffers, by destination role.',
        },
        relay_paused_harness_sockets: {
          kind: 'gauge',
          description: 'Harness sockets paused because their environment socket is behind.',
        },
      },
      (report) => {
        const s = gauges();
        report('relay_sockets', s.environments, ENVIRONMENT);
        report('relay_sockets', s.harnessSockets, HARNESS);
        report('relay_streams', s.streams);
        report('relay_queued_bytes', s.queuedBytes.environment, ENVIRONMENT);
        report('relay_queued_bytes', s.queuedBytes.harness, HARNESS);
        report('relay_paused_harness_sockets', s.pausedHarnessSockets);
      },
    );
  }
}
