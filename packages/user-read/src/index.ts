import { Socket } from 'node:net';

/**
 * Reads into a caller's buffers instead of a fresh buffer per read, on a socket Node already built (an
 * accepted connection, a child's pipe): the relay's fast path and the executor's child pipes use it.
 *
 * net.Socket's `onread` option (documented: reads go into a given buffer, or one a function returns, and to
 * a callback instead of 'data') can only be chosen at construction. Its state lives under symbols that are
 * not exported; they are found once on a probe socket, and where they are absent (another Node) nothing is
 * switched and sockets keep ordinary reads.
 */
const symbols: { buffer: symbol; callback: symbol; generator: symbol } | null = (() => {
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
})();

/** True when this Node lets sockets be switched (the probe found the symbols). */
export const userReadsAvailable = symbols !== null;

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

type Internals = Socket & Record<symbol, unknown> & { _handle: { useUserBuffer?: (buffer: Buffer) => void } | null };

/**
 * Switches `socket`, which must not have delivered anything yet, to reads into `reads`' buffers. 'end',
 * 'close', pause() and resume() behave as before. Returns false, changing nothing, when the socket cannot
 * be switched (no handle, data already buffered, already switched, or a Node without the symbols); the
 * caller then listens to 'data' as usual.
 */
export function readIntoUserBuffers(socket: Socket, reads: UserReads): boolean {
  const target = socket as Internals;
  const handle = target._handle;
  if (
    symbols === null ||
    handle === null ||
    typeof handle.useUserBuffer !== 'function' ||
    socket.readableLength > 0 ||
    target[symbols.buffer]
  ) {
    return false;
  }
  const first = reads.first();
  target[symbols.generator] = reads.next;
  target[symbols.callback] = reads.onRead;
  target[symbols.buffer] = first;
  handle.useUserBuffer(first);
  return true;
}
