import type { Socket } from 'node:net';
import { MAX_TCP_CHUNK_BYTES, Notification, ReceiveCredit, SendCredit } from '@tether/exec-protocol';

/** What a stream needs from its table: sending, and whether the connection's transport takes more now. */
export interface StreamLink {
  /** Sends one `tcp/data` with these bytes (copied before it returns); false above the high-water mark. */
  sendData(streamId: string, header: string, chunk: Buffer): boolean;
  sendNotification(method: string, params: unknown): boolean;
  /** The transport is above its high-water mark: no socket reads until it drains. */
  readonly blocked: boolean;
  /** The connection's budget of bytes sent and not yet received by the client (all streams) has room. */
  readonly budgetOpen: boolean;
  /** `bytes` more sent towards the client. */
  spent(bytes: number): void;
  /** The stream has ended (its socket is closed or it was reset): the table forgets it. */
  ended(streamId: string, error: string | null, notify: boolean): void;
}

/**
 * One forwarded connection on the executor: its socket, and the credit of both directions. Socket bytes go
 * to the client only while the client's window has room and the transport is below its high-water mark
 * (else the socket is paused, and TCP pushes back on the remote sender); the client's bytes are acknowledged
 * once the socket has handed them to the kernel, so at most a window of them waits in memory.
 *
 * States: open → (remote EOF: `tcp/shutdown` sent) and/or (client's `tcp/shutdown`: socket.end()) → the
 * socket's `close` → `tcp/closed`. A reset (client's `tcp/close`, a protocol violation, the connection
 * ending) destroys the socket at once.
 */
export class TcpStream {
  readonly #socket: Socket;
  readonly #link: StreamLink;
  readonly #send: SendCredit;
  readonly #receive: ReceiveCredit;
  /** The `tcp/data` header, serialized once. */
  readonly #header: string;
  #sentTotal = 0;
  #ackedTotal = 0;
  /** Client bytes handed to the socket and not yet written to the kernel. */
  #unwritten = 0;
  #writtenTotal = 0;
  #clientEnded = false;
  #paused = true;
  #error: string | null = null;
  #done = false;

  constructor(
    readonly streamId: string,
    socket: Socket,
    windowBytes: number,
    link: StreamLink,
  ) {
    this.#socket = socket;
    this.#link = link;
    this.#send = new SendCredit(windowBytes);
    this.#receive = new ReceiveCredit(windowBytes);
    this.#header = JSON.stringify({ method: Notification.tcpData, params: { streamId } });
    socket.on('end', () => {
      if (!this.#done) link.sendNotification(Notification.tcpShutdown, { streamId });
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      this.#error ??= describeSocketError(err);
    });
    socket.on('close', () => this.#finish(true));
  }

  /** The socket's `onread` callback: one chunk read into the stream's buffer (copied at once). */
  onRead(bytes: number, buffer: Buffer): boolean {
    if (this.#done || bytes <= 0) return true;
    const blocked = !this.#link.sendData(this.streamId, this.#header, buffer.subarray(0, bytes));
    this.#sentTotal += bytes;
    const open = this.#send.sent(bytes);
    this.#link.spent(bytes);
    if (blocked || !open || !this.#link.budgetOpen) {
      this.#paused = true;
      return false; // pauses the socket
    }
    return true;
  }

  /** Reads again where credit and the transport allow. */
  updateFlow(): void {
    if (this.#done) return;
    const shouldRead = this.#send.open && !this.#link.blocked && this.#link.budgetOpen;
    if (shouldRead && this.#paused) {
      this.#paused = false;
      this.#socket.resume();
    } else if (!shouldRead && !this.#paused) {
      this.#paused = true;
      this.#socket.pause();
    }
  }

  /** `tcp/data` from the client. Returns a protocol problem (the caller resets the stream), else null. */
  write(chunk: Buffer): string | null {
    if (this.#done) return null;
    if (this.#clientEnded) return 'data after tcp/shutdown';
    if (chunk.byteLength > MAX_TCP_CHUNK_BYTES) return `a tcp/data chunk above ${MAX_TCP_CHUNK_BYTES} bytes`;
    this.#unwritten += chunk.byteLength;
    if (this.#unwritten > this.#receive.windowBytes + MAX_TCP_CHUNK_BYTES) return 'data beyond the granted window';
    const bytes = chunk.byteLength;
    this.#socket.write(chunk, (err) => {
      if (err || this.#done) return;
      this.#unwritten -= bytes;
      this.#writtenTotal += bytes;
      if (this.#receive.consumed(bytes)) {
        this.#receive.ackSent();
        this.#link.sendNotification(Notification.tcpAck, { streamId: this.streamId, bytes: this.#writtenTotal });
      }
    });
    return null;
  }

  /** `tcp/ack` from the client: it has consumed `bytes` in all. */
  ack(bytes: number): string | null {
    if (this.#done) return null;
    if (bytes > this.#sentTotal) return 'an acknowledgement of bytes never sent';
    if (bytes <= this.#ackedTotal) return null;
    const delta = bytes - this.#ackedTotal;
    this.#send.acked(delta);
    this.#ackedTotal = bytes;
    this.updateFlow();
    return null;
  }

  /** `tcp/shutdown` from the client: no more bytes towards the target (its socket half-closes). */
  shutdown(): void {
    if (this.#done || this.#clientEnded) return;
    this.#clientEnded = true;
    this.#socket.end();
  }

  /** Resets the stream; `notify`: tell the client (`tcp/closed` with `error`). */
  reset(error: string | null, notify: boolean): void {
    if (this.#done) return;
    if (error !== null) this.#error = error;
    this.#finish(notify);
    this.#socket.destroy();
  }

  #finish(notify: boolean): void {
    if (this.#done) return;
    this.#done = true;
    this.#link.ended(this.streamId, this.#error, notify);
  }
}

/** A socket failure as the client sees it (the code and its meaning; no stack, nothing of the executor's). */
export function describeSocketError(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'ECONNRESET':
      return 'the target reset the connection';
    case 'EPIPE':
      return 'the target closed the connection while data was still being written';
    case 'ETIMEDOUT':
      return 'the connection to the target timed out';
    default:
      return err.code ? `socket error ${err.code}` : 'socket error';
  }
}
