import { createServer, type IncomingHttpHeaders } from 'node:http';

/** One request the collector received. */
export interface CollectedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface OtlpCollector {
  /** `http://127.0.0.1:PORT` */
  readonly baseUrl: string;
  /** `${baseUrl}/v1/metrics` */
  readonly metricsUrl: string;
  readonly requests: readonly CollectedRequest[];
  /** Parsed bodies of every JSON `POST /v1/metrics`. */
  metricPayloads(): unknown[];
  close(): Promise<void>;
}

/**
 * A minimal OTLP/HTTP collector on 127.0.0.1:0: records every request and answers 202 (or `status`),
 * like the wiremock collector of Codex's CLI tests.
 */
export async function startOtlpCollector(options: { status?: number } = {}): Promise<OtlpCollector> {
  const requests: CollectedRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      requests.push({
        method: req.method ?? '',
        path: (req.url ?? '/').split('?')[0]!,
        headers: req.headers,
        body: Buffer.concat(chunks),
      });
      res.writeHead(options.status ?? 202).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('collector has no TCP address');
  const baseUrl = `http://127.0.0.1:${address.port}`;
  return {
    baseUrl,
    metricsUrl: `${baseUrl}/v1/metrics`,
    requests,
    metricPayloads: () =>
      requests
        .filter((r) => r.method === 'POST' && r.path === '/v1/metrics')
        .map((r) => JSON.parse(r.body.toString('utf8')) as unknown),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** One OTLP-JSON data point of a named metric. */
export interface MetricPoint {
  name: string;
  kind: 'gauge' | 'sum' | 'histogram';
  attributes: Record<string, string>;
  /** `asInt` (number or numeric string) or `asDouble`; null for histograms. */
  value: number | null;
  /** Histogram count, else null. */
  count: number | null;
  /** The metric's `aggregationTemporality` (1 delta, 2 cumulative); null for gauges. */
  temporality: number | null;
  raw: Record<string, unknown>;
}

type Json = Record<string, unknown>;
const list = (value: unknown): Json[] => (Array.isArray(value) ? (value as Json[]) : []);

function numeric(value: unknown): number | null {
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && /^-?\d+(\.\d+)?$/.test(value)) return Number(value);
  return null;
}

/** Every data point in OTLP-JSON export payloads (`resourceMetrics[].scopeMetrics[].metrics[]`). */
export function metricPoints(payloads: readonly unknown[]): MetricPoint[] {
  const points: MetricPoint[] = [];
  for (const payload of payloads) {
    for (const resource of list((payload as Json | null)?.resourceMetrics)) {
      for (const scope of list(resource.scopeMetrics)) {
        for (const metric of list(scope.metrics)) {
          for (const kind of ['gauge', 'sum', 'histogram'] as const) {
            const data = metric[kind] as Json | undefined;
            if (!data) continue;
            for (const point of list(data.dataPoints)) {
              const attributes: Record<string, string> = {};
              for (const attribute of list(point.attributes)) {
                const value = (attribute.value as Json | undefined)?.stringValue;
                attributes[String(attribute.key)] = typeof value === 'string' ? value : JSON.stringify(attribute.value);
              }
              points.push({
                name: String(metric.name),
                kind,
                attributes,
                value: numeric(point.asInt) ?? numeric(point.asDouble),
                count: kind === 'histogram' ? numeric(point.count) : null,
                temporality: numeric(data.aggregationTemporality),
                raw: point,
              });
            }
          }
        }
      }
    }
  }
  return points;
}

/**
 * Codex's `assert_metric_point`: is there a point of `name` whose attributes are exactly `attributes`
 * and (when `value` is given) whose integer value is `value`?
 */
export function hasMetricPoint(
  payloads: readonly unknown[],
  name: string,
  attributes: Record<string, string>,
  value?: number,
): boolean {
  const wanted = Object.entries(attributes);
  return metricPoints(payloads).some(
    (point) =>
      point.name === name &&
      Object.keys(point.attributes).length === wanted.length &&
      wanted.every(([key, expected]) => point.attributes[key] === expected) &&
      (value === undefined || point.value === value),
  );
}

/** Readable summary of the points of the named metrics (for assertion messages). */
export function describeMetricPoints(payloads: readonly unknown[], prefix = ''): string {
  return metricPoints(payloads)
    .filter((point) => point.name.startsWith(prefix))
    .map(
      (point) =>
        `${point.name}${JSON.stringify(point.attributes)} ${point.kind}=${point.value ?? `count:${point.count}`}`,
    )
    .join('\n');
}
