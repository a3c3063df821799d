import {
  type Attributes,
  type Counter,
  createNoopMeter,
  type Histogram,
  type Meter,
  type ObservableResult,
  ValueType,
} from '@opentelemetry/api';
import type { ProxySettings } from '@tether/outbound';
import type { SdkParts } from './sdk.js';

/** Histogram bucket bounds (seconds) Codex uses for every exec-server duration. */
export const DURATION_BUCKETS_SECONDS: readonly number[] = [
  0, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 12, 15, 20, 30, 60, 120,
];

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
  /** Resource attribute `env` (Codex: `[otel] environment`, default `dev`). */
  environment?: string;
  /** Push metrics over OTLP/HTTP (delta temporality, as Codex); absent = no push. */
  otlpHttp?: OtlpHttpExporterConfig | null;
  /** Period of the background export (default 60 s). Shutdown always exports once more. */
  exportIntervalMs?: number;
  /** How long one export may take (default 5 s); it bounds how long `shutdown()` can delay an exit. */
  exportTimeoutMs?: number;
  /** Keep a cumulative pull reader so `prometheus()` can render the instruments. */
  prometheus?: boolean;
  /** Where failed exports are reported (they never throw). */
  onError?: (err: Error) => void;
}

/**
 * Owns one MeterProvider and its readers. Instruments are made through it (integer counters, duration
 * histograms with Codex's bounds, observable gauges). `flush()` pushes what was recorded. `shutdown()`
 * pushes a last time and stops. Without an exporter or Prometheus the meter is a no-op one, and the SDK
 * is never loaded: instrumented code then costs a function call.
 */
export class Telemetry {
  readonly meter: Meter;
  readonly enabled: boolean;
  private readonly sdk: SdkParts | null;
  private readonly onError: (err: Error) => void;
  private closing: Promise<void> | null = null;

  private constructor(
    sdk: SdkParts | null,
    serviceName: string,
    serviceVersion: string | undefined,
    onError: (err: Error) => void,
  ) {
    this.sdk = sdk;
    this.onError = onError;
    this.enabled = sdk !== null;
    this.meter = sdk ? sdk.provider.getMeter(serviceName, serviceVersion) : createNoopMeter();
  }

  /** Loads the SDK when `options` export somewhere; otherwise the same as `disabled()`. */
  static async create(options: TelemetryOptions): Promise<Telemetry> {
    const onError = options.onError ?? (() => {});
    if (!options.otlpHttp && !options.prometheus) return new Telemetry(null, options.serviceName, undefined, onError);
    const { createSdk } = await import('./sdk.js');
    return new Telemetry(createSdk(options, onError), options.serviceName, options.serviceVersion, onError);
  }

  /** A telemetry that records nothing and exports nothing. */
  static disabled(): Telemetry {
    return new Telemetry(null, 'disabled', undefined, () => {});
  }

  /** A monotonic integer counter. */
  counter(name: string, description: string): Counter {
    return this.meter.createCounter(name, { description, valueType: ValueType.INT });
  }

  /** A duration histogram in seconds with Codex's bucket bounds. */
  durationHistogram(name: string, description: string): Histogram {
    return this.meter.createHistogram(name, {
      description,
      unit: 's',
      valueType: ValueType.DOUBLE,
      advice: { explicitBucketBoundaries: [...DURATION_BUCKETS_SECONDS] },
    });
  }

  /**
   * An integer gauge read at collection time: `observe` reports the current value(s), so the code
   * that changes the value keeps a plain number and pays nothing per change.
   */
  gauge(
    name: string,
    description: string,
    observe: (report: (value: number, attributes?: Attributes) => void) => void,
  ): void {
    const gauge = this.meter.createObservableGauge(name, { description, valueType: ValueType.INT });
    gauge.addCallback((result: ObservableResult) => observe((value, attributes) => result.observe(value, attributes)));
  }

  /** Pushes everything recorded so far (no-op without an exporter). Export failures go to `onError`. */
  async flush(): Promise<void> {
    if (!this.sdk || this.closing) return;
    try {
      await this.sdk.provider.forceFlush();
    } catch (err) {
      this.onError(err as Error);
    }
  }

  /** Exports a last time and stops the readers; idempotent, never throws. */
  shutdown(): Promise<void> {
    this.closing ??= (async () => {
      if (!this.sdk) return;
      try {
        await this.sdk.provider.shutdown();
      } catch (err) {
        this.onError(err as Error);
      }
    })();
    return this.closing;
  }

  /** The instruments in the Prometheus text exposition format (cumulative); needs `prometheus: true`. */
  async prometheus(): Promise<string> {
    const pull = this.sdk?.pull;
    if (!pull) throw new Error('telemetry was created without prometheus: true');
    const { renderPrometheus } = await import('./prometheus.js');
    const { resourceMetrics, errors } = await pull.collect();
    for (const err of errors) this.onError(err instanceof Error ? err : new Error(String(err)));
    return renderPrometheus(resourceMetrics);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.shutdown();
  }
}
