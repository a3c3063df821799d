import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { HttpBodyDeltaNotification } from '@tether/exec-protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpRequests, MAX_REDIRECTS } from './http-requests.js';

let server: Server;
let base = '';
const held = new Set<ServerResponse>();

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const hops = Number(url.searchParams.get('hops') ?? 0);
      if (url.pathname === '/loop') {
        res.writeHead(302, { location: `/loop?hops=${hops + 1}` }).end();
      } else if (url.pathname === '/status') {
        res.writeHead(Number(url.searchParams.get('code')), { location: '/echo' }).end();
      } else if (url.pathname === '/echo') {
        res.end(JSON.stringify({ method: req.method, body: Buffer.concat(chunks).toString() }));
      } else if (url.pathname === '/headers') {
        res.end(JSON.stringify(req.rawHeaders));
      } else if (url.pathname === '/big') {
        // Eight 64 KiB chunks, written as fast as the socket takes them.
        for (let i = 0; i < 8; i++) res.write(Buffer.alloc(65536, i));
        res.end();
      } else {
        held.add(res);
        res.writeHead(200);
        res.write('first');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const res of held) res.destroy();
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

function collector(writable = true, maxActiveStreams?: number) {
  const deltas: HttpBodyDeltaNotification[] = [];
  let waits = 0;
  let done!: () => void;
  const finished = new Promise<void>((resolve) => {
    done = resolve;
  });
  const requests = new HttpRequests({
    maxActiveStreams,
    sendDelta: (params) => {
      deltas.push(params);
      if (params.done) done();
      return writable;
    },
    writable: () => {
      waits++;
      return new Promise((resolve) => setImmediate(resolve));
    },
  });
  return { requests, deltas, finished, waits: () => waits };
}

const get = (url: string, extra: Record<string, unknown> = {}) => ({ method: 'GET', url, requestId: 'r', ...extra });

describe('HttpRequests', () => {
  it(`gives up after ${MAX_REDIRECTS} redirects`, async () => {
    const { requests } = collector();
    await expect(requests.request(get(`${base}/loop`))).rejects.toMatchObject({
      code: -32603,
      message: `http/request failed: error following redirect for url (${base}/loop?hops=${MAX_REDIRECTS})`,
    });
  });

  it('turns POST into GET without body on 303, keeps both on 307', async () => {
    const { requests } = collector();
    const body = Buffer.from('payload').toString('base64');
    const see = await requests.request({ ...get(`${base}/status?code=303`), method: 'POST', bodyBase64: body });
    expect(JSON.parse(Buffer.from(see.bodyBase64, 'base64').toString())).toEqual({ method: 'GET', body: '' });
    const keep = await requests.request({ ...get(`${base}/status?code=307`), method: 'POST', bodyBase64: body });
    expect(JSON.parse(Buffer.from(keep.bodyBase64, 'base64').toString())).toEqual({ method: 'POST', body: 'payload' });
  });

  it('waits for the connection to drain when a delta finds it full, and loses nothing', async () => {
    const { requests, deltas, finished, waits } = collector(false);
    await requests.request(get(`${base}/big`, { streamResponse: true }));
    await finished;
    expect(waits()).toBeGreaterThan(0);
    expect(deltas.map((d) => d.seq)).toEqual(deltas.map((_, i) => i + 1));
    const body = Buffer.concat(deltas.map((d) => Buffer.from(d.deltaBase64, 'base64')));
    expect(body.length).toBe(8 * 65536);
    expect(deltas.at(-1)).toMatchObject({ done: true, error: null });
  });

  it('closeAll aborts streams: no delta after it, the id is released', async () => {
    const { requests, deltas } = collector();
    await requests.request(get(`${base}/hold`, { streamResponse: true }));
    await expect.poll(() => deltas.length).toBe(1);
    expect(requests.activeStreams).toBe(1);
    requests.closeAll();
    await expect.poll(() => requests.activeStreams).toBe(0);
    expect(deltas).toHaveLength(1);
    await expect(requests.request(get(`${base}/echo`))).rejects.toMatchObject({ code: -32603 });
  });

  it('bounds the streams active at once, and the buffered body', async () => {
    const { requests } = collector(true, 1);
    await requests.request(get(`${base}/hold`, { requestId: 'a', streamResponse: true }));
    await expect(requests.request(get(`${base}/hold`, { requestId: 'b', streamResponse: true }))).rejects.toMatchObject(
      {
        code: -32600,
        message: 'at most 1 http/request streams may be active per connection',
      },
    );
    requests.closeAll();
    const small = new HttpRequests({ sendDelta: () => true, writable: async () => {}, maxBufferedBodyBytes: 1000 });
    await expect(small.request(get(`${base}/big`))).rejects.toMatchObject({
      code: -32603,
      message: 'http/request failed: response body exceeds 1000 bytes; use streamResponse',
    });
  });

  it("appends a header's valueEnvVar from the executor's environment (httpHeaderEnvVars), never quoting it", async () => {
    const env = { TOKEN: 's3cr3t', EMPTY: '', A: 'a-value', NL: 'x\ny' };
    const requests = new HttpRequests({ sendDelta: () => true, writable: async () => {}, env });
    const sent = async (headers: unknown[]) => {
      const result = await requests.request(get(`${base}/headers`, { headers }));
      return (JSON.parse(Buffer.from(result.bodyBase64, 'base64').toString()) as string[]).slice(0, 4);
    };
    expect(
      await sent([
        { name: 'Authorization', value: 'Bearer ', valueEnvVar: 'TOKEN' },
        { name: 'x-plain', value: 'p', valueEnvVar: null },
      ]),
    ).toEqual(['authorization', 'Bearer s3cr3t', 'x-plain', 'p']);
    const refused = (headers: unknown[]) =>
      requests.request(get(`${base}/headers`, { headers })).then(
        () => null,
        (err: { code: number; message: string }) => ({ code: err.code, message: err.message }),
      );
    const unset = (name: string) => ({
      code: -32602,
      message: `http/request header h requires executor environment variable ${name}`,
    });
    expect(await refused([{ name: 'h', value: '', valueEnvVar: 'UNSET' }])).toEqual(unset('UNSET'));
    // Names getenv cannot look up are unset: Node's process.env would read `A\0B` as `A`.
    for (const name of ['A\0B', 'A=B', '', '__proto__', 'toString']) {
      expect(await refused([{ name: 'h', value: '', valueEnvVar: name }])).toEqual(unset(name));
    }
    expect(await refused([{ name: 'h', value: 'x', valueEnvVar: 'EMPTY' }])).toEqual({
      code: -32602,
      message: 'http/request header h requires a non-empty executor environment variable EMPTY',
    });
    // An invalid value names the header, not the value (it may hold the secret).
    const invalid = await refused([{ name: 'h', value: '', valueEnvVar: 'NL' }]);
    expect(invalid).toEqual({
      code: -32602,
      message: 'http/request header value is invalid for h: failed to parse header value',
    });
    // Header by header: name, variable, value.
    expect(await refused([{ name: 'bad name', value: 'x\n', valueEnvVar: 'UNSET' }])).toMatchObject({
      message: 'http/request header name is invalid: invalid HTTP header name',
    });
    expect(await refused([{ name: 'h', value: 'x\n', valueEnvVar: 'UNSET' }])).toEqual(unset('UNSET'));
    expect(
      await refused([
        { name: 'h', value: '', valueEnvVar: 'UNSET' },
        { name: 'bad name', value: '' },
      ]),
    ).toEqual(unset('UNSET'));
  });
});
