import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { type ClientOptions, WebSocket, WebSocketServer } from 'ws';

/**
 * An open client (no compression, plus `clientOptions`) of a local ws server, and the server's socket for it.
 * Pushes onto `cleanups` what ends both and the server.
 */
export async function wsPair(
  cleanups: Array<() => Promise<void> | void>,
  clientOptions: ClientOptions = {},
): Promise<{ client: WebSocket; peer: WebSocket }> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(server, 'listening');
  const accepted = once(server, 'connection') as Promise<[WebSocket]>;
  const client = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}`, {
    perMessageDeflate: false,
    ...clientOptions,
  });
  await once(client, 'open');
  const [peer] = await accepted;
  cleanups.push(async () => {
    client.terminate();
    peer.terminate();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { client, peer };
}
