/**
 * Dialing an executor: a plain WebSocket, or the rendezvous (a bundle from the registry, the relay socket,
 * the hybrid Noise handshake). Loaded on first use by `exec-client.ts` (`loadDialing`): ws, the relay
 * frames' protobuf codec, the secure stream and Noise key generation are a good part of the harness CLI's
 * start-up, which a command served by a connection master does without.
 */
import { randomUUID } from 'node:crypto';
import { type MessageTransport, WebSocketTransport } from '@tether/jsonrpc';
import type { NoiseIdentity } from '@tether/noise';
import { type ProxySettings, tunnelAgent } from '@tether/outbound';
import { MAX_FRAME_BYTES, relaySocketMask } from '@tether/relay-frames';
import { SecureStream, SecureStreamError, WebSocketFrameLink } from '@tether/secure-stream';
import { WebSocket } from 'ws';
import { PASSING_RESETS } from './dial-error.js';
import { TetherError } from './errors.js';
import { proxyForCredentials, proxySettings } from './proxy.js';
import { fetchBundle, type RegistryOptions, type RendezvousBundle } from './registry.js';

export { generateIdentity } from '@tether/noise';

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

export async function dialRendezvous(
  registry: RegistryOptions,
  environmentId: string,
  identity: NoiseIdentity,
  pin: BundlePin,
  signal: AbortSignal,
  handshakeTimeoutMs = 10_000,
): Promise<MessageTransport> {
  let bundle = await pinnedBundle(registry, environmentId, identity, pin, signal);
  const proxies = proxySettings(registry);
  const allowInsecure = registry.allowInsecureRegistry === true;
  let ws = await relaySocket(bundle.url, proxies, allowInsecure);
  try {
    await openSocket(ws, 'the relay', signal);
  } catch (err) {
    // A 401 means the bundle went stale: fetch one fresh bundle and try once more (rendezvous.md §3.1).
    if (!(err instanceof TetherError) || err.status !== 401) throw err;
    bundle = await pinnedBundle(registry, environmentId, identity, pin, signal);
    ws = await relaySocket(bundle.url, proxies, allowInsecure);
    await openSocket(ws, 'the relay', signal);
  }
  ws.on('error', () => undefined);
  const streamId = randomUUID();
  try {
    const stream = await SecureStream.initiate({
      link: new WebSocketFrameLink(ws, streamId),
      streamId,
      environmentId: bundle.environmentId,
      registrationId: bundle.registrationId,
      staticKeys: identity,
      remoteStatic: bundle.executorPublicKey,
      authorization: bundle.authorization,
      timeoutMs: handshakeTimeoutMs,
      signal,
    });
    pin.trust(bundle);
    return stream;
  } catch (err) {
    ws.terminate();
    if (err instanceof SecureStreamError) {
      const why = err.code === 'reset' ? resetExplanation(err.resetReason) : err.message;
      throw new TetherError('handshake_failed', `secure channel to ${environmentId} failed: ${why}`, { cause: err });
    }
    throw err;
  }
}
