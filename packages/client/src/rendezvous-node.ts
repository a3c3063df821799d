/**
 * The rendezvous from Node: the platform-free dialer (rendezvous-dialer.ts) on Node's platform, the relay
 * socket on `ws` through the configured proxies and `/connect` over node:http. The socket's code
 * (dial-node.ts, `ws`) is loaded on the first dial, as dial.ts is.
 */
import type { RelayLinkOpener, RendezvousPlatform } from './dial.js';
import { nodeRoute } from './registry-node.js';
import {
  rendezvousDialer as platformDialer,
  type RendezvousDialer,
  type RendezvousOptions,
} from './rendezvous-dialer.js';

/** Node's platform for these options; what `options.platform` gives is used instead. */
export function withNodePlatform<O extends RendezvousOptions>(options: O): O & { platform: RendezvousPlatform } {
  const openRelayLink: RelayLinkOpener = async (url, streamId, signal) =>
    (await import('./dial-node.js')).nodeRelayLinks(options)(url, streamId, signal);
  return { ...options, platform: { openRelayLink, registryRoute: nodeRoute, ...options.platform } };
}

/**
 * The direct dial of `connectRendezvous`: a fresh bundle, relay socket and handshake per call, one harness
 * identity (generated on the first dial unless given) and one executor key pin for all of them.
 */
export function rendezvousDialer(options: RendezvousOptions): RendezvousDialer {
  return platformDialer(withNodePlatform(options));
}
