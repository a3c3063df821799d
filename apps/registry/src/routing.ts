import { createHash } from 'node:crypto';

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
