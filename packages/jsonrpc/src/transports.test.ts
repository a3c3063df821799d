import { once } from 'node:events';
import { PassThrough } from 'node:stream';
import { BufferPool } from '@tether/bytes';
import { wsSocket } from '@tether/user-read';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { attachmentOf, encodeWithAttachment, releaseAttachment } from './attachment.js';
import { RpcClient } from './client.js';
import { ConnectionClosedError, RpcConnection } from './connection.js';
import type { InboundMessage } from './message.js';
import { createMemoryTransportPair } from './transports/memory.js';
import { StdioTransport } from './transports/stdio.js';
import { WebSocketTransport } from './transports/websocket.js';

function stdioPair(maxMessageBytes?: number) {
  const input = new PassThrough();
  const output = new PassThrough();
  const oversize: number[] = [];
  const transport = new StdioTransport({
    input,
    output,
    ...(maxMessageBytes ? { maxMessageBytes } : {}),
    onOversize: (bytes) => oversize.push(bytes),
  });
  const connection = new RpcConnection(transport);
  const received: InboundMessage[] = [];
  const closes: string[] = [];
  connection.start({ onMessage: (m) => received.push(m), onClose: (r) => closes.push(r) });
  return { input, output, connection, received, closes, oversize };
}

describe('StdioTransport', () => {
  it('splits lines across chunks, skips blank lines and tolerates CRLF', async () => {
    const { input, received } = stdioPair();
    input.write('{"id":1,"met');
    input.write('hod":"a"}\n\n   \n{"method":"b"}\r\n');
    await new Promise((r) => setImmediate(r));
    expect(received.map((m) => m.kind)).toEqual(['request', 'notification']);
  });

  it('writes compact JSON lines', async () => {
    const { output, connection } = stdioPair();
    connection.sendResponse(7, { a: 1 });
    connection.sendNotification('n', { b: 2 });
    expect(output.read().toString()).toBe('{"id":7,"result":{"a":1}}\n{"method":"n","params":{"b":2}}\n');
  });

  it('discards an oversize line, reports it, and keeps reading', async () => {
    const { input, received, oversize } = stdioPair(32);
    input.write(`${'x'.repeat(20)}`);
    input.write(`${'y'.repeat(20)}\n{"method":"ok"}\n`);
    await new Promise((r) => setImmediate(r));
    expect(oversize).toEqual([40]);
    expect(received).toEqual([{ kind: 'notification', method: 'ok', params: null }]);
  });

  it('closes on EOF and aborts the connection signal', async () => {
    const { input, connection, closes } = stdioPair();
    input.end();
    await connection.closed;
    expect(closes).toEqual(['stdin closed']);
    expect(connection.signal.aborted).toBe(true);
    expect(connection.signal.reason).toBeInstanceOf(ConnectionClosedError);
    expect(connection.sendNotification('x')).toBe(false);
  });
});

describe('WebSocketTransport and RpcClient', () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** A server of RpcConnections; with `fastReceiveMaxPayload`, its transports take messages that large fast. */
  async function serve(
    onConnection: (connection: RpcConnection) => void,
    pingIntervalMs = 0,
    fastReceiveMaxPayload?: number,
  ) {
    const maxPayload = fastReceiveMaxPayload ?? 1024;
    const fastReceive = fastReceiveMaxPayload === undefined ? {} : { fastReceive: { server: true, maxPayload } };
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, maxPayload });
    await once(wss, 'listening');
    wss.on('connection', (ws) =>
      onConnection(new RpcConnection(new WebSocketTransport(ws, { pingIntervalMs, ...fastReceive }))),
    );
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          for (const client of wss.clients) client.terminate();
          wss.close(() => resolve());
        }),
    );
    const { port } = wss.address() as { port: number };
    return `ws://127.0.0.1:${port}`;
  }

  async function dial(url: string) {
    const ws = new WebSocket(url);
    await once(ws, 'open');
    return ws;
  }

  it('answers calls, accepts binary frames and delivers notifications', async () => {
    const url = await serve((connection) => {
      connection.start({
        onMessage: (m) => {
          if (m.kind === 'request') {
            connection.sendNotification('note', { for: m.id });
            connection.sendResponse(m.id, { echo: m.params });
          }
        },
      });
    });
    const ws = await dial(url);
    const notes: unknown[] = [];
    const client = new RpcClient(new RpcConnection(new WebSocketTransport(ws, { pingIntervalMs: 0 })), {
      onNotification: (method, params) => notes.push([method, params]),
    });
    cleanups.push(() => client.close());
    await expect(client.call('m', { x: 1 })).resolves.toEqual({ echo: { x: 1 } });
    expect(notes).toEqual([['note', { for: 1 }]]);

    const raw = await dial(url);
    cleanups.push(() => raw.terminate());
    raw.send(Buffer.from('{"id":"s","method":"m"}'), { binary: true });
    const [data, isBinary] = (await once(raw, 'message')) as [Buffer, boolean];
    expect(isBinary).toBe(false);
    expect(JSON.parse(data.toString())).toEqual({ method: 'note', params: { for: 's' } });
  });

  it('gives each transport its own inbound pool and closes it with the transport; a given pool stays open for its giver', async () => {
    const url = await serve((connection) => connection.start({ onMessage: () => {} }));
    const options = { pingIntervalMs: 0, fastReceive: { server: false, maxPayload: 1 << 20 } };
    const a = new WebSocketTransport(await dial(url), options);
    const b = new WebSocketTransport(await dial(url), options);
    expect(a.inboundPool).not.toBe(b.inboundPool);
    const given = new BufferPool();
    const c = new WebSocketTransport(await dial(url), { ...options, pool: given });
    expect(c.inboundPool).toBe(given);
    for (const transport of [a, b, c]) transport.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
    a.close();
    c.close();
    expect(a.inboundPool.closed).toBe(true);
    expect(b.inboundPool.closed).toBe(false);
    expect(given.closed).toBe(false); // its creator closes it
    b.close();
    expect(b.inboundPool.closed).toBe(true);
  });

  it('fails pending calls when the server goes away', async () => {
    const url = await serve((connection) => {
      connection.start({ onMessage: () => connection.close('bye') });
    });
    const client = new RpcClient(new RpcConnection(new WebSocketTransport(await dial(url), { pingIntervalMs: 0 })));
    await expect(client.call('m')).rejects.toBeInstanceOf(ConnectionClosedError);
    await expect(client.call('again')).rejects.toBeInstanceOf(ConnectionClosedError);
  });

  it('closes with 1009 when a message exceeds maxPayload', async () => {
    const url = await serve((connection) => connection.start({ onMessage: () => {} }));
    const ws = await dial(url);
    ws.send('x'.repeat(2048));
    const [code] = (await once(ws, 'close')) as [number];
    expect(code).toBe(1009);
  });

  it('times out a call and rejects an aborted one', async () => {
    const url = await serve((connection) => connection.start({ onMessage: () => {} }));
    const client = new RpcClient(new RpcConnection(new WebSocketTransport(await dial(url), { pingIntervalMs: 0 })));
    cleanups.push(() => client.close());
    await expect(client.call('m', undefined, { timeoutMs: 20 })).rejects.toThrow('m timed out after 20 ms');
    const controller = new AbortController();
    const pending = client.call('m', undefined, { signal: controller.signal });
    controller.abort(new Error('stop'));
    await expect(pending).rejects.toThrow('stop');
  });

  it('terminates a peer that stops answering pings', async () => {
    let serverClosed: Promise<string> | undefined;
    const url = await serve((connection) => {
      connection.start({ onMessage: () => {} });
      serverClosed = connection.closed;
    }, 20);
    const ws = await dial(url);
    cleanups.push(() => ws.terminate());
    // Stop the client socket from reading, so it can never answer a ping.
    wsSocket(ws)?.pause();
    await expect.poll(() => serverClosed, { timeout: 5000 }).toBeDefined();
    await expect(serverClosed).resolves.toMatch(/websocket closed/);
  });

  it('fastReceive: text and binary messages as without it; an attachment stays intact while held', async () => {
    const held: Array<{ attachment: Buffer; expected: Buffer }> = [];
    const texts: unknown[] = [];
    const onMessage = (m: InboundMessage) => {
      if (m.kind !== 'notification') return;
      const attachment = attachmentOf(m.params);
      // Kept past this call, as a handler awaiting a file write keeps its block.
      if (attachment) held.push({ attachment, expected: Buffer.from((m.params as { hex: string }).hex, 'hex') });
      else texts.push(m.params);
    };
    const ws = await dial(await serve((connection) => connection.start({ onMessage }), 0, 1 << 20));
    for (let i = 0; i < 6; i++) {
      const bytes = Buffer.alloc(100_000 + i, i + 1);
      const json = JSON.stringify({ method: 'n', params: { hex: bytes.subarray(0, 8).toString('hex') } });
      ws.send(encodeWithAttachment(json, bytes));
      ws.send(JSON.stringify({ method: 't', params: { i, text: 'x'.repeat(90_000 + i) } }));
    }
    await expect.poll(() => held.length + texts.length).toBe(12);
    expect(
      held.map((h) => h.attachment.subarray(0, 8).equals(h.expected) && h.attachment.every((b) => b === h.expected[0])),
    ).toEqual([true, true, true, true, true, true]);
    expect(texts.map((t) => (t as { i: number; text: string }).text.length)).toEqual([
      90_000, 90_001, 90_002, 90_003, 90_004, 90_005,
    ]);
  });

  it('fastReceive: an attachment released through its message serves the next message of its size; one held does not', async () => {
    const attachments: Buffer[] = [];
    const holders: unknown[] = [];
    const onMessage = (m: InboundMessage) => {
      const attachment = m.kind === 'notification' ? attachmentOf(m.params) : undefined;
      if (attachment && m.kind === 'notification') {
        attachments.push(attachment);
        holders.push(m.params);
      }
    };
    const ws = await dial(await serve((connection) => connection.start({ onMessage }), 0, 1 << 20));
    const send = async (fill: number) => {
      ws.send(encodeWithAttachment(JSON.stringify({ method: 'n', params: {} }), Buffer.alloc(300_000, fill)));
      await expect.poll(() => attachments.length).toBe(fill);
      return attachments[fill - 1] as Buffer;
    };
    const first = await send(1);
    const second = await send(2); // the first is still held: a slab of its own
    expect(second.buffer === first.buffer).toBe(false); // (not toBe on the buffers: a failure would print them)
    releaseAttachment(holders[0]);
    releaseAttachment(holders[0]); // a second release does nothing
    const third = await send(3);
    expect(third.buffer === first.buffer).toBe(true);
    expect(third.every((b) => b === 3) && second.every((b) => b === 2)).toBe(true);
  });
});

describe('release of a sent message', () => {
  it('WebSocket: after the socket has written it, and at once when the transport is closed', async () => {
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(wss, 'listening');
    const { port } = wss.address() as { port: number };
    const accepted = once(wss, 'connection');
    const client = new WebSocket(`ws://127.0.0.1:${port}`);
    await once(client, 'open');
    const [serverSide] = (await accepted) as [WebSocket];
    const connection = new RpcConnection(new WebSocketTransport(serverSide, { pingIntervalMs: 0 }));
    connection.start({ onMessage: () => {} });
    try {
      const released: string[] = [];
      const received = once(client, 'message');
      connection.sendRaw(Buffer.from('{"method":"a"}'), () => released.push('a'));
      expect(released).toEqual([]); // still queued on the socket
      const [data] = (await received) as [Buffer];
      expect(data.toString()).toBe('{"method":"a"}');
      await new Promise((r) => setImmediate(r));
      expect(released).toEqual(['a']);

      connection.close();
      expect(connection.sendRaw(Buffer.from('{"method":"b"}'), () => released.push('b'))).toBe(false);
      expect(released).toEqual(['a', 'b']);
    } finally {
      client.terminate();
      await new Promise((resolve) => wss.close(resolve));
    }
  });

  it('memory transport: as soon as it has copied the message', async () => {
    const [a, b] = createMemoryTransportPair();
    const messages: string[] = [];
    b.start({ onMessage: (m) => messages.push(String(m)), onClose: () => {}, onDrain: () => {} });
    a.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
    const bytes = Buffer.from('{"method":"x"}');
    let released = 0;
    a.send(bytes, () => released++);
    expect(released).toBe(1);
    bytes.fill(0x20); // reusing the buffer must not change what the peer gets
    await new Promise((r) => setImmediate(r));
    expect(messages).toEqual(['{"method":"x"}']);
  });
});

describe('RpcClient call with encode', () => {
  it('builds the request in a pooled buffer, reused once the transport has sent it', async () => {
    const [clientSide, serverSide] = createMemoryTransportPair();
    const server = new RpcConnection(serverSide);
    const seen: unknown[] = [];
    server.start({
      onMessage: (m) => {
        if (m.kind === 'request') {
          seen.push((m.params as { text: string }).text.length);
          server.sendResponse(m.id, { ok: true });
        }
      },
    });
    const client = new RpcClient(new RpcConnection(clientSide));
    const slabs: ArrayBufferLike[] = [];
    const text = 'z'.repeat(40 * 1024);
    for (let i = 0; i < 2; i++) {
      await client.call('big', undefined, {
        encode: (id, allocate) => {
          const json = Buffer.from(JSON.stringify({ id, method: 'big', params: { text } }));
          const out = allocate(json.length);
          json.copy(out);
          slabs.push(out.buffer);
          return out;
        },
      });
    }
    expect(seen).toEqual([text.length, text.length]);
    expect(slabs[1]).toBe(slabs[0]); // the first request's buffer came back and carried the second
    client.close();
  });
});
