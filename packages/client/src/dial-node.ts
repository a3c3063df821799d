/**
 * Node's sockets for dialing: a plain WebSocket executor (`connectWebSocket`) and the relay socket of a
 * rendezvous, both on `ws`, the relay's through the configured proxies. Loaded on first use (rendezvous-node.ts,
 * exec-client-node.ts), as dial.ts is.
 */

import type { MessageTransport } from '@tether/jsonrpc';
import { WebSocketTransport } from '@tether/jsonrpc';
import { type ProxySettings, tunnelAgent } from '@tether/outbound';
import { MAX_FRAME_BYTES, relaySocketMask } from '@tether/relay-frames';
import { WebSocketFrameLink } from '@tether/secure-stream';
import { WebSocket } from 'ws';
import type { RelayLinkOpener } from './dial.js';
import { TetherError } from './errors.js';
import { proxyForCredentials, proxySettings } from './proxy.js';
import type { RegistryOptions } from './registry.js';

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

/** The relay socket as Node opens it: `ws`, through the configured proxies, zero-key masking. */
export function nodeRelayLinks(registry: RegistryOptions): RelayLinkOpener {
  const proxies = proxySettings(registry);
  const allowInsecure = registry.allowInsecureRegistry === true;
  return async (url, streamId, signal) => {
    const ws = await relaySocket(url, proxies, allowInsecure);
    await openSocket(ws, 'the relay', signal);
    ws.on('error', () => undefined);
    return { link: new WebSocketFrameLink(ws, streamId), terminate: () => ws.terminate() };
  };
}
