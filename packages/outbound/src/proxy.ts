import type { Agent } from 'node:http';
import { isIP } from 'node:net';

/**
 * Outbound HTTP through the proxies the environment names, read as reqwest (Codex's HTTP client) reads
 * them:
 * - `HTTPS_PROXY` (or `https_proxy`) for https:// and wss:// targets, `HTTP_PROXY` (or `http_proxy`) for
 *   http:// and ws:// ones, `ALL_PROXY` (or `all_proxy`) for both when the scheme's own is unset;
 * - `NO_PROXY` (or `no_proxy`): comma-separated; `*` matches every host; an IP address or a CIDR block
 *   matches addresses; any other entry is a domain that matches itself and its subdomains (`example.com` and
 *   `.example.com` are the same). An entry may end in `:PORT` to match that port only (as curl allows).
 *   Loopback is not special: like reqwest, a proxy applies to 127.0.0.1 unless NO_PROXY says otherwise.
 * - A proxy URL without a scheme is http://. http:// and https:// proxies are supported; a proxy URL's
 *   user and password become `Proxy-Authorization: Basic`, and are never shown in messages.
 *
 * Plain http:// requests go to the proxy in absolute form (the proxy forwards them); https:// requests and
 * every WebSocket go through a CONNECT tunnel, so the proxy sees only the target's host and port.
 */

export type ProxyEnv = Readonly<Record<string, string | undefined>>;

export class ProxyConfigError extends Error {
  override readonly name = 'ProxyConfigError';
}

export interface ProxySettings {
  readonly http: URL | null;
  readonly https: URL | null;
  readonly noProxy: NoProxy | null;
}

function variable(env: ProxyEnv, name: string): { name: string; value: string } | null {
  for (const key of [name, name.toLowerCase()]) {
    const value = env[key]?.trim();
    if (value) return { name: key, value };
  }
  return null;
}

function parseProxy(found: { name: string; value: string } | null): URL | null {
  if (!found) return null;
  const text = /^[a-z][a-z0-9+.-]*:\/\//i.test(found.value) ? found.value : `http://${found.value}`;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ProxyConfigError(`${found.name} is not a proxy URL (expected http://HOST:PORT)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ProxyConfigError(
      `${found.name} names a ${url.protocol.slice(0, -1)} proxy; only http:// and https:// proxies are supported`,
    );
  }
  if (url.hostname === '') throw new ProxyConfigError(`${found.name} has no proxy host`);
  return url;
}

/** The proxies `env` names (process.env by default); throws ProxyConfigError on a malformed one. */
export function proxySettingsFromEnv(env: ProxyEnv = process.env): ProxySettings {
  const all = parseProxy(variable(env, 'ALL_PROXY'));
  const noProxy = variable(env, 'NO_PROXY');
  return {
    http: parseProxy(variable(env, 'HTTP_PROXY')) ?? all,
    https: parseProxy(variable(env, 'HTTPS_PROXY')) ?? all,
    noProxy: noProxy ? NoProxy.parse(noProxy.value) : null,
  };
}

/** No proxy at all: what a caller that must not be proxied (or a test) passes. */
export const DIRECT: ProxySettings = Object.freeze({ http: null, https: null, noProxy: null });

interface Cidr {
  readonly family: 4 | 6;
  readonly bits: bigint;
  readonly prefix: number;
}

function addressBits(address: string): { family: 4 | 6; bits: bigint } | null {
  const family = isIP(address);
  if (family === 4) {
    const bits = address.split('.').reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
    return { family: 4, bits };
  }
  if (family !== 6) return null;
  // Expand `::` and a trailing dotted quad into eight 16-bit groups.
  let text = address.toLowerCase();
  const quad = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (quad) {
    const v4 = addressBits(quad[1]!)!.bits;
    text = `${text.slice(0, -quad[1]!.length)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? left : [...left, ...Array(8 - left.length - right.length).fill('0'), ...right];
  return { family: 6, bits: groups.reduce((acc, group) => (acc << 16n) | BigInt(Number.parseInt(group, 16)), 0n) };
}

function inCidr(address: { family: 4 | 6; bits: bigint }, cidr: Cidr): boolean {
  if (address.family !== cidr.family) return false;
  const width = cidr.family === 4 ? 32 : 128;
  const shift = BigInt(width - cidr.prefix);
  return address.bits >> shift === cidr.bits >> shift;
}

/** A parsed NO_PROXY list. */
export class NoProxy {
  private constructor(
    private readonly all: boolean,
    private readonly domains: ReadonlyArray<{ domain: string; port: string | null }>,
    private readonly blocks: readonly Cidr[],
  ) {}

  static parse(list: string): NoProxy {
    let all = false;
    const domains: Array<{ domain: string; port: string | null }> = [];
    const blocks: Cidr[] = [];
    for (const raw of list.split(',')) {
      const entry = raw.trim().toLowerCase();
      if (entry === '') continue;
      if (entry === '*') {
        all = true;
        continue;
      }
      const slash = entry.indexOf('/');
      const bare = entry.replace(/^\[(.*)\]$/, '$1');
      const address = addressBits(slash === -1 ? bare : entry.slice(0, slash));
      if (address) {
        const width = address.family === 4 ? 32 : 128;
        const prefix = slash === -1 ? width : Number(entry.slice(slash + 1));
        if (Number.isInteger(prefix) && prefix >= 0 && prefix <= width) blocks.push({ ...address, prefix });
        continue;
      }
      // host:port or [v6]:port
      const withPort = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(entry);
      if (withPort) {
        const host = withPort[1]!.replace(/^\[(.*)\]$/, '$1');
        const hostAddress = addressBits(host);
        if (hostAddress) domains.push({ domain: host, port: withPort[2]! });
        else domains.push({ domain: host.replace(/^\.+/, ''), port: withPort[2]! });
        continue;
      }
      domains.push({ domain: entry.replace(/^\*?\.+/, ''), port: null });
    }
    return new NoProxy(all, domains, blocks);
  }

  /** Whether a request to `url` goes direct. */
  matches(url: URL): boolean {
    if (this.all) return true;
    const host = url.hostname.toLowerCase().replace(/^\[(.*)\]$/, '$1');
    const port = url.port || defaultPort(url.protocol);
    const address = addressBits(host);
    if (address && this.blocks.some((block) => inCidr(address, block))) return true;
    return this.domains.some(
      ({ domain, port: only }) =>
        (only === null || only === port) && (host === domain || (!address && host.endsWith(`.${domain}`))),
    );
  }
}

function defaultPort(protocol: string): string {
  return protocol === 'https:' || protocol === 'wss:' ? '443' : '80';
}

/** The proxy a request to `target` goes through, or null for a direct one. */
export function proxyFor(target: URL, settings: ProxySettings): URL | null {
  const secure = target.protocol === 'https:' || target.protocol === 'wss:';
  const proxy = secure ? settings.https : settings.http;
  if (!proxy) return null;
  if (settings.noProxy?.matches(target)) return null;
  return proxy;
}

/** A proxy for messages: scheme, host and port, never its credentials. */
export function describeProxy(proxy: URL): string {
  return `${proxy.protocol}//${proxy.host}`;
}

/** `Proxy-Authorization` for a proxy URL with credentials, else null. */
export function proxyAuthorization(proxy: URL): string | null {
  if (proxy.username === '' && proxy.password === '') return null;
  const credentials = `${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`;
  return `Basic ${Buffer.from(credentials).toString('base64')}`;
}

/**
 * An agent that opens a CONNECT tunnel through `proxy` (for https:// and WebSocket targets). The library
 * loads on first use: it brings node:tls, node:https and node:assert, about 10 ms of a command's start that
 * a command through no proxy does not pay.
 */
export async function tunnelAgent(proxy: URL): Promise<Agent> {
  // A CommonJS package: Node's import() gives its exports as `default` (and by name), a bundle's as `default`.
  type Module = typeof import('https-proxy-agent');
  const loaded = (await import('https-proxy-agent')) as Module & { default?: Module };
  const { HttpsProxyAgent } = loaded.default ?? loaded;
  return new HttpsProxyAgent(proxy, { keepAlive: false }) as unknown as Agent;
}

/**
 * The `agent` for a WebSocket to `target` (ws's option): a CONNECT tunnel when a proxy applies, else
 * undefined (ws dials directly).
 */
export async function webSocketAgent(target: URL, settings: ProxySettings): Promise<Agent | undefined> {
  const proxy = proxyFor(target, settings);
  return proxy ? await tunnelAgent(proxy) : undefined;
}
