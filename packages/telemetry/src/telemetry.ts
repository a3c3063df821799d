import {
  type Attributes,
  type Counter,
  createNoopMeter,
  type Histogram,
  type Meter,
  type ObservableResult,
  ValueType,
} from '@opentelemetry/api';
import { ExportResultCode } from '@opentelemetry/core';
import { OTLPMetricExporterBase } from '@opentelemetry/exporter-metrics-otlp-http';
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate } from '@opentelemetry/otlp-exporter-base/node-http';
import {
  JsonMetricsSerializer,
  MetricsExporterMetricsHelper,
  ProtobufMetricsSerializer,
} from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AggregationTemporality,
  MeterProvider,
  MetricReader,
  PeriodicExportingMetricReader,
  type PushMetricExporter,
} from '@opentelemetry/sdk-metrics';
import { renderPrometheus } from './prometheus.js';

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

/** A pull reader: cumulative, collected on demand for the Prometheus text. */
class PullReader extends MetricReader {
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

/**
 * Owns one MeterProvider and its readers. Instruments are made through it (integer counters, duration
 * histograms with Codex's buckets, observable gauges); `flush()` pushes what was recorded, `shutdown()`
 * pushes a last time and stops. With neither an exporter nor Prometheus the meter is a no-op one, so
 * instrumented code costs a function call.
 */
export class Telemetry {
  readonly meter: Meter;
  readonly enabled: boolean;
  private readonly provider: MeterProvider | null;
  private readonly pull: PullReader | null;
  private readonly onError: (err: Error) => void;
  private closing: Promise<void> | null = null;

  constructor(options: TelemetryOptions) {
    this.onError = options.onError ?? (() => {});
    const readers: MetricReader[] = [];
    if (options.otlpHttp) {
      const interval = options.exportIntervalMs ?? 60_000;
      const timeout = Math.min(options.exportTimeoutMs ?? 5_000, interval);
      readers.push(
        new PeriodicExportingMetricReader({
          exporter: reportingFailures(createOtlpHttpExporter(options.otlpHttp, timeout), this.onError),
          exportIntervalMillis: interval,
          exportTimeoutMillis: timeout,
        }),
      );
    }
    this.pull = options.prometheus ? new PullReader() : null;
    if (this.pull) readers.push(this.pull);
    this.enabled = readers.length > 0;
    if (!this.enabled) {
      this.provider = null;
      this.meter = createNoopMeter();
      return;
    }
    this.provider = new MeterProvider({
      resource: resourceFromAttributes({
        'service.name': options.serviceName,
        ...(options.serviceVersion ? { 'service.version': options.serviceVersion } : {}),
        env: options.environment ?? 'dev',
      }),
      readers,
    });
    this.meter = this.provider.getMeter(options.serviceName, options.serviceVersion);
  }

  /** A telemetry that records nothing and exports nothing. */
  static disabled(): Telemetry {
    return new Telemetry({ serviceName: 'disabled' });
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
    if (!this.provider || this.closing) return;
    try {
      await this.provider.forceFlush();
    } catch (err) {
      this.onError(err as Error);
    }
  }

  /** Exports a last time and stops the readers; idempotent, never throws. */
  shutdown(): Promise<void> {
    this.closing ??= (async () => {
      if (!this.provider) return;
      try {
        await this.provider.shutdown();
      } catch (err) {
        this.onError(err as Error);
      }
    })();
    return this.closing;
  }

  /** The instruments in the Prometheus text exposition format (cumulative); needs `prometheus: true`. */
  async prometheus(): Promise<string> {
    if (!this.pull) throw new Error('telemetry was created without prometheus: true');
    const { resourceMetrics, errors } = await this.pull.collect();
    for (const err of errors) this.onError(err instanceof Error ? err : new Error(String(err)));
    return renderPrometheus(resourceMetrics);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.shutdown();
  }
}

/** The reader hands export failures to OTel's global error handler; route them to ours instead. */
function reportingFailures(exporter: PushMetricExporter, onError: (err: Error) => void): PushMetricExporter {
  return {
    export: (metrics, done) =>
      exporter.export(metrics, (result) => {
        if (result.code !== ExportResultCode.SUCCESS) onError(result.error ?? new Error('metrics export failed'));
        done(result);
      }),
    forceFlush: () => exporter.forceFlush(),
    shutdown: () => exporter.shutdown(),
    selectAggregationTemporality: (kind) => exporter.selectAggregationTemporality!(kind),
    selectAggregation: (kind) => exporter.selectAggregation!(kind),
  };
}

/** OTLP/HTTP push exporter with delta temporality (what Codex sends: `aggregationTemporality: 1`). */
function createOtlpHttpExporter(config: OtlpHttpExporterConfig, timeoutMillis: number): OTLPMetricExporterBase {
  const json = config.protocol === 'json';
  const options = convertLegacyHttpOptions(
    { url: config.endpoint, timeoutMillis, ...(config.headers ? { headers: config.headers } : {}) },
    'METRICS',
    'v1/metrics',
    { 'Content-Type': json ? 'application/json' : 'application/x-protobuf' },
  );
  const delegate = createOtlpHttpExportDelegate(
    options,
    json ? JsonMetricsSerializer : ProtobufMetricsSerializer,
    'otlp_http_metric_exporter',
    MetricsExporterMetricsHelper,
    undefined,
  );
  return new OTLPMetricExporterBase(delegate, { temporalityPreference: AggregationTemporality.DELTA });
}
