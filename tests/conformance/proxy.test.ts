// Outbound HTTP through the environment's proxies (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), against both
// executors: `http/request`, and in remote mode the registry calls and the relay socket. Expectations are
// what Codex 0.171.0 does (CODEX-FINDINGS.md §20).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  decodeB64,
  type HttpProxy,
  initialize,
  NO_AMBIENT_PROXY,
  type OtlpCollector,
  startHttpProxy,
  startOtlpCollector,
} from '@tether/test-kit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { KIND_CASES, useHarness } from './support.ts';

let origin: Server;
let base = '';
const proxies: HttpProxy[] = [];

beforeAll(async () => {
  origin = createServer((req, res) => res.end(`origin saw ${req.method} ${req.url} host=${req.headers.host}`));
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
});

afterEach(async () => {
  for (const proxy of proxies.splice(0)) await proxy.close();
});

afterAll(async () => {
  origin.closeAllConnections();
  await new Promise<void>((resolve) => origin.close(() => resolve()));
});

async function proxy(): Promise<HttpProxy> {
  const started = await startHttpProxy();
  proxies.push(started);
  return started;
}

const seen = (p: HttpProxy) => p.seen.map(({ kind, target }) => `${kind} ${target}`);

describe.each(KIND_CASES)('proxy: %s', (_label, kind) => {
  const h = useHarness();

  it('http/request to an http:// URL goes to HTTP_PROXY in absolute form', async () => {
    const p = await proxy();
    const { client } = await h.session(kind, 'ws', { env: { ...NO_AMBIENT_PROXY, HTTP_PROXY: p.url } });
    const result = await client.call<{ status: number; bodyBase64: string }>('http/request', {
      method: 'GET',
      url: `${base}/through?x=1`,
      requestId: 'p1',
    });
    expect(result.status).toBe(200);
    expect(decodeB64(result.bodyBase64).toString()).toBe(`origin saw GET /through?x=1 host=${base.slice(7)}`);
    expect(seen(p)).toEqual([`forward ${base}/through?x=1`]);
  });

  it('NO_PROXY that names the host sends http/request direct', async () => {
    const p = await proxy();
    const env = { ...NO_AMBIENT_PROXY, HTTP_PROXY: p.url, NO_PROXY: 'localhost,127.0.0.1' };
    const { client } = await h.session(kind, 'ws', { env });
    const result = await client.call<{ status: number }>('http/request', {
      method: 'GET',
      url: `${base}/direct`,
      requestId: 'p2',
    });
    expect(result.status).toBe(200);
    expect(seen(p)).toEqual([]);
  });

  it('HTTPS_PROXY alone leaves an http:// request direct and tunnels an https:// one', async () => {
    const p = await proxy();
    const { client } = await h.session(kind, 'ws', { env: { ...NO_AMBIENT_PROXY, HTTPS_PROXY: p.url } });
    const plain = await client.call<{ status: number }>('http/request', {
      method: 'GET',
      url: `${base}/plain`,
      requestId: 'p3',
    });
    expect(plain.status).toBe(200);
    // The origin speaks plain HTTP, so TLS fails inside the tunnel: the route is what is checked.
    const secure = await client.request('http/request', {
      method: 'GET',
      url: `${base.replace('http://', 'https://')}/secure`,
      requestId: 'p4',
    });
    expect(secure.error).toBeDefined();
    expect(seen(p)).toEqual([`connect ${base.slice(7)}`]);
  });

  it('in remote mode, registers through HTTP_PROXY and tunnels the relay socket through it', async () => {
    const p = await proxy();
    const peer = await h.startRemote(kind, { env: { ...NO_AMBIENT_PROXY, HTTP_PROXY: p.url } });
    const client = await h.connect(peer);
    const result = await client.call<{ sessionId: string }>('initialize', {
      clientName: 'proxy',
      resumeSessionId: null,
    });
    expect(result.sessionId).toBeTruthy();
    const routes = seen(p);
    expect(
      routes.some((route) => /^forward http:\/\/127\.0\.0\.1:\d+\/cloud\/environment\/[^/]+\/register$/.test(route)),
    ).toBe(true);
    expect(routes.some((route) => /^connect 127\.0\.0\.1:\d+$/.test(route))).toBe(true);
    // The harness's /validate check went through the proxy too.
    expect(routes.some((route) => /\/validate$/.test(route))).toBe(true);
  });

  it('exports OTLP metrics through HTTP_PROXY', async () => {
    const p = await proxy();
    const collector: OtlpCollector = await startOtlpCollector();
    try {
      const config = `[otel]\nenvironment = "test"\nmetrics_exporter = { otlp-http = { endpoint = "${collector.metricsUrl}", protocol = "json" } }\n`;
      const peer = await h.start(kind, 'stdio', {
        homeFiles: { 'config.toml': config },
        env: { ...NO_AMBIENT_PROXY, HTTP_PROXY: p.url },
      });
      const client = await h.connect(peer);
      await initialize(client, { clientName: 'otel-proxy', resumeSessionId: null });
      peer.stdin.end();
      expect(await peer.exited, peer.stderr()).toEqual({ code: 0, signal: null });
      expect(collector.requests.length).toBeGreaterThan(0);
      expect(seen(p)).toContain(`forward ${collector.metricsUrl}`);
    } finally {
      await collector.close();
    }
  });
});
