/**
 * Dialing an executor through the rendezvous: a bundle from the registry, the relay socket (the platform's),
 * the hybrid Noise handshake. Loaded on first use by `rendezvous-dialer.ts` (`loadDialing`): the relay
 * frames' protobuf codec, the secure stream and Noise key generation are a good part of the harness CLI's
 * start-up, which a command served by a connection master does without. Node's sockets (`ws`, proxies) are
 * dial-node.ts's.
 */
import type { MessageTransport } from '@tether/jsonrpc';
import type { CryptoProvider, Kem, NoiseIdentity } from '@tether/noise';
import { type FrameLink, SecureStream, SecureStreamError } from '@tether/secure-stream';
import { PASSING_RESETS } from './dial-error.js';
import { TetherError } from './errors.js';
import { fetchBundleVia, type RegistryOptions, type RegistryRoute, type RendezvousBundle } from './registry.js';

export { generateIdentity } from '@tether/noise';

/**
 * Where a dial is (`ConnectProgress.phase`): the registry call for a bundle, the relay socket's WebSocket
 * upgrade, the Noise handshake over it, a plain executor WebSocket's upgrade (`connectWebSocket`), or the wait
 * for a channel from a `channelSource`.
 */
export type DialPhase = 'registry' | 'relay' | 'handshake' | 'websocket' | 'channel';

/** The session's executor key pin, as the dial uses it (`ExecutorKeyPin` in exec-client.ts). */
export interface BundlePin {
  /** Throws ExecutorKeyChangedError when the bundle names another key than the pinned one. */
  check(bundle: RendezvousBundle): void;
  /** A handshake with the bundle's key succeeded. */
  trust(bundle: RendezvousBundle): void;
}

/** The executor's one reset reason for a refused handshake (opaque by design: Codex's text). */
const EXECUTOR_REFUSAL = 'noise_relay_protocol_error';

/** What a Reset during the handshake means, for a message (the reason is the relay's: shown only if tame). */
function resetExplanation(reason: string | undefined): string {
  if (reason === EXECUTOR_REFUSAL) return 'the executor refused the harness (authorization not accepted)';
  const shown = reason !== undefined && /^[a-z0-9_]{1,64}$/.test(reason) ? reason : 'no usable reason';
  return reason !== undefined && PASSING_RESETS.has(reason)
    ? `the relay reset the stream (${shown}): the executor is not reachable there right now`
    : `the stream was reset (${shown})`;
}

/** A fresh bundle whose executor key the session trusts. */
async function pinnedBundle(
  registry: RegistryOptions,
  environmentId: string,
  identity: NoiseIdentity,
  pin: BundlePin,
  signal: AbortSignal,
  route: RegistryRoute | undefined,
): Promise<RendezvousBundle> {
  const bundle = await fetchBundleVia(route, registry, environmentId, identity.publicKey, signal);
  pin.check(bundle);
  return bundle;
}

/** An opened relay socket carrying one stream, as the handshake and the stream use it. */
export interface RelayLink {
  readonly link: FrameLink;
  /** Drops the socket at once (a failed handshake). */
  terminate(): void;
}

/**
 * Opens the relay socket for a bundle's signed URL as a frame link for `streamId`. A refusal with an HTTP
 * status is a TetherError carrying it (a 401 makes the dial fetch one fresh bundle and try once more).
 * Node's is `ws` (`nodeRelayLinks`, dial-node.ts); a web page gives one over the browser's WebSocket.
 */
export type RelayLinkOpener = (url: string, streamId: string, signal: AbortSignal) => Promise<RelayLink>;

/**
 * What runs a rendezvous dial: its socket, its registry calls and its crypto. Node's (`ws` through the
 * proxies, node:http, node:crypto) is the default of the Node entry (rendezvous-node.ts); a page gives its own.
 */
export interface RendezvousPlatform {
  openRelayLink: RelayLinkOpener;
  /** How the registry's `/connect` is sent (default: the options' `fetch`, else the global one). */
  registryRoute?: RegistryRoute;
  /** The handshake's primitives (default: node:crypto's). */
  provider?: CryptoProvider;
  /** The handshake's ML-KEM-768 (default: node:crypto's where Node has it, else noble's). */
  kem?: Kem;
}

export async function dialRendezvous(
  registry: RegistryOptions,
  environmentId: string,
  identity: NoiseIdentity,
  pin: BundlePin,
  signal: AbortSignal,
  handshakeTimeoutMs: number | undefined,
  platform: RendezvousPlatform,
  onPhase?: (phase: DialPhase) => void,
): Promise<MessageTransport> {
  const route = platform.registryRoute;
  onPhase?.('registry');
  let bundle = await pinnedBundle(registry, environmentId, identity, pin, signal, route);
  const openLink = platform.openRelayLink;
  const streamId = crypto.randomUUID();
  let relay: RelayLink;
  try {
    onPhase?.('relay');
    relay = await openLink(bundle.url, streamId, signal);
  } catch (err) {
    // A 401 means the bundle went stale: fetch one fresh bundle and try once more (rendezvous.md §3.1).
    if (!(err instanceof TetherError) || err.status !== 401) throw err;
    onPhase?.('registry');
    bundle = await pinnedBundle(registry, environmentId, identity, pin, signal, route);
    onPhase?.('relay');
    relay = await openLink(bundle.url, streamId, signal);
  }
  try {
    onPhase?.('handshake');
    const stream = await SecureStream.initiate({
      link: relay.link,
      streamId,
      environmentId: bundle.environmentId,
      registrationId: bundle.registrationId,
      staticKeys: identity,
      remoteStatic: bundle.executorPublicKey,
      authorization: bundle.authorization,
      timeoutMs: handshakeTimeoutMs ?? 10_000,
      signal,
      ...(platform.provider ? { provider: platform.provider } : {}),
      ...(platform.kem ? { kem: platform.kem } : {}),
    });
    pin.trust(bundle);
    return stream;
  } catch (err) {
    relay.terminate();
    if (err instanceof SecureStreamError) {
      const why = err.code === 'reset' ? resetExplanation(err.resetReason) : err.message;
      throw new TetherError('handshake_failed', `secure channel to ${environmentId} failed: ${why}`, { cause: err });
    }
    throw err;
  }
}
