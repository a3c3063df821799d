import { decodeBase64Strict, encodeBase64 } from './base64.js';
import { X25519_KEY_LENGTH } from './crypto.js';
import { NoiseError } from './errors.js';
import { MLKEM768_PUBLIC_KEY_LENGTH } from './kem/sizes.js';
import { type Suite, suiteInfo } from './suite.js';

/** An executor's (or harness's) public identity: the suite and both static public keys. */
export interface NoisePublicKey {
  readonly suite: Suite;
  /** X25519 u-coordinate (RFC 7748), 32 bytes. */
  readonly x25519: Uint8Array;
  /** ML-KEM-768 encapsulation key (FIPS 203), 1184 bytes. */
  readonly mlkem768: Uint8Array;
}

/** rendezvous.md §2.3 `NoiseChannelPublicKey`: exactly these three fields, snake_case, padded base64. */
export interface NoisePublicKeyJson {
  suite: string;
  x25519_public_key: string;
  mlkem768_public_key: string;
}

const FIELDS = ['suite', 'x25519_public_key', 'mlkem768_public_key'] as const;
/** Padded base64 lengths of the exact key sizes: 32 B → 44 chars, 1184 B → 1580 chars. */
export const X25519_PUBLIC_KEY_BASE64_LENGTH = 44;
export const MLKEM768_PUBLIC_KEY_BASE64_LENGTH = 1580;

function invalid(message: string): NoiseError {
  return new NoiseError('invalid_public_key', message);
}

export function publicKeyToJson(key: NoisePublicKey): NoisePublicKeyJson {
  checkPublicKey(key);
  return {
    suite: key.suite,
    x25519_public_key: encodeBase64(key.x25519),
    mlkem768_public_key: encodeBase64(key.mlkem768),
  };
}

export function serializePublicKey(key: NoisePublicKey): string {
  return JSON.stringify(publicKeyToJson(key));
}

/** ML-KEM's modulus q: every coefficient of an encapsulation key is below it (FIPS 203 §7.2). */
const MLKEM_Q = 3329;
/** The encoded polynomial vector t̂ of an ML-KEM-768 key: 3 × 256 coefficients of 12 bits; ρ (32 bytes) follows. */
const MLKEM768_VECTOR_BYTES = 1152;

/**
 * FIPS 203 §7.2's encapsulation key check: every 12-bit coefficient is below q, i.e. the key is what
 * ByteEncode12(ByteDecode12(key)) gives back. Without it an executor could publish a key no conformant
 * implementation produces (and that libraries which skip the check would still encapsulate to).
 */
function isCanonicalMlKemKey(key: Uint8Array): boolean {
  for (let i = 0; i < MLKEM768_VECTOR_BYTES; i += 3) {
    const b1 = key[i + 1] as number;
    if (((key[i] as number) | ((b1 & 0x0f) << 8)) >= MLKEM_Q) return false;
    if (((b1 >> 4) | ((key[i + 2] as number) << 4)) >= MLKEM_Q) return false;
  }
  return true;
}

/**
 * Checks a decoded key object: known suite (`bad_suite`), exact key lengths and an ML-KEM key whose
 * coefficients are all reduced (`invalid_public_key`).
 */
export function checkPublicKey(key: NoisePublicKey): void {
  suiteInfo(key.suite);
  if (!(key.x25519 instanceof Uint8Array) || key.x25519.length !== X25519_KEY_LENGTH) {
    throw invalid('invalid x25519 public key length');
  }
  if (!(key.mlkem768 instanceof Uint8Array) || key.mlkem768.length !== MLKEM768_PUBLIC_KEY_LENGTH) {
    throw invalid('invalid mlkem768 public key length');
  }
  if (!isCanonicalMlKemKey(key.mlkem768)) {
    throw invalid('mlkem768 public key has a coefficient out of range (FIPS 203 encapsulation key check)');
  }
}

function decodeField(value: unknown, field: string, expectedLength: number, encodedLength: number): Uint8Array {
  if (typeof value !== 'string') throw invalid(`${field} must be a string`);
  // Length first: an over-long string is rejected before any decoding work.
  if (value.length !== encodedLength) throw invalid(`invalid ${field} length`);
  const bytes = decodeBase64Strict(value);
  if (bytes === null) throw invalid(`${field} is not canonical padded standard base64`);
  if (bytes.length !== expectedLength) throw invalid(`invalid ${field} length`);
  return bytes;
}

/** Parses an already-decoded JSON value; unknown or missing fields are rejected. */
export function parsePublicKey(value: unknown): NoisePublicKey {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalid('public key must be a JSON object');
  }
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (!(FIELDS as readonly string[]).includes(key)) throw invalid(`unknown field in public key: ${key}`);
  }
  for (const field of FIELDS) {
    if (!Object.hasOwn(record, field)) throw invalid(`missing field in public key: ${field}`);
  }
  const { suite } = suiteInfo(record.suite);
  const key: NoisePublicKey = {
    suite,
    x25519: decodeField(
      record.x25519_public_key,
      'x25519_public_key',
      X25519_KEY_LENGTH,
      X25519_PUBLIC_KEY_BASE64_LENGTH,
    ),
    mlkem768: decodeField(
      record.mlkem768_public_key,
      'mlkem768_public_key',
      MLKEM768_PUBLIC_KEY_LENGTH,
      MLKEM768_PUBLIC_KEY_BASE64_LENGTH,
    ),
  };
  checkPublicKey(key);
  return key;
}

/** Parses public-key JSON text. */
export function parsePublicKeyJson(text: string): NoisePublicKey {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (cause) {
    throw new NoiseError('invalid_public_key', 'public key is not valid JSON', { cause });
  }
  return parsePublicKey(value);
}
