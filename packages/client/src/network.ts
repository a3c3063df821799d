/**
 * A process whose network is confined to named hosts (capability `networkProxyLaunch`): the executor runs
 * Codex's managed proxy for it, in a network namespace of its own where only that proxy is reachable, and the
 * command's HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and the like name it. Hosts are exact names or addresses, or
 * `*.example.com` (subdomains) and `**.example.com` (the domain and its subdomains); a local or private
 * address is reached only when named exactly. Each decision of the proxy reaches `onNetworkDecision`.
 */
import { decode, NetworkPolicyDecisionNotification, type NetworkProxyLaunch } from '@tether/exec-protocol';
import { TetherError } from './errors.js';

export interface NetworkPolicy {
  /** The hosts the process may reach (through the proxy); none: no host. */
  allow?: readonly string[];
  /** Hosts refused even where `allow` would let them through. */
  deny?: readonly string[];
  /** `limited`: only GET, HEAD and OPTIONS, and no CONNECT (HTTPS); default `full`. */
  mode?: 'full' | 'limited';
}

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
      },
      auditMetadata: { originator: 'tether' },
      environmentId: null,
      executionId: processId,
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
