import {
  Environment,
  ExecServerClient,
  type RelayLinkOpener,
  type RendezvousPlatform,
  rendezvousDialer,
  TetherError,
} from '@tether/client/browser';
import { createMlKem768, createWebCryptoProvider } from '@tether/noise';
import { BrowserSocketFrameLink } from './socket-link.js';

/** How long the relay socket may take to open. */
const OPEN_TIMEOUT_MS = 10_000;

/**
 * The relay socket as a page opens it: the browser's WebSocket on the bundle's signed URL (a browser cannot
 * set headers; the URL carries the whole credential). A browser does not say why a socket failed to open (no
 * HTTP status), so every failure is one that may pass and the SDK's retry and resume handle it.
 */
export const browserRelayLinks: RelayLinkOpener = (url, streamId, signal) =>
  new Promise((resolve, reject) => {
    let socket: WebSocket;
    try {
      socket = new WebSocket(url);
    } catch {
      // The URL is a credential: not repeated.
      reject(new TetherError('registry', 'the relay URL in the bundle is not a valid WebSocket URL'));
      return;
    }
    socket.binaryType = 'arraybuffer';
    const settle = (error: Error | null) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      socket.removeEventListener('open', onOpen);
      socket.removeEventListener('close', onClose);
      if (error) {
        socket.close();
        reject(error);
        return;
      }
      resolve({ link: new BrowserSocketFrameLink(socket, streamId), terminate: () => socket.close() });
    };
    const onOpen = () => settle(null);
    const onClose = () => settle(new TetherError('connect_failed', 'the relay closed the connection while opening'));
    const onAbort = () => settle(new TetherError('closed', 'connect aborted'));
    const timer = setTimeout(
      () => settle(new TetherError('connect_failed', `the relay did not answer within ${OPEN_TIMEOUT_MS} ms`)),
      OPEN_TIMEOUT_MS,
    );
    signal.addEventListener('abort', onAbort, { once: true });
    socket.addEventListener('open', onOpen);
    socket.addEventListener('close', onClose);
  });

/**
 * A page's rendezvous platform: the browser's socket; records opened by WebCrypto's AES-GCM, everything else in
 * JavaScript (noble, stablelib; ChaChaPoly records too: WebCrypto has no ChaCha20-Poly1305).
 */
export function browserPlatform(): RendezvousPlatform {
  return {
    openRelayLink: browserRelayLinks,
    provider: createWebCryptoProvider(),
    kem: createMlKem768({ backend: 'noble' }),
  };
}

export interface BrowserConnectOptions {
  /** The registry's base URL: the page's own origin when the registry serves it. */
  registryUrl: string;
  environmentId: string;
  /** A harness API key, or a browser session token exchanged for a grant. */
  credential: string;
  onStatus?: (status: 'disconnected' | 'reconnected' | 'lost', detail: string) => void;
}

/**
 * An environment through registry and relay, from a web page: the same client as the harness CLI's
 * (`ExecServerClient`, the rendezvous dial, `SecureStream`, session resume), on the browser's socket.
 */
export async function connectFromBrowser(options: BrowserConnectOptions): Promise<Environment> {
  const registry = new URL(options.registryUrl);
  const dialer = rendezvousDialer({
    registryUrl: options.registryUrl,
    apiKey: options.credential,
    environmentId: options.environmentId,
    // The browser's own fetch; it follows no proxy variables (the browser has its own proxy settings).
    fetch: globalThis.fetch.bind(globalThis),
    proxy: { http: null, https: null, noProxy: null },
    // A page served over plain http:// already came in clear: its API calls go the same way.
    allowInsecureRegistry: registry.protocol === 'http:' && registry.origin === globalThis.location?.origin,
    platform: browserPlatform(),
  });
  const client = await ExecServerClient.connect({
    dial: dialer.dial,
    clientName: 'tether-web',
    ...(options.onStatus ? { onStatus: options.onStatus } : {}),
  });
  return Environment.remote(client);
}
