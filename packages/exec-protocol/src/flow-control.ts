/**
 * Credit-based flow control for one byte stream (a process's output today; port forwards and attach
 * later), as an SSH channel window works: the sender may have at most `windowBytes` handed to the peer
 * and not yet acknowledged; the receiver acknowledges what its consumer has taken, cumulatively, so an
 * acknowledgement can be repeated or overtaken without harm. Neither side knows the transport.
 *
 * On the wire (exec-protocol, capability `flowControl`): `process/start {flowControl: {windowBytes}}`
 * opts a process in (the result echoes the window granted), and the notification
 * `process/ack {processId, seq}` says the client has consumed every event up to `seq`.
 */

/** Smallest and largest window an executor grants; a request outside is clamped. */
export const MIN_FLOW_WINDOW_BYTES = 64 * 1024;
export const MAX_FLOW_WINDOW_BYTES = 64 * 1024 * 1024;
/**
 * The window our SDK asks for. Sized for throughput through relay and Noise (about 10 ms of output at
 * the executor's pipe rate), not for retention: the executor keeps what is not acknowledged, however much
 * that is within the window.
 */
export const DEFAULT_FLOW_WINDOW_BYTES = 4 * 1024 * 1024;
/** The receiver acknowledges once it has consumed this fraction of the window since its last ack. */
const ACK_FRACTION = 0.25;

export function clampFlowWindow(requested: number): number {
  return Math.min(MAX_FLOW_WINDOW_BYTES, Math.max(MIN_FLOW_WINDOW_BYTES, Math.floor(requested)));
}

/** The sender's side: how much is in flight, and whether it may send more. */
export class SendCredit {
  readonly windowBytes: number;
  #sent = 0;
  #acked = 0;

  constructor(windowBytes: number) {
    this.windowBytes = windowBytes;
  }

  /** Bytes handed to the peer and not yet acknowledged. */
  get inFlight(): number {
    return this.#sent - this.#acked;
  }

  /** The window has room: the producer may go on. */
  get open(): boolean {
    return this.inFlight < this.windowBytes;
  }

  /** `bytes` more were handed to the peer; returns whether the window still has room. */
  sent(bytes: number): boolean {
    this.#sent += bytes;
    return this.open;
  }

  /**
   * The peer has consumed `bytes` more (the caller turns a cumulative acknowledgement into a delta).
   * Returns true when this reopened a window that was full.
   */
  acked(bytes: number): boolean {
    const wasOpen = this.open;
    this.#acked = Math.min(this.#sent, this.#acked + bytes);
    return !wasOpen && this.open;
  }
}

/** The receiver's side: counts what the consumer took and says when an acknowledgement is due. */
export class ReceiveCredit {
  readonly windowBytes: number;
  #unacked = 0;

  constructor(windowBytes: number) {
    this.windowBytes = windowBytes;
  }

  /**
   * The consumer took `bytes`; true when an acknowledgement should go now (a quarter of the window was
   * consumed since the last one). The caller sends it and then calls `ackSent()`.
   */
  consumed(bytes: number): boolean {
    this.#unacked += bytes;
    return this.#unacked >= this.windowBytes * ACK_FRACTION;
  }

  /** Consumed bytes not yet acknowledged. */
  get pending(): number {
    return this.#unacked;
  }

  ackSent(): void {
    this.#unacked = 0;
  }
}
