import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startHttpProxy } from '@tether/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { outboundFetch } from './fetch.js';
import {
  DIRECT,
  describeProxy,
  NoProxy,
  ProxyConfigError,
  proxyFor,
  proxySettingsFromEnv,
  webSocketAgent,
} from './proxy.js';
import { outboundRequest } from './request.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const url = (text: string) => new URL(text);

describe('proxy settings from the environment (as reqwest reads them)', () => {
  it('takes HTTP_PROXY for http and ws, HTTPS_PROXY for https and wss, ALL_PROXY for the scheme left unset', () => {
    const settings = proxySettingsFromEnv({ HTTP_PROXY: 'http://p1:8080', ALL_PROXY: 'p2:3128' });
    expect(proxyFor(url('http://example.com/'), settings)?.href).toBe('http://p1:8080/');
    expect(proxyFor(url('ws://example.com/'), settings)?.href).toBe('http://p1:8080/');
    // No scheme: http:// is assumed.
    expect(proxyFor(url('https://example.com/'), settings)?.href).toBe('http://p2:3128/');
    expect(proxyFor(url('wss://example.com/'), settings)?.href).toBe('http://p2:3128/');
    expect(proxyFor(url('https://example.com/'), proxySettingsFromEnv({}))).toBeNull();
  });

  it('prefers the upper-case variable and reads the lower-case one when it is unset', () => {
    const upper = proxySettingsFromEnv({ HTTPS_PROXY: 'http://up:1', https_proxy: 'http://low:2' });
    expect(proxyFor(url('https://x/'), upper)?.host).toBe('up:1');
    const lower = proxySettingsFromEnv({ https_proxy: 'http://low:2', no_proxy: 'x' });
    expect(proxyFor(url('https://y/'), lower)?.host).toBe('low:2');
    expect(proxyFor(url('https://x/'), lower)).toBeNull();
  });

  it('refuses a malformed or unsupported proxy, naming the variable and not its value', () => {
    expect(() => proxySettingsFromEnv({ HTTPS_PROXY: 'http://user:secret@[bad' })).toThrow(ProxyConfigError);
    expect(() => proxySettingsFromEnv({ HTTPS_PROXY: 'http://user:secret@[bad' })).toThrow(/^HTTPS_PROXY is not/);
    expect(() => proxySettingsFromEnv({ ALL_PROXY: 'socks5://h:1080' })).toThrow(/socks5 proxy; only http/);
    try {
      proxySettingsFromEnv({ HTTPS_PROXY: 'http://user:secret@[bad' });
    } catch (err) {
      expect((err as Error).message).not.toContain('secret');
    }
  });

  it('describes a proxy without its credentials', () => {
    expect(describeProxy(url('http://alice:pw@proxy.corp:3128'))).toBe('http://proxy.corp:3128');
  });
});

describe('NO_PROXY', () => {
  const matches = (list: string, target: string) => NoProxy.parse(list).matches(url(target));

  it('matches a domain and its subdomains, with or without a leading dot, and nothing else', () => {
    for (const list of ['example.com', '.example.com', ' other.org , example.com ']) {
      expect(matches(list, 'http://example.com/')).toBe(true);
      expect(matches(list, 'https://api.example.com/x')).toBe(true);
      expect(matches(list, 'http://notexample.com/')).toBe(false);
      expect(matches(list, 'http://example.com.evil.net/')).toBe(false);
    }
    expect(matches('EXAMPLE.com', 'http://Example.COM/')).toBe(true);
  });

  it.each<[string, string, boolean]>([
    // IPv4 and IPv6 addresses and CIDR blocks.
    ['127.0.0.1', 'http://127.0.0.1:8080/', true],
    ['127.0.0.1', 'http://127.0.0.2/', false],
    ['192.168.1.0/24', 'http://192.168.1.42/', true],
    ['192.168.1.0/24', 'http://192.168.2.1/', false],
    ['10.0.0.0/8', 'http://10.200.3.4/', true],
    ['::1', 'http://[::1]:9000/', true],
    ['fd00::/8', 'http://[fd12:3456::1]/', true],
    ['fd00::/8', 'http://[fe80::1]/', false],
    ['::ffff:10.0.0.0/104', 'http://[::ffff:10.1.2.3]/', true],
    // An address entry is not a domain suffix.
    ['0.0.1', 'http://10.0.0.1/', false],
    // Everything with *, and a port only where an entry names one.
    ['*', 'https://anything.example/', true],
    ['example.com:8443', 'https://example.com:8443/', true],
    ['example.com:8443', 'https://example.com/', false],
    ['127.0.0.1:80', 'http://127.0.0.1/', true],
    ['', 'http://example.com/', false],
  ])('matches addresses, CIDR blocks, * and ports: %j against %s is %s', (list, target, expected) => {
    expect(matches(list, target)).toBe(expected);
  });
});

async function origin(): Promise<{ server: Server; base: string; requests: IncomingMessage[] }> {
  const requests: IncomingMessage[] = [];
  const server = createServer((req, res) => {
    requests.push(req);
    res.end(`hello ${req.url}`);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { server, base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests };
}

async function send(target: URL, settings: ReturnType<typeof proxySettingsFromEnv>): Promise<string> {
  const req = await outboundRequest(
    target,
    { method: 'GET', headers: { accept: 'text/plain' }, agent: false },
    settings,
  );
  return new Promise((resolve, reject) => {
    req.once('error', reject);
    req.once('response', (res: IncomingMessage) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk;
      });
      res.once('end', () => resolve(`${res.statusCode} ${body}`));
    });
    req.end();
  });
}

describe('outbound requests through a real proxy', () => {
  it('sends an http:// request in absolute form with Basic credentials, and the target sees its own Host', async () => {
    const { base, requests } = await origin();
    const proxy = await startHttpProxy({ credentials: 'alice:s3cret' });
    cleanups.push(() => proxy.close());
    const withAuth = proxy.url.replace('http://', 'http://alice:s3cret@');
    expect(await send(url(`${base}/a?b=1`), proxySettingsFromEnv({ HTTP_PROXY: withAuth }))).toBe('200 hello /a?b=1');
    expect(proxy.seen).toEqual([
      { kind: 'forward', target: `${base}/a?b=1`, method: 'GET', authorization: expect.stringMatching(/^Basic /) },
    ]);
    expect(requests[0]!.headers.host).toBe(new URL(base).host);
    expect(requests[0]!.headers['proxy-authorization']).toBeUndefined();
    // Wrong credentials: the proxy's 407 comes back as the answer.
    expect(await send(url(`${base}/`), proxySettingsFromEnv({ HTTP_PROXY: proxy.url }))).toMatch(/^407 /);
  });

  it('opens a CONNECT tunnel for an https:// target', async () => {
    const { base } = await origin();
    const proxy = await startHttpProxy();
    cleanups.push(() => proxy.close());
    const target = url(base.replace('http://', 'https://'));
    // The origin speaks plain HTTP, so TLS fails inside the tunnel; the route is what is checked.
    await expect(send(target, proxySettingsFromEnv({ HTTPS_PROXY: proxy.url }))).rejects.toThrow();
    expect(proxy.seen.map(({ kind, target }) => `${kind} ${target}`)).toEqual([`connect ${target.host}`]);
  });

  it('goes direct when NO_PROXY matches, and with no proxy set', async () => {
    const { base } = await origin();
    const proxy = await startHttpProxy();
    cleanups.push(() => proxy.close());
    const settings = proxySettingsFromEnv({ HTTP_PROXY: proxy.url, NO_PROXY: '127.0.0.0/8' });
    expect(await send(url(`${base}/direct`), settings)).toBe('200 hello /direct');
    expect(await send(url(`${base}/none`), DIRECT)).toBe('200 hello /none');
    expect(proxy.seen).toEqual([]);
  });

  it('tunnels a ws:// WebSocket with CONNECT', async () => {
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(wss, 'listening');
    wss.on('connection', (socket) => socket.on('message', (data) => socket.send(`echo ${data}`)));
    cleanups.push(() => new Promise<void>((resolve) => wss.close(() => resolve())));
    const proxy = await startHttpProxy();
    cleanups.push(() => proxy.close());
    const target = url(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}/path`);
    const agent = await webSocketAgent(target, proxySettingsFromEnv({ HTTP_PROXY: proxy.url }));
    expect(agent).toBeDefined();
    const ws = new WebSocket(target, { agent });
    cleanups.push(() => ws.terminate());
    await once(ws, 'open');
    ws.send('hi');
    const [reply] = (await once(ws, 'message')) as [Buffer];
    expect(reply.toString()).toBe('echo hi');
    expect(proxy.seen.map(({ kind, target }) => `${kind} ${target}`)).toEqual([`connect ${target.host}`]);
    expect(
      await webSocketAgent(target, proxySettingsFromEnv({ HTTP_PROXY: proxy.url, NO_PROXY: '127.0.0.1' })),
    ).toBeUndefined();
  });
});

describe('outboundFetch', () => {
  it('posts through the proxy and answers a Response; a refused connection is a TypeError with the OS cause', async () => {
    const bodies: string[] = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => {
        body += chunk;
      });
      req.on('end', () => {
        bodies.push(body);
        res.writeHead(201, { 'content-type': 'application/json', 'x-extra': 'a' }).end('{"ok":true}');
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const proxy = await startHttpProxy();
    cleanups.push(() => proxy.close());
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const doFetch = outboundFetch(proxySettingsFromEnv({ HTTP_PROXY: proxy.url }));
    const response = await doFetch(`${base}/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
      body: JSON.stringify({ a: 1 }),
    });
    expect(response.status).toBe(201);
    expect(response.headers.get('x-extra')).toBe('a');
    expect(await response.json()).toEqual({ ok: true });
    expect(bodies).toEqual(['{"a":1}']);
    expect(proxy.seen.map(({ kind, target }) => `${kind} ${target}`)).toEqual([`forward ${base}/register`]);

    const closed = await startHttpProxy();
    const deadPort = new URL(closed.url).port;
    await closed.close();
    const refused = await outboundFetch(DIRECT)(`http://127.0.0.1:${deadPort}/`).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(TypeError);
    expect((refused as { cause?: { code?: string } }).cause?.code).toBe('ECONNREFUSED');
  });
});
