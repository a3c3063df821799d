import type { FrameKind } from './frame.js';
import { MAX_STREAM_ID_BYTES } from './limits.js';

/** `RelayMessageFrame` body fields 5…10, in field order (rendezvous.md §3.3). */
const BODY_KINDS: readonly FrameKind[] = ['data', 'ack', 'resume', 'reset', 'heartbeat', 'handshake'];
const STREAM_ID_FIELD = 2;

export interface FrameHeaderPeek {
  /**
   * The `stream_id` bytes as a latin1 string (one char per byte): routing compares exact bytes and never
   * decodes UTF-8 on the hot path. Use `streamKey()` to get the same key from a decoded id.
   */
  streamKey: string;
  /** The body kind, or null when the frame has none (the endpoint will refuse it). */
  kind: FrameKind | null;
}

/** The routing key of a decoded stream id (see `FrameHeaderPeek.streamKey`). */
export function streamKey(streamId: string): string {
  return Buffer.from(streamId, 'utf8').toString('latin1');
}

/** The stream id a routing key was read from, as text (invalid UTF-8 becomes U+FFFD: the endpoint refuses it). */
export function streamIdOfKey(key: string): string {
  return Buffer.from(key, 'latin1').toString('utf8');
}

/**
 * The one look inside a frame short of decoding it, the relay's (and test-kit's rendezvous double's): walks the top-level protobuf fields of one `RelayMessageFrame`
 * for `stream_id` (last occurrence wins, as in a full decode) and the body kind, skipping every value
 * without copying it. Returns null for bytes that are not a well-formed message or carry no stream id;
 * never throws. Bodies are not validated: the endpoints do that, and the relay forwards verbatim.
 */
export function peekHeader(bytes: Buffer): FrameHeaderPeek | null {
  return peek(
    (i) => bytes[i],
    bytes.length,
    (s, e) => bytes.toString('latin1', s, e),
  );
}

/** `peekHeader` of a message held as consecutive views (`length` bytes in all), without joining them. */
export function peekHeaderParts(parts: readonly Buffer[], length: number): FrameHeaderPeek | null {
  if (parts.length === 1) return peekHeader(parts[0] as Buffer);
  const at = (index: number): number | undefined => {
    let base = 0;
    for (const part of parts) {
      if (index < base + part.length) return part[index - base];
      base += part.length;
    }
    return undefined;
  };
  const latin1 = (start: number, end: number): string => {
    const out: Buffer[] = [];
    let base = 0;
    for (const part of parts) {
      const s = Math.max(start - base, 0);
      const e = Math.min(end - base, part.length);
      if (s < e) out.push(part.subarray(s, e));
      base += part.length;
    }
    return Buffer.concat(out).toString('latin1');
  };
  return peek(at, length, latin1);
}

function peek(
  at: (index: number) => number | undefined,
  end: number,
  slice: (start: number, end: number) => string,
): FrameHeaderPeek | null {
  let pos = 0;
  let idStart = -1;
  let idEnd = -1;
  let kind: FrameKind | null = null;
  while (pos < end) {
    // Tag (field numbers here are small, but accept any varint up to 5 bytes).
    let tag = 0;
    let shift = 0;
    for (;;) {
      if (pos >= end || shift > 28) return null;
      const byte = at(pos++) as number;
      tag |= (byte & 0x7f) << shift;
      if (byte < 0x80) break;
      shift += 7;
    }
    tag >>>= 0;
    const field = tag >>> 3;
    const wireType = tag & 7;
    if (field === 0) return null;
    switch (wireType) {
      case 0: {
        // varint: at most 10 bytes
        let n = 0;
        while (pos < end && (at(pos) as number) >= 0x80) {
          pos++;
          if (++n >= 10) return null;
        }
        if (pos >= end) return null;
        pos++;
        break;
      }
      case 1:
        pos += 8;
        if (pos > end) return null;
        break;
      case 5:
        pos += 4;
        if (pos > end) return null;
        break;
      case 2: {
        let length = 0;
        let lshift = 0;
        for (;;) {
          if (pos >= end || lshift > 28) return null;
          const byte = at(pos++) as number;
          length += (byte & 0x7f) * 2 ** lshift;
          if (byte < 0x80) break;
          lshift += 7;
        }
        if (pos + length > end) return null;
        if (field === STREAM_ID_FIELD) {
          idStart = pos;
          idEnd = pos + length;
        } else if (field >= 5 && field <= 10) {
          kind = BODY_KINDS[field - 5] as FrameKind;
        }
        pos += length;
        break;
      }
      default:
        return null; // groups (3/4) and reserved wire types: not something codex or we send
    }
  }
  if (idStart < 0 || idEnd === idStart || idEnd - idStart > MAX_STREAM_ID_BYTES) return null;
  return { streamKey: slice(idStart, idEnd), kind };
}
