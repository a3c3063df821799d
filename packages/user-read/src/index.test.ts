import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { readIntoUserBuffers, userReadsAvailable } from './index.js';

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/** An accepted socket (nothing read yet) and the client connected to it. */
async function acceptedPair(): Promise<{ accepted: Socket; client: Socket }> {
  const server = createServer({ pauseOnConnect: true });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  const client = connect(port, '127.0.0.1');
  const [accepted] = (await once(server, 'connection')) as [Socket];
  cleanups.push(() => {
    client.destroy();
    accepted.destroy();
    server.close();
  });
  return { accepted, client };
}

describe('readIntoUserBuffers', () => {
  it('finds the symbols on this Node', () => {
    expect(userReadsAvailable()).toBe(true);
  });

  it('reads into the buffers it is given and passes each read to onRead, never as data events', async () => {
    const { accepted, client } = await acceptedPair();
    const given: Buffer[] = [];
    const reads: string[] = [];
    const take = () => {
      const buffer = Buffer.alloc(64);
      given.push(buffer);
      return buffer;
    };
    accepted.on('data', () => reads.push('data event'));
    const done = new Promise<void>((resolve) => {
      expect(
        readIntoUserBuffers(accepted, {
          first: take,
          next: take,
          onRead: (nread, buffer) => {
            expect(given).toContain(buffer);
            reads.push(buffer.toString('utf8', 0, nread));
            if (reads.join('') === 'hello world') resolve();
            return undefined;
          },
        }),
      ).toBe(true);
    });
    accepted.resume();
    client.write('hello ');
    setTimeout(() => client.write('world'), 20);
    await done;
    expect(reads).not.toContain('data event');
    // Switched once: a second switch is refused and takes no buffer.
    const before = given.length;
    expect(readIntoUserBuffers(accepted, { first: take, next: null, onRead: () => undefined })).toBe(false);
    expect(given.length).toBe(before);
  });

  it('refuses a socket without a handle, taking no buffer', () => {
    let taken = 0;
    const socket = connect({ port: 1, host: '127.0.0.1' });
    socket.on('error', () => {});
    socket.destroy();
    expect(
      readIntoUserBuffers(socket, {
        first: () => {
          taken++;
          return Buffer.alloc(1);
        },
        next: null,
        onRead: () => undefined,
      }),
    ).toBe(false);
    expect(taken).toBe(0);
  });
});
