import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { ExportResultCode } from '@opentelemetry/core';
import { AggregationTemporalityPreference, OTLPMetricExporterBase } from '@opentelemetry/exporter-metrics-otlp-http';
import { PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import {
  createOtlpNetworkExportDelegate,
  type ExportResponse,
  type IExporterTransport,
} from '@opentelemetry/otlp-exporter-base';
import { createOtlpHttpExporterMetrics } from '@opentelemetry/otlp-exporter-base/node-http';
import {
  JsonMetricsSerializer,
  MetricsExporterMetricsHelper,
  ProtobufMetricsSerializer,
} from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  MeterProvider,
  MetricReader,
  PeriodicExportingMetricReader,
  type PushMetricExporter,
  type ResourceMetrics,
} from '@opentelemetry/sdk-metrics';
import { DIRECT, outboundRequest } from '@tether/outbound';
import type { OtlpHttpExporterConfig, TelemetryOptions, Temporality } from './options.js';
import type { ProcessMetrics } from './process-metrics.js';

// The OpenTelemetry SDK, loaded only when something is pushed or rendered (it costs megabytes of RSS).

/** A pull reader: cumulative, collected on demand for the Prometheus text. */
export class PullReader extends MetricReader {
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

export interface SdkParts {
  provider: MeterProvider;
  pull: PullReader | null;
  /** Renders what `pull` collected in the Prometheus text format. */
  serialize(metrics: ResourceMetrics): string;
  processMetrics: ProcessMetrics | null;
}

export async function createSdk(options: TelemetryOptions, onError: (err: Error) => void): Promise<SdkParts> {
  const readers: MetricReader[] = [];
  if (options.otlpHttp) {
    const interval = options.exportIntervalMs ?? 60_000;
    const timeout = Math.min(options.exportTimeoutMs ?? 5_000, interval);
    readers.push(
      new PeriodicExportingMetricReader({
        exporter: reportingFailures(
          createOtlpHttpExporter(options.otlpHttp, timeout, options.temporality ?? 'delta'),
          onError,
        ),
        exportIntervalMillis: interval,
        exportTimeoutMillis: timeout,
      }),
    );
  }
  const pull = options.prometheus ? new PullReader() : null;
  if (pull) readers.push(pull);
  const provider = new MeterProvider({
    resource: resourceFromAttributes({
      ...options.resourceAttributes,
      'service.name': options.serviceName,
      ...(options.serviceVersion ? { 'service.version': options.serviceVersion } : {}),
      ...(options.environment !== undefined ? { env: options.environment } : {}),
    }),
    readers,
  });
  // The instruments' own names and attributes, as the services always had them: no `otel_scope_*` labels on
  // every series; `target_info` carries the resource once. (The serializer keeps state during a call: one each.)
  const serializer = new PrometheusSerializer(undefined, false, undefined, false, true);
  const processMetrics =
    pull && options.processMetrics ? new (await import('./process-metrics.js')).ProcessMetrics() : null;
  return {
    provider,
    pull,
    processMetrics,
    serialize: (metrics) => {
      const text = serializer.serialize(metrics);
      // With no instrument at all it says so in a comment without a line end.
      return text.endsWith('\n') ? text : `${text}\n`;
    },
  };
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

/**
 * One POST per export, no retries: what codex's Rust exporter does (it exits ≈ 60 ms after stdin EOF even
 * when the collector refuses connections). The stock OpenTelemetry JS transport retries refused
 * connections with backoff until its timeout, which would hold every exit for that long.
 */
export function httpTransport(config: OtlpHttpExporterConfig, contentType: string): IExporterTransport {
  const url = new URL(config.endpoint);
  const agent = url.protocol === 'https:' ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
  return {
    send: (data, timeoutMillis) =>
      new Promise<ExportResponse>((resolve) => {
        outboundRequest(
          url,
          {
            method: 'POST',
            agent,
            timeout: timeoutMillis,
            headers: { ...config.headers, 'content-type': contentType, 'content-length': data.byteLength },
          },
          config.proxy ?? DIRECT,
        ).then(
          (req) => {
            req.once('response', (res) => {
              res.resume(); // the body (an optional partial-success report) is not needed
              res.on('error', (error) => resolve({ status: 'failure', error }));
              res.on('end', () => {
                const status = res.statusCode ?? 0;
                resolve(
                  status >= 200 && status < 300
                    ? { status: 'success' }
                    : { status: 'failure', error: new Error(`the collector answered HTTP ${status}`) },
                );
              });
            });
            req.on('timeout', () => req.destroy(new Error(`no answer from the collector within ${timeoutMillis} ms`)));
            req.on('error', (error) => resolve({ status: 'failure', error }));
            req.end(data);
          },
          (error) => resolve({ status: 'failure', error }),
        );
      }),
    shutdown: () => agent.destroy(),
  };
}

const TEMPORALITY: Record<Temporality, AggregationTemporalityPreference> = {
  delta: AggregationTemporalityPreference.DELTA,
  cumulative: AggregationTemporalityPreference.CUMULATIVE,
  lowmemory: AggregationTemporalityPreference.LOWMEMORY,
};

/** OTLP/HTTP push exporter; the executor's is delta, what Codex sends (`aggregationTemporality: 1`). */
function createOtlpHttpExporter(
  config: OtlpHttpExporterConfig,
  timeoutMillis: number,
  temporality: Temporality,
): OTLPMetricExporterBase {
  const json = config.protocol === 'json';
  const delegate = createOtlpNetworkExportDelegate(
    { timeoutMillis, concurrencyLimit: 8, compression: 'none' },
    json ? JsonMetricsSerializer : ProtobufMetricsSerializer,
    createOtlpHttpExporterMetrics(
      'otlp_http_metric_exporter',
      MetricsExporterMetricsHelper,
      config.endpoint,
      undefined,
    ),
    httpTransport(config, json ? 'application/json' : 'application/x-protobuf'),
  );
  return new OTLPMetricExporterBase(delegate, { temporalityPreference: TEMPORALITY[temporality] });
}
