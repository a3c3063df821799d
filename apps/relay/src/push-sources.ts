import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { TrustedProxies, TrustProxyError } from './client-address.js';
import { type Clock, systemClock } from './clock.js';

/** Resolves a host name to every address it has (both families). */
export type Resolver = (host: string) => Promise<string[]>;

const systemResolver: Resolver = async (host) =>
  (await lookup(host, { all: true, verbatim: true })).map((entry) => entry.address);

/** A failed or stale resolution is tried again at most this often, when a push from an unlisted address arrives. */
export const PUSH_SOURCES_REFRESH_MS = 30_000;

// A DNS name: labels of letters, digits and hyphens (a Kubernetes service name, `registry.internal`, `localhost`).
const HOST_NAME =
  /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

/** Whether `entry` is something `--revocation-push-from` takes: an IP, a CIDR block or a host name. */
function classify(entry: string): 'block' | 'host' {
  const text = entry.trim();
  if (/^[\d.]+(\/\d+)?$/.test(text) || text.includes(':') || text.includes('/')) {
    TrustedProxies.parse([text]); // throws TrustProxyError naming it
    return 'block';
  }
  if (HOST_NAME.test(text)) return 'host';
  throw new TrustProxyError(`not an IP address, CIDR block or host name: ${JSON.stringify(entry)}`);
}

/**
 * The addresses a revocation push is taken from (`POST /v1/revocations`): the registry's, when the relay knows them.
 * `any()` (no `--registry`, no `--revocation-push-from`) takes every address, as before. Otherwise the IPs and CIDR
 * blocks given, plus the addresses the host names given resolve to (`--revocation-push-from`, else `--registry`'s
 * host), resolved again (at most every 30 s) when a push comes from an address not listed, so a registry that
 * moved, or a new replica behind a headless service name, is followed.
 */
export class PushSources {
  readonly #blocks: TrustedProxies;
  readonly #hosts: readonly string[];
  #resolved: TrustedProxies = TrustedProxies.parse([]);
  #resolving: Promise<void> | null = null;
  #lastAttempt = Number.NEGATIVE_INFINITY;

  private constructor(
    blocks: readonly string[],
    hosts: readonly string[],
    readonly known: boolean,
    private readonly resolver: Resolver,
    private readonly clock: Clock,
  ) {
    this.#blocks = TrustedProxies.parse(blocks);
    this.#hosts = hosts;
  }

  /** Every address (the registry's addresses are not known). */
  static any(): PushSources {
    return new PushSources([], [], false, systemResolver, systemClock);
  }

  /** Throws TrustProxyError naming an entry that is no IP address, CIDR block or host name. */
  static validate(entries: readonly string[]): void {
    for (const entry of entries) classify(entry);
  }

  /**
   * These IPs, CIDR blocks and host names (resolved). Until a host resolves, only the blocks are taken (heartbeat
   * answers still carry every revocation); `ready` resolves after the first resolution, whatever its outcome, with the
   * addresses taken then or the resolution's error.
   */
  static of(
    entries: readonly string[],
    options: { resolver?: Resolver; now?: Clock } = {},
  ): { sources: PushSources; ready: Promise<string[] | Error> } {
    const blocks: string[] = [];
    const hosts: string[] = [];
    for (const entry of entries) (classify(entry) === 'block' ? blocks : hosts).push(entry.trim());
    const sources = new PushSources(
      blocks,
      hosts,
      true,
      options.resolver ?? systemResolver,
      options.now ?? systemClock,
    );
    const ready =
      hosts.length === 0
        ? Promise.resolve([...blocks])
        : sources.#resolve().then((r) => (r instanceof Error ? r : (sources.entries() as string[])));
    return { sources, ready };
  }

  /** The addresses of `registryUrl`'s host (an IP literal as it is). */
  static ofRegistry(
    registryUrl: string,
    options: { resolver?: Resolver; now?: Clock } = {},
  ): { sources: PushSources; ready: Promise<string[] | Error> } {
    const host = new URL(registryUrl).hostname.replace(/^\[(.*)\]$/, '$1');
    return PushSources.of([host], options);
  }

  /** Only these IPs and CIDR blocks (no resolution); throws TrustProxyError naming a bad entry. */
  static fixed(entries: readonly string[]): PushSources {
    for (const entry of entries) {
      if (classify(entry) !== 'block') throw new TrustProxyError(`not an IP address or CIDR block: ${entry}`);
    }
    return PushSources.of(entries).sources;
  }

  /** The addresses and blocks taken now; null for any. */
  entries(): readonly string[] | null {
    if (!this.known) return null;
    return [...this.#blocks.entries, ...this.#resolved.entries];
  }

  /** Whether a push from `address` is taken; a miss, with host names to resolve, starts a resolution (rate-limited). */
  allows(address: string): boolean {
    if (!this.known) return true;
    if (this.#blocks.trusts(address) || this.#resolved.trusts(address)) return true;
    if (this.#hosts.length > 0 && this.clock() - this.#lastAttempt >= PUSH_SOURCES_REFRESH_MS) void this.#resolve();
    return false;
  }

  #resolve(): Promise<string[] | Error> {
    this.#lastAttempt = this.clock();
    const attempt = Promise.all(this.#hosts.map((host) => this.resolver(host))).then(
      (lists) => {
        const addresses = lists.flat().filter((address) => isIP(address) !== 0);
        this.#resolved = TrustedProxies.parse(addresses);
        return addresses;
      },
      (err: Error) => err,
    );
    this.#resolving = attempt.then(() => undefined);
    return attempt;
  }

  /** The resolution under way, if any (tests). */
  settled(): Promise<void> {
    return this.#resolving ?? Promise.resolve();
  }
}
