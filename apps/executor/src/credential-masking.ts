// Credential masking in the managed network proxy (capabilities `credentialMasking` and
// `credentialMaskingCustomProviders`; tests/conformance/FINDINGS-credential-masking.md): with
// `networkProxy.proxy.credentialMasking: true` a `bash -c` command sees, for each credential the executor knows in
// its environment, a dummy of the same shape; the proxy intercepts TLS to the destinations a credential is bound
// to (with a CA of the executor's own, which the command is told to trust) and swaps the dummy for the real value
// there only. Everywhere else the dummy travels as it is. No real value is ever logged.

import { createHash, KeyObject, randomBytes, randomInt, webcrypto } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import {
  createServer,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type Server,
  type ServerResponse,
} from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import type { Duplex } from 'node:stream';
import { createSecureContext, rootCertificates, type SecureContext, TLSSocket } from 'node:tls';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import randexpModule from 'randexp';
import { forwardedHeaders, HOP_BY_HOP } from './proxy-headers.js';

/** Set in a masked command's environment (Codex's name). */
export const BROKER_ACTIVE_ENV = 'CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE';
/** `[[name, dummy], …]` of what was masked (Codex's name and shape). */
export const BROKERED_CREDENTIALS_ENV = 'CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS';

/** The variables Codex points at its CA bundle (the platform's roots plus the proxy's CA). */
export const CA_BUNDLE_ENV_KEYS = [
  'BUNDLE_SSL_CA_CERT',
  'CARGO_HTTP_CAINFO',
  'CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE',
  'CODEX_CA_CERTIFICATE',
  'CURL_CA_BUNDLE',
  'DENO_CERT',
  'GIT_SSL_CAINFO',
  'NODE_EXTRA_CA_CERTS',
  'NPM_CONFIG_CAFILE',
  'PIP_CERT',
  'REQUESTS_CA_BUNDLE',
  'SSL_CERT_FILE',
  'npm_config_cafile',
] as const;

export const UNAVAILABLE_FOR_SHELL =
  'Credential masking is unavailable for this shell startup; preserving shell profiles and snapshots and running with unmasked credentials.';
export const NOT_PROTECTED =
  'Credential masking could not protect some environment credentials; continuing with those values unmasked.';

// ---------------------------------------------------------------------------------------------------------------
// `credentialProviders`: Codex's `CredentialProviderConfig` map, refused with serde's words.

export type AuthMode = 'bearer' | 'token' | 'basic' | 'header';
const AUTH_MODES: readonly AuthMode[] = ['bearer', 'token', 'basic', 'header'];

export interface CredentialProviderConfig {
  env: string[];
  patterns: string[];
  url_prefixes: string[];
  url_prefix_from_env?: string;
  /** Each a mode, or a one-key map `{mode: …}` (its value is kept as given). */
  auth: (AuthMode | Record<string, unknown>)[];
  header?: string;
  prefix?: string;
}

const PROVIDER_FIELDS = ['env', 'patterns', 'url_prefixes', 'url_prefix_from_env', 'auth', 'header', 'prefix'];

export class ProviderConfigError extends Error {
  override readonly name = 'ProviderConfigError';
}

/** serde_json's words for a JSON value it did not expect. */
function serdeUnexpected(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'boolean') return `boolean \`${value}\``;
  if (typeof value === 'number') return Number.isInteger(value) ? `integer \`${value}\`` : `floating \`${value}\``;
  if (typeof value === 'string') return `string ${JSON.stringify(value)}`;
  if (Array.isArray(value)) return 'sequence';
  return 'map';
}

const invalidType = (value: unknown, expected: string) =>
  new ProviderConfigError(`invalid type: ${serdeUnexpected(value)}, expected ${expected}`);

function strings(value: unknown): string[] {
  if (!Array.isArray(value)) throw invalidType(value, 'a sequence');
  for (const item of value) if (typeof item !== 'string') throw invalidType(item, 'a string');
  return value as string[];
}

function authModes(value: unknown): CredentialProviderConfig['auth'] {
  if (!Array.isArray(value)) throw invalidType(value, 'a sequence');
  const expected = `one of ${AUTH_MODES.map((m) => `\`${m}\``).join(', ')}`;
  for (const item of value) {
    if (typeof item === 'string') {
      if (!AUTH_MODES.includes(item as AuthMode))
        throw new ProviderConfigError(`unknown variant \`${item}\`, expected ${expected}`);
    } else if (item !== null && typeof item === 'object' && !Array.isArray(item)) {
      const keys = Object.keys(item);
      if (keys.length !== 1) throw new ProviderConfigError('invalid value: map, expected map with a single key');
      if (!AUTH_MODES.includes(keys[0] as AuthMode)) {
        throw new ProviderConfigError(`unknown variant \`${keys[0]}\`, expected ${expected}`);
      }
    } else {
      throw invalidType(item, 'string or map');
    }
  }
  return value as CredentialProviderConfig['auth'];
}

/** `credentialProviders` as Codex reads it (absent: none), or ProviderConfigError with serde's message. */
export function parseCredentialProviders(raw: unknown): Map<string, CredentialProviderConfig> {
  const providers = new Map<string, CredentialProviderConfig>();
  if (raw === undefined) return providers;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw invalidType(raw, 'a map');
  for (const [name, value] of Object.entries(raw)) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw invalidType(value, 'struct CredentialProviderConfig');
    }
    const config: CredentialProviderConfig = { env: [], patterns: [], url_prefixes: [], auth: [] };
    for (const [key, field] of Object.entries(value)) {
      switch (key) {
        case 'env':
        case 'patterns':
        case 'url_prefixes':
          config[key] = strings(field);
          break;
        case 'auth':
          config.auth = authModes(field);
          break;
        case 'url_prefix_from_env':
        case 'header':
        case 'prefix':
          // Options: null is as absent.
          if (field === null) break;
          if (typeof field !== 'string') throw invalidType(field, 'a string');
          config[key] = field;
          break;
        default:
          throw new ProviderConfigError(
            `unknown field \`${key}\`, expected one of ${PROVIDER_FIELDS.map((f) => `\`${f}\``).join(', ')}`,
          );
      }
    }
    providers.set(name, config);
  }
  return providers;
}

// ---------------------------------------------------------------------------------------------------------------
// Destinations and the built-in credential sources.

/** Where a credential's real value may go: https to `host` (and `port`, 443 by default), under `path`. */
export interface Destination {
  host: string;
  /** null: any host ending with `.${suffix}`. */
  suffix?: string;
  port: number;
  path: string;
}

/** How the real value is written where the dummy was: the header it travels in. */
interface HeaderRule {
  header: string;
}

export interface BoundCredential {
  /** The variable it came from. */
  name: string;
  real: string;
  dummy: string;
  destinations: Destination[];
  headers: HeaderRule[];
}

const GITHUB_CLOUD: Destination[] = [
  { host: 'github.com', port: 443, path: '/' },
  { host: 'api.github.com', port: 443, path: '/' },
  { host: 'uploads.github.com', port: 443, path: '/' },
  { host: '', suffix: 'ghe.com', port: 443, path: '/' },
];
const OPENAI: Destination[] = [{ host: 'api.openai.com', port: 443, path: '/' }];
const AUTHORIZATION: HeaderRule[] = [{ header: 'authorization' }];

const GITHUB_PREFIXES = ['github_pat_', 'ghp_', 'gho_', 'ghu_', 'ghs_', 'ghr_'];
const OPENAI_PREFIXES = ['sk-svcacct-', 'sk-admin-', 'sk-proj-'];

interface BuiltIn {
  names: string[];
  /** The dummy's prefix for a real value, and its least length. */
  shape: (real: string) => { prefix: string; minLength: number };
  /** Where it may go; null: nowhere known, so it cannot be protected. */
  destinations: (env: Record<string, string>) => Destination[] | null;
}

const githubShape = (real: string) => ({
  prefix: GITHUB_PREFIXES.find((p) => real.startsWith(p)) ?? 'ghp_',
  minLength: 40,
});

const isGithubCloudHost = (host: string) =>
  host === 'github.com' || host === 'api.github.com' || host === 'uploads.github.com' || host.endsWith('.ghe.com');

export const BUILT_IN_SOURCES: readonly BuiltIn[] = [
  { names: ['GH_TOKEN', 'GITHUB_TOKEN'], shape: githubShape, destinations: () => GITHUB_CLOUD },
  {
    names: ['GH_ENTERPRISE_TOKEN', 'GITHUB_ENTERPRISE_TOKEN'],
    shape: githubShape,
    destinations: (env) => {
      const host = (env.GH_HOST ?? '')
        .trim()
        .toLowerCase()
        .replace(/^https?:\/\//, '')
        .replace(/\/.*$/, '');
      return host === '' || isGithubCloudHost(host) ? null : [{ host, port: 443, path: '/' }];
    },
  },
  {
    names: ['OPENAI_API_KEY', 'CODEX_API_KEY', 'OPENAI_ADMIN_KEY'],
    shape: (real) => ({ prefix: OPENAI_PREFIXES.find((p) => real.startsWith(p)) ?? 'sk-', minLength: 51 }),
    destinations: () => OPENAI,
  },
];

const BUILT_IN_NAMES = new Set(BUILT_IN_SOURCES.flatMap((s) => s.names));

const ALPHANUMERIC = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** `prefix` + `masked` + random letters and digits, as long as `real` (at least `minLength`). */
export function shapedDummy(real: string, prefix: string, minLength: number): string {
  const length = Math.max(real.length, minLength, prefix.length + 16);
  let dummy = `${prefix}masked`;
  while (dummy.length < length) dummy += ALPHANUMERIC[randomInt(ALPHANUMERIC.length)];
  return dummy;
}

type RandExpClass = typeof import('randexp').default;
const RandExp = ((randexpModule as unknown as { default?: RandExpClass }).default ?? randexpModule) as RandExpClass;

/** A pattern longer than this is refused (the provider is ignored). */
export const MAX_PATTERN_LENGTH = 1024;

/** A random string `pattern` matches whole, other than `real`; null when none could be made. */
export function patternDummy(pattern: RegExp, real: string): string | null {
  const generator = new RandExp(pattern);
  generator.max = 32;
  (generator as unknown as { randInt: (from: number, to: number) => number }).randInt = (from, to) =>
    from + randomInt(to - from + 1);
  for (let attempt = 0; attempt < 16; attempt++) {
    const candidate = generator.gen();
    if (candidate !== real && pattern.test(candidate)) return candidate;
  }
  return null;
}

/** Whether `host` is a loopback, private or link-local address, or `localhost` (Codex binds nothing there). */
function isLocalHost(host: string): boolean {
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  if (isIP(host) === 0) return false;
  return /^(?:127\.|10\.|192\.168\.|169\.254\.|172\.(?:1[6-9]|2\d|3[01])\.|0\.|::1$|::$|f[cd]|fe80:)/i.test(host);
}

/** A url prefix as a destination; null when it is not `https://host[:port][/path]`. */
export function destinationOf(prefix: string): Destination | null {
  let url: URL;
  try {
    url = new URL(prefix);
  } catch {
    return null;
  }
  if (url.protocol !== 'https:' || url.hostname === '' || url.username !== '' || url.search !== '') return null;
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return { host, port: url.port === '' ? 443 : Number(url.port), path: url.pathname || '/' };
}

/** A custom provider ready to use, or why it is ignored (Codex's log wording). */
function compileProvider(
  name: string,
  config: CredentialProviderConfig,
  env: Record<string, string>,
): { ok: true; patterns: RegExp[]; destinations: Destination[]; headers: HeaderRule[] } | { ok: false; why: string } {
  if (config.env.length === 0) return { ok: false, why: `missing credential source in \`${name}\`` };
  if (config.env.some((v) => BUILT_IN_NAMES.has(v))) {
    return { ok: false, why: `credential provider \`${name}\` overlaps a built-in credential source` };
  }
  if (config.patterns.length === 0)
    return { ok: false, why: `credential provider \`${name}\` has no credential patterns` };
  const patterns: RegExp[] = [];
  for (const pattern of config.patterns) {
    if (pattern.length > MAX_PATTERN_LENGTH) {
      return { ok: false, why: `credential pattern exceeds ${MAX_PATTERN_LENGTH} bytes in \`${name}\`` };
    }
    try {
      patterns.push(new RegExp(`^(?:${pattern})$`, 'u'));
    } catch {
      return { ok: false, why: `invalid credential source in \`${name}\`` };
    }
  }
  const prefixes = [...config.url_prefixes];
  if (config.url_prefix_from_env !== undefined && env[config.url_prefix_from_env]) {
    prefixes.push(env[config.url_prefix_from_env]!);
  }
  if (prefixes.length === 0)
    return { ok: false, why: `credential provider \`${name}\` has no destination URL prefixes` };
  const destinations: Destination[] = [];
  for (const prefix of prefixes) {
    const destination = destinationOf(prefix);
    if (destination === null) return { ok: false, why: `invalid destination for credential provider \`${name}\`` };
    destinations.push(destination);
  }
  let headers: HeaderRule[] = AUTHORIZATION;
  if (config.header !== undefined) {
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(config.header)) {
      return { ok: false, why: `invalid header for credential provider \`${name}\`` };
    }
    headers = [{ header: config.header.toLowerCase() }];
  }
  return { ok: true, patterns, destinations, headers };
}

// ---------------------------------------------------------------------------------------------------------------
// The environment a masked command sees.

/** Dummies stable for the executor's life (one per variable and real value), at most this many. */
export const MAX_REMEMBERED_DUMMIES = 1024;

/** The executor's dummies: the same real value in the same variable gets the same dummy in every process. */
export class DummyBook {
  private readonly dummies = new Map<string, string>();

  dummyFor(name: string, real: string, make: () => string | null): string | null {
    // The key is a digest: the book holds no real value.
    const key = createHash('sha256').update(name).update('\0').update(real).digest('base64');
    const known = this.dummies.get(key);
    if (known !== undefined) return known;
    const made = make();
    if (made === null) return null;
    if (this.dummies.size >= MAX_REMEMBERED_DUMMIES) this.dummies.delete(this.dummies.keys().next().value!);
    this.dummies.set(key, made);
    return made;
  }
}

/** Whether `argv` is a start Codex masks: `bash -c SCRIPT` and nothing more (not a login shell, not `sh`). */
export function maskableArgv(argv: readonly string[]): boolean {
  return argv.length === 3 && basename(argv[0] ?? '') === 'bash' && argv[1] === '-c';
}

export interface MaskOutcome {
  credentials: BoundCredential[];
  /** Log lines (no values): why something was left unmasked. */
  warnings: string[];
}

/**
 * Masks `env` in place for `argv`: each known credential (built-in or of `providers`) gets its dummy, every other
 * variable holding the same real value too, and Codex's marker variables are set. A credential that cannot be
 * bound (no destination, a value no pattern matches, a local destination under `allowLocalBinding`) stays as it
 * is, with a warning.
 */
export function maskEnvironment(
  env: Record<string, string>,
  argv: readonly string[],
  providers: Map<string, CredentialProviderConfig>,
  book: DummyBook,
  allowLocalBinding = false,
): MaskOutcome {
  const warnings: string[] = [];
  const credentials: BoundCredential[] = [];
  if (!maskableArgv(argv)) return { credentials, warnings: [UNAVAILABLE_FOR_SHELL] };
  let unprotected = false;
  const taken = new Set(Object.values(env));
  const bind = (
    name: string,
    real: string,
    destinations: Destination[],
    headers: HeaderRule[],
    make: () => string | null,
  ) => {
    const dummy = book.dummyFor(name, real, make);
    if (dummy === null || (taken.has(dummy) && env[name] !== dummy)) {
      unprotected = true;
      return;
    }
    credentials.push({ name, real, dummy, destinations, headers });
  };
  for (const source of BUILT_IN_SOURCES) {
    for (const name of source.names) {
      const real = (env[name] ?? '').trim();
      if (real === '' || /[\r\n\0]/.test(real)) continue;
      const destinations = source.destinations(env);
      if (destinations === null) {
        unprotected = true;
        continue;
      }
      const { prefix, minLength } = source.shape(real);
      bind(name, real, destinations, AUTHORIZATION, () => shapedDummy(real, prefix, minLength));
    }
  }
  for (const [providerName, config] of providers) {
    const compiled = compileProvider(providerName, config, env);
    if (!compiled.ok) {
      warnings.push(`ignoring invalid credential provider provider=${providerName} error=${compiled.why}`);
      continue;
    }
    for (const name of config.env) {
      const real = env[name] ?? '';
      if (real === '' || credentials.some((c) => c.name === name)) continue;
      const pattern = compiled.patterns.find((p) => p.test(real));
      // A local destination cannot be told apart from the command's own listeners when it may bind locally.
      if (pattern === undefined || (allowLocalBinding && compiled.destinations.some((d) => isLocalHost(d.host)))) {
        unprotected = true;
        continue;
      }
      bind(name, real, compiled.destinations, compiled.headers, () => patternDummy(pattern, real));
    }
  }
  if (unprotected) warnings.push(NOT_PROTECTED);
  const brokered: [string, string][] = [];
  const aliases: [string, string][] = [];
  for (const [name, value] of Object.entries(env)) {
    const credential = credentials.find((c) => c.real === value.trim() && value !== '');
    if (!credential) continue;
    env[name] = credential.dummy;
    aliases.push([`@alias:${name}`, credential.dummy]);
    if (credentials.some((c) => c.name === name)) brokered.push([name, credential.dummy]);
  }
  env[BROKER_ACTIVE_ENV] = '1';
  if (aliases.length > 0) {
    const byName = (a: [string, string], b: [string, string]) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
    env[BROKERED_CREDENTIALS_ENV] = JSON.stringify([...aliases.sort(byName), ...brokered.sort(byName)]);
  }
  return { credentials, warnings };
}

// ---------------------------------------------------------------------------------------------------------------
// The executor's CA and the leaf certificates it signs.

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;
const crypto = webcrypto;
x509.cryptoProvider.set(crypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);
const EC = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGNING = { name: 'ECDSA', hash: 'SHA-256' } as const;

/** Codex's validity for its CA and leaves (rcgen's defaults). */
const NOT_BEFORE = new Date(Date.UTC(1975, 0, 1));
const NOT_AFTER = new Date(Date.UTC(4096, 0, 1));

/** Leaf certificates kept at once (one per host); the oldest goes first. */
export const MAX_LEAF_CERTIFICATES = 256;

const pemKey = (key: CryptoKey) =>
  KeyObject.from(key as unknown as Parameters<typeof KeyObject.from>[0]).export({
    format: 'pem',
    type: 'pkcs8',
  }) as string;

/**
 * The executor's MITM CA (ECDSA P-256, `CN=network_proxy MITM CA` as Codex's): made at first use, its key only in
 * memory. `bundlePath` is a file (under a private directory, removed by `close`) holding the platform's roots and
 * this CA, which the command's CA variables name.
 */
export class MitmAuthority {
  private readonly leaves = new Map<string, Promise<SecureContext>>();
  private constructor(
    private readonly caCert: x509.X509Certificate,
    private readonly caKey: CryptoKey,
    private readonly leafKeys: CryptoKeyPair,
    private readonly leafKeyPem: string,
    readonly caPem: string,
    private readonly dir: string,
    readonly bundlePath: string,
  ) {}

  static async create(): Promise<MitmAuthority> {
    const keys = (await crypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as CryptoKeyPair;
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: randomBytes(16)
        .toString('hex')
        .replace(/^[89a-f]/, '1'),
      name: 'CN=network_proxy MITM CA',
      notBefore: NOT_BEFORE,
      notAfter: NOT_AFTER,
      signingAlgorithm: SIGNING,
      keys,
      extensions: [
        new x509.BasicConstraintsExtension(true, undefined, true),
        new x509.KeyUsagesExtension(
          x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment | x509.KeyUsageFlags.keyCertSign,
          true,
        ),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    const leafKeys = (await crypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as CryptoKeyPair;
    const caPem = cert.toString('pem');
    const dir = mkdtempSync(join(tmpdir(), 'tether-mitm-'));
    const bundlePath = join(dir, 'ca-bundle.pem');
    writeFileSync(bundlePath, `${[...rootCertificates, caPem].join('\n')}\n`, { mode: 0o644 });
    const authority = new MitmAuthority(
      cert,
      keys.privateKey,
      leafKeys,
      pemKey(leafKeys.privateKey),
      caPem,
      dir,
      bundlePath,
    );
    // The executor's one authority lives as long as the executor: its bundle goes when the process exits.
    process.once('exit', authority.removeBundle);
    return authority;
  }

  /** A TLS server context presenting a certificate for `host`, signed by this CA (cached). */
  contextFor(host: string): Promise<SecureContext> {
    const known = this.leaves.get(host);
    if (known) {
      this.leaves.delete(host);
      this.leaves.set(host, known);
      return known;
    }
    const made = this.makeLeaf(host);
    made.catch(() => this.leaves.delete(host));
    if (this.leaves.size >= MAX_LEAF_CERTIFICATES) this.leaves.delete(this.leaves.keys().next().value!);
    this.leaves.set(host, made);
    return made;
  }

  private async makeLeaf(host: string): Promise<SecureContext> {
    const leaf = await x509.X509CertificateGenerator.create({
      serialNumber: randomBytes(16)
        .toString('hex')
        .replace(/^[89a-f]/, '1'),
      // Codex's leaves (rcgen's): this subject, the host only in the SAN, the CA's validity.
      subject: 'CN=rcgen self signed cert',
      issuer: this.caCert.subject,
      notBefore: NOT_BEFORE,
      notAfter: NOT_AFTER,
      signingAlgorithm: SIGNING,
      publicKey: this.leafKeys.publicKey,
      signingKey: this.caKey,
      extensions: [
        new x509.SubjectAlternativeNameExtension([{ type: isIP(host) === 0 ? 'dns' : 'ip', value: host }]),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        new x509.BasicConstraintsExtension(false),
        await x509.AuthorityKeyIdentifierExtension.create(this.caCert),
      ],
    });
    return createSecureContext({ key: this.leafKeyPem, cert: `${leaf.toString('pem')}\n${this.caPem}` });
  }

  private readonly removeBundle = () => rmSync(this.dir, { recursive: true, force: true });

  close(): void {
    this.leaves.clear();
    process.off('exit', this.removeBundle);
    this.removeBundle();
  }
}

/**
 * What credential masking keeps for the executor's life: its one CA (made at first use, its bundle removed at
 * close) and the dummies (one per variable and real value, so a command sees the same dummy each time). Owned by
 * the ExecServer and shared by its connections, never module state.
 */
export class CredentialMasking {
  readonly dummies = new DummyBook();
  #authority: Promise<MitmAuthority> | null = null;

  authority(): Promise<MitmAuthority> {
    this.#authority ??= MitmAuthority.create();
    const made = this.#authority;
    made.catch(() => {
      if (this.#authority === made) this.#authority = null;
    });
    return made;
  }

  async close(): Promise<void> {
    const authority = this.#authority;
    this.#authority = null;
    (await authority?.catch(() => null))?.close();
  }
}

/** The CA variables of a start with `credentialMasking`: each names the bundle. */
export function caEnvironment(bundlePath: string): Record<string, string> {
  return Object.fromEntries(CA_BUNDLE_ENV_KEYS.map((key) => [key, bundlePath]));
}

/**
 * The roots an intercepted connection's origin must chain to: the platform's, plus the PEM file the executor's
 * own CODEX_CA_CERTIFICATE or SSL_CERT_FILE names (as Codex adds its startup roots).
 */
export function upstreamTrust(env: NodeJS.ProcessEnv = process.env): string[] {
  const extra: string[] = [];
  for (const key of ['CODEX_CA_CERTIFICATE', 'SSL_CERT_FILE']) {
    const path = env[key];
    if (!path) continue;
    try {
      extra.push(readFileSync(path, 'utf8'));
    } catch {
      // An unreadable file adds nothing (Codex logs and goes on with the platform's roots).
    }
  }
  return [...rootCertificates, ...extra];
}

// ---------------------------------------------------------------------------------------------------------------
// Substitution and interception.

function destinationMatches(d: Destination, host: string, port: number, path: string): boolean {
  const hostOk = d.suffix === undefined ? d.host === host : host.endsWith(`.${d.suffix}`);
  return (
    hostOk &&
    d.port === port &&
    (d.path === '/' || path === d.path || path.startsWith(d.path.endsWith('/') ? d.path : `${d.path}/`))
  );
}

/**
 * Request headers with each dummy of a credential bound to `https://host:port/path` replaced by its real value,
 * in the headers that credential travels in only (a Basic `Authorization` is decoded, swapped and re-encoded).
 * Counts the swaps in `swapped`.
 */
export function substituteHeaders(
  rawHeaders: readonly string[],
  credentials: readonly BoundCredential[],
  target: { host: string; port: number; path: string },
): { headers: [string, string][]; swapped: number } {
  const bound = credentials.filter((c) =>
    c.destinations.some((d) => destinationMatches(d, target.host, target.port, target.path)),
  );
  const headers: [string, string][] = [];
  let swapped = 0;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    let value = rawHeaders[i + 1]!;
    for (const credential of bound) {
      if (!credential.headers.some((rule) => rule.header === name.toLowerCase())) continue;
      if (value.includes(credential.dummy)) {
        value = value.split(credential.dummy).join(credential.real);
        swapped++;
        continue;
      }
      const basic = /^(basic\s+)([A-Za-z0-9+/=]+)$/i.exec(value);
      if (basic) {
        const decoded = Buffer.from(basic[2]!, 'base64').toString('utf8');
        if (decoded.includes(credential.dummy)) {
          value = basic[1] + Buffer.from(decoded.split(credential.dummy).join(credential.real)).toString('base64');
          swapped++;
        }
      }
    }
    headers.push([name, value]);
  }
  return { headers, swapped };
}

export interface InterceptLimits {
  /** A TLS handshake with the command, or the origin's answer to start, taking longer than this ends the connection. */
  timeoutMs: number;
  /** Request header bytes an intercepted request may carry. */
  maxHeaderBytes: number;
}

export const DEFAULT_INTERCEPT_LIMITS: InterceptLimits = { timeoutMs: 30_000, maxHeaderBytes: 64 * 1024 };

/** What one proxy counts of its interception (for /metrics and tests). */
export interface InterceptCounters {
  intercepted: number;
  swapped: number;
}

/**
 * One process's interception: which CONNECT targets it terminates (`binds`), and the termination itself
 * (`intercept`): TLS with a leaf of the executor's CA towards the command, HTTP/1.1 requests read off it, each
 * forwarded over TLS to the resolved origin (verified against `trust` for the host's name) with the bound dummies
 * swapped for their real values, and the answer streamed back.
 */
export class CredentialInterceptor {
  readonly counters: InterceptCounters = { intercepted: 0, swapped: 0 };
  private readonly http: Server;

  constructor(
    private readonly authority: MitmAuthority,
    private readonly credentials: readonly BoundCredential[],
    private readonly trust: string[] = upstreamTrust(),
    private readonly limits: InterceptLimits = DEFAULT_INTERCEPT_LIMITS,
  ) {
    this.http = createServer({ maxHeaderSize: limits.maxHeaderBytes, requestTimeout: limits.timeoutMs }, (req, res) =>
      this.forward(req, res),
    );
    this.http.on('clientError', (_err, socket) => socket.destroy());
  }

  /** Whether a CONNECT to `host:port` carries a credential's destination (and so is intercepted). */
  binds(host: string, port: number): boolean {
    return this.credentials.some((c) =>
      c.destinations.some(
        (d) => (d.suffix === undefined ? d.host === host : host.endsWith(`.${d.suffix}`)) && d.port === port,
      ),
    );
  }

  /**
   * Terminates the command's TLS on `client` (already answered `200`), `head` being what it sent after CONNECT;
   * requests go to `address` (the resolved origin; null: `host` is resolved here, to public addresses only) with
   * `host` as its name. `track` owns each socket made here, `count` counts the bytes.
   */
  async intercept(
    client: Duplex,
    head: Buffer,
    target: { host: string; port: number; address: string | null },
    track: (socket: Duplex) => void,
    count: (bytes: number) => void,
  ): Promise<void> {
    if (head.length > 0) client.unshift(head);
    const context = await this.authority.contextFor(target.host);
    const tls = new TLSSocket(client, { isServer: true, secureContext: context, ALPNProtocols: ['http/1.1'] });
    track(tls);
    this.counters.intercepted++;
    const timer = setTimeout(() => tls.destroy(), this.limits.timeoutMs);
    tls.once('secure', () => clearTimeout(timer));
    tls.on('close', () => clearTimeout(timer));
    tls.on('error', () => tls.destroy());
    tls.on('data', (chunk: Buffer) => count(chunk.length));
    this.targets.set(tls, { ...target, track, count });
    this.http.emit('connection', tls);
  }

  private readonly targets = new WeakMap<object, InterceptTarget>();

  private forward(req: IncomingMessage, res: ServerResponse): void {
    const target = this.targets.get(req.socket);
    if (target === undefined) return void res.destroy();
    const path = req.url ?? '/';
    const named = splitHost(req.headers.host ?? '');
    if (!path.startsWith('/') || named !== target.host) {
      // Codex's answer to a request for another host than the CONNECT's (nothing is sent on).
      req.resume();
      plainAnswer(res, 400, 'Bad Request', 'host mismatch');
      return;
    }
    const raw = forwardedHeaders(req.rawHeaders).flat();
    const { headers, swapped } = substituteHeaders(raw, this.credentials, {
      host: target.host,
      port: target.port,
      path: path.replace(/\?.*$/, ''),
    });
    const outgoing: OutgoingHttpHeaders = {};
    // The Host the origin gets names the CONNECT's authority (Codex's: `127.0.0.1` becomes `127.0.0.1:<port>`).
    const authority = `${isIP(target.host) === 6 ? `[${target.host}]` : target.host}${target.port === 443 ? '' : `:${target.port}`}`;
    for (const [name, raw] of headers) {
      const value = name.toLowerCase() === 'host' ? authority : raw;
      const known = outgoing[name];
      outgoing[name] = known === undefined ? value : [...(Array.isArray(known) ? known : [String(known)]), value];
    }
    const failed = () => {
      if (res.headersSent) return void res.destroy();
      req.resume();
      // Codex's wording; the reason is not given (a header of the request may hold a real value).
      plainAnswer(res, 502, 'Bad Gateway', 'mitm upstream error');
    };
    void publicAddress(target.host, target.address).then((address) => {
      if (address === null) return failed();
      this.counters.swapped += swapped;
      const upstream = httpsRequest({
        host: address,
        servername: isIP(target.host) === 0 ? target.host : undefined,
        port: target.port,
        method: req.method,
        path,
        headers: outgoing,
        setHost: false,
        agent: false,
        ca: this.trust,
        timeout: this.limits.timeoutMs,
      });
      upstream.on('socket', (socket) => target.track(socket));
      upstream.on('timeout', () => upstream.destroy(new Error('the origin did not answer in time')));
      upstream.on('response', (answer) => {
        answer.on('data', (chunk: Buffer) => target.count(chunk.length));
        const back: string[] = [];
        for (let i = 0; i + 1 < answer.rawHeaders.length; i += 2) {
          const name = answer.rawHeaders[i]!;
          // The origin's Connection stays where it was (as Codex passes it on); node adds none then.
          const lower = name.toLowerCase();
          if (lower === 'connection' || !HOP_BY_HOP.has(lower)) back.push(name, answer.rawHeaders[i + 1]!);
        }
        res.writeHead(answer.statusCode ?? 502, answer.statusMessage, back);
        answer.pipe(res);
      });
      upstream.on('error', failed);
      req.pipe(upstream);
    }, failed);
  }
}

interface InterceptTarget {
  host: string;
  port: number;
  address: string | null;
  track: (socket: Duplex) => void;
  count: (bytes: number) => void;
}

/** A Host header's host, lowercase, without port or brackets. */
function splitHost(value: string): string {
  const m = /^(?:\[([^\]]+)\]|([^:]+))(?::\d+)?$/.exec(value.trim());
  return (m?.[1] ?? m?.[2] ?? '').toLowerCase();
}

/** `address`, or `host` resolved to an address that is not local; null when there is none. */
async function publicAddress(host: string, address: string | null): Promise<string | null> {
  if (address !== null) return address;
  const found = await lookup(host, { all: true }).catch(() => []);
  if (found.length === 0 || found.some((a) => isLocalHost(a.address))) return null;
  return found[0]!.address;
}

/** A short text answer as Codex's MITM writes it (these headers, in this order), closing the connection. */
function plainAnswer(res: ServerResponse, status: number, text: string, body: string): void {
  res.sendDate = false;
  res.writeHead(status, text, [
    'content-type',
    'text/plain',
    'connection',
    'close',
    'content-length',
    String(Buffer.byteLength(body)),
    'date',
    new Date().toUTCString(),
  ]);
  res.end(body);
}
