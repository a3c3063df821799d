import { type KeyObject, sign, verify } from 'node:crypto';
import type { SigningKey } from './signing.js';

/**
 * The registry pushes revocations to each relay node as `POST <node http base>/v1/revocations` with a JSON body
 * `{"revoked_registrations":[{"environment_id","registration_id"}…],"issued_at":<epoch seconds>}` and this header
 * carrying a base64url Ed25519 signature, by the same key that signs relay URLs, over the domain tag and the exact
 * body bytes. Signing the bytes (not a re-serialisation) means the relay verifies before it parses.
 */
export const REVOCATIONS_SIGNATURE_HEADER = 'x-tether-signature';
export const REVOCATIONS_PATH = '/v1/revocations';
const DOMAIN = 'tether-relay-revocations-v1\n';

export interface RevokedRegistration {
  environment_id: string;
  registration_id: string;
}

export interface RevocationNotice {
  revoked_registrations: RevokedRegistration[];
  /** Epoch seconds. */
  issued_at: number;
}

/** The exact bytes signed: the domain tag, then the body as sent. */
export function revocationsMessage(body: string): Buffer {
  return Buffer.concat([Buffer.from(DOMAIN, 'utf8'), Buffer.from(body, 'utf8')]);
}

/** base64url Ed25519 signature over `revocationsMessage(body)`: the value of the `x-tether-signature` header. */
export function signRevocations(body: string, key: SigningKey): string {
  return sign(null, revocationsMessage(body), key.privateKey).toString('base64url');
}

/** Whether `signature` (base64url, as in the header) is the registry's signature over exactly `body`. */
export function verifyRevocations(body: string, signature: string, publicKey: KeyObject): boolean {
  if (typeof signature !== 'string' || !/^[A-Za-z0-9_-]{86}$/.test(signature)) return false;
  const bytes = Buffer.from(signature, 'base64url');
  if (bytes.byteLength !== 64) return false;
  try {
    return verify(null, revocationsMessage(body), publicKey, bytes);
  } catch {
    return false;
  }
}
