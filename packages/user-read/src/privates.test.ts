import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { type AddressInfo, connect, createServer, Socket } from 'node:net';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { wsPair as wsPairOf } from './__tests__/ws-pair.js';
import {
  PRIVATE_FIELDS,
  ptyMasterFd,
  ptySocket,
  socketFd,
  socketUserBufferHandle,
  userReadSymbols,
  wsReceiver,
  wsReceiverIdle,
  wsSocket,
} from './privates.js';

/**
 * One contract test per private field in PRIVATE_FIELDS: each fails, naming the field, when an upgrade of
 * Node, ws or node-pty changes what privates.ts reads. Then: check the new version's source, adjust the
 * accessor (or drop the private use), and update `checkedAgainst`.
 */

const require = createRequire(import.meta.url);
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Warnings emitted while `run` runs and one turn after (emitWarning reports on the next tick). */
async function warningsOf(run: () => void): Promise<string[]> {
  const messages: string[] = [];
  const listener = (warning: Error & { code?: string }) => {
    if (warning.code === 'TETHER_PRIVATE_FIELD') messages.push(warning.message);
  };
  process.on('warning', listener);
  try {
    run();
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    process.off('warning', listener);
  }
  return messages;
}

function versionOf(pkg: string): string {
  return (JSON.parse(readFileSync(require.resolve(`${pkg}/package.json`), 'utf8')) as { version: string }).version;
}

function checked(library: string): string[] {
  return PRIVATE_FIELDS.filter((field) => field.library === library).map((field) => field.checkedAgainst);
}

const wsPair = () => wsPairOf(cleanups);

describe('the versions the private fields were checked against', () => {
  it('are the installed ones (a bump of a pin must re-check the fields and update PRIVATE_FIELDS)', () => {
    expect(checked('ws').every((version) => version === `ws ${versionOf('ws')}`)).toBe(true);
    expect(checked('node-pty').every((version) => version === `node-pty ${versionOf('node-pty')}`)).toBe(true);
    // Node is not pinned by a lockfile: the running major must be one the fields were checked on (CI runs
    // these tests on the machine's Node and on every runtime of scripts/node-runtimes.mjs).
    const majors = (versions: string) =>
      versions
        .replace(/^Node /, '')
        .split(', ')
        .map((v) => v.split('.')[0]);
    for (const versions of checked('node')) expect(majors(versions)).toContain(process.versions.node.split('.')[0]);
  });
});

describe('Node', () => {
  it("net.Socket keeps the onread option's state under symbols 'kBuffer', 'kBufferCb', 'kBufferGen'", () => {
    expect(userReadSymbols()).not.toBeNull();
    const buffer = Buffer.alloc(16);
    const callback = () => true;
    const options = { onread: { buffer, callback } };
    const socket = new Socket(options as ConstructorParameters<typeof Socket>[0]) as Socket & Record<symbol, unknown>;
    const symbols = userReadSymbols()!;
    // What readIntoUserBuffers writes: the buffer, the callback, and the generator (null for a fixed buffer).
    expect(socket[symbols.buffer]).toBe(buffer);
    expect(socket[symbols.callback]).toBe(callback);
    expect(socket[symbols.generator]).toBeNull();
    socket.destroy();
  });

  it('net.Socket#_handle of a connected socket has useUserBuffer()', async () => {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
    await once(client, 'connect');
    cleanups.push(() => {
      client.destroy();
      server.close();
    });
    const handle = socketUserBufferHandle(client);
    expect(handle).not.toBeNull();
    expect(typeof (handle as { useUserBuffer: unknown }).useUserBuffer).toBe('function');
    // A socket without a handle (destroyed) answers null rather than failing.
    const gone = new Socket();
    gone.destroy();
    expect(socketUserBufferHandle(gone)).toBeNull();
  });

  it('net.Socket#_handle.fd of an accepted socket is its descriptor: this process holds a socket by that number', async () => {
    const accepted = new Promise<Socket>((resolve) => {
      const server = createServer((socket) => resolve(socket));
      server.listen(0, '127.0.0.1', () => {
        const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
        cleanups.push(() => {
          client.destroy();
          server.close();
        });
      });
    });
    const socket = await accepted;
    const fd = socketFd(socket);
    expect(fd).toEqual(expect.any(Number));
    const { readlinkSync } = await import('node:fs');
    expect(readlinkSync(`/proc/self/fd/${fd}`)).toMatch(/^socket:\[\d+\]$/);
    socket.destroy();
    // Without a handle (destroyed): null, not a failure.
    expect(socketFd(socket)).toBeNull();
  });
  it('answers null, and warns once per accessor, for a socket without _handle (a shape it was not checked against)', async () => {
    const unchecked = {} as Socket;
    const warnings = await warningsOf(() => {
      expect(socketFd(unchecked)).toBeNull();
      expect(socketFd(unchecked)).toBeNull();
      expect(socketUserBufferHandle(unchecked)).toBeNull();
    });
    expect(warnings).toHaveLength(2);
    expect(warnings[0]).toContain('net.Socket has no _handle');
    expect(warnings[0]).toContain('_handle.fd');
    expect(warnings[1]).toContain('_handle.useUserBuffer');
  });
});

describe('ws', () => {
  it('WebSocket#_receiver is a Writable Receiver with _state 0, _bufferedBytes 0 and _fragments [] when idle', async () => {
    const { client, peer } = await wsPair();
    for (const ws of [client, peer]) {
      const receiver = wsReceiver(ws);
      expect(receiver).toBeInstanceOf(Writable);
      const fields = receiver as unknown as { _state: unknown; _bufferedBytes: unknown; _fragments: unknown };
      expect(fields._state).toBe(0); // GET_INFO
      expect(fields._bufferedBytes).toBe(0);
      expect(fields._fragments).toEqual([]);
      expect(wsReceiverIdle(receiver as Writable)).toBe(true);
    }
  });

  it('Receiver#_bufferedBytes counts a partial frame, and _state leaves 0 while a frame is read', async () => {
    const { client, peer } = await wsPair();
    const receiver = wsReceiver(client) as Writable;
    const fields = receiver as unknown as { _state: number; _bufferedBytes: number };
    // Half of a 10-byte binary frame's header and payload, raw, from the server's side.
    (wsSocket(peer) as Socket).write(Buffer.from([0x82, 10, 1, 2, 3]));
    while (fields._bufferedBytes === 0 && fields._state === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    expect(wsReceiverIdle(receiver)).toBe(false);
  });

  it('Receiver#_fragments holds the fragments of an unfinished message', async () => {
    const { client, peer } = await wsPair();
    const receiver = wsReceiver(client) as Writable;
    const fields = receiver as unknown as { _fragments: Buffer[] };
    peer.send(Buffer.from('first'), { binary: true, fin: false });
    while (fields._fragments.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    expect(Buffer.concat(fields._fragments).toString()).toBe('first');
    expect(wsReceiverIdle(receiver)).toBe(false);
  });

  it('ws calls WebSocket#_receiver.write() with every socket read (what installFastMessages replaces)', async () => {
    const { client, peer } = await wsPair();
    const receiver = wsReceiver(client) as Writable & { write: (chunk: Buffer) => boolean };
    const seen: Buffer[] = [];
    const real = receiver.write.bind(receiver);
    receiver.write = (chunk: Buffer) => {
      seen.push(Buffer.from(chunk));
      return real(chunk);
    };
    const message = once(client, 'message');
    peer.send(Buffer.from('hello'), { binary: true });
    const [data] = (await message) as [Buffer];
    expect(data.toString()).toBe('hello');
    expect(Buffer.concat(seen).subarray(2).toString()).toBe('hello'); // after the 2-byte header
  });

  it('WebSocket#_socket is the net.Socket under the WebSocket (null before a client is connected)', async () => {
    const { client, peer } = await wsPair();
    for (const ws of [client, peer]) expect(wsSocket(ws)).toBeInstanceOf(Socket);
    expect((wsSocket(client) as Socket).remotePort).toBe((wsSocket(peer) as Socket).localPort);
    const unopened = new WebSocket('ws://127.0.0.1:1');
    unopened.on('error', () => {});
    expect(wsSocket(unopened)).toBeNull();
    expect(wsReceiver(unopened)).toBeNull();
    unopened.terminate();
  });

  it('answers null, and warns once, for shapes it was not checked against', async () => {
    const warnings = await warningsOf(() => {
      expect(wsReceiver({ _receiver: { write() {} } })).toBeNull();
      expect(wsReceiver({ _receiver: { write() {} } })).toBeNull();
      expect(wsSocket({ _socket: {} })).toBeNull();
    });
    expect(warnings).toHaveLength(2);
    expect(warnings[0]).toContain('WebSocket#_receiver');
    expect(warnings[1]).toContain('WebSocket#_socket');
  });
});

describe('node-pty', () => {
  /** Calls `send` every 200 ms until `text` shows in `chunks`; fails after 10 s. */
  async function untilSeen(chunks: Buffer[], text: string, send: () => void): Promise<void> {
    const deadline = Date.now() + 10_000;
    for (let attempt = 0; !Buffer.concat(chunks).toString().includes(text); attempt++) {
      if (Date.now() > deadline) throw new Error(`no ${text} in ${JSON.stringify(Buffer.concat(chunks).toString())}`);
      if (attempt % 40 === 0) send();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  /**
   * A child that answers every line and stays until killed: one that exits after its first answer closes the
   * master under a resend (EBADF), and node-pty may drop the last output of a child that exits at once.
   */
  async function tinyPty() {
    const pty = await import('node-pty');
    const term = pty.spawn('/bin/sh', ['-c', 'while read line; do echo "got:$line"; done'], {
      cols: 80,
      rows: 24,
      encoding: null,
    });
    const exited = new Promise<void>((resolve) => term.onExit(() => resolve()));
    cleanups.push(async () => {
      term.kill('SIGKILL');
      await exited;
    });
    return { term, exited };
  }

  it('IPty#fd is the master fd: writing to it reaches the child', async () => {
    const { term } = await tinyPty();
    const fd = ptyMasterFd(term);
    expect(fd).toEqual(expect.any(Number));
    const output: Buffer[] = [];
    term.onData((data) => output.push(Buffer.from(data as unknown as Buffer)));
    const { writeSync } = await import('node:fs');
    // Sent again until answered: input written before the child set its terminal up may be flushed.
    await untilSeen(output, 'got:ping', () => writeSync(fd as number, 'ping\n'));
  });

  it('IPty#_socket is the net.Socket that reads the master (its data is what onData delivers)', async () => {
    const { term } = await tinyPty();
    const socket = ptySocket(term);
    expect(socket).toBeInstanceOf(Socket);
    const fromSocket: Buffer[] = [];
    (socket as Socket).on('data', (chunk: Buffer) => fromSocket.push(Buffer.from(chunk)));
    await untilSeen(fromSocket, 'got:pong', () => term.write('pong\n'));
  });

  it('answers null, and warns, for shapes it was not checked against', async () => {
    const warnings = await warningsOf(() => {
      expect(ptyMasterFd({ fd: 'x' })).toBeNull();
      expect(ptySocket({ _socket: {} })).toBeNull();
    });
    expect(warnings.map((message) => message.includes('node-pty'))).toEqual([true, true]);
  });
});
