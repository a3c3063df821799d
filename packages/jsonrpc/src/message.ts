import { isAscii } from '#platform';
import { attach, hasAttachmentMarker, splitAttachment } from './attachment.js';

/**
 * JSON-RPC messages in the Codex dialect (spec/exec-protocol.md §1.5): the `jsonrpc` member is omitted
 * on output and ignored on input; ids are integers or strings and are echoed unchanged. Classification
 * is "untagged": the first shape that matches wins.
 */
export type RequestId = number | string;

export interface RpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

export type InboundMessage =
  | { kind: 'request'; id: RequestId; method: string; params: unknown }
  | { kind: 'notification'; method: string; params: unknown }
  | { kind: 'response'; id: RequestId; result: unknown }
  | { kind: 'error'; id: RequestId; error: RpcErrorObject }
  | { kind: 'malformed'; reason: string };

/** The id used for errors about a message that could not be read (Codex uses -1). */
export const MALFORMED_MESSAGE_ID = -1;

function isRequestId(value: unknown): value is RequestId {
  return typeof value === 'string' || (typeof value === 'number' && Number.isSafeInteger(value));
}

function isErrorObject(value: unknown): value is RpcErrorObject {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as Record<string, unknown>;
  return Number.isInteger(candidate.code) && typeof candidate.message === 'string';
}

/** Classifies an already-parsed JSON value. */
export function classifyMessage(value: unknown): InboundMessage {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { kind: 'malformed', reason: 'expected a JSON-RPC object' };
  }
  const message = value as Record<string, unknown>;
  // An `id` that is present must be a string or an integer, even on a notification (Codex: parse error).
  if ('id' in message && !isRequestId(message.id)) {
    return { kind: 'malformed', reason: 'data did not match any variant of untagged enum RequestId' };
  }
  const hasId = 'id' in message;
  if (typeof message.method === 'string') {
    const params = message.params ?? null;
    if (hasId) return { kind: 'request', id: message.id as RequestId, method: message.method, params };
    return { kind: 'notification', method: message.method, params };
  }
  if (!hasId) return { kind: 'malformed', reason: 'missing field `method`' };
  if ('result' in message) return { kind: 'response', id: message.id as RequestId, result: message.result };
  if (!('error' in message)) return { kind: 'malformed', reason: 'missing field `error`' };
  if (isErrorObject(message.error)) return { kind: 'error', id: message.id as RequestId, error: message.error };
  return { kind: 'malformed', reason: 'invalid error object: expected `code` and `message`' };
}

/**
 * Parses one transport message (text, UTF-8 bytes, or a message with a binary attachment, which is
 * then on `params` or `result` under `ATTACHMENT`). Never throws. `release` gives back the pooled buffer
 * `data` sits in (TransportHandlers.onMessage): an attachment is a view of it, so the release goes with the
 * attachment (`releaseAttachment`) to its last user; anything else is parsed into copies, so the buffer goes
 * back at once.
 */
export function parseMessage(data: string | Buffer, release?: () => void): InboundMessage {
  if (hasAttachmentMarker(data)) return parseWithAttachment(data as Buffer, release);
  if (!release) return parseText(data);
  const message = parseText(data);
  release();
  return message;
}

function parseText(data: string | Buffer): InboundMessage {
  if (typeof data !== 'string' && data.length >= LARGE_MESSAGE_BYTES) {
    const value = parseLargeMessage(data);
    if (value !== undefined) return classifyMessage(value);
  }
  let value: unknown;
  try {
    value = JSON.parse(typeof data === 'string' ? data : data.toString('utf8'));
  } catch (err) {
    return { kind: 'malformed', reason: (err as Error).message };
  }
  return classifyMessage(value);
}

function parseWithAttachment(data: Buffer, release: (() => void) | undefined): InboundMessage {
  const parts = splitAttachment(data);
  if (typeof parts === 'string') {
    release?.();
    return { kind: 'malformed', reason: parts };
  }
  let message: InboundMessage;
  try {
    message = classifyMessage(JSON.parse(parts.json));
  } catch (err) {
    release?.();
    return { kind: 'malformed', reason: (err as Error).message };
  }
  if (message.kind === 'malformed') {
    release?.();
    return message;
  }
  const holder =
    message.kind === 'request' || message.kind === 'notification'
      ? message.params
      : message.kind === 'response'
        ? message.result
        : undefined;
  if (typeof holder !== 'object' || holder === null || Array.isArray(holder)) {
    release?.();
    return { kind: 'malformed', reason: 'a binary attachment needs an object as params or result' };
  }
  attach(holder, parts.attachment, release);
  return message;
}

/** Messages from this size on try `parseLargeMessage` first. */
const LARGE_MESSAGE_BYTES = 64 * 1024;
/** The shortest string value worth taking out of the JSON text. */
const LARGE_STRING_BYTES = 16 * 1024;
/** Stands in for the large string while the rest of the message is parsed: the JSON escape of U+0001. */
const PLACEHOLDER = '\\u0001';
const PLACEHOLDER_VALUE = '\u0001';
const BACKSLASH = 0x5c;

/**
 * True when every byte of `bytes` is one JSON takes as itself inside a string: ASCII, not a control
 * character, not a backslash. Native scans for the first two (`isAscii`, `indexOf`); control characters
 * four bytes at a time: for bytes below 0x80, `(w - 0x20202020) & ~w & 0x80808080` is non-zero exactly
 * when some byte of `w` is below 0x20 (a borrow can only add a flag above a byte that has one already).
 * A regex over the latin1 text took ≈ 1.2 ms per MiB; this ≈ 0.3.
 *
 * @internal exported for tests
 */
export function isPlainStringText(bytes: Uint8Array): boolean {
  if (!isAscii(bytes) || bytes.indexOf(BACKSLASH) !== -1) return false;
  const n = bytes.length;
  let i = 0;
  // Bytes up to a 4-byte boundary of the underlying memory, then words, then the rest.
  while (i < n && ((bytes.byteOffset + i) & 3) !== 0) if ((bytes[i++] as number) < 0x20) return false;
  const words = (n - i) >>> 2;
  if (words > 0) {
    const view = new Uint32Array(bytes.buffer, bytes.byteOffset + i, words);
    for (let k = 0; k < words; k++) {
      const w = view[k] as number;
      if (((w - 0x20202020) & ~w & 0x80808080) !== 0) return false;
    }
    i += words * 4;
  }
  for (; i < n; i++) if ((bytes[i] as number) < 0x20) return false;
  return true;
}
const MAX_SEARCH_DEPTH = 16;

/**
 * The JSON of a large message is mostly one long string: base64 in `fs/writeBlock`, `fs/readBlock`,
 * `process/read`. Decoding the whole buffer to a string and letting JSON.parse copy the long value again
 * costs V8 two large-object allocations per message (and the collections they bring); at 1 MiB blocks
 * that was 4× the cost of the path below, which takes the long value straight from the bytes as latin1.
 *
 * The longest stretch between two consecutive `"` bytes is the candidate. It is used only if it is plain
 * ASCII without backslashes or control characters (then its bytes are exactly the string's characters),
 * and if the message with the stretch replaced by a placeholder parses to a value holding that
 * placeholder exactly once as a string (then the stretch was a whole string value: the text before it is
 * the same in both). Otherwise returns undefined and the caller parses the message as usual, so results,
 * including the error of a malformed message, never differ from JSON.parse. (Exported for clients that
 * parse JSON themselves, the benchmark's lean one among them.)
 */
export function parseLargeMessage(data: Buffer): unknown {
  let start = -1;
  let end = -1;
  for (let quote = data.indexOf(0x22); quote !== -1; ) {
    const next = data.indexOf(0x22, quote + 1);
    if (next === -1) break;
    if (next - quote > end - start) {
      start = quote;
      end = next;
    }
    quote = next;
  }
  if (end - start - 1 < LARGE_STRING_BYTES) return undefined;
  if (!isPlainStringText(data.subarray(start + 1, end))) return undefined;
  // Plain ASCII: as latin1, every byte is exactly the string's character.
  const text = data.toString('latin1', start + 1, end);
  let value: unknown;
  try {
    value = JSON.parse(`${data.toString('utf8', 0, start + 1)}${PLACEHOLDER}${data.toString('utf8', end)}`);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const found: PlaceholderSearch = { count: 0, holder: null, key: '' };
  findPlaceholder(value, 0, found);
  if (found.count !== 1 || found.holder === null) return undefined;
  // defineProperty: a plain assignment to a key named `__proto__` would not set the own property.
  Object.defineProperty(found.holder, found.key, { value: text, writable: true, enumerable: true, configurable: true });
  return value;
}

interface PlaceholderSearch {
  count: number;
  holder: object | null;
  key: string;
}

function findPlaceholder(value: object, depth: number, found: PlaceholderSearch): void {
  if (depth > MAX_SEARCH_DEPTH || found.count > 1) return;
  for (const key of Object.keys(value)) {
    const child = (value as Record<string, unknown>)[key];
    if (child === PLACEHOLDER_VALUE) {
      found.count++;
      found.holder = value;
      found.key = key;
    } else if (typeof child === 'object' && child !== null) {
      findPlaceholder(child, depth + 1, found);
    }
  }
}

export function serializeRequest(id: RequestId, method: string, params: unknown): string {
  return params === undefined ? JSON.stringify({ id, method }) : JSON.stringify({ id, method, params });
}

export function serializeNotification(method: string, params: unknown): string {
  return params === undefined ? JSON.stringify({ method }) : JSON.stringify({ method, params });
}

export function serializeResponse(id: RequestId, result: unknown): string {
  return JSON.stringify({ id, result: result ?? null });
}

export function serializeError(id: RequestId, error: RpcErrorObject): string {
  const body: RpcErrorObject = { code: error.code, message: error.message };
  if (error.data !== undefined) body.data = error.data;
  return JSON.stringify({ id, error: body });
}
