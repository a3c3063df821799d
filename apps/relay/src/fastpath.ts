import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import type { Writable } from 'node:stream';
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
const nativeUnmask: Unmask | null = (() => {
  try {
    const require = createRequire(import.meta.url);
    return (require('bufferutil') as { unmask: Unmask }).unmask;
  } catch {
    return null;
  }
})();

function unmask(buffer: Buffer, mask: Buffer) {
  const n = buffer.length;
  if (nativeUnmask && n >= 64) return nativeUnmask(buffer, mask);
  for (let i = 0; i < n; i++) buffer[i] = (buffer[i] as number) ^ (mask[i & 3] as number);
}

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
export function installFastPath(ws: WebSocket, maxPayload: number, onFast: FastHandler) {
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
  let parts: Buffer[] = [];
  let total = 0;
  // `ws` is assembling a fragmented message: everything goes to it until its final fragment.
  let fragmented = false;

  const receiverGone = () => state.ending || state.destroyed || state.errored != null;

  const takeFast = (view: Buffer) => {
    if ((offset & 3) === 0) unmask(view, mask);
    else {
      for (let i = 0; i < 4; i++) rotated[i] = mask[(i + offset) & 3] as number;
      unmask(view, rotated);
    }
    offset += view.length;
    parts.push(view);
  };

  const finishFast = () => {
    const message = parts;
    const length = total;
    parts = [];
    total = 0;
    mode = HEADER;
    onFast(message, length);
  };

  (receiver as unknown as { write: (chunk: Buffer) => boolean }).write = (chunk: Buffer): boolean => {
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
        ok = realWrite(chunk.subarray(pos, pos + take));
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
        offset = 0;
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
      ok = realWrite(src === header ? Buffer.from(header.subarray(0, need)) : src.subarray(at, at + need));
      remaining = huge ? Number.MAX_SAFE_INTEGER : length;
      mode = remaining > 0 ? PASS : HEADER;
    }
    return ok;
  };
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
  socket.cork();
  socket.write(head);
  for (const part of parts) socket.write(part);
  socket.uncork();
}

/** One contiguous buffer of a message (a view when it is one part). */
export function joinParts(parts: readonly Buffer[], length: number): Buffer {
  return parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts as Buffer[], length);
}
