/**
 * One telemetry library for the three services, through the real registry, relay and `executor --remote`
 * processes: each serves `/metrics` in the Prometheus text format (its own metrics, the process and event-loop
 * ones), and each pushes OTLP to the collector the standard OTEL_* variables name, under its service name.
 */
import { Environment } from '@tether/client';
import {
  metricPoints,
  type OtlpCollector,
  type PeerHandle,
  parsePrometheusText,
  prometheusSample,
  type Stack,
  startOtlpCollector,
  startStack,
  waitUntil,
} from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ENVIRONMENT_ID = 'env-observability';

let collector: OtlpCollector;
let stack: Stack;
let executor: PeerHandle;
let executorBase: string;

/** The standard variables, as an operator sets them (the collector speaks OTLP/HTTP JSON on 127.0.0.1). */
function otelEnv(): Record<string, string> {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.baseUrl,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_EXPORTER_OTLP_HEADERS: 'x-tether-test=observability',
    OTEL_METRIC_EXPORT_INTERVAL: '300',
    OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=e2e',
    NO_PROXY: '127.0.0.1,localhost',
    no_proxy: '127.0.0.1,localhost',
  };
}

beforeAll(async () => {
  collector = await startOtlpCollector();
  stack = await startStack({ env: otelEnv() });
  executor = await stack.startExecutor('tether', ENVIRONMENT_ID, {
    args: ['--listen', 'ws://127.0.0.1:0'],
    env: { ...otelEnv(), OTEL_SERVICE_NAME: 'executor-observability' },
  });
  executorBase = (await printedUrl(executor)).replace('ws:', 'http:');
  // One command through the stack, so that every service has counted something of its own.
  const env = await Environment.connectRendezvous({
    registryUrl: stack.registryUrl,
    apiKey: stack.keys.harness,
    environmentId: ENVIRONMENT_ID,
    clientName: 'tether-observability-e2e',
  });
  try {
    expect((await env.exec(['true'])).exitCode).toBe(0);
  } finally {
    await env.close();
  }
}, 60_000);

afterAll(async () => {
  await stack?.close();
  await collector?.close();
});

/** The `ws://` line the executor prints once its --listen server is up (after it registered). */
function printedUrl(peer: PeerHandle): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    peer.stdout.setEncoding('utf8');
    peer.stdout.on('data', (chunk: string) => {
      text += chunk;
      const line = text.split('\n').find((l) => l.startsWith('ws://'));
      if (line) resolve(line.trim());
    });
    void peer.exited.then((status) =>
      reject(new Error(`executor exited (${JSON.stringify(status)}): ${peer.stderr()}`)),
    );
  });
}

async function scrape(base: string) {
  const res = await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(5_000) });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  // Strict: any line outside the text format's grammar throws here.
  return parsePrometheusText(await res.text());
}

/** The process and event-loop families every service must expose, with their Prometheus types. */
const PROCESS_FAMILIES = {
  process_cpu_user_seconds_total: 'counter',
  process_cpu_seconds_total: 'counter',
  process_resident_memory_bytes: 'gauge',
  process_start_time_seconds: 'gauge',
  process_open_fds: 'gauge',
  nodejs_eventloop_lag_seconds: 'gauge',
  nodejs_eventloop_lag_p99_seconds: 'gauge',
  nodejs_eventloop_utilization: 'gauge',
  nodejs_heap_size_used_bytes: 'gauge',
} as const;

function expectProcessMetrics(families: ReturnType<typeof parsePrometheusText>) {
  for (const [name, type] of Object.entries(PROCESS_FAMILIES)) {
    expect(families.get(name)?.type, name).toBe(type);
    expect(families.get(name)?.samples.length, name).toBeGreaterThan(0);
  }
  expect(prometheusSample(families, 'process_resident_memory_bytes')).toBeGreaterThan(0);
}

describe('/metrics on every service', () => {
  it('registry: its counters and gauges, and the process metrics', async () => {
    const families = await scrape(stack.registryUrl);
    expectProcessMetrics(families);
    expect(families.get('registry_http_requests_total')?.type).toBe('counter');
    expect(
      prometheusSample(families, 'registry_http_requests_total', {
        method: 'POST',
        route: '/cloud/environment/:id/register',
        status: '200',
      }),
    ).toBeGreaterThanOrEqual(1);
    expect(prometheusSample(families, 'registry_bundles_total')).toBeGreaterThanOrEqual(1);
    // The environment gauges come from a scan shared for 5 s (an OTLP export may have made it before the
    // executor registered): a later scrape sees the registration.
    await waitUntil(
      async () => prometheusSample(await scrape(stack.registryUrl), 'registry_registered_environments') === 1,
      'the registry to count the registered environment',
      15_000,
      200,
    );
    expect(
      prometheusSample(families, 'target_info', { service_name: 'tether-registry', deployment_environment: 'e2e' }),
    ).toBe(1);
  });

  it('relay: its counters and gauges, and the process metrics', async () => {
    const families = await scrape(stack.relayUrl.replace('ws:', 'http:'));
    expectProcessMetrics(families);
    expect(prometheusSample(families, 'relay_sockets', { role: 'environment' })).toBe(1);
    expect(prometheusSample(families, 'relay_connections_total', { role: 'harness' })).toBeGreaterThanOrEqual(1);
    expect(prometheusSample(families, 'relay_forwarded_frames_total', { direction: 'to_environment' })).toBeGreaterThan(
      0,
    );
    // Every reason is pre-registered, so a reason nothing has hit yet is a 0, not an absent series.
    expect(prometheusSample(families, 'relay_drops_total', { reason: 'oversize_message' })).toBe(0);
    expect(families.get('relay_resets_total')?.type).toBe('counter');
  });

  it('executor: the exec_server_* instruments (cumulative) on its --listen server, and the process metrics', async () => {
    const families = await scrape(executorBase);
    expectProcessMetrics(families);
    expect(prometheusSample(families, 'exec_server_remote_registration_total', { result: 'success' })).toBe(1);
    expect(prometheusSample(families, 'exec_server_remote_websocket_active')).toBe(1);
    expect(prometheusSample(families, 'exec_server_connections_total', { transport: 'relay' })).toBe(1);
    expect(
      prometheusSample(families, 'exec_server_requests_total', { method: 'process/start', result: 'success' }),
    ).toBe(1);
    expect(families.get('exec_server_request_duration_seconds')?.type).toBe('histogram');
    // Cumulative: a second scrape still counts the same request (the OTLP push sends deltas).
    const again = await scrape(executorBase);
    expect(prometheusSample(again, 'exec_server_requests_total', { method: 'process/start', result: 'success' })).toBe(
      1,
    );
  });

  it('the executor still refuses a request that carries an Origin', async () => {
    const res = await fetch(`${executorBase}/metrics`, { headers: { origin: 'https://page.example' } });
    expect(res.status).toBe(403);
  });
});

describe('OTLP push from every service', () => {
  /** The metric names of every payload the collector received from `serviceName`, and their resources. */
  function received(serviceName: string) {
    const names = new Set<string>();
    const resources: Record<string, string>[] = [];
    for (const payload of collector.metricPayloads()) {
      for (const resourceMetrics of (payload as { resourceMetrics?: unknown[] }).resourceMetrics ?? []) {
        const attributes = Object.fromEntries(
          ((resourceMetrics as { resource?: { attributes?: unknown[] } }).resource?.attributes ?? []).map((a) => {
            const { key, value } = a as { key: string; value: { stringValue?: string } };
            return [key, value.stringValue ?? ''];
          }),
        );
        if (attributes['service.name'] !== serviceName) continue;
        resources.push(attributes);
        for (const point of metricPoints([{ resourceMetrics: [resourceMetrics] }])) names.add(point.name);
      }
    }
    return { names, resources };
  }

  it.each([
    ['tether-registry', ['registry_http_requests_total', 'registry_registered_environments']],
    ['tether-relay', ['relay_sockets', 'relay_forwarded_frames_total']],
    ['executor-observability', ['exec_server_remote_registration_total', 'exec_server_requests_total']],
  ])('%s pushes its metrics to the collector named by OTEL_EXPORTER_OTLP_ENDPOINT', async (serviceName, wanted) => {
    await waitUntil(
      () => wanted.every((name) => received(serviceName).names.has(name)),
      `${serviceName} to push ${wanted.join(', ')}`,
      20_000,
      100,
    );
    const { resources } = received(serviceName);
    expect(resources[0]).toMatchObject({ 'service.name': serviceName, 'deployment.environment': 'e2e' });
  });

  it('every push is an OTLP/HTTP JSON POST to /v1/metrics with the configured headers', () => {
    expect(collector.requests.length).toBeGreaterThan(0);
    for (const request of collector.requests) {
      expect([request.method, request.path]).toEqual(['POST', '/v1/metrics']);
      expect(request.headers['content-type']).toBe('application/json');
      expect(request.headers['x-tether-test']).toBe('observability');
    }
  });
});

describe("the managed network proxy in the executor's metrics and logs", { timeout: 60_000 }, () => {
  it('counts each proxy and decision (bounded labels, no host) and logs each decision with its audit metadata', async () => {
    const env = await Environment.connectRendezvous({
      registryUrl: stack.registryUrl,
      apiKey: stack.keys.harness,
      environmentId: ENVIRONMENT_ID,
      clientName: 'tether-observability-e2e',
    });
    try {
      const result = await env.exec(
        ['sh', '-c', 'curl -s -m 10 -o /dev/null -w "%{http_code}" http://audited.invalid/'],
        {
          network: { allow: ['allowed.invalid'] },
        },
      );
      expect(result.stdout.toString()).toBe('403');
    } finally {
      await env.close();
    }
    const text = await (await fetch(`${executorBase}/metrics`)).text();
    expect(prometheusSample(parsePrometheusText(text), 'tether_network_proxies_total')).toBeGreaterThanOrEqual(1);
    expect(
      prometheusSample(parsePrometheusText(text), 'tether_network_proxy_decisions_total', {
        protocol: 'http',
        decision: 'deny',
        reason: 'not_allowed',
      }),
    ).toBe(1);
    expect(text).not.toContain('audited.invalid');
    await waitUntil(() => executor.stderr().includes('network policy decision'), 'the decision in the log', 5000);
    const line = executor
      .stderr()
      .split('\n')
      .find((entry) => entry.includes('network policy decision'));
    expect(JSON.parse(line!)).toMatchObject({
      host: 'audited.invalid',
      port: 80,
      decision: 'deny',
      reason: 'not_allowed',
      protocol: 'http',
      auditMetadata: { originator: 'tether' },
      principal: expect.stringMatching(/^key:harness:/),
    });
  });
});
