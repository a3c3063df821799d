import { pathToFileUri } from '@tether/exec-protocol';
import { createMemoryTransportPair, RpcClient, RpcConnection } from '@tether/jsonrpc';
import { DIRECT } from '@tether/outbound';
import { Telemetry } from '@tether/telemetry';
import { afterEach, describe, expect, it } from 'vitest';
import { ExecutorMetrics, executorTelemetryOptions, methodLabel } from './metrics.js';
import { ExecServer } from './server.js';

const servers: ExecServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

/** A server whose metrics can be read back as Prometheus text (cumulative). */
async function makeServer() {
  const telemetry = await Telemetry.create({ serviceName: 'executor-test', prometheus: true });
  const metrics = new ExecutorMetrics(telemetry);
  const server = new ExecServer({ config: { pingIntervalMs: 0 }, metrics, reaper: false });
  servers.push(server);
  return { server, metrics, scrape: () => telemetry.prometheus() };
}

async function session(server: ExecServer) {
  const [serverSide, clientSide] = createMemoryTransportPair('stdio');
  const processor = server.serve(new RpcConnection(serverSide), { endSessionOnClose: true });
  const exited: string[] = [];
  const connection = new RpcConnection(clientSide);
  const client = new RpcClient(connection, {
    onNotification: (method, params) => {
      if (method === 'process/closed') exited.push((params as { processId: string }).processId);
    },
    callTimeoutMs: 10_000,
  });
  await client.call('initialize', { clientName: 'metrics-test', resumeSessionId: null });
  client.notify('initialized', {});
  return { client, connection, processor, closed: exited };
}

const cwd = pathToFileUri(process.cwd());
const start = (client: RpcClient, processId: string, argv: string[]) =>
  client.call('process/start', { processId, argv, cwd, env: { PATH: '/usr/bin:/bin' }, tty: false });

describe('executor metrics', () => {
  it('labels only protocol methods; anything else is unknown', () => {
    expect(methodLabel('process/start')).toBe('process/start');
    expect(methodLabel('initialize')).toBe('initialize');
    expect(methodLabel('/etc/passwd')).toBe('unknown');
  });

  it('counts connections, requests by method and result, and processes by how they ended', async () => {
    const { server, metrics, scrape } = await makeServer();
    const { client, closed, connection, processor } = await session(server);
    expect(metrics.snapshot().connectionsActive).toEqual({ stdio: 1, websocket: 0, relay: 0 });

    await start(client, 'ok', ['true']);
    await start(client, 'bad', ['sh', '-c', 'exit 3']);
    await start(client, 'long', ['sleep', '30']);
    await start(client, 'killed', ['sleep', '30']);
    await expect(start(client, 'ok', ['true'])).rejects.toMatchObject({ code: -32600 }); // id in use
    await expect(client.call('no/such/method', {})).rejects.toMatchObject({ code: -32601 });
    await expect.poll(() => closed.includes('ok') && closed.includes('bad'), { timeout: 10_000 }).toBe(true);
    expect(metrics.snapshot().processesActive).toBe(2);

    await client.call('process/terminate', { processId: 'killed' });
    await expect.poll(() => closed.includes('killed'), { timeout: 10_000 }).toBe(true);
    expect(metrics.snapshot().processesActive).toBe(1);

    const during = await scrape();
    expect(during).toContain('exec_server_connections_active{transport="stdio"} 1\n');
    expect(during).toContain('exec_server_processes_active 1\n');

    // The client goes away: the stdio session ends and kills `long`.
    connection.close('client done');
    await processor.done;
    const text = await scrape();
    expect(text).toContain('exec_server_connections_total{transport="stdio"} 1\n');
    expect(text).toContain('exec_server_connections_active{transport="stdio"} 0\n');
    expect(text).toContain('exec_server_requests_total{method="initialize",result="success"} 1\n');
    expect(text).toContain('exec_server_requests_total{method="process/start",result="success"} 4\n');
    expect(text).toContain('exec_server_requests_total{method="process/start",result="error"} 1\n');
    expect(text).toContain('exec_server_requests_total{method="unknown",result="error"} 1\n');
    expect(text).toContain('exec_server_requests_total{method="process/terminate",result="success"} 1\n');
    expect(text).toContain('exec_server_request_duration_seconds_count{method="process/start",result="success"} 4\n');
    expect(text).toContain('exec_server_request_queue_duration_seconds_count{method="process/start"} 5\n');
    expect(text).toContain('exec_server_processes_finished_total{result="success"} 1\n');
    expect(text).toContain('exec_server_processes_finished_total{result="error"} 1\n');
    expect(text).toContain('exec_server_processes_finished_total{result="terminated"} 2\n');
    expect(text).toContain('exec_server_process_duration_seconds_count{result="terminated"} 2\n');
    expect(text).toContain('exec_server_processes_active 0\n');
    expect(text, 'no remote gauge in local mode').not.toContain('exec_server_remote_websocket_active');
  });

  it('a start that fails to spawn is not an active or finished process', async () => {
    const { server, metrics, scrape } = await makeServer();
    const { client } = await session(server);
    await expect(start(client, 'nope', ['/no/such/program'])).rejects.toBeDefined();
    expect(metrics.snapshot().processesActive).toBe(0);
    const text = await scrape();
    expect(text).toContain('exec_server_requests_total{method="process/start",result="error"} 1\n');
    expect(text).not.toContain('exec_server_processes_finished_total');
  });

  it('a request whose connection closes before the answer counts as disconnected', async () => {
    const { server, scrape } = await makeServer();
    const { client, connection, processor } = await session(server);
    await start(client, 'quiet', ['sleep', '30']);
    const read = client.call('process/read', { processId: 'quiet', afterSeq: 0, waitMs: 30_000 }).catch(() => null);
    // The long poll is in flight on the server when the client disconnects.
    await expect
      .poll(async () =>
        (await scrape()).includes('exec_server_request_queue_duration_seconds_count{method="process/read"} 1'),
      )
      .toBe(true);
    connection.close('gone');
    await read;
    await processor.done;
    expect(await scrape()).toContain('exec_server_requests_total{method="process/read",result="disconnected"} 1\n');
  });
});

describe('/metrics on the WebSocket listener', () => {
  it('serves the exec_server_* instruments (cumulative) and the process metrics; refuses a browser', async () => {
    const telemetry = await Telemetry.create({ serviceName: 'executor-test', prometheus: true, processMetrics: true });
    const server = new ExecServer({
      config: { pingIntervalMs: 0 },
      metrics: new ExecutorMetrics(telemetry),
      reaper: false,
    });
    servers.push(server);
    const base = (await server.listen('127.0.0.1', 0)).replace('ws:', 'http:');
    const { client, connection } = await session(server);
    await start(client, 'one', ['true']);
    connection.close('done');

    const res = await fetch(`${base}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    const text = await res.text();
    expect(text).toContain('exec_server_connections_total{transport="stdio"} 1\n');
    expect(text).toContain('exec_server_requests_total{method="process/start",result="success"} 1\n');
    expect(text).toMatch(/^process_cpu_user_seconds_total [0-9.e+-]+$/m);
    expect(text).toMatch(/^nodejs_eventloop_lag_seconds [0-9.e+-]+$/m);
    // A second scrape is cumulative: the counter is still there (an OTLP push would have sent a delta).
    expect(await (await fetch(`${base}/metrics`)).text()).toContain(
      'exec_server_requests_total{method="process/start",result="success"} 1\n',
    );
    const browser = await fetch(`${base}/metrics`, { headers: { origin: 'https://evil.example' } });
    expect(browser.status).toBe(403);
    expect(await browser.text()).toBe('');
    await telemetry.shutdown();
  });

  it('answers 404 when the telemetry keeps no Prometheus reader', async () => {
    const server = new ExecServer({ config: { pingIntervalMs: 0 }, reaper: false });
    servers.push(server);
    const base = (await server.listen('127.0.0.1', 0)).replace('ws:', 'http:');
    expect((await fetch(`${base}/metrics`)).status).toBe(404);
  });
});

describe('executorTelemetryOptions', () => {
  const base = { serviceVersion: '9.9.9', proxy: DIRECT, prometheus: false, onError: () => {}, onIgnored: () => {} };
  const codex = { endpoint: 'http://codex-config:4318/v1/metrics', protocol: 'json' as const };

  it('the Codex config keeps priority over OTEL_* and is pushed delta, as Codex does', () => {
    const options = executorTelemetryOptions(
      { otelEnvironment: 'test', metricsExporter: codex },
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://from-env:4318',
        OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: 'cumulative',
        OTEL_SERVICE_NAME: 'exec-eu',
        OTEL_RESOURCE_ATTRIBUTES: 'env=ignored,host.name=box',
      },
      base,
    );
    expect(options).toMatchObject({
      serviceName: 'exec-eu',
      environment: 'test',
      resourceAttributes: { env: 'ignored', 'host.name': 'box' },
      otlpHttp: { ...codex, proxy: DIRECT },
      temporality: 'delta',
      prometheus: false,
      processMetrics: false,
    });
  });

  it('without it the OTEL_* variables name the collector; nothing named, nothing pushed', () => {
    const options = executorTelemetryOptions(
      { otelEnvironment: 'dev', metricsExporter: null },
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://from-env:4318',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_METRIC_EXPORT_INTERVAL: '1000',
      },
      { ...base, prometheus: true },
    );
    expect(options).toMatchObject({
      serviceName: 'tether-executor',
      otlpHttp: { endpoint: 'http://from-env:4318/v1/metrics', protocol: 'json' },
      temporality: 'delta',
      exportIntervalMs: 1000,
      prometheus: true,
      processMetrics: true,
    });
    expect(executorTelemetryOptions({ otelEnvironment: 'dev', metricsExporter: null }, {}, base).otlpHttp).toBeNull();
  });

  it('an unusable OTEL_* variable (set for another tool) is ignored with a reason, not fatal', () => {
    const ignored: string[] = [];
    const options = executorTelemetryOptions(
      { otelEnvironment: 'dev', metricsExporter: null },
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4317',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
        OTEL_SERVICE_NAME: 'x',
      },
      { ...base, onIgnored: (err) => ignored.push(err.message) },
    );
    expect(options).toMatchObject({ serviceName: 'tether-executor', otlpHttp: null });
    expect(ignored).toEqual([expect.stringMatching(/OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported/)]);
  });
});
