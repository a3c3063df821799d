/**
 * Binary attachments: one JSON-RPC message plus raw bytes, for bulk data that base64 inside JSON would
 * inflate by a third and make every side copy, scan and decode (Tether's `binaryBlocks` extension).
 *
 * On the wire an attachment message is
 *
 *     0x01 | u32 big-endian length H | H bytes of JSON (one JSON-RPC message) | the attachment
 *
 * JSON text never starts with byte 0x01, so a receiver tells the two kinds apart by the first byte. Over
 * WebSocket such a message travels as a binary frame (JSON stays in text frames); over the relay's secure
 * stream it is one message like any other. It can never be sent over stdio (lines of text), and a peer
 * uses it only after the other side advertised it.
 *
 * After parsing, the attachment sits on the message's `params` (request, notification) or `result`
 * (response) object under the `ATTACHMENT` symbol: handlers and callers that know the extension read it
 * with `attachmentOf`, and JSON serialization never sees it.
 */

/** First byte of a message with an attachment. */
export const ATTACHMENT_MARKER = 0x01;
/** Marker byte and header length. */
export const ATTACHMENT_PREFIX_BYTES = 5;
/** Where a parsed message keeps its attachment (on `params` or `result`). */
export const ATTACHMENT: unique symbol = Symbol('tether.attachment');
/** Where it keeps the release of the pooled buffer the attachment sits in, when it does. */
const RELEASE: unique symbol = Symbol('tether.release');

/** True when `data` is an attachment message (not JSON text). */
export function hasAttachmentMarker(data: string | Buffer): boolean {
  return typeof data !== 'string' && data.length > 0 && data[0] === ATTACHMENT_MARKER;
}

/** The attachment parsed with `value` (a request's params or a response's result), if any. */
export function attachmentOf(value: unknown): Buffer | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  return (value as { [ATTACHMENT]?: Buffer })[ATTACHMENT];
}

/**
 * Gives back the pooled buffer the attachment of `value` (params or result) sits in, if it does; nothing
 * otherwise, and nothing on a second call. The caller must be the bytes' last user: the memory serves
 * another message next.
 */
export function releaseAttachment(value: unknown): void {
  takeAttachmentRelease(value)?.();
}

/**
 * Takes the release of the attachment of `value` over (later calls find none): for a holder that hands the
 * attachment on to a consumer of its own, with its release (the SDK's read streams and forwarded sockets).
 */
export function takeAttachmentRelease(value: unknown): (() => void) | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const holder = value as { [RELEASE]?: (() => void) | undefined };
  const release = holder[RELEASE];
  if (release) holder[RELEASE] = undefined;
  return release;
}

/** Puts `attachment` on `holder` (non-enumerable: JSON never sees it), with the release of its buffer. */
export function attach(holder: object, attachment: Buffer, release: (() => void) | undefined): void {
  Object.defineProperty(holder, ATTACHMENT, { value: attachment, enumerable: false });
  if (release) Object.defineProperty(holder, RELEASE, { value: release, enumerable: false, writable: true });
}

/**
 * Encodes `json` (one serialized JSON-RPC message) with `attachment` after it, into a buffer from
 * `allocate` (default: a fresh one) of exactly the message's size.
 */
export function encodeWithAttachment(
  json: string,
  attachment: Buffer,
  allocate: (size: number) => Buffer = Buffer.allocUnsafe,
): Buffer {
  const headerBytes = Buffer.byteLength(json);
  const out = allocate(ATTACHMENT_PREFIX_BYTES + headerBytes + attachment.byteLength);
  out[0] = ATTACHMENT_MARKER;
  out.writeUInt32BE(headerBytes, 1);
  out.write(json, ATTACHMENT_PREFIX_BYTES, 'utf8');
  attachment.copy(out, ATTACHMENT_PREFIX_BYTES + headerBytes);
  return out;
}

/**
 * Splits an attachment message into its JSON text and its attachment (a view of `data`, not a copy);
 * a string with the reason when the framing is wrong.
 */
export function splitAttachment(data: Buffer): { json: string; attachment: Buffer } | string {
  if (data.length < ATTACHMENT_PREFIX_BYTES) return 'attachment message shorter than its prefix';
  const headerBytes = data.readUInt32BE(1);
  if (headerBytes > data.length - ATTACHMENT_PREFIX_BYTES) {
    return `attachment header of ${headerBytes} bytes overruns a message of ${data.length}`;
  }
  const end = ATTACHMENT_PREFIX_BYTES + headerBytes;
  return { json: data.toString('utf8', ATTACHMENT_PREFIX_BYTES, end), attachment: data.subarray(end) };
}
