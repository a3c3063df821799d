import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import type { Writable } from 'node:stream';
import { type BufferLease, BufferPool } from '@tether/jsonrpc';
import { readIntoUserBuffers } from '@tether/user-read';
import type { WebSocket } from 'ws';

/**
 * The relay's data path without `ws`'s per-message buffers. `ws` keeps the handshake, control frames, close,
 * errors and every unusual message; the relay only takes over the common frame: a single masked binary frame
 * (FIN, no RSV bits, within `maxPayload`) at a frame boundary of an open socket. Its payload stays as views of
 * the socket's read chunks, unmasked in place, and is written back with a server frame header (no copy).
 *
 * Mechanism: `ws` feeds every socket read to its receiver's `write()`; that method is replaced per socket by
 * a frame splitter which hands the fast frames to `onFast` and passes every other frame's bytes, whole and in
 * order, to the real receiver. Whatever `ws` does on a socket (close, errors, stop reading) is unchanged.
 */

type Unmask = (buffer: Buffer, mask: Buffer) => void;
/** XORs `source` with `mask` into `output` at `offset` (bufferutil's `mask`: masking and unmasking are one). */
type MaskInto = (source: Buffer, mask: Buffer, output: Buffer, offset: number, length: number) => void;
const native: { unmask: Unmask; mask: MaskInto } | null = (() => {
  try {
    const require = createRequire(import.meta.url);
    return require('bufferutil') as { unmask: Unmask; mask: MaskInto };
  } catch {
    return null;
  }
})();
const nativeUnmask = native?.unmask ?? null;
const nativeMask = native?.mask ?? null;

/** Copies `source` unmasked into `output` at `offset`; `mask` is already rotated to `offset`. */
function unmaskInto(source: Buffer, mask: Buffer, output: Buffer, offset: number) {
  const n = source.length;
  if (nativeMask && n >= 64) return nativeMask(source, mask, output, offset, n);
  for (let i = 0; i < n; i++) output[offset + i] = (source[i] as number) ^ (mask[i & 3] as number);
}

function unmask(buffer: Buffer, mask: Buffer) {
  const n = buffer.length;
  if (nativeUnmask && n >= 64) return nativeUnmask(buffer, mask);
  for (let i = 0; i < n; i++) buffer[i] = (buffer[i] as number) ^ (mask[i & 3] as number);
}

/**
 * Every socket the fast path takes over reads into this one buffer (`readIntoUserBuffers`, Node's `onread`
 * mode) instead of a new buffer per read: each read is consumed synchronously.
 */
const READ_BUFFER = Buffer.allocUnsafeSlow(256 * 1024);

/** Destination sockets corked while one read is handled: its frames leave in one writev per socket. */
let corked: Socket[] | null = null;

// Payload buffers of forwarded frames, reused once the kernel has taken them (the write's callback).
const pool = new BufferPool({ step: 16 * 1024, maxPooledBytes: 8 * 1024 * 1024 });

/** The slab of the message being handled, until a `sendParts` of it takes it over. */
let lease: BufferLease | null = null;

/** A message: `parts` are views (in order) whose lengths add up to `length`. */
export type FastHandler = (parts: Buffer[], length: number) => void;

interface WritableInternals {
  ending: boolean;
  destroyed: boolean;
  errored: Error | null;
}

interface WsInternals {
  _receiver: Writable;
  _socket: Socket;
}

const HEADER = 0;
const FAST = 1;
const PASS = 2;

/** Installs the fast path on a freshly upgraded server-side `ws` socket (before any data was read). */
export function installFastPath(ws: WebSocket, maxPayload: number, onFast: FastHandler, pooled: boolean) {
  const receiver = (ws as unknown as WsInternals)._receiver;
  const state = (receiver as unknown as { _writableState: WritableInternals })._writableState;
  const realWrite = receiver.write.bind(receiver) as (chunk: Buffer) => boolean;
  const header = Buffer.alloc(14);
  const rotated = Buffer.alloc(4);
  let headerLen = 0;
  let mode = HEADER;
  let remaining = 0;
  let offset = 0;
  let mask = Buffer.alloc(4);
  let zeroMask = false;
  let parts: Buffer[] = [];
  let total = 0;
  // Copying mode (reads land in the shared READ_BUFFER): a fast frame's payload is copied into `slab`.
  let copying = false;
  let volatile = false;
  let slab: BufferLease | null = null;
  // `ws` is assembling a fragmented message: everything goes to it until its final fragment.
  let fragmented = false;

  const receiverGone = () => state.ending || state.destroyed || state.errored != null;

  const takeFast = (view: Buffer) => {
    if (zeroMask) {
      // Tether's clients mask with zeros (relay-frames/socket-mask.ts): the payload is already plain.
      if (copying) view.copy((slab as BufferLease).buffer, offset);
      else parts.push(view);
      offset += view.length;
      return;
    }
    let key = mask;
    if ((offset & 3) !== 0) {
      for (let i = 0; i < 4; i++) rotated[i] = mask[(i + offset) & 3] as number;
      key = rotated;
    }
    if (copying) {
      unmaskInto(view, key, (slab as BufferLease).buffer, offset);
      offset += view.length;
      return;
    }
    unmask(view, key);
    offset += view.length;
    parts.push(view);
  };

  const finishFast = () => {
    const length = total;
    total = 0;
    mode = HEADER;
    if (copying) {
      lease = slab as BufferLease;
      slab = null;
      try {
        onFast([lease.buffer], length);
      } finally {
        lease?.release(); // not forwarded: nothing refers to it any more
        lease = null;
      }
      return;
    }
    const message = parts;
    parts = [];
    onFast(message, length);
  };

  const passOn = (bytes: Buffer) => realWrite(volatile ? Buffer.from(bytes) : bytes);

  const write = (chunk: Buffer): boolean => {
    let ok = true;
    let pos = 0;
    const n = chunk.length;
    while (pos < n) {
      if (receiverGone()) return ok; // `ws` has stopped reading this socket (close frame, error)
      if (mode === FAST) {
        const take = Math.min(remaining, n - pos);
        takeFast(chunk.subarray(pos, pos + take));
        pos += take;
        remaining -= take;
        if (remaining === 0) finishFast();
        continue;
      }
      if (mode === PASS) {
        const take = Math.min(remaining, n - pos);
        ok = passOn(chunk.subarray(pos, pos + take));
        pos += take;
        remaining -= take;
        if (remaining === 0) mode = HEADER;
        continue;
      }
      // HEADER: gather 2 bytes, then the rest of this frame's header.
      let src: Buffer;
      let at: number;
      let need = 2;
      if (headerLen === 0 && n - pos >= 2) {
        const b1 = chunk[pos + 1] as number;
        need = headerSize(b1);
      }
      if (headerLen === 0 && n - pos >= need) {
        src = chunk;
        at = pos;
        pos += need;
      } else {
        // A header split across reads: copy it together.
        while (pos < n) {
          header[headerLen++] = chunk[pos++] as number;
          if (headerLen >= 2) need = headerSize(header[1] as number);
          if (headerLen >= need) break;
        }
        if (headerLen < need) return ok;
        src = header;
        at = 0;
        headerLen = 0;
      }
      const b0 = src[at] as number;
      const b1 = src[at + 1] as number;
      const masked = (b1 & 0x80) !== 0;
      let length = b1 & 0x7f;
      let extra = 2;
      let huge = false;
      if (length === 126) {
        length = src.readUInt16BE(at + 2);
        extra = 4;
      } else if (length === 127) {
        const high = src.readUInt32BE(at + 2);
        huge = high !== 0;
        length = high * 2 ** 32 + src.readUInt32BE(at + 6);
        extra = 10;
      }
      const opcode = b0 & 0x0f;
      const fin = (b0 & 0x80) !== 0;
      if (
        !fragmented &&
        opcode === 2 &&
        fin &&
        (b0 & 0x70) === 0 &&
        masked &&
        !huge &&
        length <= maxPayload &&
        ws.readyState === 1
      ) {
        mask = Buffer.from(src.subarray(at + extra, at + extra + 4));
        zeroMask = mask.readUInt32BE(0) === 0;
        offset = 0;
        if (copying) slab = pool.lease(length);
        total = length;
        remaining = length;
        mode = FAST;
        if (length === 0) finishFast();
        continue;
      }
      // Anything else is `ws`'s: the header bytes now, the payload as it arrives.
      if (opcode < 8) {
        if (opcode !== 0 && !fin) fragmented = true;
        else if (opcode === 0 && fin) fragmented = false;
      }
      ok = src === header ? realWrite(Buffer.from(header.subarray(0, need))) : passOn(src.subarray(at, at + need));
      remaining = huge ? Number.MAX_SAFE_INTEGER : length;
      mode = remaining > 0 ? PASS : HEADER;
    }
    return ok;
  };
  (receiver as unknown as { write: (chunk: Buffer) => boolean }).write = write;

  const socket = (ws as unknown as WsInternals)._socket;
  if (!pooled) return;
  const switched = readIntoUserBuffers(socket, {
    first: () => READ_BUFFER,
    next: null,
    onRead: (nread, buffer) => {
      volatile = true;
      const outer = corked === null;
      if (outer) corked = [];
      try {
        // false stops reading, as ws pauses a socket whose receiver is behind; its 'drain' resumes it.
        return write(buffer.subarray(0, nread));
      } finally {
        volatile = false;
        if (outer) {
          const sockets = corked as Socket[];
          corked = null;
          for (const out of sockets) out.uncork();
        }
      }
    },
  });
  if (switched) copying = true;
}

function headerSize(b1: number): number {
  const len = b1 & 0x7f;
  return 2 + (len === 126 ? 2 : len === 127 ? 8 : 0) + ((b1 & 0x80) !== 0 ? 4 : 0);
}

/** Writes one unmasked binary frame (server to client) of `parts` straight to the socket under `ws`. */
export function sendParts(ws: WebSocket, parts: readonly Buffer[], length: number) {
  const socket = (ws as unknown as WsInternals)._socket;
  let head: Buffer;
  if (length < 126) {
    head = Buffer.allocUnsafe(2);
    head[1] = length;
  } else if (length < 65536) {
    head = Buffer.allocUnsafe(4);
    head[1] = 126;
    head.writeUInt16BE(length, 2);
  } else {
    head = Buffer.allocUnsafe(10);
    head[1] = 127;
    head.writeUInt32BE(Math.floor(length / 2 ** 32), 2);
    head.writeUInt32BE(length >>> 0, 6);
  }
  head[0] = 0x82;
  const batch = corked;
  if (batch === null) socket.cork();
  else if (!batch.includes(socket)) {
    socket.cork();
    batch.push(socket);
  }
  socket.write(head);
  const only = parts.length === 1 ? (parts[0] as Buffer) : null;
  if (lease !== null && only !== null && only.buffer === lease.buffer.buffer) {
    const { release } = lease;
    lease = null;
    socket.write(only, release);
  } else {
    for (const part of parts) socket.write(part);
  }
  if (batch === null) socket.uncork();
}

/** One contiguous buffer of a message (a view when it is one part). */
export function joinParts(parts: readonly Buffer[], length: number): Buffer {
  return parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts as Buffer[], length);
}
