import { BlockList, isIP } from 'node:net';

/**
 * Which targets `tcp/connect` may reach (`--forward-allow`, `[forward] allow`). Each entry is
 *
 *     any | loopback | IPv4[/bits] | IPv6[/bits] | [IPv6[/bits]] | host.name      with an optional :PORT,
 *                                                                                  :LOW-HIGH or :*
 *
 * (an IPv6 entry with a port needs the brackets: `[fd00::/8]:22`). The host a client names is resolved on
 * the executor and every address is checked, so a name that resolves to a forbidden address is refused
 * (no DNS-rebinding bypass: the connection goes to the address that was checked). A name entry allows the
 * addresses that name resolves to, when the client asks for that name.
 */
export class ForwardPolicyError extends Error {
  override readonly name = 'ForwardPolicyError';

  /** `problem`: what is wrong with the entries, without naming where they came from (flag or config key). */
  constructor(readonly problem: string) {
    super(`--forward-allow: ${problem}`);
  }
}

/** The default: this machine only. */
export const DEFAULT_FORWARD_ALLOW: readonly string[] = ['loopback'];

interface PortRange {
  low: number;
  high: number;
}

type Rule =
  | { kind: 'any'; ports: PortRange }
  | { kind: 'addresses'; list: BlockList; ports: PortRange }
  | { kind: 'name'; name: string; ports: PortRange };

const ALL_PORTS: PortRange = { low: 1, high: 65535 };
const HOST_NAME = /^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

function parsePorts(text: string, entry: string): PortRange {
  if (text === '*') return ALL_PORTS;
  const match = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(text);
  const low = Number(match?.[1]);
  const high = match?.[2] === undefined ? low : Number(match[2]);
  if (!match || low < 1 || high > 65535 || low > high) {
    throw new ForwardPolicyError(`${JSON.stringify(entry)}: port must be N, N-M (1-65535) or *`);
  }
  return { low, high };
}

function addressList(address: string, bits: string | undefined, entry: string): BlockList {
  const family = isIP(address);
  if (family === 0) throw new ForwardPolicyError(`${JSON.stringify(entry)}: not an IP address`);
  const type = family === 4 ? 'ipv4' : 'ipv6';
  const list = new BlockList();
  if (bits === undefined) {
    list.addAddress(address, type);
    return list;
  }
  const prefix = Number(bits);
  if (!/^\d{1,3}$/.test(bits) || prefix > (family === 4 ? 32 : 128)) {
    throw new ForwardPolicyError(`${JSON.stringify(entry)}: bad prefix length /${bits}`);
  }
  list.addSubnet(address, prefix, type);
  return list;
}

function loopbackList(): BlockList {
  const list = new BlockList();
  list.addSubnet('127.0.0.0', 8, 'ipv4');
  list.addAddress('::1', 'ipv6');
  return list;
}

function parseEntry(raw: string): Rule {
  const entry = raw.trim().toLowerCase();
  if (entry === '') throw new ForwardPolicyError('empty entry');
  let host: string;
  let ports = ALL_PORTS;
  if (entry.startsWith('[')) {
    const close = entry.indexOf(']');
    if (close < 0) throw new ForwardPolicyError(`${JSON.stringify(raw)}: missing ]`);
    host = entry.slice(1, close);
    const rest = entry.slice(close + 1);
    if (rest !== '') {
      if (!rest.startsWith(':')) throw new ForwardPolicyError(`${JSON.stringify(raw)}: expected :PORT`);
      ports = parsePorts(rest.slice(1), raw);
    }
    if (!host.includes(':')) throw new ForwardPolicyError(`${JSON.stringify(raw)}: [ ] is for IPv6`);
  } else {
    const colons = entry.split(':').length - 1;
    if (colons === 1) {
      const at = entry.indexOf(':');
      host = entry.slice(0, at);
      ports = parsePorts(entry.slice(at + 1), raw);
    } else {
      host = entry; // no port, or a bare IPv6 address
    }
  }
  if (host === 'any' || host === '*') return { kind: 'any', ports };
  if (host === 'loopback' || host === 'localhost') return { kind: 'addresses', list: loopbackList(), ports };
  const slash = host.indexOf('/');
  const address = slash < 0 ? host : host.slice(0, slash);
  const bits = slash < 0 ? undefined : host.slice(slash + 1);
  if (isIP(address) !== 0) return { kind: 'addresses', list: addressList(address, bits, raw), ports };
  if (bits === undefined && HOST_NAME.test(host)) return { kind: 'name', name: host.replace(/\.$/, ''), ports };
  throw new ForwardPolicyError(
    `${JSON.stringify(raw)}: expected any, loopback, an IP address or CIDR, or a host name (each with an optional :PORT)`,
  );
}

/** `::ffff:1.2.3.4` is checked as the IPv4 address it carries. */
function unmapped(address: string): { address: string; type: 'ipv4' | 'ipv6' } {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped?.[1]) return { address: mapped[1], type: 'ipv4' };
  return { address, type: isIP(address) === 4 ? 'ipv4' : 'ipv6' };
}

export class ForwardPolicy {
  private constructor(
    private readonly rules: readonly Rule[],
    /** The entries as given, for messages. */
    readonly entries: readonly string[],
  ) {}

  /** Parses `--forward-allow` entries (each may itself be a comma-separated list); throws ForwardPolicyError. */
  static parse(entries: readonly string[]): ForwardPolicy {
    const flat = entries.flatMap((entry) => entry.split(',')).map((entry) => entry.trim());
    if (flat.length === 0 || flat.every((entry) => entry === '')) {
      throw new ForwardPolicyError('no entries (use --no-forward to disable forwarding)');
    }
    return new ForwardPolicy(flat.map(parseEntry), flat);
  }

  /** Whether `address:port`, reached by the client's name `requestedHost`, may be connected to. */
  allows(address: string, port: number, requestedHost: string): boolean {
    const target = unmapped(address);
    const name = requestedHost.trim().toLowerCase().replace(/\.$/, '');
    return this.rules.some((rule) => {
      if (port < rule.ports.low || port > rule.ports.high) return false;
      switch (rule.kind) {
        case 'any':
          return true;
        case 'addresses':
          return rule.list.check(target.address, target.type);
        case 'name':
          return rule.name === name;
        default:
          return false;
      }
    });
  }
}

/** How one executor forwards (`--forward-allow`, `--no-forward`, `[forward]`). */
export interface ForwardOptions {
  /** null: forwarding is off, and `tcpForward` is not advertised. */
  policy: ForwardPolicy | null;
  /** Forwarded connections at once per executor connection. */
  maxStreams?: number;
}

/** The forward options of a config: `forwardEnabled`, `forwardAllow`, `forwardMaxConnections`. */
export function forwardOptions(config: {
  forwardEnabled: boolean;
  forwardAllow: readonly string[];
  forwardMaxConnections: number;
}): ForwardOptions {
  return {
    policy: config.forwardEnabled ? ForwardPolicy.parse(config.forwardAllow) : null,
    maxStreams: config.forwardMaxConnections,
  };
}
