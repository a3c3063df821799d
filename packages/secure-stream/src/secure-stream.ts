import { type BufferLease, BufferPool, DEFAULT_HIGH_WATER_MARK, DEFAULT_LOW_WATER_MARK } from '@tether/bytes';
import type { MessageTransport, TransportHandlers } from '@tether/jsonrpc';
import {
  buildRelayPrologue,
  createInitiator,
  createResponder,
  MAX_HANDSHAKE_PAYLOAD,
  MAX_TRANSPORT_PLAINTEXT,
  type NoiseIdentity,
  type NoisePublicKey,
  TAG_LENGTH_BYTES,
  type Transport,
} from '@tether/noise';
import {
  copyBytes,
  DataFrameEncoder,
  type Frame,
  frameMessageParts,
  handshakeFrame,
  MessageReassembler,
  OrderedReceiveWindow,
  resetFrame,
  resumeFrame,
  SendSequence,
} from '@tether/relay-frames';
import { CLOSED_RESET, DEFAULT_HANDSHAKE_TIMEOUT_MS, PROTOCOL_ERROR_RESET, SecureStreamError } from './errors.js';
import type { FrameLink } from './link.js';
import type { AcceptOptions, InitiateOptions, SecureStreamPools } from './options.js';

/** A stream's own pools when its creator gives none: a stream's worth of frames in flight and of blocks. */
function ownPools(): SecureStreamPools {
  return {
    frames: new BufferPool({ maxPooledBytes: 2 * 1024 * 1024 }),
    // 16 KiB steps: a one-record message (up to 60 KiB, from LENT_MESSAGE_BYTES on) is pooled, not plain.
    messages: new BufferPool({ step: 16 * 1024, maxPooledBytes: 8 * 1024 * 1024 }),
  };
}

/**
 * Messages from this size on are assembled in buffers leased from the stream's message pool, which go with
 * the message (TransportHandlers.onMessage's `release`) to their last user: a forwarded connection's data
 * (about 60 KiB a message) then reuses a few slabs instead of one fresh ArrayBuffer per message, whose
 * external memory made V8 run a full mark-compact every few dozen megabytes (a fifth of the harness's CPU in
 * a port-forward download).
 */
const LENT_MESSAGE_BYTES = 32 * 1024;

type State = 'handshaking' | 'open' | 'closed';

/**
 * One end-to-end encrypted JSON-RPC stream over relay frames (rendezvous.md §3.4–§3.5, §4.8). After the
 * handshake it is an ordinary MessageTransport, so the JSON-RPC layer never knows it has a relay: each
 * message is length-prefixed, cut into ≤ 60 KiB records, each record encrypted (nonce = seq) into one
 * Data frame; inbound Data frames go through the ordered window, are decrypted in order and reassembled.
 * Any decrypt, framing or order failure resets the stream: there is no plaintext fallback.
 */
export class SecureStream implements MessageTransport {
  readonly kind = 'relay' as const;
  readonly carriesAttachments = true;
  readonly label: string;
  private state: State = 'handshaking';
  private handlers: TransportHandlers | null = null;
  private transport: Transport | null = null;
  private readonly window = new OrderedReceiveWindow();
  private readonly pools: SecureStreamPools;
  private readonly ownsPools: boolean;
  /**
   * Where a record that does not continue a message is opened (opening and reassembly are synchronous,
   * and the reassembler copies out what it keeps), made at the first such record. Sized for the largest
   * Noise transport record, so an oversized one still authenticates and is then refused by the reassembler.
   */
  private opened: Uint8Array | null = null;
  // A record that continues a message is opened straight into that message's buffer; any other into
  // `opened`, which the reassembler copies from. A large message is assembled in a leased buffer, whose
  // release goes with the message.
  private readonly reassembler = new MessageReassembler({
    allocate: (size) => (size >= LENT_MESSAGE_BYTES ? this.leaseMessage(size) : Buffer.allocUnsafe(size)),
  });
  /**
   * Leases of messages being assembled (or opened whole) in pooled buffers, in the order they were taken,
   * which is the order their messages complete: `deliver` hands each on with its message.
   */
  private readonly leased: BufferLease[] = [];
  /** Records being sealed asynchronously, in seq (nonce) order; `flushSealed` sends them in turn. */
  private sealing: Array<{ seq: number; sealed: Promise<Uint8Array>; length: number }> = [];
  private sealingBytes = 0;
  private flushing = false;
  /** A caller was told to wait (`send` returned false) and has not had its `onDrain` yet. */
  private sealedNeedsDrain = false;
  /** The link refused more (its `send` returned false) and has not drained since: its `onDrain` will come. */
  private linkFull = false;
  /** `close()` was called while records were still being sealed: the stream closes once they are sent. */
  private closeAfterSealing = false;
  /** Records being opened asynchronously, in arrival (nonce) order; `drainOpening` takes them in turn. */
  private opening: Promise<Uint8Array>[] = [];
  private draining = false;
  private readonly sequence = new SendSequence();
  private readonly dataFrames: DataFrameEncoder;
  /** Messages that arrived between the handshake and `start()`. */
  private early: Array<{ bytes: Buffer; release: (() => void) | undefined }> | null = [];
  private handshakeListener: ((frame: Frame) => void) | null = null;
  private failHandshake: ((error: SecureStreamError) => void) | null = null;
  /**
   * How the stream ended while handshaking once nothing waited for message 2 any more: message 2 had resolved
   * the wait, and a Reset, a failure or the link's close came in the same read, before `initiate` opened it.
   */
  private handshakeEnd: SecureStreamError | null = null;
  private closeReason = '';

  private constructor(
    private readonly link: FrameLink,
    readonly streamId: string,
    pools: SecureStreamPools | undefined,
  ) {
    this.label = `secure stream ${streamId}`;
    this.ownsPools = pools === undefined;
    this.pools = pools ?? ownPools();
    this.dataFrames = new DataFrameEncoder(streamId);
    link.start({
      onFrame: (frame) => this.onFrame(frame),
      onClose: (reason) => this.finish(`relay link closed: ${reason}`, false),
      onDrain: () => {
        if (!this.transport?.sealsAsync) {
          this.handlers?.onDrain();
          return;
        }
        this.linkFull = false;
        this.drainSealed();
      },
    });
  }

  /** Bytes waiting to leave: on the link, and (with an asynchronous AEAD) records still being sealed. */
  get bufferedAmount(): number {
    return this.link.bufferedAmount + this.sealingBytes;
  }

  /** The stream's pools (its creator's, or its own). */
  get bufferPools(): Readonly<SecureStreamPools> {
    return this.pools;
  }

  get status(): State {
    return this.state;
  }

  /** Why the stream ended ('' while open). */
  get closedReason(): string {
    return this.closeReason;
  }

  start(handlers: TransportHandlers): void {
    this.handlers = handlers;
    const early = this.early ?? [];
    this.early = null;
    for (const message of early) handlers.onMessage(message.bytes, message.release);
    if (this.state === 'closed') handlers.onClose(this.closeReason);
  }

  send(message: string | Buffer, release?: () => void): boolean {
    if (this.state !== 'open' || !this.transport || this.closeAfterSealing) {
      release?.();
      return false;
    }
    const bytes = typeof message === 'string' ? Buffer.from(message) : message;
    if (this.transport.sealsAsync) return this.sendSealingLater(bytes, release);
    let writable = true;
    try {
      // Each record is sealed straight into the payload of its frame's wire bytes: the message is not
      // copied to prepend its length, and the ciphertext is not copied into an encoded frame.
      for (const parts of frameMessageParts(bytes)) {
        let length = TAG_LENGTH_BYTES;
        for (const part of parts) length += part.byteLength;
        // The frame's wire bytes come from a pool and go back once the link has written them (a frame lost
        // to a failure below is simply garbage).
        const seq = this.sequence.take();
        const { built: frame, release: written } = this.pools.frames.build((allocate) =>
          this.dataFrames.allocate(seq, length, allocate),
        );
        this.transport.encryptInto(parts, frame.payload);
        writable = this.link.send(frame, written);
      }
    } catch (err) {
      this.fail(`cannot send: ${(err as Error).message}`);
      return false;
    } finally {
      release?.(); // every record was sealed into its own frame: the message's bytes are no longer read
    }
    return writable;
  }

  /**
   * `send` with the provider's asynchronous AEAD (the browser's WebCrypto): each record takes its seq and
   * nonce now and is sealed concurrently; `flushSealed` sends the frames strictly in that order. The message's
   * bytes are taken when each seal is called, so `release` runs at once. Returns false once the link is full
   * or more than the high-water mark is being sealed; `onDrain` follows when both are below the low-water mark.
   */
  private sendSealingLater(bytes: Buffer, release?: () => void): boolean {
    try {
      for (const parts of frameMessageParts(bytes)) {
        const plaintext = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
        const seq = this.sequence.take();
        const sealed = this.transport!.encryptAsync(plaintext);
        sealed.catch(() => undefined); // taken in order by flushSealed
        this.sealing.push({ seq, sealed, length: plaintext.byteLength + TAG_LENGTH_BYTES });
        this.sealingBytes += plaintext.byteLength + TAG_LENGTH_BYTES;
      }
    } catch (err) {
      // No flush may be running to empty the queue: records queued by this call are dropped here.
      this.sealing = [];
      this.sealingBytes = 0;
      this.fail(`cannot send: ${(err as Error).message}`);
      return false;
    } finally {
      release?.();
    }
    if (!this.flushing) void this.flushSealed();
    if (this.linkFull || this.sealingBytes > DEFAULT_HIGH_WATER_MARK) this.sealedNeedsDrain = true;
    return !this.sealedNeedsDrain;
  }

  private async flushSealed(): Promise<void> {
    this.flushing = true;
    try {
      while (this.sealing.length > 0) {
        const { seq, sealed, length } = this.sealing[0]!;
        const ciphertext = await sealed;
        this.sealing.shift();
        this.sealingBytes -= length;
        if (this.state !== 'open') return;
        if (ciphertext.byteLength !== length) throw new Error('a sealed record has the wrong length');
        const { built: frame, release: written } = this.pools.frames.build((allocate) =>
          this.dataFrames.allocate(seq, length, allocate),
        );
        frame.payload.set(ciphertext);
        if (!this.link.send(frame, written)) this.linkFull = true;
        this.drainSealed();
      }
    } catch (err) {
      this.fail(`cannot send: ${(err as Error).message}`); // the queue is emptied below
    } finally {
      this.flushing = false;
      if (this.state !== 'open') {
        this.sealing = [];
        this.sealingBytes = 0;
      } else if (this.closeAfterSealing && this.sealing.length === 0) {
        this.closeNow();
      }
    }
  }

  /** Wakes a caller told to wait once the link has drained and little is left being sealed. */
  private drainSealed(): void {
    if (!this.sealedNeedsDrain || this.linkFull || this.sealingBytes > DEFAULT_LOW_WATER_MARK) return;
    if (this.state !== 'open' || this.closeAfterSealing) return;
    this.sealedNeedsDrain = false;
    this.handlers?.onDrain();
  }

  pause(): void {
    this.link.pause();
  }

  resume(): void {
    this.link.resume();
  }

  /**
   * Ends the stream: tells the peer with a Reset, then closes the link. Idempotent. Records still being
   * sealed (an asynchronous AEAD) are sent first: the stream closes once the last has left.
   */
  close(): void {
    if (this.state === 'closed') return;
    if (this.state === 'open' && this.sealing.length > 0) {
      this.closeAfterSealing = true;
      return;
    }
    this.closeNow();
  }

  private closeNow(): void {
    if (this.state === 'closed') return;
    this.link.send(resetFrame(this.streamId, CLOSED_RESET));
    this.finish('closed', true);
  }

  // Handshake drivers ---------------------------------------------------------------------------

  /**
   * Harness side (initiator): claims the stream with `Resume`, sends message 1 carrying the
   * authorization, and resolves once message 2 authenticates the pinned executor key.
   */
  static async initiate(options: InitiateOptions): Promise<SecureStream> {
    const stream = new SecureStream(options.link, options.streamId, options.pools);
    const initiator = createInitiator({
      remoteStatic: options.remoteStatic,
      staticKeys: options.staticKeys,
      prologue: buildRelayPrologue({
        environmentId: options.environmentId,
        registrationId: options.registrationId,
        streamId: options.streamId,
      }),
      payload: new TextEncoder().encode(options.authorization),
      ...(options.provider ? { provider: options.provider } : {}),
      ...(options.kem ? { kem: options.kem } : {}),
    });
    const message2 = stream.awaitHandshake(options.timeoutMs ?? DEFAULT_HANDSHAKE_TIMEOUT_MS, options.signal);
    options.link.send(resumeFrame(options.streamId, 0));
    options.link.send(handshakeFrame(options.streamId, initiator.message1));
    const payload = await message2;
    // A link hands over every frame of one read before this continuation runs: a Reset right behind message 2
    // (the relay's, when the executor's socket went meanwhile), a failure or the link's close may have ended the
    // stream already. Opening it then would bring back a stream whose link is gone: no one would report its
    // close, and what it sends would go nowhere (an `initialize` sent on it waited for its call timeout).
    if (stream.state === 'closed') {
      throw stream.handshakeEnd ?? new SecureStreamError('closed', stream.closeReason);
    }
    try {
      stream.open(initiator.readMessage2(payload));
    } catch (err) {
      stream.fail('message 2 did not authenticate the executor');
      throw new SecureStreamError('handshake_failed', 'the executor failed the Noise handshake', { cause: err });
    }
    return stream;
  }

  /**
   * Executor side (responder): reads message 1 (already received by the caller's demultiplexer), asks
   * `authorize` about the recovered harness key and payload, and only then answers with message 2.
   * A refusal or any failure resets the stream without details.
   */
  static async accept(options: AcceptOptions): Promise<AcceptedStream> {
    const stream = new SecureStream(options.link, options.streamId, options.pools);
    // The responder's suite is its own identity's (a NoiseIdentity carries it), else Codex's.
    const suite = options.suite ?? (options.staticKeys as Partial<NoiseIdentity>).suite;
    const responder = createResponder({
      ...(suite ? { suite } : {}),
      staticKeys: options.staticKeys,
      prologue: buildRelayPrologue({
        environmentId: options.environmentId,
        registrationId: options.registrationId,
        streamId: options.streamId,
      }),
      ...(options.provider ? { provider: options.provider } : {}),
      ...(options.kem ? { kem: options.kem } : {}),
    });
    let pending: ReturnType<typeof responder.readMessage1>;
    let authorization: string;
    try {
      pending = responder.readMessage1(options.message1);
      if (pending.payload.length > MAX_HANDSHAKE_PAYLOAD) throw new Error('authorization too long');
      authorization = new TextDecoder('utf-8', { fatal: true }).decode(pending.payload);
    } catch (err) {
      stream.fail('invalid handshake message 1');
      throw new SecureStreamError('handshake_failed', 'invalid Noise message 1', { cause: err });
    }
    let allowed = false;
    try {
      allowed = await options.authorize({ remoteStatic: pending.remoteStatic, authorization });
    } catch (err) {
      stream.fail('authorization check failed');
      throw new SecureStreamError('unauthorized', 'the harness authorization could not be checked', { cause: err });
    }
    if (!allowed || stream.state === 'closed') {
      stream.fail('harness not authorized');
      throw new SecureStreamError('unauthorized', 'the harness is not authorized for this environment');
    }
    const { message2, transport } = pending.writeMessage2();
    options.link.send(handshakeFrame(options.streamId, message2));
    stream.open(transport);
    return { stream, remoteStatic: pending.remoteStatic, authorization };
  }

  // Internals -----------------------------------------------------------------------------------

  private awaitHandshake(timeoutMs: number, signal?: AbortSignal): Promise<Uint8Array> {
    return new Promise<Uint8Array>((resolve, reject) => {
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.handshakeListener = null;
        this.failHandshake = null;
      };
      const timer = setTimeout(() => {
        cleanup();
        this.fail('handshake timed out');
        reject(new SecureStreamError('timeout', `no handshake answer within ${timeoutMs} ms`));
      }, timeoutMs);
      const onAbort = () => {
        cleanup();
        this.fail('handshake aborted');
        reject(signal?.reason ?? new SecureStreamError('closed', 'handshake aborted'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.failHandshake = (error) => {
        cleanup();
        reject(error);
      };
      this.handshakeListener = (frame) => {
        cleanup();
        resolve((frame as Extract<Frame, { kind: 'handshake' }>).payload);
      };
    });
  }

  private open(transport: Transport): void {
    this.transport = transport;
    this.state = 'open';
  }

  private onFrame(frame: Frame): void {
    if (this.state === 'closed') return;
    switch (frame.kind) {
      case 'ack':
      case 'resume':
      case 'heartbeat':
        return; // accepted and ignored by both endpoints (§3.3)
      case 'reset':
        this.handshakeFailed(
          new SecureStreamError('reset', `the stream was reset (${frame.reason})`, { resetReason: frame.reason }),
        );
        // The link goes too (no Reset back): the executor's stream slot is freed, the harness's socket closed.
        this.finish('the peer reset the stream', true);
        return;
      case 'handshake':
        if (this.state === 'handshaking' && this.handshakeListener) {
          this.handshakeListener(frame);
          return;
        }
        this.fail('unexpected handshake frame');
        return;
      case 'data':
        if (this.state !== 'open' || !this.transport) {
          this.fail('data before the handshake completed');
          return;
        }
        this.onData(frame.seq, frame.payload);
        return;
    }
  }

  private onData(seq: number, ciphertext: Uint8Array): void {
    try {
      // The payload may be a view into the received message (links decode without copying). A record
      // parked out of order is copied, so the window's 1 MiB bound counts all the memory it pins.
      const parked = seq !== this.window.nextSeq;
      for (const record of this.window.push(seq, parked ? copyBytes(ciphertext) : ciphertext)) {
        if (this.transport!.opensAsync) {
          this.openLater(record);
          continue;
        }
        const length = Math.max(0, record.byteLength - TAG_LENGTH_BYTES);
        const room = this.reassembler.bodyRoom(length);
        let messages: Uint8Array[];
        if (room) {
          this.transport!.decryptInto(record, room);
          messages = this.reassembler.commitRoom(length);
        } else if (length >= LENT_MESSAGE_BYTES && this.reassembler.atMessageStart) {
          // A large record at a message start (a forwarded connection's or a file's data: one message a
          // record) opens into a leased buffer, and the message is a view of it: no copy out of `opened`.
          const lease = this.pools.messages.lease(length);
          const whole = this.reassembler.wholeMessage(this.transport!.decryptInto(record, lease.buffer));
          if (whole) {
            this.leased.push(lease);
            messages = [whole];
          } else {
            messages = this.reassembler.push(lease.buffer);
            lease.release(); // push copied out what it keeps
          }
        } else {
          this.opened ??= new Uint8Array(MAX_TRANSPORT_PLAINTEXT);
          messages = this.reassembler.push(this.transport!.decryptInto(record, this.opened.subarray(0, length)));
        }
        if (!this.deliver(messages)) return;
      }
    } catch (err) {
      this.fail(`inbound record rejected: ${(err as Error).message}`);
    }
  }

  /**
   * Hands a record to the provider's asynchronous AEAD (the browser's WebCrypto): records are opened
   * concurrently, each with its nonce taken in arrival order, and their plaintexts are reassembled and
   * delivered strictly in that order by `drainOpening`. A record that fails to open resets the stream.
   */
  private openLater(record: Uint8Array): void {
    const opened = this.transport!.decryptAsync(record);
    opened.catch(() => undefined); // taken in order by drainOpening
    this.opening.push(opened);
    if (!this.draining) void this.drainOpening();
  }

  private async drainOpening(): Promise<void> {
    this.draining = true;
    try {
      while (this.opening.length > 0) {
        const plaintext = await this.opening[0]!;
        this.opening.shift();
        if (this.state !== 'open') return;
        // The plaintext is this stream's own: a record that is one whole message becomes it, no copy.
        const whole = this.reassembler.atMessageStart ? this.reassembler.wholeMessage(plaintext) : null;
        if (!this.deliver(whole ? [whole] : this.reassembler.push(plaintext))) return;
      }
    } catch (err) {
      this.fail(`inbound record rejected: ${(err as Error).message}`);
    } finally {
      this.draining = false;
      if (this.state !== 'open') this.opening = [];
    }
  }

  /** Passes reassembled messages on (or keeps them until `start`); false once the stream has closed. */
  private deliver(messages: Uint8Array[]): boolean {
    for (const message of messages) {
      const bytes = Buffer.from(message.buffer, message.byteOffset, message.byteLength);
      // A message in a leased buffer is the oldest lease's (messages complete in the order they were leased).
      const head = this.leased[0];
      const release =
        head !== undefined && head.buffer.buffer === message.buffer ? this.leased.shift()!.release : undefined;
      if (this.early) this.early.push({ bytes, release });
      else this.handlers?.onMessage(bytes, release);
      if (this.state !== 'open') return false;
    }
    return true;
  }

  /** A pooled buffer for a message being assembled; its release goes with the message (`deliver`). */
  private leaseMessage(size: number): Buffer {
    const lease = this.pools.messages.lease(size);
    this.leased.push(lease);
    return lease.buffer;
  }

  /** Resets the stream with the generic reason (never details) and closes it. */
  private fail(reason: string): void {
    if (this.state === 'closed') return;
    this.link.send(resetFrame(this.streamId, PROTOCOL_ERROR_RESET));
    this.handshakeFailed(new SecureStreamError('protocol', reason));
    this.finish(reason, true);
  }

  /** The handshake cannot complete: the wait for message 2 rejects, or `initiate` finds why once it got it. */
  private handshakeFailed(error: SecureStreamError): void {
    if (this.state !== 'handshaking') return;
    if (this.failHandshake) this.failHandshake(error);
    else this.handshakeEnd ??= error;
  }

  private finish(reason: string, closeLink: boolean): void {
    if (this.state === 'closed') return;
    this.handshakeFailed(new SecureStreamError('closed', reason));
    this.state = 'closed';
    this.closeReason = reason;
    this.transport = null;
    // Frames still in the link's queue and blocks still being written come back to nothing.
    this.leased.length = 0;
    if (this.ownsPools) {
      this.pools.frames.close();
      this.pools.messages.close();
    }
    if (closeLink) this.link.close(reason);
    if (!this.early) this.handlers?.onClose(reason);
  }
}

export interface AcceptedStream {
  stream: SecureStream;
  remoteStatic: NoisePublicKey;
  authorization: string;
}
