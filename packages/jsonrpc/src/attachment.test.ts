import { once } from 'node:events';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { ATTACHMENT, attachmentOf, encodeWithAttachment, splitAttachment } from './attachment.js';
import { RpcClient } from './client.js';
import { RpcConnection } from './connection.js';
import { type InboundMessage, parseMessage } from './message.js';
import { createMemoryTransportPair } from './transports/memory.js';
import { StdioTransport } from './transports/stdio.js';
import { WebSocketTransport } from './transports/websocket.js';

const bytes = (n: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7 + 3) & 0xff));

describe('binary attachments', () => {
  it('round-trip a request and a response, the attachment a view of the message', () => {
    const data = bytes(70_000);
    const wire = encodeWithAttachment('{"id":7,"method":"fs/writeBlock","params":{"handleId":"h","offset":0}}', data);
    expect(wire[0]).toBe(0x01);
    const request = parseMessage(wire);
    expect(request).toEqual({ kind: 'request', id: 7, method: 'fs/writeBlock', params: { handleId: 'h', offset: 0 } });
    const params = (request as { params: unknown }).params;
    expect(attachmentOf(params)?.equals(data)).toBe(true);
    expect(attachmentOf(params)?.buffer).toBe(wire.buffer);
    // Invisible to JSON and to key enumeration.
    expect(JSON.stringify(params)).toBe('{"handleId":"h","offset":0}');
    expect(Object.keys(params as object)).toEqual(['handleId', 'offset']);

    const response = parseMessage(encodeWithAttachment('{"id":"r","result":{"eof":true}}', Buffer.alloc(0)));
    expect(response).toMatchObject({ kind: 'response', id: 'r', result: { eof: true } });
    expect(attachmentOf((response as { result: unknown }).result)).toEqual(Buffer.alloc(0));
  });

  it('encode into a buffer the caller supplies, of exactly the message size', () => {
    const sizes: number[] = [];
    const out = encodeWithAttachment('{"method":"n","params":{}}', bytes(10), (size) => {
      sizes.push(size);
      return Buffer.alloc(size);
    });
    expect(sizes).toEqual([5 + 26 + 10]);
    expect(out.readUInt32BE(1)).toBe(26);
  });

  it('are malformed when the framing, the JSON or the holder is wrong', () => {
    const reason = (data: Buffer) => (parseMessage(data) as { kind: string; reason?: string }).reason;
    expect(reason(Buffer.from([1, 0, 0]))).toMatch(/shorter than its prefix/);
    const overrun = Buffer.from([1, 0, 0, 0, 200, 0x7b]);
    expect(reason(overrun)).toMatch(/overruns a message of 6/);
    expect(reason(encodeWithAttachment('{"id":1,', bytes(3)))).toMatch(/JSON/);
    expect(reason(encodeWithAttachment('{"id":1,"method":"m","params":[1]}', bytes(3)))).toMatch(/object as params/);
    expect(reason(encodeWithAttachment('{"id":1,"method":"m"}', bytes(3)))).toMatch(/object as params/);
    expect(reason(encodeWithAttachment('{"id":1,"result":5}', bytes(3)))).toMatch(/object as params or result/);
    expect(parseMessage(encodeWithAttachment('{"id":1,"error":{"code":1,"message":"x"}}', bytes(1)))).toMatchObject({
      kind: 'malformed',
    });
    expect(splitAttachment(Buffer.from([1, 0, 0, 0, 0]))).toEqual({ json: '', attachment: Buffer.alloc(0) });
  });

  it('never appear on ordinary JSON messages', () => {
    const message = parseMessage(Buffer.from('{"id":1,"method":"m","params":{}}'));
    expect(attachmentOf((message as { params: unknown }).params)).toBeUndefined();
    expect(attachmentOf(null)).toBeUndefined();
    expect(Object.getOwnPropertySymbols((message as { params: object }).params)).not.toContain(ATTACHMENT);
  });
});

describe('transports and attachments', () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it('WebSocket: an attachment message travels as a binary frame, JSON stays text', async () => {
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(wss, 'listening');
    cleanups.push(() => new Promise<void>((resolve) => wss.close(() => resolve())));
    const served: InboundMessage[] = [];
    wss.on('connection', (ws) => {
      const connection = new RpcConnection(new WebSocketTransport(ws, { pingIntervalMs: 0 }));
      expect(connection.carriesAttachments).toBe(true);
      connection.start({
        onMessage: (m) => {
          served.push(m);
          if (m.kind !== 'request') return;
          const echo = attachmentOf(m.params) ?? Buffer.alloc(0);
          connection.sendRaw(encodeWithAttachment(JSON.stringify({ id: m.id, result: { n: echo.length } }), echo));
          connection.sendResponse(`${m.id}-text`, {});
        },
      });
    });
    const { port } = wss.address() as { port: number };
    const raw = new WebSocket(`ws://127.0.0.1:${port}`);
    await once(raw, 'open');
    cleanups.push(() => raw.terminate());
    const frames: Array<[Buffer, boolean]> = [];
    raw.on('message', (data: Buffer, isBinary: boolean) => frames.push([data, isBinary]));
    const client = new RpcClient(new RpcConnection(new WebSocketTransport(raw, { pingIntervalMs: 0 })));
    const payload = bytes(200_000);
    const result = await client.call(
      'echo',
      { a: 1 },
      { encode: (id) => encodeWithAttachment(JSON.stringify({ id, method: 'echo', params: { a: 1 } }), payload) },
    );
    expect(result).toEqual({ n: payload.length });
    expect(attachmentOf(result)?.equals(payload)).toBe(true);
    expect(served[0]).toMatchObject({ kind: 'request', method: 'echo', params: { a: 1 } });
    await new Promise((resolve) => setImmediate(resolve));
    expect(frames.map(([, isBinary]) => isBinary)).toEqual([true, false]);
  });

  it('memory: copies the attachment message; a memory "stdio" refuses it', () => {
    const [a, b] = createMemoryTransportPair();
    expect(a.carriesAttachments).toBe(true);
    const got: Array<string | Buffer> = [];
    b.start({ onMessage: (m) => got.push(m), onClose: () => {}, onDrain: () => {} });
    const wire = encodeWithAttachment('{"method":"n","params":{}}', bytes(4));
    a.send(wire);
    wire.fill(0);
    return new Promise<void>((resolve) => {
      setImmediate(() => {
        expect(attachmentOf((parseMessage(got[0] as Buffer) as { params: unknown }).params)).toEqual(bytes(4));
        const [s] = createMemoryTransportPair('stdio');
        expect(s.carriesAttachments).toBe(false);
        expect(() => s.send(encodeWithAttachment('{}', bytes(1)))).toThrow(/cannot be sent over stdio/);
        resolve();
      });
    });
  });

  it('stdio: refuses to send one (lines of text cannot carry bytes)', () => {
    const transport = new StdioTransport({ input: new PassThrough(), output: new PassThrough() });
    expect(transport.carriesAttachments).toBe(false);
    expect(() => transport.send(encodeWithAttachment('{}', bytes(1)))).toThrow(/cannot be sent over stdio/);
  });
});
