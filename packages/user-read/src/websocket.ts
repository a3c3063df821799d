import { isUtf8 } from 'node:buffer';
import { createRequire } from 'node:module';
import type { WebSocket } from 'ws';
import { readIntoUserBuffers } from './index.js';
import { wsReceiver, wsReceiverIdle, wsSocket } from './privates.js';

/**
 * WebSocket messages without `ws`'s per-message buffers, for sockets that carry many large binary
 * messages (the relay's sockets, the endpoints' relay links). `ws` keeps the handshake, control frames,
 * close, errors and every unusual message; the fast path only takes the common frame: a single binary
 * (or, when asked, text) frame (FIN, no RSV bits, within `maxPayload`, masked exactly when this side is a
 * server) at a frame
 * boundary of an open socket, outside a fragmented message.
 *
 * Mechanism: `ws` feeds every socket read to its receiver's `write()`; that method is replaced per socket
 * by a frame splitter which hands the fast frames to `onMessage` and passes every other frame's bytes,
 * whole and in order, to the real receiver. Whatever `ws` does on a socket (close, errors, stop reading)
 * is unchanged. Where Node allows it (`readIntoUserBuffers`), the socket reads into its owner's read
 * buffer instead of a fresh one per read and each fast message is assembled in a leased slab: no garbage
 * per read or per message (a fresh buffer per read and another per message split across reads was most
 * of what V8's collector did on a transfer). The `ws` internals it relies on are read through
 * privates.ts, which checks them first: when they are not as expected nothing is installed.
 */

/** A reusable buffer of exactly the asked size; `release` gives it back (later calls do nothing). */
export interface Slab {
  readonly buffer: Buffer;
  release(): void;
}

export interface FastMessageOptions {
  /** This side is the server: frames arrive masked (RFC 6455 §5.1). A client's frames arrive unmasked. */
  server: boolean;
  /** Larger messages go to `ws`, which enforces its own `maxPayload`. */
  maxPayload: number;
  /** Slabs for messages assembled from the shared read buffer. */
  lease(size: number): Slab;
  /**
   * One message: `parts` (views, in order) add up to `length`. They are valid until the call returns,
   * unless `slab` is given and the handler returns true: then it has taken the slab (the bytes are its
   * only part) and releases it when done with them. Text arrives only with `text`, as valid UTF-8.
   */
  onMessage(parts: Buffer[], length: number, slab: Slab | null, isBinary: boolean): boolean | undefined;
  /**
   * Text frames take the fast path too. Their UTF-8 is checked as `ws` checks it; a message that fails is
   * handed to `ws` as it came, which closes the socket as it would have (1007).
   */
  text?: boolean;
  /** Runs around the handling of each socket read (the relay batches its writes per read). */
  aroundRead?: (handle: () => boolean) => boolean;
  /** False keeps Node's reads (a fresh buffer each), e.g. while something else reads the raw chunks. */
  userReads?: boolean;
  /**
   * What the socket reads into. Each read is consumed synchronously (copied into slabs, or passed to `ws`
   * as a copy), so the owner of many sockets (the relay, an executor's server) may give them all one
   * buffer. Default: one of READ_BUFFER_BYTES for this socket alone, allocated once it is switched.
   */
  readBuffer?: Buffer;
}

/** The default read buffer of a socket switched to user reads. */
export const READ_BUFFER_BYTES = 256 * 1024;

type Unmask = (buffer: Buffer, mask: Buffer) => void;
/** XORs `source` with `mask` into `output` at `offset` (bufferutil's `mask`: masking and unmasking are one). */
type MaskInto = (source: Buffer, mask: Buffer, output: Buffer, offset: number, length: number) => void;
type NativeMask = { unmask: Unmask; mask: MaskInto };
let nativeMask: NativeMask | null | undefined;
/** bufferutil, loaded by the first frame long enough to use it (not at load: a command may open no socket). */
function native(): NativeMask | null {
  if (nativeMask === undefined) {
    try {
      nativeMask = createRequire(import.meta.url)('bufferutil') as NativeMask;
    } catch {
      nativeMask = null;
    }
  }
  return nativeMask;
}

/** Copies `source` unmasked into `output` at `offset`; `mask` is already rotated to `offset`. */
function unmaskInto(source: Buffer, mask: Buffer, output: Buffer, offset: number) {
  const n = source.length;
  const bufferutil = n >= 64 ? native() : null;
  if (bufferutil) return bufferutil.mask(source, mask, output, offset, n);
  for (let i = 0; i < n; i++) output[offset + i] = (source[i] as number) ^ (mask[i & 3] as number);
}

function unmask(buffer: Buffer, mask: Buffer) {
  const n = buffer.length;
  const bufferutil = n >= 64 ? native() : null;
  if (bufferutil) return bufferutil.unmask(buffer, mask);
  for (let i = 0; i < n; i++) buffer[i] = (buffer[i] as number) ^ (mask[i & 3] as number);
}

const HEADER = 0;
const FAST = 1;
const PASS = 2;

/**
 * Installs the fast path on a `ws` socket between messages: a server's socket right after the upgrade, a
 * client's once open. Does nothing when `ws` is in the middle of a frame or message. Returns true when
 * reads were switched to the shared buffer (else fast messages are views of `ws`'s read chunks).
 */
export function installFastMessages(ws: WebSocket, options: FastMessageOptions): boolean {
  const { server, maxPayload, onMessage } = options;
  const receiver = wsReceiver(ws);
  if (!receiver || !wsReceiverIdle(receiver)) return false; // ws keeps the socket as it is
  const realWrite = receiver.write.bind(receiver) as (chunk: Buffer) => boolean;
  const header = Buffer.alloc(14);
  const rotated = Buffer.alloc(4);
  let headerLen = 0;
  let mode = HEADER;
  let remaining = 0;
  let offset = 0;
  let mask = Buffer.alloc(4);
  let plain = true; // no mask, or a zero one (relay-frames' socket mask): the payload is as sent
  let parts: Buffer[] = [];
  let total = 0;
  let isBinary = true;
  // Copying mode (reads land in the read buffer): a fast frame's payload is copied into `slab`.
  let copying = false;
  let volatile = false;
  let slab: Slab | null = null;
  // `ws` is assembling a fragmented message: everything goes to it until its final fragment.
  let fragmented = false;

  // ws ends, destroys or errors its receiver once it stops reading the socket (Writable's public state).
  const receiverGone = () => receiver.writableEnded || receiver.destroyed || receiver.errored != null;

  const takeFast = (view: Buffer) => {
    if (plain) {
      if (copying) view.copy((slab as Slab).buffer, offset);
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
      unmaskInto(view, key, (slab as Slab).buffer, offset);
      offset += view.length;
      return;
    }
    unmask(view, key);
    offset += view.length;
    parts.push(view);
  };

  /** A text message that is not UTF-8 goes to `ws` whole, as one frame (masked with zeros if need be). */
  const notUtf8 = (bytes: Buffer): boolean => {
    if (isUtf8(bytes)) return false;
    // A server's receiver wants a masked frame: the zero key leaves the payload as it is.
    const head = frameHeader(0x1, bytes.length, { masked: server });
    realWrite(Buffer.concat([head, bytes]));
    return true;
  };

  const finishFast = () => {
    const length = total;
    total = 0;
    mode = HEADER;
    if (copying) {
      const whole = slab as Slab;
      slab = null;
      let taken: boolean | undefined = false;
      try {
        if (!isBinary && notUtf8(whole.buffer)) return;
        taken = onMessage([whole.buffer], length, whole, isBinary);
      } finally {
        if (!taken) whole.release();
      }
      return;
    }
    let message = parts;
    parts = [];
    if (!isBinary) {
      const joined = joinParts(message, length);
      if (notUtf8(joined)) return;
      message = [joined];
    }
    onMessage(message, length, null, isBinary);
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
      if (headerLen === 0 && n - pos >= 2) need = headerSize(chunk[pos + 1] as number);
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
        (opcode === 2 || (opcode === 1 && options.text === true)) &&
        fin &&
        (b0 & 0x70) === 0 &&
        masked === server &&
        !huge &&
        length <= maxPayload &&
        ws.readyState === 1
      ) {
        if (masked) {
          mask = Buffer.from(src.subarray(at + extra, at + extra + 4));
          plain = mask.readUInt32BE(0) === 0;
        } else {
          plain = true;
        }
        offset = 0;
        isBinary = opcode === 2;
        if (copying) slab = options.lease(length);
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

  if (options.userReads === false) return false;
  const socket = wsSocket(ws);
  if (socket === null) return false; // fast messages stay views of ws's read chunks
  const aroundRead = options.aroundRead ?? ((handle: () => boolean) => handle());
  const switched = readIntoUserBuffers(socket, {
    first: () => options.readBuffer ?? Buffer.allocUnsafeSlow(READ_BUFFER_BYTES),
    next: null,
    onRead: (nread, buffer) => {
      volatile = true;
      try {
        // false stops reading, as ws pauses a socket whose receiver is behind; its 'drain' resumes it.
        return aroundRead(() => write(buffer.subarray(0, nread)));
      } finally {
        volatile = false;
      }
    },
  });
  if (switched) copying = true;
  return switched;
}

/**
 * What to call before each `ws.send` so that the messages sent in one synchronous burst (the records of a
 * large message, several answers) leave in one socket write: the socket is corked at the burst's first
 * send and uncorked when the burst ends (a `process.nextTick`, before the event loop polls again, so nothing
 * waits). `ws` writes each message at once otherwise, a system call each, which on loopback also carries the
 * receiver's wake-up. Where the socket cannot be reached, it does nothing (each message its own write).
 */
export function burstWrites(ws: WebSocket): () => void {
  let corked = false;
  return () => {
    if (corked) return;
    const socket = wsSocket(ws);
    if (socket === null) return;
    corked = true;
    socket.cork();
    process.nextTick(() => {
      corked = false;
      socket.uncork();
    });
  };
}

/** One contiguous buffer of a message's parts (the part itself, not a copy, when there is one). */
export function joinParts(parts: readonly Buffer[], length: number): Buffer {
  return parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts as Buffer[], length);
}

/**
 * The header of one WebSocket frame of `length` payload bytes (RFC 6455 §5.2), FIN set unless `fin` is
 * false; `masked` adds the mask bit and a zero key (the payload then goes unchanged).
 */
export function frameHeader(opcode: number, length: number, options: { fin?: boolean; masked?: boolean } = {}): Buffer {
  const masked = options.masked === true;
  const size = length < 126 ? 2 : length < 65536 ? 4 : 10;
  const head = Buffer.allocUnsafe(size + (masked ? 4 : 0)); // from Node's small-buffer pool
  if (masked) head.fill(0, size);
  head[0] = (options.fin === false ? 0 : 0x80) | opcode;
  if (length < 126) head[1] = length;
  else if (length < 65536) {
    head[1] = 126;
    head.writeUInt16BE(length, 2);
  } else {
    head[1] = 127;
    head.writeUInt32BE(Math.floor(length / 2 ** 32), 2);
    head.writeUInt32BE(length >>> 0, 6);
  }
  if (masked) head[1] = (head[1] as number) | 0x80;
  return head;
}

function headerSize(b1: number): number {
  const len = b1 & 0x7f;
  return 2 + (len === 126 ? 2 : len === 127 ? 8 : 0) + ((b1 & 0x80) !== 0 ? 4 : 0);
}
