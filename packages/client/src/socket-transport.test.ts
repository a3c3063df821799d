import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeWithAttachment } from '@tether/jsonrpc';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SocketMessageTransport } from './socket-transport.js';

interface Received {
  messages: Buffer[];
  closed: string | null;
  drains: number;
}

function collect(transport: SocketMessageTransport): Received {
  const received: Received = { messages: [], closed: null, drains: 0 };
  transport.start({
    onMessage: (data) => received.messages.push(Buffer.from(data as Buffer)),
    onClose: (reason) => {
      received.closed = reason;
    },
    onDrain: () => {
      received.drains++;
    },
  });
  return received;
}

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 2000 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
  expect(check()).toBe(true);
}

describe('SocketMessageTransport', () => {
  let dir: string;
  let server: Server;
  let serverSide: Promise<Socket>;
  let client: Socket;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'socket-transport-'));
    const path = join(dir, 's.sock');
    server = createServer();
    serverSide = new Promise((resolve) => server.once('connection', resolve));
    await new Promise<void>((resolve) => server.listen(path, resolve));
    client = createConnection(path);
    await new Promise((resolve) => client.once('connect', resolve));
  });

  afterEach(async () => {
    client.destroy();
    (await serverSide).destroy();
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  it('delivers text and attachment messages whole, however the bytes are cut', async () => {
    const receiver = collect(new SocketMessageTransport(await serverSide));
    const text = '{"id":1,"method":"initialize","params":{}}';
    const attachment = encodeWithAttachment('{"method":"process/output","params":{}}', Buffer.alloc(70_000, 7));
    const frame = (bytes: Buffer) => {
      const prefix = Buffer.alloc(4);
      prefix.writeUInt32BE(bytes.length, 0);
      return Buffer.concat([prefix, bytes]);
    };
    const wire = Buffer.concat([frame(Buffer.from(text)), frame(attachment), frame(Buffer.from('{}'))]);
    // Byte by byte at first (a prefix split across reads), then in odd-sized pieces.
    for (let i = 0; i < 7; i++) client.write(wire.subarray(i, i + 1));
    for (let at = 7; at < wire.length; at += 9_999) client.write(wire.subarray(at, Math.min(at + 9_999, wire.length)));
    await until(() => receiver.messages.length === 3);
    expect(receiver.messages[0]!.toString()).toBe(text);
    expect(receiver.messages[1]!.equals(attachment)).toBe(true);
    expect(receiver.messages[2]!.toString()).toBe('{}');
  });

  it('round-trips what one transport sends to another, and ends both on close', async () => {
    const a = new SocketMessageTransport(client);
    const b = new SocketMessageTransport(await serverSide);
    const atA = collect(a);
    const atB = collect(b);
    expect(a.send('{"id":1}')).toBe(true);
    b.send(Buffer.from('{"id":2}'));
    await until(() => atA.messages.length === 1 && atB.messages.length === 1);
    expect(atB.messages[0]!.toString()).toBe('{"id":1}');
    expect(atA.messages[0]!.toString()).toBe('{"id":2}');
    a.close(1000, 'done');
    expect(atA.closed).toBe('done');
    await until(() => atB.closed !== null);
    expect(a.send('{}')).toBe(false);
  });

  it('closes on a length over the limit instead of buffering it', async () => {
    const receiver = collect(new SocketMessageTransport(await serverSide, { maxMessageBytes: 1024 }));
    const prefix = Buffer.alloc(4);
    prefix.writeUInt32BE(1025, 0);
    client.write(prefix);
    await until(() => receiver.closed !== null);
    expect(receiver.closed).toMatch(/message too large/);
    expect(receiver.messages).toEqual([]);
  });

  it('holds messages while paused and reports backpressure with a drain', async () => {
    const sender = new SocketMessageTransport(client);
    const atSender = collect(sender);
    const receiverTransport = new SocketMessageTransport(await serverSide);
    const receiver = collect(receiverTransport);
    receiverTransport.pause();
    const block = Buffer.alloc(1024 * 1024, 1);
    let accepted = true;
    let sent = 0;
    while (accepted && sent < 64) {
      accepted = sender.send(Buffer.concat([Buffer.from('{}'), block]));
      sent++;
    }
    expect(accepted).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const whilePaused = receiver.messages.length;
    expect(whilePaused).toBeLessThan(sent);
    receiverTransport.resume();
    await until(() => receiver.messages.length === sent);
    await until(() => atSender.drains === 1);
    expect(receiver.messages.every((m) => m.length === block.length + 2)).toBe(true);
  });
});
