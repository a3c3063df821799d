import { Socket } from 'node:net';
import type { Readable, Writable } from 'node:stream';

/**
 * The one place Tether touches private fields of Node, `ws` and node-pty (this package's README). Every field is listed in PRIVATE_FIELDS with the version it was checked against, read only
 * through an accessor below that checks its shape first and answers null when it is not as expected, so the
 * caller takes the public API instead; `privates.test.ts` has one contract test per field, which fails on
 * an upgrade that changes one. ws and node-pty are pinned exactly in every package.json that hands their
 * objects here, so the version in production is the version the tests ran against.
 *
 * A broken contract is reported once per field as a process warning (`TETHER_PRIVATE_FIELD`): the fallback
 * keeps working but is slower, and a silent fallback would hide that the pin moved.
 */

export interface PrivateField {
  readonly library: 'node' | 'ws' | 'node-pty';
  /** Where it lives and what is expected of it. */
  readonly field: string;
  /** The versions whose source it was checked against (and that CI's contract tests run). */
  readonly checkedAgainst: string;
  /** The accessor that reads it, and what the caller does when the accessor answers null. */
  readonly accessor: string;
  readonly fallback: string;
}

/**
 * The Nodes the Node fields were read against and that CI's contract tests run on: the machine's 20 and the
 * pinned runtimes of scripts/node-runtimes.mjs (22, 24). Node 24 has no public API for either field: `onread`
 * can still be chosen only at construction, and no handle method replaces useUserBuffer.
 */
const NODE_CHECKED = 'Node 20.20.2, 22.23.5, 24.22.3';

export const PRIVATE_FIELDS: readonly PrivateField[] = Object.freeze([
  {
    library: 'node',
    field: "net.Socket symbols 'kBuffer', 'kBufferCb', 'kBufferGen' (lib/net.js: the `onread` option's state)",
    checkedAgainst: NODE_CHECKED,
    accessor: 'userReadSymbols',
    fallback: "the socket keeps Node's reads ('data' events, a fresh buffer each)",
  },
  {
    library: 'node',
    field: 'net.Socket#_handle.useUserBuffer(buffer) (TCPWrap/PipeWrap: reads go into the buffer)',
    checkedAgainst: NODE_CHECKED,
    accessor: 'socketUserBufferHandle',
    fallback: "the socket keeps Node's reads",
  },
  {
    library: 'node',
    field: 'net.Socket#_handle.fd (TCPWrap/PipeWrap: the descriptor of an accepted or connected socket)',
    checkedAgainst: NODE_CHECKED,
    accessor: 'socketFd',
    fallback:
      "no socket option can be read (the sandbox relay's transparent TCP cannot learn where a connection was headed, and resets it)",
  },
  {
    library: 'ws',
    field: 'WebSocket#_receiver: the Receiver (a Writable) whose write() ws calls with every socket read',
    checkedAgainst: 'ws 8.23.1',
    accessor: 'wsReceiver',
    fallback: "no fast path: messages come through ws's 'message' event",
  },
  {
    library: 'ws',
    field: 'Receiver#_state (0 = GET_INFO when idle), #_bufferedBytes (number), #_fragments (array)',
    checkedAgainst: 'ws 8.23.1',
    accessor: 'wsReceiver, wsReceiverIdle',
    fallback: "no fast path: messages come through ws's 'message' event",
  },
  {
    library: 'ws',
    field: 'WebSocket#_socket: the net.Socket under the WebSocket',
    checkedAgainst: 'ws 8.23.1',
    accessor: 'wsSocket',
    fallback: "reads stay Node's; the relay sends with ws.send() (one copy per frame)",
  },
  {
    library: 'node-pty',
    field: 'UnixTerminal#fd: the PTY master fd (a getter, missing from the IPty typings)',
    checkedAgainst: 'node-pty 1.1.0',
    accessor: 'ptyMasterFd',
    fallback: "input through IPty#write (no EAGAIN backpressure); no drain of the master's last output on destroy",
  },
  {
    library: 'node-pty',
    field: 'UnixTerminal#_socket: the tty.ReadStream (a net.Socket) reading the master',
    checkedAgainst: 'node-pty 1.1.0',
    accessor: 'ptySocket',
    fallback: "no drain of the master's last output on destroy (output already read still arrives)",
  },
]);

const reported = new Set<string>();

/** Reports a field that is not as checked, once per field for the process (the caller falls back). */
function contractBroken(accessor: string, detail: string): void {
  if (reported.has(accessor)) return;
  reported.add(accessor);
  const field = PRIVATE_FIELDS.find((entry) => entry.accessor.split(', ').includes(accessor));
  process.emitWarning(
    `${field?.library ?? ''} private field is not as checked against ${field?.checkedAgainst ?? '?'} ` +
      `(${field?.field ?? accessor}): ${detail}; falling back: ${field?.fallback ?? 'public API'}`,
    { code: 'TETHER_PRIVATE_FIELD' },
  );
}

// Node -----------------------------------------------------------------------------------------------

export interface UserReadSymbols {
  readonly buffer: symbol;
  readonly callback: symbol;
  readonly generator: symbol;
}

/**
 * net.Socket's `onread` option (documented: reads go into a given buffer, or one a function returns, and
 * to a callback instead of 'data') can only be chosen at construction; its state lives under symbols Node
 * does not export. They are found once, on a probe socket, by their descriptions. Null on a Node without
 * them (no warning: that is a Node the code was never meant to switch). Probed on first use, not at load: a
 * harness command that reads through a connection master never needs it.
 */
export function userReadSymbols(): UserReadSymbols | null {
  if (probed === undefined) probed = probeUserReadSymbols();
  return probed;
}

let probed: UserReadSymbols | null | undefined;

function probeUserReadSymbols(): UserReadSymbols | null {
  try {
    // `onread` is a documented option of net.Socket; the bundled types omit it.
    const options = { onread: { buffer: Buffer.alloc(1), callback: () => true } };
    const probe = new Socket(options as ConstructorParameters<typeof Socket>[0]);
    const find = (name: string) => Object.getOwnPropertySymbols(probe).find((sym) => sym.description === name);
    const found = { buffer: find('kBuffer'), callback: find('kBufferCb'), generator: find('kBufferGen') };
    probe.destroy();
    const { buffer, callback, generator } = found;
    return buffer && callback && generator ? { buffer, callback, generator } : null;
  } catch {
    return null;
  }
}

export interface UserBufferHandle {
  useUserBuffer(buffer: Buffer): void;
}

/**
 * `net.Socket#_handle` (both fields above read it): the libuv handle, or null when there is none (closed).
 * Node's Socket always has the property (null once closed); a socket without it is a Node whose shape was
 * not checked, reported for `accessor` rather than taken silently for a closed socket.
 */
function socketHandle(socket: Socket, accessor: string): object | null {
  if (!('_handle' in socket)) {
    contractBroken(accessor, 'net.Socket has no _handle');
    return null;
  }
  const handle = (socket as unknown as { _handle: unknown })._handle;
  return handle === null || handle === undefined ? null : (handle as object);
}

/**
 * The libuv handle of `socket` when it can read into a user buffer; null when the socket has no handle
 * (closed, or not yet connected) or the handle lacks `useUserBuffer`.
 */
export function socketUserBufferHandle(socket: Socket): UserBufferHandle | null {
  const handle = socketHandle(socket, 'socketUserBufferHandle');
  if (handle === null) return null;
  if (typeof (handle as { useUserBuffer?: unknown }).useUserBuffer !== 'function') {
    contractBroken('socketUserBufferHandle', '_handle.useUserBuffer is not a function');
    return null;
  }
  return handle as UserBufferHandle;
}

/**
 * The descriptor of a connected socket (to read a socket option Node has no API for, through a native call);
 * null when the socket has no handle (closed) or the handle has no such number.
 */
export function socketFd(socket: Socket): number | null {
  const handle = socketHandle(socket, 'socketFd');
  if (handle === null) return null;
  const fd = (handle as { fd?: unknown }).fd;
  if (typeof fd !== 'number' || !Number.isSafeInteger(fd) || fd < 0) {
    contractBroken('socketFd', '_handle.fd is not a descriptor');
    return null;
  }
  return fd;
}

// ws ---------------------------------------------------------------------------------------------------

interface ReceiverFields {
  _state?: unknown;
  _bufferedBytes?: unknown;
  _fragments?: unknown;
}

/**
 * `ws`'s Receiver of `ws`: a Writable with the fields `wsReceiverIdle` reads. Null before a client is open
 * (ws sets it with the socket) and when it is not of that shape.
 */
export function wsReceiver(ws: object): Writable | null {
  const receiver = (ws as { _receiver?: unknown })._receiver;
  if (receiver === null || receiver === undefined) return null;
  const r = receiver as ReceiverFields & { write?: unknown };
  if (
    typeof r.write !== 'function' ||
    typeof r._state !== 'number' ||
    typeof r._bufferedBytes !== 'number' ||
    !Array.isArray(r._fragments)
  ) {
    contractBroken('wsReceiver', 'WebSocket#_receiver lacks write(), _state, _bufferedBytes or _fragments');
    return null;
  }
  return receiver as Writable;
}

/** The receiver (from `wsReceiver`) holds no part of a frame or message: fresh bytes start a frame. */
export function wsReceiverIdle(receiver: Writable): boolean {
  const r = receiver as unknown as ReceiverFields;
  return r._state === 0 && r._bufferedBytes === 0 && (r._fragments as unknown[]).length === 0;
}

/** The net.Socket under `ws` (a tls.TLSSocket is one too); null before a client is open, or not a Socket. */
export function wsSocket(ws: object): Socket | null {
  const socket = (ws as { _socket?: unknown })._socket;
  if (socket === null || socket === undefined) return null;
  if (!(socket instanceof Socket)) {
    contractBroken('wsSocket', 'WebSocket#_socket is not a net.Socket');
    return null;
  }
  return socket;
}

// node-pty -------------------------------------------------------------------------------------------

/** The PTY master fd of a node-pty terminal; null when `fd` is not a file descriptor number. */
export function ptyMasterFd(term: object): number | null {
  const fd = (term as { fd?: unknown }).fd;
  if (typeof fd !== 'number' || !Number.isInteger(fd) || fd < 0) {
    contractBroken('ptyMasterFd', 'IPty#fd is not a file descriptor');
    return null;
  }
  return fd;
}

/** The socket node-pty reads the master with; null when `_socket` is not a net.Socket. */
export function ptySocket(term: object): Readable | null {
  const socket = (term as { _socket?: unknown })._socket;
  if (!(socket instanceof Socket)) {
    contractBroken('ptySocket', 'IPty#_socket is not a net.Socket');
    return null;
  }
  return socket;
}
