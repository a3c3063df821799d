/** Issue 16 item 7: server timeouts and the connection cap, and a `/metrics` that does not scan per scrape. */
import { generateKeyPairSync } from 'node:crypto';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { buildRegistry, type RegistryConfig } from './app.js';
import { sharedScan } from './routes/health.js';
import { openSqliteStore, type RegistryStore } from './store/index.js';

const pair = generateKeyPairSync('ed25519');
let app: FastifyInstance | undefined;
let store: RegistryStore | undefined;
const sockets: Socket[] = [];

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await app?.close();
  await store?.close();
  app = undefined;
  store = undefined;
});

async function listening(config: Partial<RegistryConfig>): Promise<number> {
  store = openSqliteStore(':memory:');
  app = await buildRegistry(
    { relayUrls: ['ws://relay:1'], ...config },
    { store, signingKey: { privateKey: pair.privateKey, publicKey: pair.publicKey } },
  );
  await app.listen({ host: '127.0.0.1', port: 0 });
  return (app.server.address() as { port: number }).port;
}

/** A raw TCP connection to the server, with everything it received and a promise for its close. */
async function open(port: number) {
  const socket = connect(port, '127.0.0.1');
  sockets.push(socket);
  let received = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    received += chunk;
  });
  socket.on('error', () => {}); // a refused connection may be reset
  const closed = once(socket, 'close');
  await once(socket, 'connect');
  return { socket, closed, received: () => received };
}

describe('server limits', () => {
  it('cuts a slow-loris client that never finishes its headers', async () => {
    const port = await listening({ limits: { headersTimeoutMs: 200, requestTimeoutMs: 1_000 } });
    const client = await open(port);
    // Headers trickle in and never end: the socket is never idle, so only the headers deadline can cut it.
    client.socket.write('GET /livez HTTP/1.1\r\nHost: x\r\n');
    const trickle = setInterval(() => client.socket.write('X-Slow: 1\r\n'), 50);
    try {
      await client.closed;
    } finally {
      clearInterval(trickle);
    }
    expect(client.received()).toMatch(/^HTTP\/1\.1 408/);
  });

  it('refuses connections beyond the cap while serving those within it', async () => {
    const port = await listening({ limits: { maxConnections: 2 } });
    const first = await open(port);
    const second = await open(port);
    // Connections are counted once accepted: make sure both are before the third arrives.
    for (const c of [first, second]) c.socket.write('GET /livez HTTP/1.1\r\nHost: x\r\n\r\n');
    await new Promise<void>((resolve) => {
      const check = () => (/200/.test(first.received()) && /200/.test(second.received()) ? resolve() : undefined);
      first.socket.on('data', check);
      second.socket.on('data', check);
      check();
    });
    const third = await open(port);
    third.socket.write('GET /livez HTTP/1.1\r\nHost: x\r\n\r\n');
    await third.closed;
    expect(third.received()).toBe('');
    // The first two keep working.
    const before = first.received().length;
    first.socket.write('GET /livez HTTP/1.1\r\nHost: x\r\n\r\n');
    await new Promise<void>((resolve) => {
      const check = () => (first.received().length > before ? resolve() : undefined);
      first.socket.on('data', check);
      check();
    });
    expect(first.received().slice(before)).toMatch(/^HTTP\/1\.1 200/);
  });

  it('applies the configured timeouts to the Node server and refuses nonsense', async () => {
    await listening({
      limits: {
        connectionTimeoutMs: 11_000,
        requestTimeoutMs: 12_000,
        headersTimeoutMs: 3_000,
        keepAliveTimeoutMs: 4_000,
        maxConnections: 50,
      },
    });
    const server = app?.server;
    expect([server?.timeout, server?.requestTimeout, server?.headersTimeout, server?.keepAliveTimeout]).toEqual([
      11_000, 12_000, 3_000, 4_000,
    ]);
    expect(server?.maxConnections).toBe(50);
    const s = openSqliteStore(':memory:');
    const deps = { store: s, signingKey: { privateKey: pair.privateKey, publicKey: pair.publicKey } };
    await expect(buildRegistry({ relayUrls: ['ws://r:1'], limits: { maxConnections: 0 } }, deps)).rejects.toThrow(
      /maxConnections/,
    );
    await expect(
      buildRegistry({ relayUrls: ['ws://r:1'], limits: { headersTimeoutMs: 5_000, requestTimeoutMs: 1_000 } }, deps),
    ).rejects.toThrow(/headersTimeoutMs/);
    await s.close();
  });
});

describe('/metrics', () => {
  it('scans the environments at most once per cache period, however many scrapes arrive', async () => {
    store = openSqliteStore(':memory:');
    let clock = 1_000_000;
    let scans = 0;
    const listEnvironments = store.listEnvironments.bind(store);
    store.listEnvironments = async () => {
      scans++;
      return listEnvironments();
    };
    app = await buildRegistry(
      { relayUrls: ['ws://relay:1'], metricsCacheMs: 5_000 },
      { store, signingKey: { privateKey: pair.privateKey, publicKey: pair.publicKey }, now: () => clock },
    );
    const scrapes = await Promise.all(Array.from({ length: 50 }, () => app?.inject('/metrics')));
    expect(scrapes.every((r) => r?.statusCode === 200)).toBe(true);
    expect(scans).toBe(1);
    clock += 4_999;
    await app.inject('/metrics');
    expect(scans).toBe(1);
    clock += 1;
    const fresh = await app.inject('/metrics');
    expect(scans).toBe(2);
    expect(fresh.body).toContain('registry_environments 0');
  });

  it('sharedScan: concurrent callers share one scan; a failed scan is not cached', async () => {
    let calls = 0;
    let fail = true;
    const scan = sharedScan(
      async () => {
        calls++;
        if (fail) throw new Error('down');
        return calls;
      },
      1_000,
      () => 0,
    );
    await expect(Promise.all([scan(), scan()])).rejects.toThrow('down');
    expect(calls).toBe(1);
    fail = false;
    expect(await Promise.all([scan(), scan(), scan()])).toEqual([2, 2, 2]);
    expect(calls).toBe(2);
  });
});
