import { type ObservedInstrument, Telemetry, type TelemetryOptions } from '@tether/telemetry';

type Counter = ReturnType<Telemetry['counter']>;

const COUNTERS = {
  registry_http_requests_total: 'HTTP requests answered, by method, route and status.',
  registry_registrations_total: 'Executor registrations accepted.',
  registry_bundles_total: 'Harness rendezvous bundles issued.',
  registry_validations_total: 'Harness key validations, by result.',
  registry_rate_limited_total: 'Requests refused by a rate limit (429), by route and reason (address or api_key).',
} as const;
export type RegistryCounter = keyof typeof COUNTERS;

const GAUGES = {
  registry_environments: { kind: 'gauge', description: 'Known environments.' },
  registry_registered_environments: {
    kind: 'gauge',
    description: 'Environments with a current executor registration.',
  },
  registry_relay_nodes_routable: { kind: 'gauge', description: 'Relay nodes environments are routed to.' },
} as const satisfies Record<string, ObservedInstrument>;

/** The gauges' values, read when the metrics are collected (a scrape, an OTLP export). */
export interface RegistryGauges {
  environments: number;
  registeredEnvironments: number;
  relayNodesRoutable: number;
}

/**
 * The registry's metrics on a Telemetry (`/metrics` and OTLP): counters added to per request, gauges read
 * by `gauges()` at collection time.
 */
export class Metrics {
  readonly telemetry: Telemetry;
  private readonly counters: Record<RegistryCounter, Counter>;
  private readonly owned: boolean;

  constructor(telemetry: Telemetry, owned: boolean) {
    this.telemetry = telemetry;
    this.owned = owned;
    this.counters = Object.fromEntries(
      Object.entries(COUNTERS).map(([name, description]) => [name, telemetry.counter(name, description)]),
    ) as Record<RegistryCounter, Counter>;
  }

  inc(name: RegistryCounter, labels: Record<string, string> = {}, by = 1): void {
    this.counters[name].add(by, labels);
  }

  /** Registers the gauges; `read` may share one scan between collections (see `sharedScan`). */
  observeGauges(read: () => Promise<RegistryGauges>): void {
    this.telemetry.observe(GAUGES, async (report) => {
      const gauges = await read();
      report('registry_environments', gauges.environments);
      report('registry_registered_environments', gauges.registeredEnvironments);
      report('registry_relay_nodes_routable', gauges.relayNodesRoutable);
    });
  }

  /** The Prometheus text exposition, as served on `/metrics`. */
  text(): Promise<string> {
    return this.telemetry.prometheus();
  }

  /** Shuts the telemetry down when it is the registry's own. */
  async close(): Promise<void> {
    if (this.owned) await this.telemetry.shutdown();
  }
}

/**
 * The registry's metrics on `telemetry` (its owner shuts it down), or on one made from these options (by
 * default Prometheus only), shut down by `close()`.
 */
export async function createRegistryMetrics(telemetry?: Telemetry | TelemetryOptions): Promise<Metrics> {
  if (telemetry instanceof Telemetry) return new Metrics(telemetry, false);
  return new Metrics(await Telemetry.create(telemetry ?? { serviceName: 'tether-registry', prometheus: true }), true);
}
