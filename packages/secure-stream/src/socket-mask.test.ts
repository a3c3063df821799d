import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type Socket } from 'node:net';
import { relaySocketMask } from '@tether/relay-frames';
import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';

describe('relaySocketMask', () => {
  it('makes ws send client frames with a zero key and the payload as it is', async () => {
    // A bare TCP server that answers the upgrade and records the first frame's bytes.
    const server = createServer();
    const sockets: Socket[] = [];
    const frame = new Promise<Buffer>((resolve) => {
      server.on('connection', (socket) => {
        sockets.push(socket);
        let buffered = Buffer.alloc(0);
        let upgraded = false;
        socket.on('data', (data: Buffer) => {
          buffered = Buffer.concat([buffered, data]);
          if (!upgraded) {
            const end = buffered.indexOf('\r\n\r\n');
            if (end === -1) return;
            const key = /sec-websocket-key: (\S+)/i.exec(buffered.subarray(0, end).toString())?.[1] as string;
            const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
            socket.write(
              `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
            );
            upgraded = true;
            buffered = buffered.subarray(end + 4);
          }
          if (buffered.length >= 2 + 4 + 5) resolve(buffered.subarray(0, 11));
        });
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as { port: number };
    const ws = new WebSocket(`ws://127.0.0.1:${port}`, { generateMask: relaySocketMask });
    await once(ws, 'open');
    ws.send(Buffer.from('hello'), { binary: true });
    const bytes = await frame;
    expect(bytes[1]).toBe(0x80 | 5); // masked, 5 bytes
    expect([...bytes.subarray(2, 6)]).toEqual([0, 0, 0, 0]);
    expect(bytes.subarray(6, 11).toString()).toBe('hello');
    ws.terminate();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
});
