/**
 * The tamper evidence of a recording: every line after the header extends a SHA-256 chain, and a seal (an event
 * of Tether's own type, which asciicast players skip) signs the chain's head with the executor's Ed25519 key and
 * lists the first 8 bytes of each link since the previous seal, so that a verifier names the first event whose
 * bytes changed, not only the seal that no longer verifies.
 *
 *   link(0) = SHA-256("tether-recording-v1\n" ‖ header line)
 *   link(n) = SHA-256(link(n-1) ‖ event line n)            (seal lines are not links)
 *   seal    = [t, "tether.seal", JSON {"n": n, "head": b64(link(n)), "links": b64(link(k)[0..8] for k in (prev, n]),
 *              "sig": b64(Ed25519(key, "tether-recording-seal-v1\n" ‖ n ‖ "\n" ‖ b64(link(n))))}]
 */
import { createHash, createPublicKey, type KeyObject, sign, verify } from 'node:crypto';

export const CHAIN_PREFIX = 'tether-recording-v1\n';
export const SEAL_PREFIX = 'tether-recording-seal-v1\n';
/** The event type of a seal (asciicast v2 lets a file carry types a player does not know; players skip them). */
export const SEAL_TYPE = 'tether.seal';
/** Bytes of each link a seal lists. */
export const LINK_PREFIX_BYTES = 8;

export function firstLink(headerLine: string): Buffer {
  return createHash('sha256').update(CHAIN_PREFIX).update(headerLine).digest();
}

export function nextLink(previous: Buffer, line: string | Uint8Array): Buffer {
  return createHash('sha256').update(previous).update(line).digest();
}

export interface Seal {
  /** Events (links) covered: the seal follows event n. */
  n: number;
  head: string;
  links: string;
  sig: string;
}

function sealMessage(n: number, head: string): Buffer {
  return Buffer.from(`${SEAL_PREFIX}${n}\n${head}`);
}

export function makeSeal(n: number, head: Buffer, links: Buffer[], key: KeyObject): Seal {
  const headText = head.toString('base64');
  return {
    n,
    head: headText,
    links: Buffer.concat(links.map((link) => link.subarray(0, LINK_PREFIX_BYTES))).toString('base64'),
    sig: sign(null, sealMessage(n, headText), key).toString('base64'),
  };
}

export function sealSigned(seal: Seal, publicKey: KeyObject): boolean {
  try {
    return verify(null, sealMessage(seal.n, seal.head), publicKey, Buffer.from(seal.sig, 'base64'));
  } catch {
    return false;
  }
}

/** The recording key's public half as text (`ed25519:` and its 32 raw bytes in base64), as printed and kept. */
export function publicKeyText(key: KeyObject): string {
  const jwk = key.export({ format: 'jwk' }) as { x?: string };
  return `ed25519:${Buffer.from(jwk.x ?? '', 'base64url').toString('base64')}`;
}

/** The key named by `publicKeyText`'s form; throws on anything else. */
export function publicKeyOf(text: string): KeyObject {
  const match = /^ed25519:([A-Za-z0-9+/]{43}=)$/.exec(text.trim());
  if (!match)
    throw new Error(`not a recording key (ed25519:BASE64 of 32 bytes): ${JSON.stringify(text.trim().slice(0, 80))}`);
  const raw = Buffer.from(match[1]!, 'base64');
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') }, format: 'jwk' });
}
