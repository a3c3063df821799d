import { Writable } from 'node:stream';
import {
  describeMetricPoints,
  hasMetricPoint,
  metricPoints,
  type OtlpCollector,
  parsePrometheusText,
  startOtlpCollector,
} from '@tether/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from './logger.js';
import type { TelemetryOptions } from './options.js';
import { DURATION_BUCKETS_SECONDS, Telemetry } from './telemetry.js';

const collectors: OtlpCollector[] = [];
const telemetries: Telemetry[] = [];
afterEach(async () => {
  await Promise.all(telemetries.splice(0).map((t) => t.shutdown()));
  await Promise.all(collectors.splice(0).map((c) => c.close()));
});

async function collector(): Promise<OtlpCollector> {
  const started = await startOtlpCollector();
  collectors.push(started);
  return started;
}

async function telemetry(options: Partial<TelemetryOptions> = {}): Promise<Telemetry> {
  const created = await Telemetry.create({
    serviceName: 'unit',
    serviceVersion: '1.2.3',
    exportIntervalMs: 3_600_000,
    ...options,
  });
  telemetries.push(created);
  return created;
}

/** Records one of each instrument kind the executor uses. */
function record(t: Telemetry, active: { value: number }) {
  const requests = t.counter('requests_total', 'Requests.');
  const duration = t.durationHistogram('request_duration_seconds', 'Request time.');
  t.gauge('active', 'Active things.', (report) => report(active.value));
  t.gauge('by_transport', 'Per transport.', (report) => {
    report(2, { transport: 'stdio' });
    report(0, { transport: 'websocket' });
  });
  requests.add(1, { method: 'process/start', result: 'success' });
  requests.add(1, { method: 'process/start', result: 'success' });
  requests.add(1, { method: 'unknown', result: 'error' });
  duration.record(0.003, { method: 'process/start', result: 'success' });
  duration.record(0.2, { method: 'process/start', result: 'success' });
  return { requests, duration };
}

describe('Telemetry over OTLP/HTTP JSON', () => {
  it('pushes integer counters, gauges and duration histograms on flush', async () => {
    const c = await collector();
    const t = await telemetry({ otlpHttp: { endpoint: c.metricsUrl, protocol: 'json' }, environment: 'test' });
    record(t, { value: 3 });
    expect(c.requests).toHaveLength(0);
    await t.flush();

    expect(c.requests).toHaveLength(1);
    expect(c.requests[0]!.headers['content-type']).toBe('application/json');
    const payloads = c.metricPayloads();
    const summary = describeMetricPoints(payloads);
    expect(hasMetricPoint(payloads, 'requests_total', { method: 'process/start', result: 'success' }, 2), summary).toBe(
      true,
    );
    expect(hasMetricPoint(payloads, 'requests_total', { method: 'unknown', result: 'error' }, 1), summary).toBe(true);
    expect(hasMetricPoint(payloads, 'active', {}, 3), summary).toBe(true);
    expect(hasMetricPoint(payloads, 'by_transport', { transport: 'stdio' }, 2), summary).toBe(true);
    expect(hasMetricPoint(payloads, 'by_transport', { transport: 'websocket' }, 0), summary).toBe(true);
    // Attributes must match exactly: a subset is not a match.
    expect(hasMetricPoint(payloads, 'requests_total', { method: 'process/start' })).toBe(false);

    const histogram = metricPoints(payloads).find((p) => p.name === 'request_duration_seconds')!;
    expect(histogram.kind).toBe('histogram');
    expect(histogram.count).toBe(2);
    expect(histogram.raw.explicitBounds).toEqual(DURATION_BUCKETS_SECONDS);
    const counter = metricPoints(payloads).find((p) => p.name === 'requests_total')!;
    expect(counter.raw.asInt, 'integer counters as Codex sends them').toBeDefined();

    const body = payloads[0] as {
      resourceMetrics: {
        resource: { attributes: { key: string; value: { stringValue: string } }[] };
        scopeMetrics: { metrics: { name: string; sum?: { aggregationTemporality: number } }[] }[];
      }[];
    };
    const resource = Object.fromEntries(
      body.resourceMetrics[0]!.resource.attributes.map((a) => [a.key, a.value.stringValue]),
    );
    expect(resource).toMatchObject({ 'service.name': 'unit', 'service.version': '1.2.3', env: 'test' });
    const sum = body.resourceMetrics[0]!.scopeMetrics[0]!.metrics.find((m) => m.name === 'requests_total')!.sum!;
    expect(sum.aggregationTemporality, 'delta, as Codex').toBe(1);
  });

  it('sends deltas: a later export carries only new counts, gauges every time', async () => {
    const c = await collector();
    const t = await telemetry({ otlpHttp: { endpoint: c.metricsUrl, protocol: 'json' } });
    const active = { value: 1 };
    const { requests } = record(t, active);
    await t.flush();
    active.value = 0;
    await t.flush();
    expect(c.requests).toHaveLength(2);
    const second = [c.metricPayloads()[1]];
    expect(metricPoints(second).some((p) => p.name === 'requests_total')).toBe(false);
    expect(hasMetricPoint(second, 'active', {}, 0)).toBe(true);

    requests.add(1, { method: 'initialize', result: 'success' });
    await t.shutdown();
    const last = [c.metricPayloads().at(-1)];
    expect(hasMetricPoint(last, 'requests_total', { method: 'initialize', result: 'success' }, 1)).toBe(true);
    expect(hasMetricPoint(last, 'requests_total', { method: 'process/start', result: 'success' })).toBe(false);
    // `env` only when given (the executor always gives Codex's `[otel] environment`, `dev` by default)
    expect(JSON.stringify(c.metricPayloads()[0])).not.toContain('"key":"env"');
  });

  it('shutdown exports once and is idempotent; flush after shutdown sends nothing', async () => {
    const c = await collector();
    const t = await telemetry({ otlpHttp: { endpoint: c.metricsUrl, protocol: 'json' } });
    t.counter('things_total', 'Things.').add(5);
    await Promise.all([t.shutdown(), t.shutdown()]);
    await t.flush();
    expect(c.requests).toHaveLength(1);
    expect(hasMetricPoint(c.metricPayloads(), 'things_total', {}, 5)).toBe(true);
  });

  it('a collector that is down never makes shutdown throw; the failure is reported', async () => {
    const down = await startOtlpCollector();
    await down.close();
    const errors: Error[] = [];
    const t = await telemetry({
      otlpHttp: { endpoint: down.metricsUrl, protocol: 'json' },
      exportTimeoutMs: 300,
      onError: (e) => errors.push(e),
    });
    t.counter('things_total', 'Things.').add(1);
    await expect(t.shutdown()).resolves.toBeUndefined();
    expect(errors.length).toBeGreaterThan(0);
  });
});

describe('OTLP/HTTP transport', () => {
  it('sends the configured headers, posts once per export and reports a refusal without retrying', async () => {
    const refusing = await startOtlpCollector({ status: 503 });
    collectors.push(refusing);
    const errors: Error[] = [];
    const t = await telemetry({
      otlpHttp: { endpoint: refusing.metricsUrl, protocol: 'json', headers: { 'x-team': 'exec' } },
      onError: (e) => errors.push(e),
    });
    t.counter('things_total', 'Things.').add(1);
    await t.shutdown();
    expect(refusing.requests).toHaveLength(1); // a 503 is not retried (codex does not either)
    expect(refusing.requests[0]!.headers['x-team']).toBe('exec');
    expect(errors.map((e) => e.message).join('\n')).toContain('HTTP 503');
  });
});

describe('Telemetry over OTLP/HTTP protobuf', () => {
  it('posts application/x-protobuf carrying the metric names', async () => {
    const c = await collector();
    const t = await telemetry({ otlpHttp: { endpoint: c.metricsUrl, protocol: 'binary' } });
    record(t, { value: 1 });
    await t.flush();
    expect(c.requests).toHaveLength(1);
    const request = c.requests[0]!;
    expect(request.path).toBe('/v1/metrics');
    expect(request.headers['content-type']).toBe('application/x-protobuf');
    expect(() => JSON.parse(request.body.toString('utf8'))).toThrow();
    // protobuf strings are raw UTF-8 inside the message
    expect(request.body.includes('requests_total')).toBe(true);
    expect(request.body.includes('process/start')).toBe(true);
  });
});

describe('Prometheus exposition', () => {
  it('renders cumulative counters, gauges and histogram buckets', async () => {
    const t = await telemetry({ prometheus: true });
    const counter = t.counter('requests_total', 'Requests.');
    const histogram = t.durationHistogram('request_duration_seconds', 'Request time.');
    t.gauge('active', 'Active "things".', (report) => report(4));
    counter.add(2, { method: 'process/start', result: 'success' });
    histogram.record(0.003, { method: 'a' });
    histogram.record(0.02, { method: 'a' });
    const first = await t.prometheus();
    counter.add(1, { method: 'process/start', result: 'success' });
    const text = await t.prometheus();

    expect(first).toContain('requests_total{method="process/start",result="success"} 2\n');
    expect(text).toContain('# TYPE requests_total counter\n');
    expect(text, 'cumulative across scrapes').toContain('requests_total{method="process/start",result="success"} 3\n');
    expect(text).toContain('# HELP active Active "things".\n# TYPE active gauge\nactive 4\n');
    expect(text).toContain('# TYPE request_duration_seconds histogram\n');
    expect(text).toContain('request_duration_seconds_bucket{method="a",le="0"} 0\n');
    expect(text).toContain('request_duration_seconds_bucket{method="a",le="0.005"} 1\n');
    expect(text).toContain('request_duration_seconds_bucket{method="a",le="0.025"} 2\n');
    expect(text).toContain('request_duration_seconds_bucket{method="a",le="+Inf"} 2\n');
    expect(text).toContain('request_duration_seconds_count{method="a"} 2\n');
    expect(text).toMatch(/request_duration_seconds_sum\{method="a"\} 0\.023\d*\n/);
    // The resource once, as target_info; no otel_scope_* labels on the series.
    expect(text).toContain('target_info{service_name="unit",service_version="1.2.3"} 1\n');
    expect(text).not.toContain('otel_scope');
    expectExposition(text);
  });

  it('escapes label values', async () => {
    const t = await telemetry({ prometheus: true });
    t.counter('odd_total', 'Odd.').add(1, { path: 'a"b\\c\nd' });
    const text = await t.prometheus();
    expect(text).toContain('odd_total{path="a\\"b\\\\c\\nd"} 1\n');
    expectExposition(text);
  });

  it('observe(): counters report running totals and gauges current values from one read per collection', async () => {
    const t = await telemetry({ prometheus: true });
    const totals = { a: 0, b: 0 };
    let reads = 0;
    const byKind = { a: { kind: 'a' }, b: { kind: 'b' } };
    t.observe(
      {
        frames_total: { kind: 'counter', description: 'Frames.' },
        open_sockets: { kind: 'gauge', description: 'Sockets.' },
      },
      (report) => {
        reads++;
        report('frames_total', totals.a, byKind.a);
        report('frames_total', totals.b, byKind.b);
        report('open_sockets', 7);
      },
    );
    totals.a += 3;
    expect(await t.prometheus()).toContain(
      '# TYPE frames_total counter\nframes_total{kind="a"} 3\nframes_total{kind="b"} 0\n',
    );
    totals.b += 2;
    const text = await t.prometheus();
    expect(text).toContain('frames_total{kind="a"} 3\nframes_total{kind="b"} 2\n');
    expect(text).toContain('# TYPE open_sockets gauge\nopen_sockets 7\n');
    expect(reads).toBe(2);
  });

  it('without instruments it is still a well-formed exposition', async () => {
    const t = await telemetry({ prometheus: true });
    const text = await t.prometheus();
    expect(text.endsWith('\n')).toBe(true);
    expectExposition(text);
  });

  it('processMetrics adds prom-client’s process and event-loop collectors and the loop’s utilization', async () => {
    const t = await telemetry({ prometheus: true, processMetrics: true });
    t.counter('things_total', 'Things.').add(1);
    await t.prometheus(); // the lag gauge is measured one scrape behind, utilization since the previous scrape
    const text = await t.prometheus();
    expect(text).toContain('things_total 1\n');
    for (const family of [
      'process_cpu_user_seconds_total',
      'process_resident_memory_bytes',
      'process_start_time_seconds',
      'process_open_fds',
      'nodejs_eventloop_lag_seconds',
      'nodejs_eventloop_lag_p99_seconds',
      'nodejs_heap_size_used_bytes',
      'nodejs_eventloop_utilization',
    ]) {
      expect(text, family).toMatch(new RegExp(`^# TYPE ${family} (counter|gauge)$`, 'm'));
      expect(text, family).toMatch(new RegExp(`^${family}(\\{[^}]*\\})? [0-9.e+-]+$`, 'm'));
    }
    const utilization = Number(/^nodejs_eventloop_utilization ([^ \n]+)$/m.exec(text)?.[1]);
    expect(utilization).toBeGreaterThanOrEqual(0);
    expect(utilization).toBeLessThanOrEqual(1);
    expectExposition(text);
  });
});

/** Strict: throws on any departure from the text format 0.0.4 (see test-kit's parser). */
function expectExposition(text: string): void {
  expect(() => parsePrometheusText(text)).not.toThrow();
}

describe('disabled telemetry', () => {
  it('records into a no-op meter and has nothing to flush', async () => {
    const t = Telemetry.disabled();
    expect(t.enabled).toBe(false);
    t.counter('x_total', 'X.').add(1);
    t.gauge('g', 'G.', (report) => report(1));
    await t.flush();
    await t.shutdown();
    await expect(t.prometheus()).rejects.toThrow(/prometheus/);
    // create() without an exporter or Prometheus is the same no-op telemetry (the SDK stays unloaded).
    expect((await Telemetry.create({ serviceName: 'idle', otlpHttp: null })).enabled).toBe(false);
  });
});

describe('createLogger', () => {
  it('writes JSON lines with credentials and environments redacted', () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const log = createLogger({ name: 'unit', destination: sink });
    log.info({ authorization: 'Bearer secret', params: { env: { TOKEN: 'x' }, argv: ['ls'] } }, 'hello');
    const line = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(line).toMatchObject({ name: 'unit', msg: 'hello', authorization: '[redacted]' });
    expect(line.params).toEqual({ env: '[redacted]', argv: ['ls'] });
    expect(lines[0]).not.toContain('secret');
  });
});
