import { BlockList, isIPv4, isIPv6 } from 'node:net';

/** A `--trust-proxy` entry that is not an IP address or CIDR block. */
export class TrustProxyError extends Error {
  override name = 'TrustProxyError';
}

/** `::ffff:10.0.0.1` (a dual-stack socket's IPv4 peer) → `10.0.0.1`; anything that is no IP address → null. */
function normalize(text: string): string | null {
  const address = text.trim();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped && isIPv4(mapped[1] as string)) return mapped[1] as string;
  return isIPv4(address) || isIPv6(address) ? address : null;
}

/**
 * The proxies whose `X-Forwarded-For` the relay believes (`--trust-proxy`). A client's address is the
 * socket's peer, unless that peer is trusted: then the forwarded hops are walked from the right (nearest
 * first) and the first one that is not itself a trusted proxy is the client. Nothing trusted (the
 * default): the header is ignored, so a client cannot choose the address its limits are counted under.
 */
export class TrustedProxies {
  private readonly list = new BlockList();
  readonly entries: readonly string[];

  private constructor(entries: readonly string[]) {
    this.entries = entries;
  }

  /** `IP` or `IP/BITS`, IPv4 or IPv6; throws TrustProxyError naming the bad entry. */
  static parse(entries: readonly string[]): TrustedProxies {
    const trusted = new TrustedProxies([...entries]);
    for (const entry of entries) {
      const [ip = '', bits, extra] = entry.trim().split('/');
      const address = normalize(ip);
      const family = address === null ? null : isIPv4(address) ? 'ipv4' : 'ipv6';
      const max = family === 'ipv4' ? 32 : 128;
      const prefix = bits === undefined ? max : /^\d{1,3}$/.test(bits) ? Number(bits) : Number.NaN;
      if (address === null || family === null || extra !== undefined || !(prefix >= 0 && prefix <= max)) {
        throw new TrustProxyError(`not an IP address or CIDR block: ${JSON.stringify(entry)}`);
      }
      trusted.list.addSubnet(address, prefix, family);
    }
    return trusted;
  }

  static none(): TrustedProxies {
    return new TrustedProxies([]);
  }

  trusts(address: string): boolean {
    if (this.entries.length === 0) return false;
    const ip = normalize(address);
    return ip !== null && this.list.check(ip, isIPv4(ip) ? 'ipv4' : 'ipv6');
  }

  /** The client's address for a socket peer and the request's `X-Forwarded-For` (joined or as received). */
  clientAddress(peer: string | undefined, forwardedFor: string | string[] | undefined): string {
    let client = (peer === undefined ? null : normalize(peer)) ?? peer ?? 'unknown';
    if (!this.trusts(client) || forwardedFor === undefined) return client;
    const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor).split(',').reverse();
    for (const hop of hops) {
      const address = normalize(hop);
      // A hop that is no address ends the walk at the last proxy we trust: nothing left of it is believable.
      if (address === null) return client;
      client = address;
      if (!this.trusts(address)) return address;
    }
    return client;
  }
}
