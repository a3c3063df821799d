// Telemetry scenarios of codex-rs/cli/tests/exec_server.rs, run against codex and tether with the
// same config.toml: `local_exec_server_flushes_telemetry_on_stdio_disconnect` and the metrics half of
// `remote_exec_server_gracefully_stops_when_parent_stdin_closes`. A node:http collector on 127.0.0.1
// receives `POST /v1/metrics` (OTLP JSON); the assertions are the seed's `assert_metric_point`.
import {
  collectUntilClosed,
  describeMetricPoints,
  hasMetricPoint,
  initialize,
  metricPoints,
  type OtlpCollector,
  startOtlpCollector,
} from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { closedAfterEach, expectStopOnStdinClose, KIND_CASES, startParentLifetime, useHarness } from './support.ts';

/** The seed's config.toml, with `[analytics] enabled` as given. */
function telemetryConfig(metricsUrl: string, analytics = true): string {
  return `
[analytics]
enabled = ${analytics}

[otel]
environment = "test"
metrics_exporter = { otlp-http = { endpoint = "${metricsUrl}", protocol = "json" } }
`;
}

const NO_PROXY = { NO_PROXY: '127.0.0.1,localhost', no_proxy: '127.0.0.1,localhost' };

describe.each(KIND_CASES)('telemetry: %s', (_label, kind) => {
  const h = useHarness();
  const collector = closedAfterEach(() => startOtlpCollector());

  /** The seed's assert_metric_point over everything the collector received. */
  function expectPoint(c: OtlpCollector, name: string, attributes: Record<string, string>, value?: number) {
    const payloads = c.metricPayloads();
    expect(
      hasMetricPoint(payloads, name, attributes, value),
      `metric ${name} ${JSON.stringify(attributes)} value ${value ?? 'any'} missing; received:\n${describeMetricPoints(payloads, 'exec_server_')}`,
    ).toBe(true);
  }

  /** A peer over `transport` exporting its metrics to `metricsUrl`, and an initialized client of it. */
  async function exportingSession(transport: 'stdio' | 'ws', metricsUrl: string, analytics = true) {
    const peer = await h.start(kind, transport, {
      homeFiles: { 'config.toml': telemetryConfig(metricsUrl, analytics) },
      env: NO_PROXY,
    });
    const client = await h.connect(peer);
    await initialize(client, { clientName: 'otel-test', resumeSessionId: null });
    return { peer, client };
  }

  /**
   * stdio session: initialize, a process that exits 0 on its own, the seed's `sleep 60`, then stdin
   * closes. Returns the exit status.
   */
  async function stdioRun(c: OtlpCollector, analytics: boolean) {
    const { peer, client } = await exportingSession('stdio', c.metricsUrl, analytics);
    await client.call('process/start', h.startParams('otel-short', ['/bin/true']));
    const short = await collectUntilClosed(client, 'otel-short');
    expect(short.exitCode).toBe(0);
    await client.call('process/start', h.startParams('otel-process', ['/bin/sleep', '60']));
    expect(c.metricPayloads(), 'nothing is exported before the end of a short run').toEqual([]);
    peer.stdin.end();
    const exit = await peer.exited;
    expect(exit, peer.stderr()).toEqual({ code: 0, signal: null });
  }

  it('flushes telemetry on stdio disconnect: every metric point reaches the collector before exit 0', async () => {
    const c = await collector();
    await stdioRun(c, true);
    expect(c.requests.every((r) => r.method === 'POST' && r.path === '/v1/metrics')).toBe(true);
    expect(c.requests[0]!.headers['content-type']).toBe('application/json');
    expectPoint(c, 'exec_server_connections_active', { transport: 'stdio' }, 0);
    expectPoint(c, 'exec_server_connections_total', { transport: 'stdio' }, 1);
    expectPoint(c, 'exec_server_requests_total', { method: 'initialize', result: 'success' }, 1);
    expectPoint(c, 'exec_server_requests_total', { method: 'process/start', result: 'success' }, 2);
    expectPoint(c, 'exec_server_processes_active', {}, 0);
    expectPoint(c, 'exec_server_processes_finished_total', { result: 'success' }, 1);
    expectPoint(c, 'exec_server_processes_finished_total', { result: 'terminated' }, 1);
    expectPoint(c, 'exec_server_request_duration_seconds', { method: 'process/start', result: 'success' });
    expectPoint(c, 'exec_server_process_duration_seconds', { result: 'terminated' });
    expectPoint(c, 'exec_server_process_duration_seconds', { result: 'success' });
    // Wire format: delta sums and histograms, integer counters, Codex's duration buckets.
    const points = metricPoints(c.metricPayloads());
    const duration = points.find((p) => p.name === 'exec_server_request_duration_seconds')!;
    expect(duration.temporality).toBe(1);
    expect(duration.raw.explicitBounds).toEqual([
      0, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 12, 15, 20, 30, 60, 120,
    ]);
    const started = points.find((p) => p.name === 'exec_server_requests_total')!;
    expect(started.temporality).toBe(1);
    expect(started.raw.asInt).toBeDefined();
    // codex 0.171.0 labels accepted connections by transport only (the spec's `result=accepted` is not sent).
    expect(
      hasMetricPoint(c.metricPayloads(), 'exec_server_connections_total', { transport: 'stdio', result: 'accepted' }),
    ).toBe(false);
  });

  it('exports with `[analytics] enabled = false` too: metrics_exporter alone decides', async () => {
    const c = await collector();
    await stdioRun(c, false);
    expectPoint(c, 'exec_server_connections_total', { transport: 'stdio' }, 1);
    expectPoint(c, 'exec_server_processes_finished_total', { result: 'terminated' }, 1);
  });

  it('a collector that refuses connections does not change the exit status', async () => {
    const gone = await startOtlpCollector();
    await gone.close();
    const { peer, client } = await exportingSession('stdio', gone.metricsUrl);
    await client.call('process/start', h.startParams('otel-process', ['/bin/sleep', '60']));
    peer.stdin.end();
    expect(await peer.exited, peer.stderr()).toEqual({ code: 0, signal: null });
  });

  it('an unknown method is counted under `unknown`, its error as `error`', async () => {
    const c = await collector();
    const { peer, client } = await exportingSession('stdio', c.metricsUrl);
    const response = await client.request('no-such/method-with-a-long-name', {});
    expect(response.error?.code).toBe(-32601);
    peer.stdin.end();
    expect(await peer.exited, peer.stderr()).toEqual({ code: 0, signal: null });
    expectPoint(c, 'exec_server_requests_total', { method: 'unknown', result: 'error' }, 1);
    expect(JSON.stringify(c.metricPayloads())).not.toContain('no-such/method-with-a-long-name');
  });

  it('SIGTERM on a WebSocket server: exit 0 after the metrics are flushed', async () => {
    const c = await collector();
    const { peer, client } = await exportingSession('ws', c.metricsUrl);
    await client.call('process/start', h.startParams('otel-sigterm', ['/bin/sleep', '60']));
    peer.kill('SIGTERM');
    expect(await peer.exited, peer.stderr()).toEqual({ code: 0, signal: null });
    expectPoint(c, 'exec_server_connections_total', { transport: 'websocket' }, 1);
    expectPoint(c, 'exec_server_requests_total', { method: 'process/start', result: 'success' }, 1);
    if (kind === 'codex') {
      expectPoint(c, 'exec_server_processes_active', {}, 1);
      // codex drops its local run loop on SIGTERM: the child dies with its process group uncounted, and
      // the last export still shows it (and the connection) active.
      expectPoint(c, 'exec_server_connections_active', { transport: 'websocket' }, 1);
      expect(hasMetricPoint(c.metricPayloads(), 'exec_server_processes_finished_total', { result: 'terminated' })).toBe(
        false,
      );
    } else {
      // tether shuts down in order (spec §8.4: a server shutdown ends processes as `terminated`), so the
      // last export shows the kill too.
      expectPoint(c, 'exec_server_processes_finished_total', { result: 'terminated' }, 1);
      expectPoint(c, 'exec_server_processes_active', {}, 0);
      expectPoint(c, 'exec_server_connections_active', { transport: 'websocket' }, 0);
    }
  });

  it('remote: stops when its parent closes stdin and flushes the process metrics first', async () => {
    const c = await collector();
    const { peer, client } = await startParentLifetime(h, kind, 'parent-lifetime-process', {
      homeFiles: { 'config.toml': telemetryConfig(c.metricsUrl) },
      env: NO_PROXY,
      args: ['--concurrent-requests', '2'],
    });
    expect(peer.exitStatus()).toBeUndefined();
    await expectStopOnStdinClose(peer, client);

    expectPoint(c, 'exec_server_processes_active', {}, 0);
    expectPoint(c, 'exec_server_processes_finished_total', { result: 'terminated' }, 1);
    expectPoint(c, 'exec_server_requests_total', { method: 'process/start', result: 'success' }, 1);
    expectPoint(c, 'exec_server_connections_total', { transport: 'relay' }, 1);
  });
});
