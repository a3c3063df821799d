import type { Socket } from 'node:net';
import { socketUserBufferHandle, userReadSymbols } from './privates.js';

export {
  PRIVATE_FIELDS,
  type PrivateField,
  ptyMasterFd,
  ptySocket,
  socketFd,
  wsReceiver,
  wsSocket,
} from './privates.js';

/**
 * Reads into a caller's buffers instead of a fresh buffer per read, on a socket Node already built (an
 * accepted connection, a child's pipe): the relay's fast path and the executor's child pipes use it.
 *
 * net.Socket's `onread` option can only be chosen at construction; its state lives under symbols that are
 * not exported (`userReadSymbols`, privates.ts). Where they are absent (another Node) nothing is switched
 * and sockets keep ordinary reads.
 */
/** True when this Node lets sockets be switched (the probe found the symbols). */
export function userReadsAvailable(): boolean {
  return userReadSymbols() !== null;
}

export interface UserReads {
  /** The buffer of the first read; taken only once the switch is sure to happen. */
  first(): Buffer;
  /** A buffer for each later read, or null to reuse the first one every time. */
  next: (() => Buffer) | null;
  /**
   * `nread` bytes were read into `buffer`. Runs synchronously within the read: with `next` null the buffer
   * is refilled by the next read. Returning false stops reading (as pause() does).
   */
  onRead(nread: number, buffer: Buffer): boolean | undefined;
}

type Internals = Socket & Record<symbol, unknown>;

/**
 * Switches `socket`, which must not have delivered anything yet, to reads into `reads`' buffers. 'end',
 * 'close', pause() and resume() behave as before. Returns false, changing nothing, when the socket cannot
 * be switched (no handle, data already buffered, already switched, or a Node without the symbols); the
 * caller then listens to 'data' as usual.
 */
export function readIntoUserBuffers(socket: Socket, reads: UserReads): boolean {
  const target = socket as Internals;
  const symbols = userReadSymbols();
  if (symbols === null || socket.readableLength > 0 || target[symbols.buffer]) return false;
  const handle = socketUserBufferHandle(socket);
  if (handle === null) return false;
  const first = reads.first();
  target[symbols.generator] = reads.next;
  target[symbols.callback] = reads.onRead;
  target[symbols.buffer] = first;
  handle.useUserBuffer(first);
  return true;
}
