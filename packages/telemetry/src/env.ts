import { ProxyConfigError, proxySettingsFromEnv } from '@tether/outbound';
import type { OtlpHttpExporterConfig, TelemetryOptions, Temporality } from './options.js';

/** A standard OpenTelemetry variable that is set but cannot be used; the message names it (never a header value). */
export class TelemetryConfigError extends Error {
  override readonly name = 'TelemetryConfigError';
}

export type OtelEnv = Readonly<Record<string, string | undefined>>;

/** What the standard `OTEL_*` variables ask of a service's metrics. */
export interface OtelEnvSettings {
  /** `OTEL_SERVICE_NAME`, else `service.name` of `OTEL_RESOURCE_ATTRIBUTES`, else null (the service's own). */
  serviceName: string | null;
  /** `OTEL_RESOURCE_ATTRIBUTES` without `service.name` (that one is `serviceName`). */
  resourceAttributes: Record<string, string>;
  /** Where to push (no proxy set here), or null: no endpoint named, `OTEL_METRICS_EXPORTER` without `otlp`, or `OTEL_SDK_DISABLED`. */
  otlpHttp: OtlpHttpExporterConfig | null;
  /** `OTEL_METRIC_EXPORT_INTERVAL` (ms), else null. */
  exportIntervalMs: number | null;
  /** `OTEL_EXPORTER_OTLP_METRICS_TIMEOUT`, `OTEL_EXPORTER_OTLP_TIMEOUT` or `OTEL_METRIC_EXPORT_TIMEOUT` (ms), else null. */
  exportTimeoutMs: number | null;
  /** `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`, else null. */
  temporality: Temporality | null;
}

/** The OTLP/HTTP default of the specification, used when `OTEL_METRICS_EXPORTER=otlp` names no endpoint. */
export const DEFAULT_OTLP_HTTP_ENDPOINT = 'http://localhost:4318';

/**
 * Reads the OpenTelemetry SDK variables that concern metrics over OTLP/HTTP. Export is on when an endpoint
 * variable is set, or when `OTEL_METRICS_EXPORTER` lists `otlp` (then the specification's default endpoint);
 * a service with neither pushes nothing. `grpc` is refused: only OTLP/HTTP is implemented.
 */
export function otelEnvSettings(env: OtelEnv): OtelEnvSettings {
  const attributes = keyValueList(env, 'OTEL_RESOURCE_ATTRIBUTES', 'a resource attribute');
  const attributeServiceName = attributes['service.name'];
  delete attributes['service.name'];
  const serviceName = value(env, 'OTEL_SERVICE_NAME') ?? attributeServiceName ?? null;
  return {
    serviceName,
    resourceAttributes: attributes,
    otlpHttp: otlpHttpFromEnv(env),
    exportIntervalMs: milliseconds(env, 'OTEL_METRIC_EXPORT_INTERVAL', 1),
    exportTimeoutMs:
      milliseconds(env, 'OTEL_EXPORTER_OTLP_METRICS_TIMEOUT', 1) ??
      milliseconds(env, 'OTEL_EXPORTER_OTLP_TIMEOUT', 1) ??
      milliseconds(env, 'OTEL_METRIC_EXPORT_TIMEOUT', 1),
    temporality: temporality(env),
  };
}

/**
 * A service's telemetry (registry, relay): `/metrics` with the process collectors, and OTLP as the `OTEL_*`
 * variables say, through the proxies the environment names (HTTPS_PROXY, HTTP_PROXY, NO_PROXY), pushed
 * cumulative unless `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` says otherwise.
 */
export function serviceTelemetryOptions(
  env: OtelEnv,
  service: Pick<TelemetryOptions, 'serviceName' | 'serviceVersion' | 'onError'>,
): TelemetryOptions {
  const settings = otelEnvSettings(env);
  let otlpHttp: OtlpHttpExporterConfig | null = null;
  if (settings.otlpHttp) {
    try {
      otlpHttp = { ...settings.otlpHttp, proxy: proxySettingsFromEnv(env) };
    } catch (err) {
      if (err instanceof ProxyConfigError) throw new TelemetryConfigError(err.message);
      throw err;
    }
  }
  return {
    ...service,
    serviceName: settings.serviceName ?? service.serviceName,
    resourceAttributes: settings.resourceAttributes,
    otlpHttp,
    temporality: settings.temporality ?? 'cumulative',
    ...(settings.exportIntervalMs !== null ? { exportIntervalMs: settings.exportIntervalMs } : {}),
    ...(settings.exportTimeoutMs !== null ? { exportTimeoutMs: settings.exportTimeoutMs } : {}),
    prometheus: true,
    processMetrics: true,
  };
}

function otlpHttpFromEnv(env: OtelEnv): OtlpHttpExporterConfig | null {
  if (value(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return null;
  const exporters = value(env, 'OTEL_METRICS_EXPORTER')
    ?.split(',')
    .map((e) => e.trim().toLowerCase())
    .filter((e) => e !== '');
  const specific = value(env, 'OTEL_EXPORTER_OTLP_METRICS_ENDPOINT');
  const base = value(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  if (exporters !== undefined && !exporters.includes('otlp')) return null;
  if (exporters === undefined && specific === undefined && base === undefined) return null;
  const endpoint = specific
    ? httpUrl('OTEL_EXPORTER_OTLP_METRICS_ENDPOINT', specific)
    : new URL('v1/metrics', withSlash(httpUrl('OTEL_EXPORTER_OTLP_ENDPOINT', base ?? DEFAULT_OTLP_HTTP_ENDPOINT)));
  const headers = {
    ...keyValueList(env, 'OTEL_EXPORTER_OTLP_HEADERS', 'a header'),
    ...keyValueList(env, 'OTEL_EXPORTER_OTLP_METRICS_HEADERS', 'a header'),
  };
  return {
    endpoint: endpoint.href,
    protocol: protocol(env),
    ...(Object.keys(headers).length > 0 ? { headers } : {}),
  };
}

function value(env: OtelEnv, name: string): string | undefined {
  const v = env[name]?.trim();
  return v === undefined || v === '' ? undefined : v;
}

function httpUrl(name: string, text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new TelemetryConfigError(`${name} is not a URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new TelemetryConfigError(`${name} must be an http:// or https:// URL (OTLP/HTTP; gRPC is not supported)`);
  }
  return url;
}

function withSlash(url: URL): URL {
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  return url;
}

function protocol(env: OtelEnv): 'json' | 'binary' {
  const [name, text] = ['OTEL_EXPORTER_OTLP_METRICS_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL']
    .map((n) => [n, value(env, n)] as const)
    .find(([, v]) => v !== undefined) ?? ['', 'http/protobuf'];
  switch (text) {
    case 'http/protobuf':
      return 'binary';
    case 'http/json':
      return 'json';
    default:
      throw new TelemetryConfigError(
        `${name}=${text} is not supported: use http/protobuf or http/json (OTLP over HTTP, port 4318)`,
      );
  }
}

function temporality(env: OtelEnv): Temporality | null {
  const text = value(env, 'OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE')?.toLowerCase();
  if (text === undefined) return null;
  if (text === 'cumulative' || text === 'delta' || text === 'lowmemory') return text;
  throw new TelemetryConfigError(
    `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=${text} is not one of cumulative, delta, lowmemory`,
  );
}

function milliseconds(env: OtelEnv, name: string, min: number): number | null {
  const text = value(env, name);
  if (text === undefined) return null;
  if (!/^\d+$/.test(text) || Number(text) < min || !Number.isSafeInteger(Number(text))) {
    throw new TelemetryConfigError(`${name}=${text} is not a whole number of milliseconds ≥ ${min}`);
  }
  return Number(text);
}

/**
 * `key=value,key2=value2` (the W3C Baggage form the specification uses for headers and resource attributes):
 * keys and values percent-decoded and trimmed. A malformed entry is refused by its position, because header
 * values are often credentials that must not reach a log.
 */
function keyValueList(env: OtelEnv, name: string, what: string): Record<string, string> {
  const text = value(env, name);
  const out: Record<string, string> = {};
  if (text === undefined) return out;
  text.split(',').forEach((entry, i) => {
    if (entry.trim() === '') return;
    const eq = entry.indexOf('=');
    const key = eq > 0 ? decode(entry.slice(0, eq)) : null;
    const v = eq > 0 ? decode(entry.slice(eq + 1)) : null;
    if (!key || v === null) {
      throw new TelemetryConfigError(`${name}: entry ${i + 1} is not ${what} in the form key=value (percent-encoded)`);
    }
    out[key] = v;
  });
  return out;
}

function decode(text: string): string | null {
  try {
    return decodeURIComponent(text.trim());
  } catch {
    return null;
  }
}
