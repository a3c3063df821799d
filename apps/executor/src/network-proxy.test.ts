import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { NetworkProxyConfig } from '@tether/exec-protocol';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_PROXY_LIMITS,
  DomainPolicy,
  ManagedProxy,
  type ManagedProxyLimits,
  type PolicyDecision,
} from './network-proxy.js';

const config = (overrides: Partial<NetworkProxyConfig> = {}): NetworkProxyConfig => ({
  enabled: true,
  enableSocks5: false,
  enableSocks5Udp: false,
  allowUpstreamProxy: true,
  dangerouslyAllowAllUnixSockets: false,
  mode: 'full',
  domains: null,
  unixSockets: null,
  allowLocalBinding: false,
  ...overrides,
});

/** An origin on 127.0.0.1 answering `BODY`. */
const BODY = 'x'.repeat(64 * 1024);
let origin: Server;
let originPort = 0;
beforeAll(async () => {
  origin = createServer((_req, res) => res.end(BODY));
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
  originPort = (origin.address() as { port: number }).port;
});
afterAll(async () => {
  origin.closeAllConnections();
  await new Promise((resolve) => origin.close(resolve));
});

const proxies: ManagedProxy[] = [];
afterEach(() => {
  for (const proxy of proxies.splice(0)) proxy.close();
});

async function proxy(
  overrides: Partial<NetworkProxyConfig>,
  limits: Partial<ManagedProxyLimits> = {},
  unixSocket = false,
): Promise<{ proxy: ManagedProxy; decisions: PolicyDecision[] }> {
  const decisions: PolicyDecision[] = [];
  const started = await ManagedProxy.start(
    config(overrides),
    (d) => decisions.push(d),
    { ...DEFAULT_PROXY_LIMITS, ...limits },
    { unixSocket },
  );
  proxies.push(started);
  return { proxy: started, decisions };
}

/** A connection to the proxy (its TCP port, or its unix socket), what came back, and when it closed. */
function open(to: ManagedProxy, via: 'tcp' | 'unix' = 'tcp') {
  const socket: Socket = via === 'tcp' ? connect(to.port, '127.0.0.1') : connect(to.socketPath!);
  let received = '';
  socket.on('data', (d: Buffer) => {
    received += d.toString('latin1');
  });
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  const connected = new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  return { socket, closed, connected, received: () => received };
}

const get = (host: string, path = '/') =>
  `GET http://${host}${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;

describe('DomainPolicy: the order of the checks', () => {
  const check = (overrides: Partial<NetworkProxyConfig>, host: string) =>
    new DomainPolicy(config(overrides)).check(host);

  it('a local host needs an exact allow entry: a pattern or no entry is not_allowed_local, not not_allowed', async () => {
    expect((await check({ domains: null }, 'localhost')).reason).toBe('not_allowed_local');
    expect((await check({ domains: { '**.localhost': 'allow' } }, 'a.localhost')).reason).toBe('not_allowed_local');
    expect((await check({ domains: { '127.0.0.1': 'allow' } }, '127.0.0.1')).reason).toBe('allow');
    expect((await check({ domains: { '127.0.0.1': 'allow' } }, '10.0.0.1')).reason).toBe('not_allowed_local');
  });

  it('allowLocalBinding forwards a local host with no decision', async () => {
    expect(await check({ allowLocalBinding: true }, '127.0.0.1')).toEqual({
      reason: 'allow',
      silent: true,
      address: '127.0.0.1',
    });
  });

  it('deny beats allow, then the allow list, then the name must resolve to a public address', async () => {
    const domains = { 'x.test': 'allow', '**.x.test': 'deny', '*.y.invalid': 'allow' } as const;
    expect((await check({ domains }, 'x.test')).reason).toBe('denied');
    expect((await check({ domains }, 'other.test')).reason).toBe('not_allowed');
    // `*.d` is a subdomain only; an allowed name that does not resolve is local/private as Codex words it.
    expect((await check({ domains }, 'y.invalid')).reason).toBe('not_allowed');
    expect((await check({ domains }, 'a.y.invalid')).reason).toBe('not_allowed_local');
    expect((await check({ domains: { '8.8.8.8': 'allow' } }, '8.8.8.8')).reason).toBe('allow');
  });
});

describe('ManagedProxy: limits and lifetime', () => {
  it.each(['tcp', 'unix'] as const)('refuses connections past maxConnections (%s)', async (via) => {
    const { proxy: p } = await proxy({}, { maxConnections: 2 }, via === 'unix');
    const first = open(p, via);
    const second = open(p, via);
    await Promise.all([first.connected, second.connected]);
    // The two are served (a denied request answers 403 over each)…
    first.socket.write(`GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n`);
    await new Promise<void>((resolve) => first.socket.once('data', () => resolve()));
    // …a third is closed with nothing said, though it asks the same.
    const third = open(p, via);
    third.socket.write(get('a.test'));
    await third.closed;
    expect(third.received()).toBe('');
    expect(first.socket.destroyed).toBe(false);
  });

  it('cuts every connection once maxBytes have been relayed', async () => {
    const { proxy: p } = await proxy({ domains: { '127.0.0.1': 'allow' } }, { maxBytes: 1024 });
    const client = open(p);
    client.socket.write(get(`127.0.0.1:${originPort}`));
    await client.closed;
    // Cut mid-answer (the first chunk already passes the budget): never the whole body.
    expect(client.received().length).toBeLessThan(BODY.length);
  });

  it('relays all of an answer under maxBytes', async () => {
    const { proxy: p } = await proxy({ domains: { '127.0.0.1': 'allow' } });
    const client = open(p);
    client.socket.write(get(`127.0.0.1:${originPort}`));
    await client.closed;
    expect(client.received().endsWith(BODY)).toBe(true);
  });

  it('closes a connection idle for idleMs', async () => {
    const { proxy: p } = await proxy({}, { idleMs: 50 });
    const client = open(p);
    await client.closed;
    expect(client.received()).toBe('');
  });

  it('close() ends open tunnels and the listeners, and removes the socket directory', async () => {
    const { proxy: p, decisions } = await proxy({ domains: { '127.0.0.1': 'allow' } }, {}, true);
    const tunnel = open(p, 'unix');
    tunnel.socket.write(`CONNECT 127.0.0.1:${originPort} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
    await new Promise<void>((resolve) => tunnel.socket.once('data', () => resolve()));
    expect(tunnel.received()).toMatch(/^HTTP\/1\.1 200 OK/);
    expect(decisions.map((d) => [d.protocol, d.reason, d.client])).toEqual([['https_connect', 'allow', '127.0.0.1:0']]);
    const directory = p.socketDirectory!;
    expect(existsSync(directory)).toBe(true);
    p.close();
    await tunnel.closed;
    expect(existsSync(directory)).toBe(false);
    const late = open(p);
    await late.closed;
    expect(late.received()).toBe('');
  });
});
