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
import type { OtlpHttpExporterConfig, TelemetryOptions } from './telemetry.js';

// The OpenTelemetry SDK, loaded only when something is exported (it costs megabytes of RSS).

/** A pull reader: cumulative, collected on demand for the Prometheus text. */
export class PullReader extends MetricReader {
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

export interface SdkParts {
  provider: MeterProvider;
  pull: PullReader | null;
}

export function createSdk(options: TelemetryOptions, onError: (err: Error) => void): SdkParts {
  const readers: MetricReader[] = [];
  if (options.otlpHttp) {
    const interval = options.exportIntervalMs ?? 60_000;
    const timeout = Math.min(options.exportTimeoutMs ?? 5_000, interval);
    readers.push(
      new PeriodicExportingMetricReader({
        exporter: reportingFailures(createOtlpHttpExporter(options.otlpHttp, timeout), onError),
        exportIntervalMillis: interval,
        exportTimeoutMillis: timeout,
      }),
    );
  }
  const pull = options.prometheus ? new PullReader() : null;
  if (pull) readers.push(pull);
  const provider = new MeterProvider({
    resource: resourceFromAttributes({
      'service.name': options.serviceName,
      ...(options.serviceVersion ? { 'service.version': options.serviceVersion } : {}),
      env: options.environment ?? 'dev',
    }),
    readers,
  });
  return { provider, pull };
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
