import { BufferPool, WriteBatch } from '@tether/bytes';
import { wsSocket } from '@tether/user-read';
import { frameHeader, installFastMessages, READ_BUFFER_BYTES, type Slab } from '@tether/user-read/websocket';
import type { WebSocket } from 'ws';

/**
 * The relay's data path without `ws`'s per-message buffers (`installFastMessages`): the common frame, a
 * single masked binary frame, reaches the relay as views or as a pooled slab, and is written back with a
 * server frame header and no copy (`sendParts`), the slab returning to the pool once the kernel took it.
 *
 * One FastPath per relay, made by `createRelay` and closed with it: its pool, read buffer and cork batch
 * are that relay's alone (two relays in one process, as the tests run them, share nothing). Within a
 * relay they are shared by its sockets on purpose: a slab read off one socket is written to another, and
 * each read is handled synchronously, so one read buffer and one batch serve every socket.
 */

/** A message: `parts` are views (in order) whose lengths add up to `length`. */
export type FastHandler = (parts: Buffer[], length: number) => void;

export interface FastPathOptions {
  /** Payload slabs of forwarded frames, reused once the kernel has taken them. Default: the relay's own. */
  pool?: BufferPool;
}

const BINARY = { binary: true } as const;

export class FastPath {
  readonly pool: BufferPool;
  /** What every switched socket of this relay reads into (each read is consumed before the next). */
  readonly #readBuffer = Buffer.allocUnsafeSlow(READ_BUFFER_BYTES);
  /** Destination sockets corked while one read is handled: its frames leave in one writev per socket. */
  readonly #batch = new WriteBatch();
  /** The slab of the message being handled, until a `sendParts` of it takes it over. */
  #lease: Slab | null = null;

  constructor(options: FastPathOptions = {}) {
    this.pool = options.pool ?? new BufferPool({ step: 16 * 1024, maxPooledBytes: 8 * 1024 * 1024 });
  }

  /** Installs the fast path on a freshly upgraded server-side `ws` socket (before any data was read). */
  install(ws: WebSocket, maxPayload: number, onFast: FastHandler, pooled: boolean): void {
    installFastMessages(ws, {
      server: true,
      maxPayload,
      lease: (size) => this.pool.lease(size),
      userReads: pooled,
      readBuffer: this.#readBuffer,
      aroundRead: this.#batch.around,
      onMessage: (parts, length, slab) => {
        this.#lease = slab;
        try {
          onFast(parts, length);
        } finally {
          this.#lease?.release(); // not forwarded (sendParts clears it when it takes the slab over)
          this.#lease = null;
        }
        return true; // the slab, if any, was given back above or taken by sendParts
      },
    });
  }

  /** Writes one unmasked binary frame (server to client) of `parts` straight to the socket under `ws`. */
  sendParts(ws: WebSocket, parts: readonly Buffer[], length: number): void {
    const socket = wsSocket(ws);
    if (socket === null) {
      // ws's own framing (a copy of the parts into one buffer): correct, only slower.
      ws.send(parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts as Buffer[], length), BINARY);
      return;
    }
    const head = frameHeader(0x2, length);
    const batched = this.#batch.join(socket);
    socket.write(head);
    const only = parts.length === 1 ? (parts[0] as Buffer) : null;
    const lease = this.#lease;
    if (lease !== null && only !== null && only.buffer === lease.buffer.buffer) {
      this.#lease = null;
      socket.write(only, lease.release);
    } else {
      for (const part of parts) socket.write(part);
    }
    if (!batched) socket.uncork();
  }

  /** The relay is closing: its free slabs go, and slabs still in flight are dropped when they come back. */
  close(): void {
    this.pool.close();
  }
}
