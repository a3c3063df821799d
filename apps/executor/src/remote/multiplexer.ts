import { createHash } from 'node:crypto';
import { DEFAULT_HIGH_WATER_MARK, DEFAULT_LOW_WATER_MARK, releasingCallback } from '@tether/bytes';
import { DEFAULT_MAX_MESSAGE_BYTES, type MessageTransport } from '@tether/jsonrpc';
import type { NoiseIdentity, NoisePublicKey } from '@tether/noise';
import {
  copyBytes,
  encodeFrame,
  type Frame,
  type HandshakeFrame,
  MAX_FRAME_BYTES,
  resetFrame,
} from '@tether/relay-frames';
import {
  type FrameLink,
  type FrameLinkHandlers,
  receiveRelayFrames,
  SecureStream,
  SecureStreamError,
} from '@tether/secure-stream';
import { burstWrites } from '@tether/user-read/websocket';
import type { WebSocket } from 'ws';
import type { Logger } from '../logger.js';
import type { ExecutorMetrics, RelayFrameDropReason } from '../metrics.js';
import { type Principal, UNATTRIBUTED_PRINCIPAL } from '../principal.js';
import { BoundedTransport, type InboundMeter, inboundBytesBound } from './bounded-transport.js';
import type { HarnessValidation } from './registry-client.js';
import { type Clock, KeyedTokenBuckets, monotonicClock, TokenBucket } from './token-bucket.js';

/** Executor limits per physical relay socket (rendezvous.md §3.7). */
export interface MultiplexerLimits {
  /** Streams open or handshaking at once; more are reset. */
  maxStreams: number;
  /**
   * Calls to the registry's `/validate` in flight at once; further handshakes wait their turn (a burst of
   * harnesses is queued, not refused; `maxStreams` bounds the queue).
   */
  maxPendingValidations: number;
  /**
   * Failed handshakes (message 1 that does not decrypt or parse) allowed at once; the budget comes back at
   * one per `failedHandshakeRefillMs`. While it is spent, new handshakes are reset before any crypto work
   * is done; the socket and every open stream are left alone.
   */
  failedHandshakeBurst: number;
  failedHandshakeRefillMs: number;
  /**
   * `/validate` calls per harness key at once, coming back at one per `validationRefillMs`. A key over
   * its budget is refused without asking the registry (a well-formed message 1 costs a registry call).
   */
  validationBurstPerKey: number;
  validationRefillMs: number;
  /** Harness keys whose `/validate` budget is remembered (the least recently seen are forgotten first). */
  maxRateLimitedKeys: number;
  /** Inbound bytes queued for one paused stream before that stream is reset. */
  maxQueuedBytesPerStream: number;
  /** Largest JSON-RPC message a stream may carry (`max_message_bytes`). */
  maxMessageBytes: number;
}

export const DEFAULT_MULTIPLEXER_LIMITS: MultiplexerLimits = {
  maxStreams: 128,
  maxPendingValidations: 32,
  failedHandshakeBurst: 8,
  failedHandshakeRefillMs: 2_000,
  validationBurstPerKey: 16,
  validationRefillMs: 1_000,
  maxRateLimitedKeys: 4096,
  maxQueuedBytesPerStream: 8 * 1024 * 1024,
  maxMessageBytes: DEFAULT_MAX_MESSAGE_BYTES,
};

const BINARY = { binary: true } as const;
export const LIMIT_RESET = 'executor_stream_limit';
export const BACKPRESSURE_RESET = 'executor_backpressure';
export const UNKNOWN_STREAM_RESET = 'unknown_stream';
/** A new stream refused because too many handshakes failed lately on this socket. */
export const HANDSHAKE_BUDGET_RESET = 'executor_handshake_budget';
/** A stream whose message in progress passed `max_message_bytes` before its handler was attached. */
export const MESSAGE_TOO_LARGE_RESET = 'executor_message_too_large';

export interface MultiplexerOptions {
  environmentId: string;
  registrationId: string;
  identity: NoiseIdentity;
  /** The registry's `/validate`: no (false), or yes (true, or what the registry told about the harness). */
  authorize(request: { remoteStatic: NoisePublicKey; authorization: string }): Promise<boolean | HarnessValidation>;
  /**
   * A stream whose handshake completed: serve JSON-RPC on it, for `principal` (who the registry said the harness
   * acts for; unattributed when it said nothing). Its messages are already held to `maxMessageBytes`
   * (BoundedTransport).
   */
  onStream(stream: MessageTransport, principal: Principal): void;
  logger: Logger;
  /** Where dropped frames are counted (`exec_server_remote_relay_frames_dropped_total`); default nowhere. */
  metrics?: ExecutorMetrics;
  limits?: Partial<MultiplexerLimits>;
  /** Time for the handshake and `/validate` budgets (tests drive it). */
  clock?: Clock;
}

export interface MultiplexerStats {
  streams: number;
  pendingValidations: number;
  queuedValidations: number;
  failedHandshakes: number;
  /** Handshakes reset unread because the failed-handshake budget was spent. */
  refusedHandshakes: number;
  /** Handshakes refused without a `/validate` because their harness key was over its budget. */
  rateLimitedValidations: number;
  droppedFrames: number;
}

/**
 * One physical relay socket carrying many virtual streams (rendezvous.md §3.2, §5 step 5). Frames are
 * routed by `stream_id`; a `Handshake` for an unknown stream opens one (responder side of the Noise IK
 * handshake, gated by the registry); a `Reset` ends one; anything else for an unknown stream is dropped.
 * A stream that cannot keep up is reset alone: the socket keeps serving every other stream.
 */
export class RelayMultiplexer {
  private readonly links = new Map<string, VirtualLink>();
  private readonly limits: MultiplexerLimits;
  private pendingValidations = 0;
  /** Handshakes waiting for a `/validate` slot, first come first served. */
  private readonly validationQueue: Array<() => void> = [];
  private failedHandshakes = 0;
  private refusedHandshakes = 0;
  private rateLimitedValidations = 0;
  private readonly handshakeBudget: TokenBucket;
  /** Whether the last handshake was refused for the budget (so the refusal is logged once per spell). */
  private handshakeBudgetSpent = false;
  private readonly validationBudgets: KeyedTokenBuckets;
  private droppedFrames = 0;
  private needsDrain = false;
  private closed = false;
  /** Frames sent in one burst (a large message's records, answers to a burst of requests) leave in one write. */
  private readonly burst: () => void;
  /** Unknown stream ids already answered with a Reset (bounded). */
  private readonly resetUnknown = new Set<string>();

  private readonly environmentId: string;
  private readonly registrationId: string;
  private readonly identity: NoiseIdentity;
  /** The registry's `/validate` (MultiplexerOptions.authorize). */
  private readonly validate: MultiplexerOptions['authorize'];
  private readonly serveStream: MultiplexerOptions['onStream'];
  private readonly logger: Logger;
  private readonly metrics: ExecutorMetrics | undefined;

  constructor(
    private readonly ws: WebSocket,
    options: MultiplexerOptions,
  ) {
    this.environmentId = options.environmentId;
    this.registrationId = options.registrationId;
    this.identity = options.identity;
    this.validate = options.authorize;
    this.serveStream = options.onStream;
    this.logger = options.logger;
    this.metrics = options.metrics;
    this.limits = { ...DEFAULT_MULTIPLEXER_LIMITS, ...options.limits };
    this.burst = burstWrites(ws);
    const clock = options.clock ?? monotonicClock;
    this.handshakeBudget = new TokenBucket(
      { burst: this.limits.failedHandshakeBurst, refillMs: this.limits.failedHandshakeRefillMs },
      clock,
    );
    this.validationBudgets = new KeyedTokenBuckets(
      {
        burst: this.limits.validationBurstPerKey,
        refillMs: this.limits.validationRefillMs,
        maxKeys: this.limits.maxRateLimitedKeys,
      },
      clock,
    );
    receiveRelayFrames(ws, MAX_FRAME_BYTES, {
      onFrame: (frame) => this.onFrame(frame),
      onInvalid: (err) => {
        this.dropped('invalid');
        this.logger.debug({ err: err.message }, 'dropped an invalid relay frame');
      },
      onText: () => {
        this.dropped('text'); // text messages are dropped by the executor (§3.1)
      },
    });
  }

  private dropped(reason: RelayFrameDropReason): void {
    this.droppedFrames++;
    this.metrics?.relayFrameDropped(reason);
  }

  get stats(): MultiplexerStats {
    return {
      streams: this.links.size,
      pendingValidations: this.pendingValidations,
      queuedValidations: this.validationQueue.length,
      failedHandshakes: this.failedHandshakes,
      refusedHandshakes: this.refusedHandshakes,
      rateLimitedValidations: this.rateLimitedValidations,
      droppedFrames: this.droppedFrames,
    };
  }

  /** Ends every stream (their sessions detach and stay resumable); the socket is the caller's. */
  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    for (const link of [...this.links.values()]) link.terminate(reason);
    this.links.clear();
    // Queued handshakes go ahead and find the socket closed.
    for (const wake of this.validationQueue.splice(0)) wake();
  }

  /**
   * The registry's `/validate` for one handshake, within the harness key's budget: a key over it is
   * refused here, without a registry call (a harness opening streams in a loop costs us, not the registry).
   */
  private async authorize(
    request: { remoteStatic: NoisePublicKey; authorization: string },
    streamId: string,
    granted: (principal: Principal) => void,
  ): Promise<boolean> {
    if (!this.validationBudgets.take(harnessKeyId(request.remoteStatic))) {
      this.rateLimitedValidations++;
      this.logger.debug(
        { rateLimitedValidations: this.rateLimitedValidations },
        'refusing a handshake: its harness key is over its /validate budget',
      );
      return false;
    }
    const answer = await this.validateInTurn(() => this.validate(request));
    if (answer === false) return false;
    // The harness's /connect request id, as the registry logged it with the connect and this validation.
    const connectRequestId = answer === true ? null : answer.connectRequestId;
    const principal = answer === true ? UNATTRIBUTED_PRINCIPAL : answer.principal;
    granted(principal);
    this.logger.info(
      { streamId, connectRequestId, harnessKeyId: principal.kind === 'key' ? principal.keyId : null },
      'harness validated',
    );
    return true;
  }

  /** Runs `validate` once fewer than `maxPendingValidations` calls are in flight. */
  private async validateInTurn<T>(validate: () => Promise<T>): Promise<T | false> {
    if (this.pendingValidations >= this.limits.maxPendingValidations) {
      await new Promise<void>((resolve) => this.validationQueue.push(resolve));
      if (this.closed) return false;
    } else {
      this.pendingValidations++;
    }
    try {
      return await validate();
    } finally {
      // The slot passes to the next in line, or is freed.
      const next = this.validationQueue.shift();
      if (next) next();
      else this.pendingValidations--;
    }
  }

  /** @internal */
  sendFrame(frame: Frame, release?: () => void): boolean {
    if (this.closed || this.ws.readyState !== this.ws.OPEN) {
      release?.();
      return false;
    }
    this.burst();
    this.ws.send(encodeFrame(frame), BINARY, releasingCallback(release, this.afterWrite));
    if (this.ws.bufferedAmount > DEFAULT_HIGH_WATER_MARK) this.needsDrain = true;
    return !this.needsDrain;
  }

  /** @internal */
  get bufferedAmount(): number {
    return this.ws.bufferedAmount;
  }

  /** @internal */
  forget(link: VirtualLink): void {
    if (this.links.get(link.streamId) === link) this.links.delete(link.streamId);
  }

  private readonly afterWrite = (err?: Error): void => {
    if (err || !this.needsDrain || this.ws.bufferedAmount > DEFAULT_LOW_WATER_MARK) return;
    this.needsDrain = false;
    for (const link of this.links.values()) link.drained();
  };

  /** A frame off the socket; a Data payload is valid only during the call (`receiveRelayFrames`). */
  private onFrame(frame: Frame): void {
    if (this.closed) return;
    const link = this.links.get(frame.streamId);
    if (link) {
      link.deliver(frame);
      return;
    }
    if (frame.kind === 'handshake') {
      this.open(frame);
      return;
    }
    // Resume/Ack/Heartbeat precede or accompany a stream and are ignored (§3.3); a Reset for a stream this
    // side does not know is stale. Data for one is answered with a Reset (§4.9), once per stream id.
    if (frame.kind === 'data') {
      this.dropped('unknown_stream');
      if (!this.resetUnknown.has(frame.streamId)) {
        if (this.resetUnknown.size >= 1024) this.resetUnknown.clear();
        this.resetUnknown.add(frame.streamId);
        // Once per stream id, as the Reset: a stream this socket never had (or a frame read as the wrong
        // stream's) stalls its sender, which must show; a stream that just ended may also get here.
        this.logger.warn(
          { streamId: frame.streamId, streams: this.links.size, droppedFrames: this.droppedFrames },
          'dropped relay data for a stream this socket does not know; resetting it',
        );
        this.sendFrame(resetFrame(frame.streamId, UNKNOWN_STREAM_RESET));
      }
    }
  }

  private open(frame: HandshakeFrame): void {
    const { streamId } = frame;
    if (this.links.size >= this.limits.maxStreams) {
      this.logger.warn(
        { streams: this.links.size, pendingValidations: this.pendingValidations },
        'refusing a stream: relay socket at its stream limit',
      );
      this.sendFrame(resetFrame(streamId, LIMIT_RESET));
      return;
    }
    if (this.handshakeBudget.available < 1) {
      this.refuseForBudget(streamId);
      return;
    }
    this.handshakeBudgetSpent = false;
    const link = new VirtualLink(
      this,
      streamId,
      this.limits.maxQueuedBytesPerStream,
      inboundBytesBound(this.limits.maxMessageBytes),
    );
    this.links.set(streamId, link);
    // Who the registry said this harness acts for; set by the /validate yes, before the handshake completes.
    let principal: Principal = UNATTRIBUTED_PRINCIPAL;
    SecureStream.accept({
      link,
      streamId,
      environmentId: this.environmentId,
      registrationId: this.registrationId,
      staticKeys: this.identity,
      message1: frame.payload,
      authorize: (request) =>
        this.authorize(request, streamId, (granted) => {
          principal = granted;
        }),
    }).then(
      ({ stream }) => {
        if (this.closed) return stream.close();
        this.logger.info({ streamId }, 'harness stream opened');
        this.serveStream(new BoundedTransport(stream, this.limits.maxMessageBytes, link.meter), principal);
      },
      (err: Error) => {
        this.forget(link);
        if (this.closed) return;
        // Only a message 1 that does not decrypt or parse spends the failed-handshake budget; a harness that
        // gave up, a refusal or an unreachable registry is not garbage on the socket.
        if (!(err instanceof SecureStreamError) || err.code !== 'handshake_failed') {
          this.logger.info({ streamId, reason: err.message }, 'harness handshake ended');
          return;
        }
        this.failedHandshakes++;
        this.handshakeBudget.take();
        this.logger.warn({ streamId, reason: err.message }, 'harness handshake failed');
      },
    );
  }

  /**
   * A handshake while the failed-handshake budget is spent: reset unread. Not the socket: the relay
   * multiplexes every harness onto it, so closing it would drop every healthy stream for one peer's garbage,
   * and the relay would pair that peer with the redialled socket anyway. Which harness sent the garbage
   * only the relay knows; here the cost is capped instead (no decryption while the budget is spent).
   */
  private refuseForBudget(streamId: string): void {
    this.refusedHandshakes++;
    if (!this.handshakeBudgetSpent) {
      this.handshakeBudgetSpent = true;
      this.logger.warn(
        { failedHandshakes: this.failedHandshakes, refillMs: this.limits.failedHandshakeRefillMs },
        'too many failed handshakes on this relay socket: refusing new streams until the budget refills',
      );
    }
    this.sendFrame(resetFrame(streamId, HANDSHAKE_BUDGET_RESET));
  }
}

/** A short, fixed-size name for a harness key (both halves of the hybrid key: either could be varied). */
function harnessKeyId(key: NoisePublicKey): string {
  return createHash('sha256').update(key.x25519).update(key.mlkem768).digest('base64');
}

/**
 * One stream of the multiplexed socket, as the FrameLink a SecureStream runs on. Pausing it queues its
 * inbound frames (bounded) instead of pausing the shared socket.
 */
class VirtualLink implements FrameLink {
  private handlers: FrameLinkHandlers | null = null;
  private paused = false;
  private queue: Frame[] = [];
  private queuedBytes = 0;
  private waitingForDrain = false;
  private closed = false;
  /** Data bytes handed to the stream since its last whole message. */
  private inboundSinceMessage = 0;
  private overflowed = false;
  /** Lets the stream's BoundedTransport restart the count and hear of an oversized message. */
  readonly meter: InboundMeter = {
    messageDelivered: () => {
      this.inboundSinceMessage = 0;
    },
    onOverflow: null,
  };

  constructor(
    private readonly mux: RelayMultiplexer,
    readonly streamId: string,
    private readonly maxQueuedBytes: number,
    /** `inboundBytesBound(max_message_bytes)`: more since the last message means one too large. */
    private readonly maxInboundSinceMessage: number,
  ) {}

  get bufferedAmount(): number {
    return this.mux.bufferedAmount;
  }

  start(handlers: FrameLinkHandlers): void {
    this.handlers = handlers;
  }

  deliver(frame: Frame): void {
    if (this.closed) return;
    if (!this.paused) {
      this.hand(frame);
      return;
    }
    // Queued past this call: a Data payload may be a view of a buffer about to be reused.
    this.queue.push(frame.kind === 'data' ? { ...frame, payload: copyBytes(frame.payload) } : frame);
    this.queuedBytes += frame.kind === 'data' ? frame.payload.byteLength : 64;
    if (this.queuedBytes > this.maxQueuedBytes) {
      this.mux.sendFrame(resetFrame(this.streamId, BACKPRESSURE_RESET));
      this.terminate('the stream fell too far behind its inbound frames');
    }
  }

  send(frame: Frame, release?: () => void): boolean {
    if (this.closed) {
      release?.();
      return false;
    }
    const ok = this.mux.sendFrame(frame, release);
    if (!ok) this.waitingForDrain = true;
    return ok;
  }

  drained(): void {
    if (!this.waitingForDrain || this.closed) return;
    this.waitingForDrain = false;
    this.handlers?.onDrain();
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    if (!this.paused || this.closed) return;
    this.paused = false;
    while (!this.paused && !this.closed && this.queue.length > 0) {
      const frame = this.queue.shift()!;
      this.queuedBytes -= frame.kind === 'data' ? frame.payload.byteLength : 64;
      this.hand(frame);
    }
  }

  /**
   * Gives a frame to the stream, metering Data: a message that is certainly over `max_message_bytes`
   * is stopped here, before the stream buffers the rest of it (its records declare up to 64 MiB).
   */
  private hand(frame: Frame): void {
    if (frame.kind === 'data' && !this.overflowed) {
      this.inboundSinceMessage += frame.payload.byteLength;
      if (this.inboundSinceMessage > this.maxInboundSinceMessage) {
        this.overflowed = true;
        if (this.meter.onOverflow) {
          this.meter.onOverflow();
        } else {
          this.mux.sendFrame(resetFrame(this.streamId, MESSAGE_TOO_LARGE_RESET));
          this.terminate('a message exceeds max_message_bytes');
        }
        return;
      }
    }
    if (this.overflowed) return;
    this.handlers?.onFrame(frame);
  }

  /** The SecureStream is done with the link (it already sent its Reset when one was due). */
  close(_reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.queue = [];
    this.mux.forget(this);
  }

  /** The socket is gone or the stream overflowed: tell the SecureStream. */
  terminate(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.queue = [];
    this.mux.forget(this);
    this.handlers?.onClose(reason);
  }
}
