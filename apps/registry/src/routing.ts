import { createHash } from 'node:crypto';
import { relayNodeOf } from '@tether/relay-auth';
import type { RegistrationRecord, RelayLinkRecord, RelayNodeRecord } from './store/types.js';

/** Rendezvous (highest-random-weight) hashing: the node with the highest hash of (node, key) wins. */
export function pickRelayNode(nodes: readonly string[], environmentId: string): string | undefined {
  let best: string | undefined;
  let bestScore = -1n;
  for (const node of nodes) {
    const score = createHash('sha256').update(node).update('\n').update(environmentId).digest().readBigUInt64BE(0);
    if (score > bestScore || (score === bestScore && best !== undefined && node < best)) {
      best = node;
      bestScore = score;
    }
  }
  return best;
}

/**
 * The node a (re-)registering executor is sent to: by hash over the live nodes, leaving out the one the executor
 * says it cannot reach (it failed over from there) while another live node remains. A node that joins moves only
 * the executors that register from then on; harnesses follow each executor's registration, never the hash.
 */
export function pickRegistrationNode(
  live: readonly string[],
  environmentId: string,
  unreachable?: string,
): string | undefined {
  const away = unreachable === undefined ? null : relayNodeOf(unreachable);
  const others = away === null ? live : live.filter((node) => relayNodeOf(node) !== away);
  return pickRelayNode(others.length > 0 ? others : live, environmentId);
}

export interface RelayRoute {
  /** The node the harness is sent to; null without a registration. */
  node: string | null;
  status: 'up' | 'down' | 'unknown';
  /** The last heartbeat that listed the environment on any node, if one did. */
  lastSeen: number | null;
}

/**
 * Where a harness of `registration` goes: the node its executor was sent to. A registration that names no node
 * (made before the registry recorded one) or a node no longer configured is routed by hash over the live nodes,
 * as it was then. `seen` are the nodes heard from within the presence TTL (any node, configured or not).
 */
export function routeToExecutor(
  registration: Pick<RegistrationRecord, 'environmentId' | 'relayUrl'>,
  configured: readonly string[],
  seen: readonly RelayNodeRecord[],
  link: RelayLinkRecord | undefined,
): RelayRoute {
  const live = seen.filter((node) => configured.includes(node.url));
  const recorded = registration.relayUrl !== null && configured.includes(registration.relayUrl);
  const node = recorded
    ? (registration.relayUrl as string)
    : (pickRelayNode(live.length > 0 ? live.map((n) => n.url) : configured, registration.environmentId) ?? null);
  const lastSeen = link?.lastSeen ?? null;
  if (live.length === 0 || node === null) return { node, status: 'unknown', lastSeen };
  const carrier = live.find((n) => n.url === node);
  // Current when the carrier's last heartbeat listed it. Both times come from the link's own read: the live list
  // above may have been read before or after a heartbeat that the link's read was not.
  const up = carrier !== undefined && link?.relayUrl === node && link.lastSeen >= link.nodeLastSeen;
  return { node, status: up ? 'up' : 'down', lastSeen };
}
