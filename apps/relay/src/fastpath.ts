import type { Socket } from 'node:net';
import { BufferPool } from '@tether/jsonrpc';
import { frameHeader, installFastMessages, type Slab } from '@tether/user-read/websocket';
import type { WebSocket } from 'ws';

/**
 * The relay's data path without `ws`'s per-message buffers (`installFastMessages`): the common frame, a
 * single masked binary frame, reaches the relay as views or as a pooled slab, and is written back with a
 * server frame header and no copy (`sendParts`), the slab returning to the pool once the kernel took it.
 */

/** Destination sockets corked while one read is handled: its frames leave in one writev per socket. */
let corked: Socket[] | null = null;

// Payload buffers of forwarded frames, reused once the kernel has taken them (the write's callback).
const pool = new BufferPool({ step: 16 * 1024, maxPooledBytes: 8 * 1024 * 1024 });

/** The slab of the message being handled, until a `sendParts` of it takes it over. */
let lease: Slab | null = null;

interface WsInternals {
  _socket: Socket;
}

/** A message: `parts` are views (in order) whose lengths add up to `length`. */
export type FastHandler = (parts: Buffer[], length: number) => void;

function aroundRead(handle: () => boolean): boolean {
  const outer = corked === null;
  if (outer) corked = [];
  try {
    return handle();
  } finally {
    if (outer) {
      const sockets = corked as Socket[];
      corked = null;
      for (const out of sockets) out.uncork();
    }
  }
}

/** Installs the fast path on a freshly upgraded server-side `ws` socket (before any data was read). */
export function installFastPath(ws: WebSocket, maxPayload: number, onFast: FastHandler, pooled: boolean) {
  installFastMessages(ws, {
    server: true,
    maxPayload,
    lease: (size) => pool.lease(size),
    userReads: pooled,
    aroundRead,
    onMessage: (parts, length, slab) => {
      lease = slab;
      try {
        onFast(parts, length);
      } finally {
        lease?.release(); // not forwarded (sendParts clears it when it takes the slab over)
        lease = null;
      }
      return true; // the slab, if any, was given back above or taken by sendParts
    },
  });
}

/** Writes one unmasked binary frame (server to client) of `parts` straight to the socket under `ws`. */
export function sendParts(ws: WebSocket, parts: readonly Buffer[], length: number) {
  const socket = (ws as unknown as WsInternals)._socket;
  const head = frameHeader(0x2, length);
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
