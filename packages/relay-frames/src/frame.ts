import { FrameError } from './errors.js';
import { MAX_RESET_REASON_BYTES, MAX_SEQ, MAX_STREAM_ID_BYTES } from './limits.js';

/**
 * Fields every relay frame carries besides its body. `ack`/`ackBits` are always 0 in shipped codex
 * (the ack layer of PR #31457 is not merged): constructors set 0 and receivers ignore them.
 * `traceparent`/`tracestate` are cleartext W3C trace context; `undefined` means absent on the wire.
 */
export interface FrameHeader {
  readonly streamId: string;
  readonly ack: number;
  readonly ackBits: number;
  readonly traceparent?: string | undefined;
  readonly tracestate?: string | undefined;
}

/** One Noise transport record; `seq` orders it (segment_index 0 / segment_count 1 are implied). */
export interface DataFrame extends FrameHeader {
  readonly kind: 'data';
  readonly seq: number;
  readonly payload: Uint8Array;
}
export interface AckFrame extends FrameHeader {
  readonly kind: 'ack';
}
/** Claims the stream at the relay (harness's first frame); `nextSeq` is 0 in shipped codex. */
export interface ResumeFrame extends FrameHeader {
  readonly kind: 'resume';
  readonly nextSeq: number;
}
/** Ends the stream; the reason is opaque, never trusted or displayed. */
export interface ResetFrame extends FrameHeader {
  readonly kind: 'reset';
  readonly reason: string;
}
export interface HeartbeatFrame extends FrameHeader {
  readonly kind: 'heartbeat';
}
/** One Noise handshake message. */
export interface HandshakeFrame extends FrameHeader {
  readonly kind: 'handshake';
  readonly payload: Uint8Array;
}

/** A relay frame, discriminated by the kind of its `body` oneof. */
export type Frame = DataFrame | AckFrame | ResumeFrame | ResetFrame | HeartbeatFrame | HandshakeFrame;
export type FrameKind = Frame['kind'];

export const FRAME_KINDS: readonly FrameKind[] = Object.freeze([
  'data',
  'ack',
  'resume',
  'reset',
  'heartbeat',
  'handshake',
]);

/** Optional header fields accepted by every constructor. */
export interface FrameOptions {
  readonly traceparent?: string | undefined;
  readonly tracestate?: string | undefined;
}

const utf8 = new TextEncoder();

function header(streamId: string, options: FrameOptions | undefined): FrameHeader {
  return {
    streamId,
    ack: 0,
    ackBits: 0,
    ...(options?.traceparent !== undefined && { traceparent: options.traceparent }),
    ...(options?.tracestate !== undefined && { tracestate: options.tracestate }),
  };
}

export function dataFrame(streamId: string, seq: number, payload: Uint8Array, options?: FrameOptions): DataFrame {
  return validateFrame({ kind: 'data', ...header(streamId, options), seq, payload });
}

export function ackFrame(streamId: string, options?: FrameOptions): AckFrame {
  return validateFrame({ kind: 'ack', ...header(streamId, options) });
}

export function resumeFrame(streamId: string, nextSeq = 0, options?: FrameOptions): ResumeFrame {
  return validateFrame({ kind: 'resume', ...header(streamId, options), nextSeq });
}

export function resetFrame(streamId: string, reason: string, options?: FrameOptions): ResetFrame {
  return validateFrame({ kind: 'reset', ...header(streamId, options), reason });
}

export function heartbeatFrame(streamId: string, options?: FrameOptions): HeartbeatFrame {
  return validateFrame({ kind: 'heartbeat', ...header(streamId, options) });
}

export function handshakeFrame(streamId: string, payload: Uint8Array, options?: FrameOptions): HandshakeFrame {
  return validateFrame({ kind: 'handshake', ...header(streamId, options), payload });
}

// A JS string that is not valid Unicode (a lone surrogate) cannot be encoded as a protobuf string.
const LONE_SURROGATE = /\p{Surrogate}/u;

function isWellFormed(s: string): boolean {
  return !LONE_SURROGATE.test(s);
}

function isU32(n: number): boolean {
  return Number.isInteger(n) && n >= 0 && n <= MAX_SEQ;
}

/**
 * The stream id rule of spec §3.3, strictest of the codex versions: non-blank, no surrounding
 * whitespace, at most 128 UTF-8 bytes.
 */
export function isValidStreamId(streamId: string): boolean {
  // No memo of the last id: every call is checked, so that the codec holds no state between frames (a
  // process decodes many streams' frames interleaved). A well-formed string takes at most 3 UTF-8 bytes
  // per UTF-16 unit, so the usual short id (a UUID) is within the limit without being encoded.
  const length = streamId.length;
  return (
    length > 0 &&
    length <= MAX_STREAM_ID_BYTES &&
    streamId.trim() === streamId &&
    isWellFormed(streamId) &&
    (length * 3 <= MAX_STREAM_ID_BYTES || utf8.encode(streamId).byteLength <= MAX_STREAM_ID_BYTES)
  );
}

/**
 * Checks a frame against codex's `validate()` (spec §3.3) plus the u32 ranges its fields must fit,
 * and returns it unchanged; throws a `FrameError` naming the first rule broken. The version and
 * segment fields are checked by the decoder, since a `Frame` cannot express other values.
 */
export function validateFrame<F extends Frame>(frame: F): F {
  if (!isValidStreamId(frame.streamId)) {
    throw new FrameError('invalid_stream_id', 'stream_id must be non-blank, unpadded and at most 128 bytes');
  }
  if (!isU32(frame.ack) || !isU32(frame.ackBits)) {
    throw new FrameError('invalid_header', 'ack and ack_bits must be u32');
  }
  if (
    (frame.traceparent !== undefined && !isWellFormed(frame.traceparent)) ||
    (frame.tracestate !== undefined && !isWellFormed(frame.tracestate))
  ) {
    throw new FrameError('invalid_header', 'trace context must be well-formed Unicode');
  }
  switch (frame.kind) {
    case 'data':
      if (!isU32(frame.seq)) throw new FrameError('invalid_data', 'data seq must be a u32');
      if (frame.payload.byteLength === 0) throw new FrameError('invalid_data', 'data payload must be non-empty');
      break;
    case 'handshake':
      if (frame.payload.byteLength === 0) {
        throw new FrameError('invalid_handshake', 'handshake payload must be non-empty');
      }
      break;
    case 'reset':
      if (frame.reason.length === 0) throw new FrameError('invalid_reset', 'reset reason must be non-empty');
      if (!isWellFormed(frame.reason)) throw new FrameError('invalid_reset', 'reset reason must be well-formed');
      if (utf8.encode(frame.reason).byteLength > MAX_RESET_REASON_BYTES) {
        throw new FrameError('invalid_reset', 'reset reason must be at most 256 bytes');
      }
      break;
    case 'resume':
      if (!isU32(frame.nextSeq)) throw new FrameError('invalid_resume', 'resume next_seq must be a u32');
      break;
    case 'ack':
    case 'heartbeat':
      break;
    default: {
      const unknown: never = frame;
      throw new FrameError('missing_body', `unknown frame kind ${String((unknown as { kind: unknown }).kind)}`);
    }
  }
  return frame;
}
