import { once } from 'node:events';
import { closeSync, readdirSync, readlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect, Socket } from 'node:net';
import type { NetworkProxyConfig } from '@tether/exec-protocol';
import { loadNativePipe } from '@tether/native-pipe';
import { waitUntil } from '@tether/test-kit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_PROXY_LIMITS,
  DomainPolicy,
  ManagedProxy,
  type ManagedProxyLimits,
  type PolicyDecision,
  type PolicyQuestion,
  verdictOf,
} from './network-proxy.js';
import { ipv6Bytes, socksConnect, socksConnectRequest } from './relay-socks.js';

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
): Promise<{ proxy: ManagedProxy; decisions: PolicyDecision[] }> {
  const decisions: PolicyDecision[] = [];
  const started = await ManagedProxy.start(config(overrides), (d) => decisions.push(d), {
    ...DEFAULT_PROXY_LIMITS,
    ...limits,
  });
  proxies.push(started);
  return { proxy: started, decisions };
}

const native = loadNativePipe()!;

/**
 * A connection as the sandbox's relay (proxy-relay.ts) gets one: a byte asked over a fresh channel of the
 * proxy's (`c` for the HTTP listener, `s` for the SOCKS5 one), the answer, and the descriptor received; null when
 * the proxy said no.
 */
async function relayed(to: ManagedProxy, request: 'c' | 's' = 'c'): Promise<Socket | null> {
  const [controlFd, passFd] = to.openRelayChannel(native);
  const control = new Socket({ fd: controlFd, readable: true, writable: true });
  control.write(request);
  const [answer] = (await once(control, 'data')) as [Buffer];
  const fd = answer[0] === 0x79 ? native.receiveFd(passFd) : null;
  control.destroy();
  closeSync(passFd);
  return fd === null ? null : new Socket({ fd, readable: true, writable: true });
}

/** A connection to the proxy (its TCP port, or through a relay channel), what came back, and when it closed. */
function watch(socket: Socket) {
  let received = '';
  socket.on('data', (d: Buffer) => {
    received += d.toString('latin1');
  });
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { socket, closed, received: () => received };
}

function open(to: ManagedProxy) {
  const socket = connect(to.port, '127.0.0.1');
  const connected = new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  return { ...watch(socket), connected };
}

const get = (host: string, path = '/') =>
  `GET http://${host}${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;

describe('DomainPolicy: the order of the checks', () => {
  const check = (overrides: Partial<NetworkProxyConfig>, host: string) =>
    new DomainPolicy(config(overrides)).check({ protocol: 'http', host, port: 80 });

  it('a local host needs an exact allow entry: a pattern or no entry is not_allowed_local, not not_allowed', async () => {
    expect((await check({ domains: null }, 'localhost')).reason).toBe('not_allowed_local');
    expect((await check({ domains: { '**.localhost': 'allow' } }, 'a.localhost')).reason).toBe('not_allowed_local');
    expect((await check({ domains: { '127.0.0.1': 'allow' } }, '127.0.0.1')).reason).toBe('allow');
    expect((await check({ domains: { '127.0.0.1': 'allow' } }, '10.0.0.1')).reason).toBe('not_allowed_local');
  });

  it('allowLocalBinding decides a local host as any other: named, allowed with a decision; else not_allowed', async () => {
    const named = { allowLocalBinding: true, domains: { '127.0.0.1': 'allow', localhost: 'allow' } } as const;
    expect(await check(named, '127.0.0.1')).toEqual({
      reason: 'allow',
      source: 'baseline_policy',
      silent: false,
      address: '127.0.0.1',
    });
    expect((await check(named, '127.0.0.2')).reason).toBe('not_allowed');
    expect((await check(named, '10.0.0.1')).reason).toBe('not_allowed');
    // A name allowed is not resolved to be decided (Codex answers its CONNECT even where it resolves nowhere); it
    // is resolved, to a local address too, when the proxy connects.
    expect(await check(named, 'localhost')).toMatchObject({ reason: 'allow', address: null });
    expect((await check({ allowLocalBinding: true, domains: { '10.0.0.1': 'deny' } }, '10.0.0.1')).reason).toBe(
      'denied',
    );
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

describe('DomainPolicy: a client that decides (networkProxyReviewDomains)', () => {
  function asking(overrides: Partial<NetworkProxyConfig>, allow: boolean) {
    const asked: PolicyQuestion[] = [];
    const policy = new DomainPolicy(config(overrides), async (question) => {
      asked.push(question);
      return allow ? { allow: true } : { allow: false, reason: 'client_says_no' };
    });
    const check = (host: string) => policy.check({ protocol: 'https_connect', host, port: 443 });
    return { asked, check };
  }

  it('asks about a host the allow list does not allow, or reviewDomains names; never a local or denied one', async () => {
    const { asked, check } = asking(
      {
        domains: { 'ok.test': 'allow', 'reviewed.test': 'allow', 'no.test': 'deny' },
        reviewDomains: ['reviewed.test'],
      },
      false,
    );
    expect(await check('other.test')).toMatchObject({ reason: 'client_says_no', source: 'decider' });
    expect(await check('sub.reviewed.test')).toMatchObject({ reason: 'client_says_no', source: 'decider' });
    expect(await check('no.test')).toMatchObject({ reason: 'denied', source: 'baseline_policy' });
    expect(await check('localhost')).toMatchObject({ reason: 'not_allowed_local', source: 'baseline_policy' });
    // Allowed and not under review: resolved as ever (this one does not resolve).
    expect(await check('ok.test')).toMatchObject({ reason: 'not_allowed_local', source: 'baseline_policy' });
    expect(asked).toEqual([
      { protocol: 'https_connect', host: 'other.test', port: 443 },
      { protocol: 'https_connect', host: 'sub.reviewed.test', port: 443 },
    ]);
  });

  it('an allowed host still has to resolve to a public address; an address is taken as it is', async () => {
    const { check } = asking({}, true);
    expect(await check('nowhere.invalid')).toMatchObject({ reason: 'not_allowed_local', source: 'baseline_policy' });
    expect(await check('8.8.8.8')).toMatchObject({ reason: 'allow', source: 'decider', address: '8.8.8.8' });
  });

  it('verdictOf reads the answer as Codex does', () => {
    const result = (decision: unknown) => verdictOf({ kind: 'result', result: { decision } });
    expect(result({ type: 'allow' })).toEqual({ allow: true });
    expect(result({ type: 'deny' })).toEqual({ allow: false, reason: 'not_allowed' });
    expect(result({ type: 'deny', reason: null })).toEqual({ allow: false, reason: 'not_allowed' });
    expect(result({ type: 'deny', reason: '' })).toEqual({ allow: false, reason: 'policy_denied' });
    expect(result({ type: 'deny', reason: 'has space é' })).toEqual({ allow: false, reason: 'has space é' });
    expect(result({ type: 'deny', reason: 'a\r\nx: y' })).toEqual({ allow: false, reason: 'not_allowed' });
    expect(result({ type: 'deny', reason: 5 })).toEqual({ allow: false, reason: 'not_allowed' });
    expect(result({ type: 'ask' })).toEqual({ allow: false, reason: 'not_allowed' });
    expect(result('allow')).toEqual({ allow: false, reason: 'not_allowed' });
    expect(verdictOf({ kind: 'error', error: { code: 1, message: 'x' } })).toEqual({
      allow: false,
      reason: 'not_allowed',
    });
    expect(verdictOf({ kind: 'none', reason: 'timed out' })).toEqual({ allow: false, reason: 'not_allowed' });
  });
});

describe('ManagedProxy: limits and lifetime', () => {
  it('refuses connections past maxConnections (tcp)', async () => {
    const { proxy: p } = await proxy({}, { maxConnections: 2 });
    const first = open(p);
    const second = open(p);
    await Promise.all([first.connected, second.connected]);
    // The two are served (a denied request answers 403 over each)…
    first.socket.write(`GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n`);
    await new Promise<void>((resolve) => first.socket.once('data', () => resolve()));
    // …a third is closed with nothing said, though it asks the same.
    const third = open(p);
    third.socket.write(get('a.test'));
    await third.closed;
    expect(third.received()).toBe('');
    expect(first.socket.destroyed).toBe(false);
  });

  it('a relay channel answers each request with a connection the proxy serves, and no past maxConnections', async () => {
    const { proxy: p, decisions } = await proxy({}, { maxConnections: 2 });
    const first = watch((await relayed(p))!);
    const second = await relayed(p);
    expect(second).not.toBeNull();
    first.socket.write(get('a.test'));
    await first.closed;
    expect(first.received()).toMatch(/^HTTP\/1\.1 403 Forbidden/);
    // A connection through the relay has no address of its own, as one through Codex's bridge.
    expect(decisions.map((d) => [d.host, d.reason, d.client])).toEqual([['a.test', 'not_allowed', '127.0.0.1:0']]);
    // `second` and another one fill the limit: the next is refused.
    const third = await relayed(p);
    expect(third).not.toBeNull();
    expect(await relayed(p)).toBeNull();
    for (const socket of [second, third]) socket!.destroy();
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

  it('close() ends open tunnels, the listener and the relay channels', async () => {
    const { proxy: p, decisions } = await proxy({ domains: { '127.0.0.1': 'allow' } });
    const tunnel = watch((await relayed(p))!);
    tunnel.socket.write(`CONNECT 127.0.0.1:${originPort} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
    await new Promise<void>((resolve) => tunnel.socket.once('data', () => resolve()));
    expect(tunnel.received()).toMatch(/^HTTP\/1\.1 200 OK/);
    expect(decisions.map((d) => [d.protocol, d.reason, d.client])).toEqual([['https_connect', 'allow', '127.0.0.1:0']]);
    const [controlFd, passFd] = p.openRelayChannel(native);
    const control = watch(new Socket({ fd: controlFd, readable: true, writable: true }));
    p.close();
    await Promise.all([tunnel.closed, control.closed]);
    closeSync(passFd);
    expect(() => p.openRelayChannel(native)).toThrow(/closed/);
    const late = open(p);
    await late.closed;
    expect(late.received()).toBe('');
  });

  it("a relay channel's descriptors here close once the relay's ends are closed", async () => {
    const { proxy: p } = await proxy({});
    const sockets = () => ownSockets().length;
    const before = sockets();
    const [controlFd, passFd] = p.openRelayChannel(native);
    expect(sockets()).toBe(before + 4);
    closeSync(controlFd);
    closeSync(passFd);
    await waitUntil(() => sockets() === before, "the channel's two sockets closing");
  });
});

// The seam between the relay's transparent TCP (proxy-relay.ts) and the proxy: a redirected connection goes to the
// SOCKS5 listener over a relay channel (`s`) as a CONNECT to where it was headed (relay-socks.ts). An allowed target
// cannot be reached alike on Codex's and ours (it would leave the host): allow is tested here, against the origin.
describe("transparent TCP: the relay's SOCKS5 client and the channel's `s` and `t`", () => {
  const socks = { enableSocks5: true, domains: { '127.0.0.1': 'allow', '192.88.99.9': 'deny' } } as const;

  it('writes the greeting and a CONNECT for an IPv4 or IPv6 literal, or a name', () => {
    expect([...socksConnectRequest('192.88.99.7', 443)]).toEqual([5, 1, 0, 5, 1, 0, 1, 192, 88, 99, 7, 1, 187]);
    expect(socksConnectRequest('2001:db8::7', 80).subarray(6)).toEqual(
      Buffer.from([4, 0x20, 0x01, 0x0d, 0xb8, ...Array(11).fill(0), 7, 0, 80]),
    );
    expect(ipv6Bytes('::ffff:10.0.0.1')).toEqual(Buffer.from([...Array(10).fill(0), 0xff, 0xff, 10, 0, 0, 1]));
    expect(ipv6Bytes('::')).toEqual(Buffer.alloc(16));
    // A name the relay's resolver gave out goes as a name.
    expect(socksConnectRequest('a.invalid', 80)).toEqual(
      Buffer.concat([Buffer.from([5, 1, 0, 5, 1, 0, 3, 9]), Buffer.from('a.invalid'), Buffer.from([0, 80])]),
    );
    expect(() => socksConnectRequest('x'.repeat(256), 80)).toThrow(RangeError);
    expect(() => ipv6Bytes('10.0.0.1')).toThrow(TypeError);
  });

  it('an allowed target is connected through the SOCKS5 listener (socks5_tcp allow), then the stream flows', async () => {
    const { proxy: p, decisions } = await proxy(socks);
    const upstream = (await relayed(p, 's'))!;
    expect(await socksConnect(upstream, '127.0.0.1', originPort)).toEqual(Buffer.alloc(0));
    const stream = watch(upstream);
    upstream.resume();
    upstream.write('GET /transparent HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    await stream.closed;
    expect(stream.received()).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(stream.received().endsWith(BODY)).toBe(true);
    expect(decisions.map((d) => [d.protocol, d.host, d.port, d.reason, d.client])).toEqual([
      ['socks5_tcp', '127.0.0.1', originPort, 'allow', '127.0.0.1:0'],
    ]);
  });

  it('a refused target (not allowed, denied, unreachable) resolves null, each decided', async () => {
    const { proxy: p, decisions } = await proxy(socks);
    for (const [host, port] of [
      ['192.88.99.7', 80],
      ['192.88.99.9', 443],
      ['127.0.0.1', 1],
    ] as const) {
      const upstream = (await relayed(p, 's'))!;
      expect(await socksConnect(upstream, host, port)).toBeNull();
      upstream.destroy();
    }
    expect(decisions.map((d) => [d.host, d.reason])).toEqual([
      ['192.88.99.7', 'not_allowed'],
      ['192.88.99.9', 'denied'],
      ['127.0.0.1', 'allow'],
    ]);
  });

  it('a server that is not SOCKS5, refuses, or closes first resolves null', async () => {
    for (const answer of [
      Buffer.from('HTTP/1.1 400 Bad Request\r\n\r\n'),
      Buffer.from([5, 0, 5, 2, 0, 1, 0, 0, 0, 0, 0, 0]),
      null,
    ]) {
      const [a, b] = native.socketPair();
      const ours = new Socket({ fd: a, readable: true, writable: true });
      const theirs = new Socket({ fd: b, readable: true, writable: true });
      theirs.on('error', () => undefined);
      if (answer === null) theirs.destroy();
      else theirs.write(answer);
      expect(await socksConnect(ours, '192.88.99.7', 80)).toBeNull();
      ours.destroy();
      theirs.destroy();
    }
  });

  it('`s` is refused without a SOCKS5 listener, `c` still served', async () => {
    const { proxy: p } = await proxy({});
    expect(await relayed(p, 's')).toBeNull();
    const served = await relayed(p, 'c');
    expect(served).not.toBeNull();
    served!.destroy();
  });

  it("`t` routes the namespace of the pair's maker (its pid), answered once routed; refused without a route", async () => {
    const { proxy: p } = await proxy(socks);
    const routed: number[] = [];
    for (const route of [async (pid: number) => routed.push(pid) > 0, null]) {
      const [controlFd, passFd] = p.openRelayChannel(native, route);
      const control = new Socket({ fd: controlFd, readable: true, writable: true });
      const [mine, theirs] = native.socketPair();
      native.sendFd(passFd, theirs);
      closeSync(theirs);
      control.write('t');
      const [answer] = (await once(control, 'data')) as [Buffer];
      expect(answer.toString()).toBe(route === null ? 'n' : 'y');
      control.destroy();
      for (const fd of [mine, passFd]) closeSync(fd);
    }
    expect(routed).toEqual([process.pid]);
  });
});

/** This process's sockets (`/proc/self/fd`). */
function ownSockets(): string[] {
  const out: string[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (target.startsWith('socket:')) out.push(target);
    } catch {}
  }
  return out;
}
