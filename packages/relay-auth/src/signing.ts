import { createPrivateKey, createPublicKey, type KeyObject, randomBytes, sign, verify } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Ed25519 key pair the registry signs relay URLs with; relays verify with the public half alone. */
export interface SigningKey {
  privateKey: KeyObject;
  publicKey: KeyObject;
}

export type RelayRole = 'environment' | 'harness';

export interface RelayGrant {
  role: RelayRole;
  environmentId: string;
  registrationId: string;
  /**
   * The registration's epoch: a per-environment counter the registry raises on every registration. A relay keeps the
   * environment socket with the highest epoch and refuses an older one, so a stale executor cannot displace the
   * current registration's.
   */
  epoch: number;
  /** Epoch seconds. */
  expiresAt: number;
}

export const SIGNING_KEY_FILE = 'relay-signing-key.pem';
const DOMAIN = 'tether-relay-url-v2';

/** The exact bytes signed: a domain tag and the five grant fields, newline-separated (none may contain one). */
export function grantMessage(grant: RelayGrant): Buffer {
  return Buffer.from(
    [DOMAIN, grant.role, grant.environmentId, grant.registrationId, String(grant.epoch), String(grant.expiresAt)].join(
      '\n',
    ),
  );
}

/**
 * The public key a relay verifies with, from a PEM holding either the public key (SPKI, as served by the
 * registry's `GET /v1/relay-signing-key`) or the private key (PKCS#8, the registry's own file).
 */
export function publicKeyFromPem(pem: string): KeyObject {
  const publicKey = pem.includes('PRIVATE KEY') ? createPublicKey(createPrivateKey(pem)) : createPublicKey(pem);
  if (publicKey.asymmetricKeyType !== 'ed25519') throw new Error('relay signing key must be Ed25519');
  return publicKey;
}

export function signingKeyFromPem(pem: string): SigningKey {
  const privateKey = createPrivateKey(pem);
  if (privateKey.asymmetricKeyType !== 'ed25519') throw new Error('relay signing key must be Ed25519');
  return { privateKey, publicKey: createPublicKey(privateKey) };
}

/** Loads `DIR/relay-signing-key.pem`, generating it (mode 0600, directory 0700) on first start. */
export function loadOrCreateSigningKey(dataDir: string): SigningKey {
  const path = join(dataDir, SIGNING_KEY_FILE);
  if (existsSync(path)) return signingKeyFromPem(readFileSync(path, 'utf8'));
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  // From 32 random bytes (an Ed25519 seed), not generateKeyPairSync: on Node 20, exporting the key a
  // key-generation job made can deadlock when a GC finalizes that job during the export (noise's
  // crypto/node.ts has the details). PKCS#8 DER around the seed: the one import every Node accepts as it is
  // (Node 24 refuses a JWK whose `x` does not match `d`).
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), randomBytes(32)]);
  const privateKey = createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' });
  writeFileSync(path, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' });
  chmodSync(path, 0o600);
  return signingKeyFromPem(readFileSync(path, 'utf8'));
}

/**
 * `BASE/ws/environment/ID?role=…&registration=…&epoch=…&expires=…&sig=…` (sig: base64url Ed25519 over
 * grantMessage).
 */
export function signRelayUrl(base: string, grant: RelayGrant, key: SigningKey): string {
  if (!Number.isSafeInteger(grant.epoch) || grant.epoch < 0)
    throw new RangeError('grant epoch must be a safe integer ≥ 0');
  const sig = sign(null, grantMessage(grant), key.privateKey).toString('base64url');
  const url = new URL(`${base.replace(/\/+$/, '')}/ws/environment/${grant.environmentId}`);
  url.searchParams.set('role', grant.role);
  url.searchParams.set('registration', grant.registrationId);
  url.searchParams.set('epoch', String(grant.epoch));
  url.searchParams.set('expires', String(grant.expiresAt));
  url.searchParams.set('sig', sig);
  return url.toString();
}

/**
 * The relay node a URL points at, in one canonical form: a node's base URL as configured (`wss://relay-0.example/`)
 * and any URL signed for it (`…/ws/environment/ID?role=…`) give the same string, with no query (a signed URL's
 * query is a credential). Null when `url` is not a ws:// or wss:// URL.
 */
export function relayNodeOf(url: string): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  if (parsed.protocol !== 'ws:' && parsed.protocol !== 'wss:') return null;
  const path = parsed.pathname.replace(/\/ws\/environment\/[^/]*$/, '').replace(/\/+$/, '');
  return `${parsed.protocol}//${parsed.host}${path}`;
}

/** Why a relay refused an upgrade: 401 for missing, forged or expired credentials, 403 for a role it does not serve. */
export type VerifyResult =
  | { ok: true; grant: RelayGrant }
  | {
      ok: false;
      status: 401 | 403;
      reason: 'malformed_url' | 'missing_signature' | 'bad_signature' | 'expired' | 'forbidden_role';
    };

const PATH = /\/ws\/environment\/([A-Za-z0-9_-]{1,128})$/;

/**
 * What a relay does with an upgrade request's path and query
 * (`/…/ws/environment/ID?role=…&registration=…&epoch=…&expires=…&sig=…`):
 * the grant when the signature verifies under `publicKey` and `expires` is after `nowSeconds`, else why not.
 */
export function verifyRelayRequest(pathAndQuery: string, publicKey: KeyObject, nowSeconds: number): VerifyResult {
  let parsed: URL;
  try {
    parsed = new URL(pathAndQuery, 'http://relay.invalid');
  } catch {
    return { ok: false, status: 401, reason: 'malformed_url' };
  }
  const match = PATH.exec(parsed.pathname);
  const role = parsed.searchParams.get('role');
  const registrationId = parsed.searchParams.get('registration');
  const epochText = parsed.searchParams.get('epoch');
  const expiresText = parsed.searchParams.get('expires');
  const sig = parsed.searchParams.get('sig');
  if (!match || !role || !registrationId || !epochText || !expiresText || !sig)
    return { ok: false, status: 401, reason: 'missing_signature' };
  if (role !== 'environment' && role !== 'harness') return { ok: false, status: 403, reason: 'forbidden_role' };
  // Printable ASCII only: a newline would make the signed message ambiguous.
  if (!/^[\x21-\x7e]{1,256}$/.test(registrationId)) return { ok: false, status: 401, reason: 'missing_signature' };
  const expires = Number(expiresText);
  const epoch = Number(epochText);
  if (!/^\d{1,15}$/.test(expiresText) || !/^\d{1,15}$/.test(epochText)) {
    return { ok: false, status: 401, reason: 'missing_signature' };
  }
  const grant: RelayGrant = { role, environmentId: match[1] as string, registrationId, epoch, expiresAt: expires };
  const signature = Buffer.from(sig, 'base64url');
  if (signature.byteLength !== 64 || !verify(null, grantMessage(grant), publicKey, signature)) {
    return { ok: false, status: 401, reason: 'bad_signature' };
  }
  if (expires <= nowSeconds) return { ok: false, status: 401, reason: 'expired' };
  return { ok: true, grant };
}

/** The grant a full relay URL carries when its signature verifies and it is unexpired, else null. */
export function verifyRelayUrl(url: string, publicKey: KeyObject, nowSeconds: number): RelayGrant | null {
  const parsed = new URL(url);
  const result = verifyRelayRequest(`${parsed.pathname}${parsed.search}`, publicKey, nowSeconds);
  return result.ok ? result.grant : null;
}
