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
  /**
   * A random value the registry puts in each harness grant (`nonceForGrant`), so that two bundles issued in the same
   * second are two grants: a relay bounds the sockets one grant may hold (`--max-sockets-per-url`). Environment
   * grants carry none. Signed when present (under its own domain tag, so a URL without one cannot gain one).
   */
  nonce?: string;
}

export const SIGNING_KEY_FILE = 'relay-signing-key.pem';
const DOMAIN = 'tether-relay-url-v2';
/** A grant with a nonce is signed under its own tag: no grant without one signs the same bytes. */
const DOMAIN_WITH_NONCE = 'tether-relay-url-v3';

/** A grant's nonce: 16 random bytes in unpadded base64url (22 characters), nothing else. */
export const NONCE_PATTERN = /^[A-Za-z0-9_-]{22}$/;

/** A fresh nonce for a harness grant (16 random bytes, base64url). */
export function nonceForGrant(): string {
  return randomBytes(16).toString('base64url');
}

/**
 * The exact bytes signed: a domain tag and the five grant fields, newline-separated (none may contain one); a grant
 * with a nonce is tagged `tether-relay-url-v3` and its nonce follows as a sixth field.
 */
export function grantMessage(grant: RelayGrant): Buffer {
  const fields = [grant.role, grant.environmentId, grant.registrationId, String(grant.epoch), String(grant.expiresAt)];
  if (grant.nonce === undefined) return Buffer.from([DOMAIN, ...fields].join('\n'));
  return Buffer.from([DOMAIN_WITH_NONCE, ...fields, grant.nonce].join('\n'));
}

/**
 * What identifies one grant (one signed URL) whatever else its query carries: its signed fields. A relay counts
 * sockets by it; the URL's text would not do (an extra parameter, or other spare bits of the base64url signature,
 * spell the same grant differently).
 */
export function grantIdentity(grant: RelayGrant): string {
  return [
    grant.role,
    grant.environmentId,
    grant.registrationId,
    String(grant.epoch),
    String(grant.expiresAt),
    grant.nonce ?? '',
  ].join('\n');
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
 * `BASE/ws/environment/ID?role=…&registration=…&epoch=…&expires=…[&nonce=…]&sig=…` (sig: base64url Ed25519 over
 * grantMessage).
 */
export function signRelayUrl(base: string, grant: RelayGrant, key: SigningKey): string {
  if (!Number.isSafeInteger(grant.epoch) || grant.epoch < 0)
    throw new RangeError('grant epoch must be a safe integer ≥ 0');
  if (grant.nonce !== undefined && !NONCE_PATTERN.test(grant.nonce)) {
    throw new RangeError('grant nonce must be 16 bytes in unpadded base64url (nonceForGrant)');
  }
  const sig = sign(null, grantMessage(grant), key.privateKey).toString('base64url');
  const url = new URL(`${base.replace(/\/+$/, '')}/ws/environment/${grant.environmentId}`);
  url.searchParams.set('role', grant.role);
  url.searchParams.set('registration', grant.registrationId);
  url.searchParams.set('epoch', String(grant.epoch));
  url.searchParams.set('expires', String(grant.expiresAt));
  if (grant.nonce !== undefined) url.searchParams.set('nonce', grant.nonce);
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
 * (`/…/ws/environment/ID?role=…&registration=…&epoch=…&expires=…[&nonce=…]&sig=…`):
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
  const nonce = parsed.searchParams.get('nonce');
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
  // Present means well formed: an empty or odd nonce is refused, never read as none.
  if (nonce !== null && !NONCE_PATTERN.test(nonce)) return { ok: false, status: 401, reason: 'missing_signature' };
  const grant: RelayGrant = { role, environmentId: match[1] as string, registrationId, epoch, expiresAt: expires };
  if (nonce !== null) grant.nonce = nonce;
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
