import type { IncomingMessage } from 'node:http';
import { REVOCATIONS_PATH } from '@tether/relay-auth';

/** One executor registration the registry revoked (its key was revoked): the relay ends and refuses its sockets. */
export interface Revocation {
  environmentId: string;
  registrationId: string;
}

/**
 * Largest revocation list the relay reads, pushed or in a heartbeat answer: about 15 000 entries, far more than
 * a registry revokes within one URL lifetime; anything longer is refused (push) or ignored (heartbeat) unread.
 */
export const MAX_REVOCATION_BODY_BYTES = 1024 * 1024;

/**
 * Pushes whose body is being read at once; one more is answered 503 unread. The registry sends one push per
 * revocation and retries undelivered ones on its next poll, so a handful is plenty; a cap keeps unauthenticated
 * senders from making the relay hold many bodies of up to MAX_REVOCATION_BODY_BYTES each.
 */
export const MAX_CONCURRENT_PUSHES = 4;

/**
 * Pushes one source address may have read at once: one. A second push from an address whose first is still being
 * read is answered 503 unread, so one sender cannot take every slot (the registry retries it on its next poll, 2 s).
 */
export const MAX_PUSHES_PER_SOURCE = 1;

/**
 * A push's body must have arrived this long after its headers; else 408 and the socket is closed. The registry
 * sends a body of at most a few hundred KiB at once (its own request timeout is 2 s), so only a sender that dribbles
 * its body is cut.
 */
export const PUSH_BODY_TIMEOUT_MS = 2_000;

// An Ed25519 signature (64 bytes) in unpadded base64url, as the registry sends it (relay-auth signRevocations).
const SIGNATURE_SHAPE = /^[A-Za-z0-9_-]{86}$/;

/**
 * Whether a push's signature header could be a signature at all: checked before any body byte is read, so that a
 * request without one costs nothing. (Whether it verifies needs the body.)
 */
export function wellFormedSignature(value: string | string[] | undefined): value is string {
  return typeof value === 'string' && SIGNATURE_SHAPE.test(value);
}

/**
 * Whether an HTTP path is the revocation endpoint. Matched by suffix, as upgrades match `/…/ws/environment/ID`:
 * a node URL with a path prefix (`wss://host/edge`) gets its pushes at `/edge/v1/revocations`.
 */
export function isRevocationsPath(path: string): boolean {
  return path.endsWith(REVOCATIONS_PATH);
}

// The shapes a relay URL can carry (packages/relay-auth verifyRelayRequest): an entry outside them names no socket.
const ENVIRONMENT_ID = /^[A-Za-z0-9_-]{1,128}$/;
const REGISTRATION_ID = /^[\x21-\x7e]{1,256}$/;

/** The key both relay tables use for one registration (a newline is in neither id). */
export function revocationKey(environmentId: string, registrationId: string): string {
  return `${environmentId}\n${registrationId}`;
}

/** The well-formed entries of a `revoked_registrations` value; malformed entries are skipped, a non-array is none. */
export function revocationEntries(value: unknown): Revocation[] {
  if (!Array.isArray(value)) return [];
  const entries: Revocation[] = [];
  for (const item of value) {
    if (typeof item !== 'object' || item === null) continue;
    const { environment_id: environmentId, registration_id: registrationId } = item as Record<string, unknown>;
    if (typeof environmentId !== 'string' || !ENVIRONMENT_ID.test(environmentId)) continue;
    if (typeof registrationId !== 'string' || !REGISTRATION_ID.test(registrationId)) continue;
    entries.push({ environmentId, registrationId });
  }
  return entries;
}

function parseObject(text: string): Record<string, unknown> | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : null;
}

/**
 * A pushed `{"revoked_registrations":[…],"issued_at":<epoch s>}` (already signature-checked): null when it is not
 * that object; malformed entries inside are skipped like the heartbeat's.
 */
export function parseRevocationPush(text: string): { revocations: Revocation[]; issuedAt: number } | null {
  const body = parseObject(text);
  if (!body || !Array.isArray(body.revoked_registrations)) return null;
  const issuedAt = body.issued_at;
  if (typeof issuedAt !== 'number' || !Number.isSafeInteger(issuedAt) || issuedAt < 0) return null;
  return { revocations: revocationEntries(body.revoked_registrations), issuedAt };
}

/**
 * The revocations in a heartbeat answer `{"status":"ok","revoked_registrations":[…]}`; an older registry's answer
 * (no field) and anything malformed yield none: presence still worked, and the next answer is read afresh.
 */
export function heartbeatRevocations(text: string): Revocation[] {
  return revocationEntries(parseObject(text)?.revoked_registrations);
}

/** A fetch response body up to `max` bytes; null (the rest cancelled) when it is longer. */
export async function readResponseLimited(
  body: ReadableStream<Uint8Array> | null,
  max: number,
): Promise<Buffer | null> {
  if (!body) return Buffer.alloc(0);
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return Buffer.concat(chunks);
    size += value.byteLength;
    if (size > max) {
      await reader.cancel();
      return null;
    }
    chunks.push(value);
  }
}

/**
 * An HTTP request body up to `max` bytes; null when it is declared or turns out longer, or the client goes away
 * first; `'timeout'` when it has not all arrived within `timeoutMs` (when given). Reading stops at the limit or the
 * deadline, so an oversized or dribbled body is never held.
 */
export function readRequestLimited(
  req: IncomingMessage,
  max: number,
  timeoutMs?: number,
): Promise<Buffer | null | 'timeout'> {
  return new Promise((resolve) => {
    if (Number(req.headers['content-length'] ?? 0) > max) return resolve(null);
    const chunks: Buffer[] = [];
    let size = 0;
    let timer: NodeJS.Timeout | undefined;
    const stop = (result: Buffer | null | 'timeout') => {
      clearTimeout(timer);
      req.off('data', onData);
      if (result === null || result === 'timeout') {
        req.pause();
        chunks.length = 0;
      }
      resolve(result);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.byteLength;
      if (size <= max) {
        chunks.push(chunk);
        return;
      }
      stop(null);
    };
    if (timeoutMs !== undefined) timer = setTimeout(() => stop('timeout'), timeoutMs);
    req.on('data', onData);
    req.once('end', () => stop(Buffer.concat(chunks)));
    // A client that disconnects mid-body: 'close' without 'end' (resolving twice is a no-op).
    req.once('close', () => stop(null));
    req.once('error', () => stop(null));
  });
}
