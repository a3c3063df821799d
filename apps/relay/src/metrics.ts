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

/** Why an upgrade was refused (HTTP status in the README). */
export const REFUSAL_REASONS = [
  'malformed_url',
  'missing_signature',
  'bad_signature',
  'expired',
  'forbidden_role',
  'registration_revoked',
  'stale_registration',
  'ip_limit',
  'shutting_down',
] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/** How a revocation reached the relay. */
export const REVOCATION_SOURCES = ['heartbeat', 'push'] as const;
export type RevocationSource = (typeof REVOCATION_SOURCES)[number];

/** What became of a `POST /v1/revocations`. */
export const PUSH_RESULTS = ['ok', 'bad_signature', 'malformed', 'too_large', 'busy'] as const;
export type PushResult = (typeof PUSH_RESULTS)[number];

/** The relay's bounded memories: an entry forgotten to stay within `maxRememberedRegistrations`. */
export const MEMORY_TABLES = ['revocations', 'epochs'] as const;
export type MemoryTable = (typeof MEMORY_TABLES)[number];

type Labels = Record<string, string>;

function labelText(labels: Labels): string {
  const parts = Object.entries(labels).map(
    ([k, v]) => `${k}="${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`,
  );
  return parts.length > 0 ? `{${parts.join(',')}}` : '';
}

/**
 * Prometheus text exposition (0.0.4) without a library, as the registry does: counters are incremented on
 * the hot path (one Map lookup), gauges are read at scrape time. Every label value is pre-registered, so a
 * reason without a series fails at startup rather than appearing later.
 */
export class RelayMetrics {
  readonly #counters = new Map<string, { help: string; series: Map<string, number> }>();

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

  #define(name: string, help: string, label: string, values: readonly string[]) {
    const series = new Map<string, number>();
    if (label === '') series.set('', 0);
    for (const value of values) series.set(labelText({ [label]: value }), 0);
    this.#counters.set(name, { help, series });
  }

  /** The counter's series for one label value, resolved once so the hot path only adds. */
  counter(name: string, labels: Labels = {}): { inc(by?: number): void; value(): number } {
    const counter = this.#counters.get(name);
    const key = labelText(labels);
    if (!counter?.series.has(key)) throw new Error(`unregistered metric ${name}${key}`);
    const series = counter.series;
    return {
      inc: (by = 1) => {
        series.set(key, (series.get(key) as number) + by);
      },
      value: () => series.get(key) as number,
    };
  }

  render(gauges: Array<{ name: string; help: string; series: Array<[Labels, number]> }>): string {
    const lines: string[] = [];
    for (const [name, { help, series }] of this.#counters) {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
      for (const [labels, value] of series) lines.push(`${name}${labels} ${value}`);
    }
    for (const gauge of gauges) {
      lines.push(`# HELP ${gauge.name} ${gauge.help}`, `# TYPE ${gauge.name} gauge`);
      for (const [labels, value] of gauge.series) lines.push(`${gauge.name}${labelText(labels)} ${value}`);
    }
    return `${lines.join('\n')}\n`;
  }
}
