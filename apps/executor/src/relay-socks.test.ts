// The seam between the sandbox relay's transparent TCP (proxy-relay.ts) and the managed proxy: a redirected
// connection goes to the proxy's SOCKS5 listener over a relay channel (`s`) as a CONNECT to where it was headed
// (relay-socks.ts). An allowed target cannot be reached on both executors alike (it would leave the host), so
// allow is tested here, against an origin on 127.0.0.1; the conformance test compares the refusals.

import { once } from 'node:events';
import { closeSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { Socket } from 'node:net';
import type { NetworkProxyConfig } from '@tether/exec-protocol';
import { loadNativePipe } from '@tether/native-pipe';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_PROXY_LIMITS, ManagedProxy, type PolicyDecision } from './network-proxy.js';
import { ipv6Bytes, socksConnect, socksConnectRequest } from './relay-socks.js';

const native = loadNativePipe()!;

const config = (overrides: Partial<NetworkProxyConfig> = {}): NetworkProxyConfig => ({
  enabled: true,
  enableSocks5: true,
  enableSocks5Udp: false,
  allowUpstreamProxy: true,
  dangerouslyAllowAllUnixSockets: false,
  mode: 'full',
  domains: { '127.0.0.1': 'allow', '192.88.99.9': 'deny' },
  unixSockets: null,
  allowLocalBinding: false,
  ...overrides,
});

let origin: Server;
let originPort = 0;
beforeAll(async () => {
  origin = createServer((req, res) => res.end(`origin saw ${req.url}`));
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
  originPort = (origin.address() as { port: number }).port;
});
afterAll(async () => {
  origin.closeAllConnections();
  await new Promise((resolve) => origin.close(resolve));
});

const opened: { close(): void }[] = [];
afterEach(() => {
  for (const thing of opened.splice(0)) thing.close();
});

async function proxy(overrides: Partial<NetworkProxyConfig>, route: ((pid: number) => Promise<boolean>) | null) {
  const decisions: PolicyDecision[] = [];
  const started = await ManagedProxy.start(config(overrides), (d) => decisions.push(d), DEFAULT_PROXY_LIMITS);
  opened.push(started);
  const [controlFd, passFd] = started.openRelayChannel(native, route);
  const control = new Socket({ fd: controlFd, readable: true, writable: true });
  opened.push({ close: () => control.destroy() }, { close: () => closeSync(passFd) });
  /** One request over the channel, as the relay asks: the answer, and for `c`/`s` the connection sent. */
  const ask = async (request: 'c' | 's' | 't') => {
    control.write(request);
    const [answer] = (await once(control, 'data')) as [Buffer];
    const fd = answer[0] === 0x79 && request !== 't' ? native.receiveFd(passFd) : null;
    const socket = fd === null ? null : new Socket({ fd, readable: true, writable: true, allowHalfOpen: true });
    if (socket) opened.push({ close: () => socket.destroy() });
    return { granted: answer[0] === 0x79, socket };
  };
  return { ask, decisions, passFd };
}

describe('relay SOCKS5 client', () => {
  it('writes the greeting and a CONNECT for an IPv4 or IPv6 literal', () => {
    expect([...socksConnectRequest('192.88.99.7', 443)]).toEqual([5, 1, 0, 5, 1, 0, 1, 192, 88, 99, 7, 1, 187]);
    expect(socksConnectRequest('2001:db8::7', 80).subarray(6)).toEqual(
      Buffer.from([4, 0x20, 0x01, 0x0d, 0xb8, ...Array(11).fill(0), 7, 0, 80]),
    );
    expect(ipv6Bytes('::ffff:10.0.0.1')).toEqual(Buffer.from([...Array(10).fill(0), 0xff, 0xff, 10, 0, 0, 1]));
    expect(ipv6Bytes('::')).toEqual(Buffer.alloc(16));
    expect(() => ipv6Bytes('10.0.0.1')).toThrow(TypeError);
  });

  it('an allowed target is connected through the proxy (socks5_tcp allow), the stream then flows both ways', async () => {
    const { ask, decisions } = await proxy({}, null);
    const { socket } = await ask('s');
    const early = await socksConnect(socket!, '127.0.0.1', originPort);
    expect(early).toEqual(Buffer.alloc(0));
    socket!.resume();
    socket!.write('GET /transparent HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    let answer = '';
    socket!.on('data', (d: Buffer) => {
      answer += d;
    });
    await once(socket!, 'end');
    expect(answer).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*origin saw \/transparent$/);
    expect(decisions.map((d) => [d.protocol, d.host, d.port, d.reason, d.decision])).toEqual([
      ['socks5_tcp', '127.0.0.1', originPort, 'allow', 'allow'],
    ]);
  });

  it('a refused target (not allowed, denied, unreachable) resolves null, each decided', async () => {
    const { ask, decisions } = await proxy({ domains: { '127.0.0.1': 'allow', '192.88.99.9': 'deny' } }, null);
    for (const [host, port] of [
      ['192.88.99.7', 80],
      ['192.88.99.9', 443],
      ['127.0.0.1', 1],
    ] as const) {
      const { socket } = await ask('s');
      expect(await socksConnect(socket!, host, port)).toBeNull();
    }
    expect(decisions.map((d) => [d.host, d.reason])).toEqual([
      ['192.88.99.7', 'not_allowed'],
      ['192.88.99.9', 'denied'],
      ['127.0.0.1', 'allow'],
    ]);
  });

  it('a server that is not SOCKS5, or closes first, resolves null', async () => {
    for (const answer of [
      Buffer.from('HTTP/1.1 400 Bad Request\r\n\r\n'),
      Buffer.from([5, 0, 5, 2, 0, 1, 0, 0, 0, 0, 0, 0]),
    ]) {
      const [a, b] = native.socketPair();
      const ours = new Socket({ fd: a, readable: true, writable: true });
      const theirs = new Socket({ fd: b, readable: true, writable: true });
      opened.push({ close: () => ours.destroy() }, { close: () => theirs.destroy() });
      theirs.write(answer);
      expect(await socksConnect(ours, '192.88.99.7', 80)).toBeNull();
    }
    const [a, b] = native.socketPair();
    const ours = new Socket({ fd: a, readable: true, writable: true });
    opened.push({ close: () => ours.destroy() });
    closeSync(b);
    expect(await socksConnect(ours, '192.88.99.7', 80)).toBeNull();
  });
});

describe('relay channel: SOCKS5 and transparent TCP requests', () => {
  it('`s` is refused without a SOCKS5 listener, `c` still served', async () => {
    const { ask } = await proxy({ enableSocks5: false }, null);
    expect((await ask('s')).granted).toBe(false);
    expect((await ask('c')).granted).toBe(true);
  });

  it("`t` routes the namespace of the pair's maker (its pid), answered once routed; refused without a route", async () => {
    const routed: number[] = [];
    const { ask, passFd } = await proxy({}, async (pid) => {
      routed.push(pid);
      return true;
    });
    const [mine, theirs] = native.socketPair();
    native.sendFd(passFd, theirs);
    closeSync(theirs);
    expect((await ask('t')).granted).toBe(true);
    closeSync(mine);
    expect(routed).toEqual([process.pid]);

    const refusing = await proxy({}, null);
    const [other, sent] = native.socketPair();
    native.sendFd(refusing.passFd, sent);
    closeSync(sent);
    expect((await refusing.ask('t')).granted).toBe(false);
    closeSync(other);
  });
});
