/**
 * What a Telemetry is made with. Its own module so that the SDK half (sdk.ts, loaded only when something is
 * exported) and the Telemetry front (telemetry.ts) both depend on it, and not on each other both ways.
 */
import type { ProxySettings } from '@tether/outbound';

/**
 * OTLP aggregation temporality: `delta` (what Codex sends), `cumulative` (the specification's default) or
 * `lowmemory` (delta for synchronous counters and histograms, cumulative for the rest).
 */
export type Temporality = 'delta' | 'cumulative' | 'lowmemory';

/** `[otel] metrics_exporter = { otlp-http = { endpoint, protocol } }`. */
export interface OtlpHttpExporterConfig {
  /** Full URL the metrics are POSTed to, e.g. `http://127.0.0.1:4318/v1/metrics`. */
  endpoint: string;
  /** `json` (application/json) or `binary` (application/x-protobuf). */
  protocol: 'json' | 'binary';
  headers?: Record<string, string>;
  /** The proxies exports go through (HTTPS_PROXY/HTTP_PROXY/NO_PROXY); default none. */
  proxy?: ProxySettings;
}

export interface TelemetryOptions {
  /** Resource `service.name`. */
  serviceName: string;
  serviceVersion?: string;
  /** Resource attribute `env` (Codex: `[otel] environment`); absent = none. */
  environment?: string;
  /** More resource attributes (`OTEL_RESOURCE_ATTRIBUTES`); `service.*` and `env` above win over these. */
  resourceAttributes?: Record<string, string>;
  /** Push metrics over OTLP/HTTP; absent = no push. */
  otlpHttp?: OtlpHttpExporterConfig | null;
  /** Temporality of the OTLP push (default `delta`, as Codex); Prometheus is always cumulative. */
  temporality?: Temporality;
  /** Period of the background export (default 60 s). Shutdown always exports once more. */
  exportIntervalMs?: number;
  /** How long one export may take (default 5 s); it bounds how long `shutdown()` can delay an exit. */
  exportTimeoutMs?: number;
  /** Keep a cumulative pull reader so `prometheus()` can render the instruments. */
  prometheus?: boolean;
  /**
   * Add prom-client's process and Node.js collectors (`process_*`, `nodejs_*`: CPU, memory, file
   * descriptors, event-loop lag, GC) and `nodejs_eventloop_utilization` to `prometheus()`. They watch the
   * whole process and cannot be stopped, so only a service's one Telemetry turns them on.
   */
  processMetrics?: boolean;
  /** Where failed exports are reported (they never throw). */
  onError?: (err: Error) => void;
}
