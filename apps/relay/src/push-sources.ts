import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { TrustedProxies } from './client-address.js';

/** Resolves a host name to every address it has (both families). */
export type Resolver = (host: string) => Promise<string[]>;

const systemResolver: Resolver = async (host) =>
  (await lookup(host, { all: true, verbatim: true })).map((entry) => entry.address);

/** A failed or stale resolution is tried again at most this often, when a push from an unlisted address arrives. */
export const PUSH_SOURCES_REFRESH_MS = 30_000;

/**
 * The addresses a revocation push is taken from (`POST /v1/revocations`): the registry's, when the relay knows it.
 * `any()` (no `--registry`, no `--revocation-push-from`) takes every address, as before; `fixed()` the IPs and
 * CIDR blocks of `--revocation-push-from`; `ofRegistry()` the addresses the `--registry` URL's host resolves to,
 * resolved again (at most every 30 s) when a push comes from another address, so a registry that moved is followed.
 */
export class PushSources {
  #allowed: TrustedProxies | null;
  #resolving: Promise<void> | null = null;
  #lastAttempt = 0;

  private constructor(
    allowed: TrustedProxies | null,
    readonly known: boolean,
    private readonly host: string | null,
    private readonly resolver: Resolver,
    private readonly clock: () => number,
  ) {
    this.#allowed = allowed;
  }

  /** Every address (the registry's addresses are not known). */
  static any(): PushSources {
    return new PushSources(null, false, null, systemResolver, Date.now);
  }

  /** Exactly these IPs and CIDR blocks; throws TrustProxyError naming a bad entry. */
  static fixed(entries: readonly string[]): PushSources {
    return new PushSources(TrustedProxies.parse(entries), true, null, systemResolver, Date.now);
  }

  /**
   * The addresses of `registryUrl`'s host. Until a resolution succeeds, no address is taken (heartbeat answers still
   * carry every revocation); `ready` resolves after the first attempt, whatever its outcome.
   */
  static ofRegistry(
    registryUrl: string,
    options: { resolver?: Resolver; now?: () => number } = {},
  ): { sources: PushSources; ready: Promise<string[] | Error> } {
    const host = new URL(registryUrl).hostname.replace(/^\[(.*)\]$/, '$1');
    const resolver = options.resolver ?? systemResolver;
    if (isIP(host) !== 0) {
      return { sources: PushSources.fixed([host]), ready: Promise.resolve([host]) };
    }
    const sources = new PushSources(TrustedProxies.parse([]), true, host, resolver, options.now ?? Date.now);
    return { sources, ready: sources.#resolve() };
  }

  /** The addresses (or blocks) taken now; null for any. */
  entries(): readonly string[] | null {
    return this.#allowed?.entries ?? null;
  }

  /** Whether a push from `address` is taken; a miss against a resolved host starts a new resolution (rate-limited). */
  allows(address: string): boolean {
    if (this.#allowed === null) return true;
    if (this.#allowed.trusts(address)) return true;
    if (this.host !== null && this.clock() - this.#lastAttempt >= PUSH_SOURCES_REFRESH_MS) void this.#resolve();
    return false;
  }

  #resolve(): Promise<string[] | Error> {
    const host = this.host as string;
    this.#lastAttempt = this.clock();
    const attempt = this.resolver(host).then(
      (addresses) => {
        if (addresses.length > 0) this.#allowed = TrustedProxies.parse(addresses);
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
