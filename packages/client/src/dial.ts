/**
 * Dialing an executor: a plain WebSocket, or the rendezvous (a bundle from the registry, the relay socket,
 * the hybrid Noise handshake). Loaded on first use by `exec-client.ts` (`loadDialing`): ws, the relay
 * frames' protobuf codec, the secure stream and Noise key generation are a good part of the harness CLI's
 * start-up, which a command served by a connection master does without.
 */
import { randomUUID } from 'node:crypto';
import { type MessageTransport, WebSocketTransport } from '@tether/jsonrpc';
import type { CryptoProvider, Kem, NoiseIdentity } from '@tether/noise';
import { type ProxySettings, tunnelAgent } from '@tether/outbound';
import { MAX_FRAME_BYTES, relaySocketMask } from '@tether/relay-frames';
import { type FrameLink, SecureStream, SecureStreamError, WebSocketFrameLink } from '@tether/secure-stream';
import { WebSocket } from 'ws';
import { PASSING_RESETS } from './dial-error.js';
import { TetherError } from './errors.js';
import { proxyForCredentials, proxySettings } from './proxy.js';
import { fetchBundle, type RegistryOptions, type RendezvousBundle } from './registry.js';

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

export async function dialWebSocket(url: string, signal: AbortSignal): Promise<MessageTransport> {
  const maxPayload = 256 * 1024 * 1024;
  const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload });
  await openSocket(ws, url, signal);
  // Messages assembled in pooled slabs off one shared read buffer (jsonrpc's `fastReceive`).
  return new WebSocketTransport(ws, { peer: url, fastReceive: { server: false, maxPayload } });
}

async function openSocket(ws: WebSocket, what: string, signal: AbortSignal, timeoutMs = 10_000): Promise<void> {
  const onAbort = () => ws.terminate();
  signal.addEventListener('abort', onAbort, { once: true });
  const timer = setTimeout(() => ws.terminate(), timeoutMs);
  try {
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('unexpected-response', (_req, res) => {
        res.resume();
        reject(
          new TetherError('connect_failed', `${what} refused the connection with HTTP ${res.statusCode}`, {
            status: res.statusCode,
          }),
        );
      });
      ws.once('error', (err) =>
        reject(new TetherError('connect_failed', `cannot connect: ${err.message}`, { cause: err })),
      );
      ws.once('close', () => reject(new TetherError('connect_failed', `${what}: connection closed while opening`)));
    });
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', onAbort);
  }
}

/** The relay socket for a signed URL; the URL is a credential, so no error repeats it. */
async function relaySocket(url: string, proxies: ProxySettings, allowInsecure: boolean): Promise<WebSocket> {
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    throw new TetherError('registry', 'the relay URL in the bundle is not a valid WebSocket URL');
  }
  const proxy = proxyForCredentials(target, proxies, allowInsecure, {
    target: 'open the plain ws:// relay socket',
    secret: 'its signed URL',
    secure: 'a wss:// relay',
  });
  const agent = proxy ? await tunnelAgent(proxy) : undefined;
  try {
    return new WebSocket(url, {
      perMessageDeflate: false,
      maxPayload: MAX_FRAME_BYTES,
      generateMask: relaySocketMask,
      ...(agent ? { agent } : {}),
    });
  } catch {
    throw new TetherError('registry', 'the relay URL in the bundle is not a valid WebSocket URL');
  }
}

/** A fresh bundle whose executor key the session trusts. */
async function pinnedBundle(
  registry: RegistryOptions,
  environmentId: string,
  identity: NoiseIdentity,
  pin: BundlePin,
  signal: AbortSignal,
): Promise<RendezvousBundle> {
  const bundle = await fetchBundle(registry, environmentId, identity.publicKey, signal);
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
 * Node's is `ws` (`nodeRelayLinks`); a web page gives one over the browser's WebSocket.
 */
export type RelayLinkOpener = (url: string, streamId: string, signal: AbortSignal) => Promise<RelayLink>;

/** The relay socket as Node opens it: `ws`, through the configured proxies, zero-key masking. */
function nodeRelayLinks(registry: RegistryOptions): RelayLinkOpener {
  const proxies = proxySettings(registry);
  const allowInsecure = registry.allowInsecureRegistry === true;
  return async (url, streamId, signal) => {
    const ws = await relaySocket(url, proxies, allowInsecure);
    await openSocket(ws, 'the relay', signal);
    ws.on('error', () => undefined);
    return { link: new WebSocketFrameLink(ws, streamId), terminate: () => ws.terminate() };
  };
}

/** What runs a rendezvous dial where Node's defaults do not (a browser): its socket and its crypto. */
export interface RendezvousPlatform {
  openRelayLink: RelayLinkOpener;
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
  handshakeTimeoutMs = 10_000,
  platform?: RendezvousPlatform,
  onPhase?: (phase: DialPhase) => void,
): Promise<MessageTransport> {
  onPhase?.('registry');
  let bundle = await pinnedBundle(registry, environmentId, identity, pin, signal);
  const openLink = platform?.openRelayLink ?? nodeRelayLinks(registry);
  const streamId = randomUUID();
  let relay: RelayLink;
  try {
    onPhase?.('relay');
    relay = await openLink(bundle.url, streamId, signal);
  } catch (err) {
    // A 401 means the bundle went stale: fetch one fresh bundle and try once more (rendezvous.md §3.1).
    if (!(err instanceof TetherError) || err.status !== 401) throw err;
    onPhase?.('registry');
    bundle = await pinnedBundle(registry, environmentId, identity, pin, signal);
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
      timeoutMs: handshakeTimeoutMs,
      signal,
      ...(platform?.provider ? { provider: platform.provider } : {}),
      ...(platform?.kem ? { kem: platform.kem } : {}),
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
