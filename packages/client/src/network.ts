/**
 * A process whose network is confined to named hosts (capability `networkProxyLaunch`): the executor runs
 * Codex's managed proxy for it, in a network namespace of its own where only that proxy is reachable, and the
 * command's HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and the like name it. Hosts are exact names or addresses, or
 * `*.example.com` (subdomains) and `**.example.com` (the domain and its subdomains); a local or private
 * address is reached only when named exactly. Each decision of the proxy reaches `onNetworkDecision`.
 *
 * With `ask` (capability `networkProxyReviewDomains`) the executor puts every host the lists do not allow, and
 * every host under `review`, to the caller before the command reaches it (`network/policyRequest`); an answer
 * that does not come within `askTimeoutMs` (plus the executor's 5 s grace) is a denial.
 */
import {
  decode,
  NetworkPolicyDecisionNotification,
  NetworkPolicyRequestParams,
  type NetworkPolicyRequestResult,
  type NetworkProxyLaunch,
} from '@tether/exec-protocol';
import { TetherError } from './errors.js';

export interface NetworkPolicy {
  /** The hosts the process may reach (through the proxy); none: no host. */
  allow?: readonly string[];
  /** Hosts refused even where `allow` would let them through. */
  deny?: readonly string[];
  /** `limited`: only GET, HEAD and OPTIONS, and no CONNECT (HTTPS); default `full`. */
  mode?: 'full' | 'limited';
  /**
   * Asked about each host neither list decides (and each under `review`) before the command reaches it:
   * `'allow'`, `'deny'`, or `{deny: reason}` (the reason the proxy reports; `denied` answers as the deny
   * list does). A throw, or no answer within `askTimeoutMs`, denies. Local addresses are never asked about.
   */
  ask?: (question: NetworkQuestion) => NetworkAnswer | Promise<NetworkAnswer>;
  /** Hosts (as `allow`'s) put to `ask` even where `allow` names them. */
  review?: readonly string[];
  /** How long the executor waits for `ask` (it adds 5 s of grace); default 30 000. */
  askTimeoutMs?: number;
}

/** A host the command is about to reach, put to `NetworkPolicy.ask`. */
export interface NetworkQuestion {
  host: string;
  port: number;
  /** `http` (a plain request through the proxy), `https_connect` (a tunnel), `socks5_tcp`. */
  protocol: 'http' | 'https_connect' | 'socks5_tcp';
}

export type NetworkAnswer = 'allow' | 'deny' | { deny: string };

/** `askTimeoutMs`'s default: long enough for a person to read the question. */
export const DEFAULT_ASK_TIMEOUT_MS = 30_000;
/** The longest wait accepted (a day): a question nobody answers holds the command's connection. */
const MAX_ASK_TIMEOUT_MS = 86_400_000;

/** One decision of a process's proxy, as the executor reported it (`network/policyDecision`). */
export type NetworkDecision = Pick<
  NetworkPolicyDecisionNotification,
  'decision' | 'reason' | 'protocol' | 'host' | 'port' | 'method' | 'timestamp'
>;

/** What `process/start` sends for a confined network, over the start's own `sandbox` when it has one. */
export interface ManagedNetworkParams {
  sandbox: Record<string, unknown>;
  enforceManagedNetwork: true;
  networkProxy: NetworkProxyLaunch;
}

/** A start without a sandbox of its own: the disk as it is, the network confined by the proxy alone. */
const NETWORK_ONLY_SANDBOX = { permissions: { type: 'disabled' }, windowsSandboxLevel: 'disabled' };

/** An exact host or address, or `*.` / `**.` and a domain; Codex refuses a bare `*` (any host). */
const HOST_PATTERN = /^(\*\*?\.)?[A-Za-z0-9_.:-]+$/;

/** Refuses what is not a host pattern; `what` names the list in the error (`network.allow`, `--network-allow`). */
export function checkNetworkHosts(hosts: readonly string[], what: string): void {
  for (const host of hosts) {
    if (host === '*' || host === '**' || !HOST_PATTERN.test(host) || host.includes('..')) {
      throw new TetherError(
        'invalid_argument',
        `${what}: ${JSON.stringify(host)} is not a host name, an address, or *.domain / **.domain`,
      );
    }
  }
}

export function managedNetworkParams(
  policy: NetworkPolicy,
  processId: string,
  sandbox: Record<string, unknown> | null | undefined,
): ManagedNetworkParams {
  const allow = policy.allow ?? [];
  const deny = policy.deny ?? [];
  checkNetworkHosts(allow, 'network.allow');
  checkNetworkHosts(deny, 'network.deny');
  const review = policy.review ?? [];
  checkNetworkHosts(review, 'network.review');
  if (review.length > 0 && !policy.ask) {
    throw new TetherError('invalid_argument', 'network.review: hosts under review need network.ask to answer for them');
  }
  const askTimeoutMs = policy.askTimeoutMs ?? DEFAULT_ASK_TIMEOUT_MS;
  if (!Number.isSafeInteger(askTimeoutMs) || askTimeoutMs < 1 || askTimeoutMs > MAX_ASK_TIMEOUT_MS) {
    throw new TetherError(
      'invalid_argument',
      `network.askTimeoutMs: ${String(policy.askTimeoutMs)} is not a whole number of ms from 1 to ${MAX_ASK_TIMEOUT_MS}`,
    );
  }
  const domains: Record<string, 'allow' | 'deny'> = {};
  for (const host of allow) domains[host.toLowerCase()] = 'allow';
  // A host both allowed and denied is denied, as Codex decides.
  for (const host of deny) domains[host.toLowerCase()] = 'deny';
  return {
    sandbox: sandbox ?? NETWORK_ONLY_SANDBOX,
    enforceManagedNetwork: true,
    networkProxy: {
      proxy: {
        enabled: true,
        enableSocks5: false,
        enableSocks5Udp: false,
        allowUpstreamProxy: false,
        dangerouslyAllowAllUnixSockets: false,
        mode: policy.mode ?? 'full',
        domains,
        unixSockets: null,
        allowLocalBinding: false,
        ...(policy.ask ? { reviewDomains: review.map((host) => host.toLowerCase()) } : {}),
      },
      auditMetadata: { originator: 'tether' },
      environmentId: null,
      executionId: processId,
      ...(policy.ask ? { policyDecisionTimeoutMs: askTimeoutMs } : {}),
    },
  };
}

/** A decision from the executor (untrusted): the fields a caller reads, or null when it does not decode. */
export function networkDecisionOf(params: unknown): (NetworkDecision & { processId: string }) | null {
  try {
    const { processId, decision, reason, protocol, host, port, method, timestamp } = decode(
      NetworkPolicyDecisionNotification,
      params,
    );
    return { processId, decision, reason, protocol, host, port, method, timestamp };
  } catch {
    return null;
  }
}

/**
 * The answer to a `network/policyRequest` from the executor (untrusted): `ask` of the process it names, a
 * denial where none asks (or it throws, or answers what is not an answer). Params that do not decode throw.
 */
export async function answerNetworkQuestion(
  params: unknown,
  askerOf: (processId: string) => NetworkPolicy['ask'] | undefined,
): Promise<NetworkPolicyRequestResult> {
  const { processId, request } = decode(NetworkPolicyRequestParams, params);
  const ask = askerOf(processId);
  if (!ask) return { decision: { type: 'deny' } };
  let answer: NetworkAnswer;
  try {
    answer = await ask({ host: request.host, port: request.port, protocol: request.protocol });
  } catch {
    return { decision: { type: 'deny' } };
  }
  if (answer === 'allow') return { decision: { type: 'allow' } };
  if (typeof answer === 'object' && answer !== null && typeof answer.deny === 'string') {
    return { decision: { type: 'deny', reason: answer.deny } };
  }
  return { decision: { type: 'deny' } };
}
