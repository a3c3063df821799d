// Codex's managed network proxy (capability `networkProxyLaunch`; CODEX-FINDINGS, findings-network-proxy.md):
// a `process/start` with `networkProxy` runs behind an HTTP proxy of its own on 127.0.0.1, started before the
// command and closed with it. Every request (absolute-form, origin-form with Host, CONNECT) is decided by
// domain as Codex decides it, answered with Codex's 403s when denied, and reported as `network/policyDecision`.

import { lookup } from 'node:dns/promises';
import { closeSync } from 'node:fs';
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import {
  BlockList,
  createServer as createNetServer,
  isIP,
  type Server as NetServer,
  Socket,
  connect as tcpConnect,
} from 'node:net';
import type { Duplex } from 'node:stream';
import {
  DecodeError,
  decode,
  type NetworkPolicyDecisionNotification,
  type NetworkPolicyRequestParams,
  NetworkPolicyRequestResult,
  type NetworkProxyConfig,
} from '@tether/exec-protocol';
import type { OutboundAnswer } from '@tether/jsonrpc';
import type { NativePipe } from '@tether/native-pipe';
import type { CredentialInterceptor } from './credential-masking.js';
import { forwardedHeaders, HOP_BY_HOP } from './proxy-headers.js';

export type PolicyDecision = Omit<NetworkPolicyDecisionNotification, 'processId'>;

export interface ManagedProxyLimits {
  /** Connections open at once (clients and tunnels); more are refused. */
  maxConnections: number;
  /** Bytes relayed in both directions over the proxy's life; past it every connection is cut. */
  maxBytes: number;
  /** A connection with nothing relayed for this long is closed. */
  idleMs: number;
}

export const DEFAULT_PROXY_LIMITS: ManagedProxyLimits = {
  maxConnections: 128,
  maxBytes: 8 * 1024 * 1024 * 1024,
  idleMs: 5 * 60_000,
};

const BLOCKED: Record<string, { header: string; message: string }> = {
  denied: { header: 'blocked-by-denylist', message: 'Domain denied by the sandbox policy.' },
  not_allowed: { header: 'blocked-by-allowlist', message: 'Domain not in allowlist.' },
  not_allowed_local: {
    header: 'blocked-by-allowlist',
    message: 'Sandbox policy blocks local/private network addresses.',
  },
  method_not_allowed: { header: 'blocked-by-method-policy', message: 'Method not allowed in limited mode.' },
  mitm_required: { header: 'blocked-by-mitm-required', message: 'MITM required for limited HTTPS.' },
};

/** The 403's header and message for `reason`: a reason of the client's own (`network/policyRequest`) is Codex's generic one. */
const blocked = (reason: string) =>
  Object.hasOwn(BLOCKED, reason)
    ? BLOCKED[reason]!
    : { header: 'blocked-by-policy', message: 'Request blocked by network policy.' };

/**
 * A decision's reason as a metric label: Codex's own reasons as they are, a deciding client's own words
 * (`network/policyRequest`, any text) as `other`, so that the label's values stay a small set.
 */
export const reasonLabel = (reason: string): string =>
  reason === 'allow' || reason === 'policy_denied' || Object.hasOwn(BLOCKED, reason) ? reason : 'other';

/** What `network/policyRequest` asks the client about: one destination. */
export type PolicyQuestion = NetworkPolicyRequestParams['request'];

/** The client's verdict on a host put to it (capability `networkProxyReviewDomains`). */
export type Decider = (question: PolicyQuestion) => Promise<{ allow: true } | { allow: false; reason: string }>;

/** Longest deny reason of the client's taken as it is (Tether's bound; a longer one is `not_allowed`). */
const MAX_CLIENT_REASON = 1024;

/**
 * The verdict in a client's answer to `network/policyRequest`, as Codex reads it: `{decision: {type: "allow"}}`
 * allows; `{type: "deny", reason}` denies for that reason (empty: `policy_denied`); anything else (an error, no
 * answer, another shape, a reason with control characters) denies as `not_allowed`.
 */
export function verdictOf(answer: OutboundAnswer): { allow: true } | { allow: false; reason: string } {
  if (answer.kind !== 'result') return { allow: false, reason: 'not_allowed' };
  let decided: NetworkPolicyRequestResult;
  try {
    decided = decode(NetworkPolicyRequestResult, answer.result);
  } catch (err) {
    if (err instanceof DecodeError) return { allow: false, reason: 'not_allowed' };
    throw err;
  }
  const decision = decided.decision;
  if (decision.type === 'allow') return { allow: true };
  const reason = decision.reason;
  if (typeof reason !== 'string' || /[\u0000-\u001f\u007f]/.test(reason) || reason.length > MAX_CLIENT_REASON) {
    return { allow: false, reason: 'not_allowed' };
  }
  return { allow: false, reason: reason === '' ? 'policy_denied' : reason };
}

/**
 * Loopback, private, link-local, CGNAT and unspecified ranges, and the special-purpose ones Codex refuses as
 * such too (`not_allowed_local`: IETF protocol assignments, documentation, benchmarking, reserved, multicast;
 * FINDINGS-transparent-tcp.md): what Codex calls local/private addresses.
 */
const LOCAL = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  LOCAL.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  LOCAL.addSubnet(net, prefix, 'ipv6');
}

function isLocalAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return false;
  const mapped = family === 6 && /^::ffff:\d+\.\d+\.\d+\.\d+$/i.test(address) ? address.slice(7) : null;
  if (mapped !== null) return LOCAL.check(mapped, 'ipv4');
  return LOCAL.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

const isLocalName = (host: string) => host === 'localhost' || host.endsWith('.localhost') || isLocalAddress(host);

/** `pattern` matches `host` (both lowercase): exact, `*.d` a subdomain of d, `**.d` d or a subdomain. */
function matches(pattern: string, host: string): boolean {
  if (pattern.startsWith('**.')) {
    const apex = pattern.slice(3);
    return host === apex || host.endsWith(`.${apex}`);
  }
  if (pattern.startsWith('*.')) return host.endsWith(pattern.slice(1));
  return pattern === host;
}

/** What a host's check came to: the verdict, and the address to connect to when it is allowed. */
interface Verdict {
  /** `allow`, one of Codex's reasons, or a deny reason of the client's. */
  reason: string;
  source: 'baseline_policy' | 'decider';
  /**
   * Forwarded without a decision. Never so since allowLocalBinding was found not to forward local hosts unasked
   * (FINDINGS-transparent-tcp.md); kept for the call sites until the credential-masking change has landed.
   */
  silent: boolean;
  address: string | null;
}

export class DomainPolicy {
  private readonly allow: string[] = [];
  private readonly deny: string[] = [];
  private readonly review: string[];

  /**
   * `decider`: the client that opted in to `network/policyRequest`, asked about each host the deny list does
   * not name that the allow list does not allow or `reviewDomains` names (as Codex does); null: none is asked.
   */
  constructor(
    private readonly config: NetworkProxyConfig,
    private readonly decider: Decider | null = null,
  ) {
    for (const [pattern, permission] of Object.entries(config.domains ?? {})) {
      const lower = pattern.toLowerCase();
      if (permission === 'deny') this.deny.push(lower);
      else if (permission === 'allow') this.allow.push(lower);
    }
    this.review = (config.reviewDomains ?? []).map((p) => p.toLowerCase());
  }

  get limited(): boolean {
    return this.config.mode === 'limited';
  }

  /**
   * The verdict on `question.host` (lowercase, no brackets), asking the decider where it must and resolving
   * a name that is allowed.
   */
  async check(question: PolicyQuestion): Promise<Verdict> {
    const host = question.host;
    const baseline = { source: 'baseline_policy', silent: false } as const;
    // With allowLocalBinding a local host is decided as any other (named: allowed; else not_allowed), as Codex's.
    const allowLocal = this.config.allowLocalBinding;
    if (isLocalName(host) && !allowLocal) {
      const named = this.allow.includes(host) && !this.deny.some((p) => matches(p, host));
      return { ...baseline, reason: named ? 'allow' : 'not_allowed_local', address: literalOrNull(host) };
    }
    if (this.deny.some((p) => matches(p, host))) return { ...baseline, reason: 'denied', address: null };
    const listed = this.allow.some((p) => matches(p, host));
    let source: Verdict['source'] = 'baseline_policy';
    if (this.decider !== null && (!listed || this.review.some((p) => matches(p, host)))) {
      const verdict = await this.decider(question);
      if (!verdict.allow) return { reason: verdict.reason, source: 'decider', silent: false, address: null };
      source = 'decider';
    } else if (!listed) {
      return { ...baseline, reason: 'not_allowed', address: null };
    }
    if (isIP(host) !== 0) return { reason: 'allow', source, silent: false, address: host };
    // With allowLocalBinding nothing is refused for its address, so an allowed name is not resolved here: Codex
    // answers its CONNECT 200 (and intercepts a credential's destination) even when it resolves nowhere.
    if (this.config.allowLocalBinding) return { reason: 'allow', source, silent: false, address: null };
    // An allowed name must resolve, and only to public addresses (nothing local reached through a name).
    const addresses = await lookup(host, { all: true }).catch(() => []);
    if (addresses.length === 0 || (!allowLocal && addresses.some((a) => isLocalAddress(a.address)))) {
      return { ...baseline, reason: 'not_allowed_local', address: null };
    }
    return { reason: 'allow', source, silent: false, address: addresses[0]!.address };
  }
}

/** `server` listening (by `how`), or the error it could not listen for. */
function listen<S extends Server | NetServer>(server: S, how: (server: S, done: () => void) => void): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    how(server, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

const literalOrNull = (host: string) => (isIP(host) === 0 ? null : host);

const LIMITED_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Splits `host[:port]` (IPv6 in brackets) into a lowercase host without brackets and a port. */
function splitAuthority(authority: string, defaultPort: number): { host: string; port: number } | null {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+))(?::(\d{1,5}))?$/.exec(authority);
  if (!m) return null;
  const port = m[3] === undefined ? defaultPort : Number(m[3]);
  if (port < 1 || port > 65535) return null;
  return { host: (m[1] ?? m[2]!).toLowerCase(), port };
}

const httpDate = () => new Date().toUTCString();

/** The 16 bytes of an IPv6 address as text, compressed as node writes it (lowercase, no brackets). */
function ipv6Text(raw: Buffer): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(raw.readUInt16BE(i).toString(16));
  return new URL(`http://[${groups.join(':')}]/`).hostname.slice(1, -1);
}

/**
 * One process's proxy: an HTTP listener on 127.0.0.1 (port 0), its decisions reported to `onDecision`, and for
 * a sandboxed command its relay's channels (`openRelayChannel`), over which the relay (proxy-relay.ts) gets
 * each upstream connection as a descriptor. `close` ends the listener, every connection and every channel;
 * it is idempotent.
 */
export class ManagedProxy {
  private readonly server: Server;
  /** The SOCKS5 listener (`enableSocks5`), null without one. */
  private readonly socks: NetServer | null;
  private readonly sockets = new Set<Duplex>();
  /** The relay channels open: each one's control socket (its pass socket goes with it). */
  private readonly channels = new Set<Socket>();
  private relayed = 0;
  private closed = false;

  private constructor(
    private readonly policy: DomainPolicy,
    private readonly onDecision: (decision: PolicyDecision) => void,
    private readonly limits: ManagedProxyLimits,
    enableSocks5: boolean,
    /** Credential masking: CONNECTs to a bound destination are intercepted by it (credential-masking.ts). */
    private readonly interceptor: CredentialInterceptor | null,
  ) {
    this.server = createServer(
      { requestTimeout: limits.idleMs, headersTimeout: Math.min(30_000, limits.idleMs) },
      (req, res) => {
        void this.onRequest(req, res).catch((err: unknown) => this.fail(res, err));
      },
    );
    this.server.maxConnections = limits.maxConnections;
    this.server.on('connection', (socket: Socket) => this.track(socket));
    this.server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      void this.onConnect(req, socket, head).catch(() => socket.destroy());
    });
    this.server.on('clientError', (_err, socket) => socket.destroy());
    this.socks = enableSocks5 ? createNetServer({ allowHalfOpen: false }, (socket) => this.onSocks(socket)) : null;
    if (this.socks) this.socks.maxConnections = limits.maxConnections;
  }

  static async start(
    config: NetworkProxyConfig,
    onDecision: (decision: PolicyDecision) => void,
    limits: ManagedProxyLimits = DEFAULT_PROXY_LIMITS,
    decider: Decider | null = null,
    interceptor: CredentialInterceptor | null = null,
  ): Promise<ManagedProxy> {
    const policy = new DomainPolicy(config, decider);
    const proxy = new ManagedProxy(policy, onDecision, limits, config.enableSocks5, interceptor);
    try {
      await listen(proxy.server, (server, done) => server.listen(0, '127.0.0.1', done));
      proxy.listenedPort = (proxy.server.address() as { port: number }).port;
      if (proxy.socks) {
        await listen(proxy.socks, (server, done) => server.listen(0, '127.0.0.1', done));
        proxy.socksListenedPort = (proxy.socks.address() as { port: number }).port;
      }
    } catch (err) {
      proxy.close();
      throw err;
    }
    return proxy;
  }

  /** The TCP listener's port (still known once closed). */
  get port(): number {
    return this.listenedPort;
  }
  private listenedPort = 0;

  /** The SOCKS5 listener's port, null without one. */
  get socksPort(): number | null {
    return this.socks === null ? null : this.socksListenedPort;
  }
  private socksListenedPort = 0;

  /**
   * A channel for one relay, as Codex's helper gets its upstream connections: two socket pairs, whose relay
   * ends `[control, pass]` are returned (the caller owns them: it hands them to the relay and closes its
   * copies). For each byte the relay writes on `control` this answers one byte, in order: for `c` (the HTTP
   * listener) and `s` (the SOCKS5 one) `y` once it has sent, on `pass`, one end of a fresh socket pair whose
   * other end that listener serves as a connection, `n` when it will not (closed, no such listener, or at its
   * connection limit); for `t` (transparent TCP, before the command starts) it takes the end of the relay's own
   * socket pair waiting on `pass`, and answers `y` once `route` has redirected the TCP of the namespace of the
   * pair's maker (its pid), `n` when it could not or there is no `route`. Our end of `pass` is non-blocking
   * (libuv opens it so), so a relay that stops taking descriptors cannot stall the executor: the channel closes
   * instead. The channel closes when the relay's ends are all closed (the relay exited) or the proxy closes.
   */
  openRelayChannel(
    native: NativePipe,
    route: ((pid: number) => Promise<boolean>) | null = null,
  ): [control: number, pass: number] {
    if (this.closed) throw new Error('the managed proxy is closed');
    const made: number[] = [];
    try {
      made.push(...native.socketPair());
      made.push(...native.socketPair());
    } catch (err) {
      for (const fd of made) closeSync(fd);
      throw err;
    }
    const [controlOurs, controlTheirs, passOurs, passTheirs] = made as [number, number, number, number];
    const control = new Socket({ fd: controlOurs, readable: true, writable: true });
    const pass = new Socket({ fd: passOurs, readable: false, writable: false });
    this.channels.add(control);
    // Answers go in the order asked; a `t` is answered once its route is in place.
    let answered = Promise.resolve();
    control.on('data', (requests: Buffer) => {
      for (const request of requests) {
        answered = answered.then(async () => {
          if (control.destroyed) return;
          const granted =
            request === 0x74
              ? await this.routeFor(native, passOurs, route)
              : this.grant(native, passOurs, request === 0x73 ? this.socks : this.server);
          // A descriptor could not be sent (the relay takes none, or is gone): nothing more goes over this channel.
          if (granted === null) return void control.destroy();
          control.write(granted ? 'y' : 'n');
        });
      }
    });
    control.on('error', () => undefined);
    control.on('close', () => {
      this.channels.delete(control);
      pass.destroy();
    });
    pass.on('error', () => undefined);
    return [controlTheirs, passTheirs];
  }

  /** A relay's `t`: whether `route` redirected the TCP of the relay whose pair waits on `pass`. */
  private async routeFor(
    native: NativePipe,
    pass: number,
    route: ((pid: number) => Promise<boolean>) | null,
  ): Promise<boolean | null> {
    let pid: number;
    try {
      const fd = native.receiveFd(pass);
      if (fd === null) return null;
      try {
        pid = native.peerPid(fd);
      } finally {
        closeSync(fd);
      }
    } catch {
      return null;
    }
    return route !== null && !this.closed && (await route(pid));
  }

  /**
   * One connection to `listener` (the HTTP or SOCKS5 one) sent over `pass`; false when the proxy takes none now,
   * null when it cannot be sent.
   */
  private grant(native: NativePipe, pass: number, listener: NetServer | null): boolean | null {
    if (listener === null || this.closed || this.sockets.size >= this.limits.maxConnections) return false;
    let pair: [number, number];
    try {
      pair = native.socketPair();
    } catch {
      return false;
    }
    const [relayEnd, proxyEnd] = pair;
    try {
      native.sendFd(pass, relayEnd);
    } catch {
      closeSync(proxyEnd);
      return null;
    } finally {
      closeSync(relayEnd);
    }
    listener.emit('connection', new Socket({ fd: proxyEnd, readable: true, writable: true, allowHalfOpen: true }));
    return true;
  }

  /** `listener` runs once when the proxy closes (at once if it has). */
  onClose(listener: () => void): void {
    if (this.closed) listener();
    else this.closeListeners.push(listener);
  }

  private readonly closeListeners: Array<() => void> = [];

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const listener of this.closeListeners.splice(0)) listener();
    this.server.close();
    this.socks?.close();
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    for (const channel of this.channels) channel.destroy();
    this.channels.clear();
  }

  private track(socket: Duplex): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => undefined);
    if ('setTimeout' in socket) (socket as Socket).setTimeout(this.limits.idleMs, () => socket.destroy());
  }

  /** Counts relayed bytes; past the proxy's budget every connection goes. */
  private count(bytes: number): void {
    this.relayed += bytes;
    if (this.relayed > this.limits.maxBytes) {
      for (const socket of this.sockets) socket.destroy();
    }
  }

  private report(
    req: IncomingMessage,
    protocol: PolicyDecision['protocol'],
    host: string,
    port: number,
    reason: string,
    source: PolicyDecision['source'],
  ): void {
    this.decide(protocol, host, port, reason, source, req.socket, req.method ?? '');
  }

  /** One decision on the connection from `from` (its method: none for SOCKS5, as Codex's). */
  private decide(
    protocol: PolicyDecision['protocol'],
    host: string,
    port: number,
    reason: string,
    source: PolicyDecision['source'],
    from: { remoteAddress?: string; remotePort?: number },
    method?: string,
  ): void {
    this.onDecision({
      timestamp: new Date().toISOString(),
      scope: source === 'mode_guard' ? 'non_domain' : 'domain',
      decision: reason === 'allow' ? 'allow' : 'deny',
      source,
      reason,
      protocol,
      host,
      port,
      ...(method === undefined ? {} : { method }),
      // A sandboxed command's connection comes through its relay's unix socket: no address of its own.
      client: from.remoteAddress === undefined ? '127.0.0.1:0' : `${from.remoteAddress}:${from.remotePort}`,
      policyOverride: false,
    });
  }

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let target: { host: string; port: number; path: string } | null = null;
    const url = req.url ?? '';
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(url)) {
      let parsed: URL | null = null;
      try {
        parsed = new URL(url);
      } catch {
        parsed = null;
      }
      if (parsed?.protocol === 'http:') {
        const authority = splitAuthority(parsed.host, 80);
        if (authority) target = { ...authority, path: `${parsed.pathname}${parsed.search}` };
      }
    } else if (url.startsWith('/') && typeof req.headers.host === 'string') {
      const authority = splitAuthority(req.headers.host, 80);
      if (authority) target = { ...authority, path: url };
    }
    if (target === null) {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('invalid proxy request');
      return;
    }
    const verdict = await this.policy.check({ protocol: 'http', host: target.host, port: target.port });
    if (!verdict.silent) this.report(req, 'http', target.host, target.port, verdict.reason, verdict.source);
    if (verdict.reason !== 'allow') return this.deny(req, res, target, verdict.reason, verdict.source);
    if (this.policy.limited && !LIMITED_METHODS.has(req.method ?? '')) {
      this.report(req, 'http', target.host, target.port, 'method_not_allowed', 'mode_guard');
      return this.deny(req, res, target, 'method_not_allowed', 'mode_guard');
    }
    const upstream = httpRequest({
      host: verdict.address ?? target.host,
      port: target.port,
      method: req.method,
      path: target.path,
      headers: Object.fromEntries(forwardedHeaders(req.rawHeaders)),
      setHost: false,
      agent: false,
    });
    // As Codex's, the request goes on with the client's headers only (node would add `Connection: close`).
    upstream.removeHeader('connection');
    upstream.on('socket', (socket) => this.track(socket));
    req.on('data', (chunk: Buffer) => this.count(chunk.length));
    upstream.on('response', (answer) => {
      answer.on('data', (chunk: Buffer) => this.count(chunk.length));
      // The origin's `Connection` stays where it was, saying close when the client asked to close (as Codex's).
      const headers: [string, string][] = [];
      for (let i = 0; i + 1 < answer.rawHeaders.length; i += 2) {
        const name = answer.rawHeaders[i]!;
        if (name.toLowerCase() === 'connection' && !res.shouldKeepAlive) headers.push([name, 'close']);
        else if (!HOP_BY_HOP.has(name.toLowerCase())) headers.push([name, answer.rawHeaders[i + 1]!]);
      }
      res.removeHeader('connection');
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, headers.flat());
      answer.pipe(res);
    });
    upstream.on('error', (err) => this.fail(res, err));
    req.pipe(upstream);
  }

  private deny(
    req: IncomingMessage,
    res: ServerResponse,
    target: { host: string; port: number },
    reason: string,
    source: PolicyDecision['source'],
  ): void {
    const body = JSON.stringify({
      status: 'blocked',
      host: target.host,
      reason,
      decision: 'deny',
      source,
      protocol: 'http',
      port: target.port,
      message: blocked(reason).message,
    });
    req.resume();
    res.removeHeader('connection');
    res.writeHead(403, 'Forbidden', {
      'content-type': 'application/json',
      'x-proxy-error': blocked(reason).header,
      // Codex answers a client that asked to close with `connection: close`, and names no keep-alive.
      ...(res.shouldKeepAlive ? {} : { connection: 'close' }),
      'content-length': Buffer.byteLength(body),
      date: httpDate(),
    });
    res.end(body);
  }

  private fail(res: ServerResponse, err: unknown): void {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const message = `upstream connection failed: ${err instanceof Error ? err.message : String(err)}`;
    res.writeHead(502, { 'content-type': 'text/plain' }).end(message);
  }

  /** `socket` is the client's connection, tracked since it was accepted. */
  private async onConnect(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const target = splitAuthority(req.url ?? '', 443);
    if (target === null) {
      socket.end('HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    const verdict = await this.policy.check({ protocol: 'https_connect', host: target.host, port: target.port });
    if (!verdict.silent) {
      this.report(req, 'https_connect', target.host, target.port, verdict.reason, verdict.source);
    }
    let reason = verdict.reason;
    if (reason === 'allow' && this.policy.limited) {
      // Codex inspects limited HTTPS only by MITM, which a remote executor never does.
      this.report(req, 'https_connect', target.host, target.port, 'mitm_required', 'mode_guard');
      reason = 'mitm_required';
    }
    if (reason !== 'allow') {
      const { header, message } = blocked(reason);
      socket.end(
        `HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\nx-proxy-error: ${header}\r\n` +
          `content-length: ${Buffer.byteLength(message)}\r\ndate: ${httpDate()}\r\n\r\n${message}`,
      );
      return;
    }
    if (this.interceptor?.binds(target.host, target.port)) {
      // A credential's destination: TLS is terminated here and the real value swapped in (credential-masking.ts).
      socket.write(`HTTP/1.1 200 OK\r\ndate: ${httpDate()}\r\n\r\n`);
      const address = verdict.address;
      const track = (s: Duplex) => this.track(s);
      return this.interceptor.intercept(socket, head, { ...target, address }, track, (n) => this.count(n));
    }
    const upstream = tcpConnect(target.port, verdict.address ?? target.host);
    this.track(upstream);
    upstream.on('connect', () => {
      socket.write(`HTTP/1.1 200 OK\r\ndate: ${httpDate()}\r\n\r\n`);
      if (head.length > 0) upstream.write(head);
      for (const side of [socket, upstream]) side.on('data', (chunk: Buffer) => this.count(chunk.length));
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    upstream.on('error', () => {
      if (upstream.connecting) socket.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n');
      else socket.destroy();
    });
    socket.on('close', () => upstream.destroy());
    upstream.on('close', () => socket.destroy());
  }

  /**
   * One SOCKS5 client (RFC 1928), as Codex's listener answers it: no-authentication only (else `05 ff`), CONNECT
   * only (BIND, UDP ASSOCIATE: reply 07), the target decided as an HTTP one is (`socks5_tcp`, no method; local with
   * allowLocalBinding silent), a refusal answered 02, an unreachable target 05 (04 unresolvable), success 00 with
   * the upstream socket's own address. Anything else (SOCKS4, a bad version) resets the connection.
   */
  private onSocks(socket: Socket): void {
    this.track(socket);
    let buffered = Buffer.alloc(0);
    let stage: 'greeting' | 'request' | 'deciding' = 'greeting';
    const reply = (code: number, address = '0.0.0.0', port = 0) => {
      const v4 = isIP(address) === 4 ? address : '0.0.0.0';
      const bytes = Buffer.from([5, code, 0, 1, ...v4.split('.').map(Number), port >> 8, port & 0xff]);
      if (code === 0) socket.write(bytes);
      else socket.end(bytes);
    };
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      // A greeting is at most 257 bytes and a request 262: more before either is complete is not SOCKS5.
      if (buffered.length > 262) return void socket.resetAndDestroy();
      if (stage === 'greeting') {
        if (buffered[0] !== 5) return void socket.resetAndDestroy();
        if (buffered.length < 2 || buffered.length < 2 + buffered[1]!) return;
        const methods = buffered.subarray(2, 2 + buffered[1]!);
        buffered = buffered.subarray(2 + buffered[1]!);
        if (!methods.includes(0)) return void socket.end(Buffer.from([5, 0xff]));
        socket.write(Buffer.from([5, 0]));
        stage = 'request';
      }
      if (stage !== 'request' || buffered.length < 5) return;
      if (buffered[0] !== 5) return void socket.resetAndDestroy();
      const type = buffered[3];
      const length = type === 1 ? 4 : type === 4 ? 16 : type === 3 ? 1 + buffered[4]! : -1;
      if (length < 0) return reply(8);
      if (buffered.length < 4 + length + 2) return;
      const command = buffered[1];
      const raw = buffered.subarray(4, 4 + length);
      const port = buffered.readUInt16BE(4 + length);
      const rest = buffered.subarray(4 + length + 2);
      stage = 'deciding';
      socket.off('data', onData);
      socket.pause();
      if (command !== 1) return reply(7);
      const host =
        type === 1 ? [...raw].join('.') : type === 4 ? ipv6Text(raw) : raw.subarray(1).toString('latin1').toLowerCase();
      void this.socksConnect(socket, host, port, rest, reply).catch(() => socket.destroy());
    };
    socket.on('data', onData);
  }

  private async socksConnect(
    socket: Socket,
    host: string,
    port: number,
    early: Buffer,
    reply: (code: number, address?: string, port?: number) => void,
  ): Promise<void> {
    const verdict = await this.policy.check({ protocol: 'socks5_tcp', host, port });
    if (!verdict.silent) this.decide('socks5_tcp', host, port, verdict.reason, verdict.source, socket);
    if (verdict.reason !== 'allow' || this.closed) return reply(2);
    const upstream = tcpConnect(port, verdict.address ?? host);
    this.track(upstream);
    let connected = false;
    upstream.on('connect', () => {
      connected = true;
      reply(0, upstream.localAddress, upstream.localPort);
      if (early.length > 0) upstream.write(early);
      for (const side of [socket, upstream]) side.on('data', (chunk: Buffer) => this.count(chunk.length));
      upstream.pipe(socket);
      socket.pipe(upstream);
      socket.resume();
    });
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      if (connected) return socket.destroy();
      reply(err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN' ? 4 : err.code === 'ECONNREFUSED' ? 5 : 1);
    });
    socket.on('close', () => upstream.destroy());
    upstream.on('close', () => socket.destroy());
  }
}

/** NO_PROXY and its kin where the start allows local binding, as Codex sets them. */
const LOCAL_NO_PROXY = 'localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16';

/**
 * The variables Codex gives a command behind its proxy (the HTTP listener at `port`): ALL_PROXY and FTP_PROXY
 * name the SOCKS5 listener (`socks5h://`) when there is one (`socksPort`), else the HTTP one, as Codex's.
 */
export function proxyEnvironment(
  port: number,
  allowLocalBinding: boolean,
  socksPort: number | null,
): Record<string, string> {
  const http = `http://127.0.0.1:${port}`;
  const env: Record<string, string> = {
    NODE_USE_ENV_PROXY: '1',
    ELECTRON_GET_USE_PROXY: 'true',
    CODEX_NETWORK_PROXY_ACTIVE: '1',
    CODEX_NETWORK_ALLOW_LOCAL_BINDING: allowLocalBinding ? '1' : '0',
  };
  for (const key of [
    'ALL_PROXY',
    'all_proxy',
    'FTP_PROXY',
    'ftp_proxy',
    'HTTP_PROXY',
    'HTTPS_PROXY',
    'http_proxy',
    'https_proxy',
    'WS_PROXY',
    'WSS_PROXY',
    'ws_proxy',
    'wss_proxy',
    'BUNDLE_HTTP_PROXY',
    'BUNDLE_HTTPS_PROXY',
    'DOCKER_HTTP_PROXY',
    'DOCKER_HTTPS_PROXY',
    'NPM_CONFIG_HTTP_PROXY',
    'NPM_CONFIG_HTTPS_PROXY',
    'NPM_CONFIG_PROXY',
    'npm_config_http_proxy',
    'npm_config_https_proxy',
    'npm_config_proxy',
    'PIP_PROXY',
    'YARN_HTTP_PROXY',
    'YARN_HTTPS_PROXY',
  ]) {
    env[key] = http;
  }
  if (socksPort !== null) {
    for (const key of ['ALL_PROXY', 'all_proxy', 'FTP_PROXY', 'ftp_proxy'])
      env[key] = `socks5h://127.0.0.1:${socksPort}`;
  }
  // With allowLocalBinding, Codex lets local destinations bypass the proxy (FINDINGS-transparent-tcp.md).
  for (const key of ['NO_PROXY', 'no_proxy', 'BUNDLE_NO_PROXY', 'NPM_CONFIG_NOPROXY', 'npm_config_noproxy']) {
    env[key] = allowLocalBinding ? LOCAL_NO_PROXY : '';
  }
  return env;
}
