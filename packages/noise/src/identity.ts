import { defaultProvider } from '#platform';
import { decodeBase64Strict, encodeBase64 } from './base64.js';
import { type CryptoProvider, equalBytes, type Kem, type KeyPair, X25519_KEY_LENGTH } from './crypto.js';
import { NoiseError } from './errors.js';
import { createMlKem768, MLKEM768_SECRET_KEY_LENGTH, mlKem768PublicKeyOf } from './kem/ml-kem-768.js';
import { checkPublicKey, type NoisePublicKey, parsePublicKey } from './keys.js';
import { INSPECT, REDACTED } from './redact.js';
import { DEFAULT_SUITE, type Suite, suiteInfo } from './suite.js';

/** Both static key pairs of one endpoint. */
export interface StaticKeys {
  readonly x25519: KeyPair;
  readonly mlkem768: KeyPair;
}

/**
 * `NoiseChannelIdentity`: an X25519 key pair and an ML-KEM-768 key pair, generated independently.
 * Private halves are never shown by `util.inspect` or `JSON.stringify`; use `identityToFileJson` on purpose.
 */
export class NoiseIdentity implements StaticKeys {
  readonly suite: Suite;
  readonly #x25519: KeyPair;
  readonly #mlkem768: KeyPair;

  constructor(suite: Suite, x25519: KeyPair, mlkem768: KeyPair) {
    this.suite = suiteInfo(suite).suite;
    this.#x25519 = x25519;
    this.#mlkem768 = mlkem768;
    checkPublicKey(this.publicKey);
  }

  get x25519(): KeyPair {
    return this.#x25519;
  }

  get mlkem768(): KeyPair {
    return this.#mlkem768;
  }

  get publicKey(): NoisePublicKey {
    return { suite: this.suite, x25519: this.#x25519.publicKey, mlkem768: this.#mlkem768.publicKey };
  }

  toJSON(): object {
    return { suite: this.suite, x25519: REDACTED, mlkem768: REDACTED };
  }

  [INSPECT](): string {
    return `NoiseIdentity { suite: '${this.suite}', keys: ${REDACTED} }`;
  }
}

export interface GenerateIdentityOptions {
  suite?: Suite;
  provider?: CryptoProvider;
  kem?: Kem;
}

/** A fresh identity from the provider's and KEM's randomness (inject seeded ones for tests). */
export function generateIdentity(options: GenerateIdentityOptions = {}): NoiseIdentity {
  const provider = options.provider ?? defaultProvider();
  const kem = options.kem ?? createMlKem768();
  return new NoiseIdentity(options.suite ?? DEFAULT_SUITE, provider.generateKeyPair(), kem.generateKeyPair());
}

/** On-disk form: the public-key JSON fields plus the two private keys. */
export interface NoiseIdentityFileJson {
  suite: string;
  x25519_public_key: string;
  x25519_private_key: string;
  mlkem768_public_key: string;
  mlkem768_private_key: string;
}

const FILE_FIELDS = [
  'suite',
  'x25519_public_key',
  'x25519_private_key',
  'mlkem768_public_key',
  'mlkem768_private_key',
] as const;

export function identityToFileJson(identity: NoiseIdentity): NoiseIdentityFileJson {
  return {
    suite: identity.suite,
    x25519_public_key: encodeBase64(identity.x25519.publicKey),
    x25519_private_key: encodeBase64(identity.x25519.secretKey),
    mlkem768_public_key: encodeBase64(identity.mlkem768.publicKey),
    mlkem768_private_key: encodeBase64(identity.mlkem768.secretKey),
  };
}

export function invalidIdentity(message: string, cause?: unknown): NoiseError {
  return new NoiseError('invalid_identity', message, cause === undefined ? undefined : { cause });
}

/** Parses the file form; checks that each private key matches its public key. */
export function identityFromFileJson(value: unknown, provider: CryptoProvider = defaultProvider()): NoiseIdentity {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalidIdentity('identity must be a JSON object');
  }
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (!(FILE_FIELDS as readonly string[]).includes(key)) throw invalidIdentity(`unknown field in identity: ${key}`);
  }
  const publicKey = parsePublicKey({
    suite: record.suite,
    x25519_public_key: record.x25519_public_key,
    mlkem768_public_key: record.mlkem768_public_key,
  });
  const secret = (field: 'x25519_private_key' | 'mlkem768_private_key', length: number): Uint8Array => {
    const text = record[field];
    if (typeof text !== 'string' || text.length !== Math.ceil(length / 3) * 4) {
      throw invalidIdentity(`invalid ${field}`);
    }
    const bytes = decodeBase64Strict(text);
    if (bytes === null || bytes.length !== length) throw invalidIdentity(`invalid ${field}`);
    return bytes;
  };
  const x25519Secret = secret('x25519_private_key', X25519_KEY_LENGTH);
  const mlkemSecret = secret('mlkem768_private_key', MLKEM768_SECRET_KEY_LENGTH);
  if (!equalBytes(provider.publicKeyFromSecret(x25519Secret), publicKey.x25519)) {
    throw invalidIdentity('x25519 private key does not match the public key');
  }
  if (!equalBytes(mlKem768PublicKeyOf(mlkemSecret), publicKey.mlkem768)) {
    throw invalidIdentity('mlkem768 private key does not match the public key');
  }
  return new NoiseIdentity(
    publicKey.suite,
    { publicKey: publicKey.x25519, secretKey: x25519Secret },
    { publicKey: publicKey.mlkem768, secretKey: mlkemSecret },
  );
}
