import { once } from 'node:events';
import { createServer } from 'node:net';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { connectStdio, type TestClient } from './client.js';
import { b64, collectEvents, collectUntilClosed, decodeB64Text, eventsOutput, fileUri, freePort } from './helpers.js';
import type { PeerHandle } from './peer.js';

/** A fake stdio peer: what the client writes goes to `sent`; `reply` feeds lines back. */
function fakePeer() {
  const stdin = new PassThrough();
  const stdout = new PassThrough();
  const sent: Record<string, unknown>[] = [];
  let buffer = '';
  stdin.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    let newline = buffer.indexOf('\n');
    while (newline >= 0) {
      sent.push(JSON.parse(buffer.slice(0, newline)));
      buffer = buffer.slice(newline + 1);
      newline = buffer.indexOf('\n');
    }
  });
  const peer = { transport: 'stdio', stdin, stdout, exited: new Promise(() => {}) } as unknown as PeerHandle;
  const reply = (message: unknown) => stdout.write(`${JSON.stringify(message)}\n`);
  return { peer, sent, reply };
}

describe('helpers', () => {
  it('fileUri and base64', () => {
    expect(fileUri('/tmp/a b')).toBe('file:///tmp/a%20b');
    expect(b64('hi')).toBe('aGk=');
    expect(decodeB64Text('aGk=')).toBe('hi');
  });

  it('client: requests match responses by id (string and integer); no jsonrpc member', async () => {
    const { peer, sent, reply } = fakePeer();
    const client = connectStdio(peer);
    const a = client.request('m', { x: 1 });
    const b = client.request('m', undefined, { id: '1' });
    await new Promise((r) => setImmediate(r));
    expect(sent).toEqual([
      { id: 1, method: 'm', params: { x: 1 } },
      { id: '1', method: 'm' },
    ]);
    reply({ id: '1', result: 'string' });
    reply({ id: 1, error: { code: -1, message: 'no' } });
    expect(await b).toEqual({ id: '1', result: 'string' });
    expect(await a).toEqual({ id: 1, error: { code: -1, message: 'no' } });
  });

  it('collectUntilClosed follows afterSeq = max(last chunk seq, nextSeq - 1)', async () => {
    const { peer, sent, reply } = fakePeer();
    const client: TestClient = connectStdio(peer);
    const responses = [
      { chunks: [{ seq: 1, stream: 'stdout', chunk: b64('a') }], nextSeq: 2, exited: false, closed: false },
      { chunks: [], nextSeq: 3, exited: true, exitCode: 4, closed: false },
      { chunks: [{ seq: 3, stream: 'stderr', chunk: b64('e') }], nextSeq: 4, exited: true, exitCode: 4, closed: false },
      { chunks: [], nextSeq: 5, exited: true, exitCode: 4, closed: true },
    ];
    const done = collectUntilClosed(client, 'p');
    for (const response of responses) {
      while (sent.length === 0) await new Promise((r) => setImmediate(r));
      const request = sent.shift()!;
      reply({ id: request.id, result: { failure: null, exitCode: null, ...response } });
    }
    const collected = await done;
    expect(collected).toMatchObject({ output: 'a', stderr: 'e', exitCode: 4, closed: true });
  });

  it('collectEvents orders out-of-order notifications by seq and waits for gaps', async () => {
    const { peer, reply } = fakePeer();
    const client = connectStdio(peer);
    reply({ method: 'process/closed', params: { processId: 'p', seq: 3 } });
    reply({ method: 'process/exited', params: { processId: 'p', seq: 2, exitCode: 0 } });
    reply({ method: 'process/output', params: { processId: 'q', seq: 1, stream: 'stdout', chunk: b64('other') } });
    const events = collectEvents(client, 'p', { timeoutMs: 5_000 });
    setTimeout(
      () => reply({ method: 'process/output', params: { processId: 'p', seq: 1, stream: 'pty', chunk: b64('x') } }),
      50,
    );
    const result = await events;
    expect(result.map((e) => e.seq)).toEqual([1, 2, 3]);
    expect(eventsOutput(result)).toBe('x');
  });
});

describe('freePort', () => {
  it('names a port on 127.0.0.1 that can then be bound', async () => {
    const port = await freePort();
    expect(port).toBeGreaterThan(0);
    const server = createServer().listen(port, '127.0.0.1');
    await once(server, 'listening');
    expect((server.address() as { port: number }).port).toBe(port);
    await new Promise((resolve) => server.close(resolve));
  });
});
