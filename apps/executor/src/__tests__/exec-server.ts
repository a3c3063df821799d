/** ExecServers for handler tests: each over an in-memory transport, initialized, and closed after the test. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMemoryTransportPair, RpcClient, RpcConnection, type TransportKind } from '@tether/jsonrpc';
import { afterEach } from 'vitest';
import { ExecServer } from '../server.js';

type ServerOptions = ConstructorParameters<typeof ExecServer>[0];

/**
 * Call at the top of a test file: `ready` starts a server (no pings, no reaper) and an initialized client
 * of it, `scratchDir` makes a temporary directory; after each test both are closed and removed.
 */
export function execServers() {
  const servers: ExecServer[] = [];
  const dirs: string[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  async function ready(options: ServerOptions = {}, kind: TransportKind = 'websocket') {
    const server = new ExecServer({ ...options, config: { pingIntervalMs: 0, ...options.config }, reaper: false });
    servers.push(server);
    const [serverSide, clientSide] = createMemoryTransportPair(kind);
    const processor = server.serve(new RpcConnection(serverSide));
    const connection = new RpcConnection(clientSide);
    const client = new RpcClient(connection, { onNotification: () => {}, callTimeoutMs: 10_000 });
    const init = await client.call<{ environmentInfo?: { capabilities?: Record<string, boolean> } }>('initialize', {
      clientName: 'test',
    });
    client.notify('initialized', {});
    return { server, client, connection, processor, capabilities: init.environmentInfo?.capabilities ?? {} };
  }

  function scratchDir(prefix: string): string {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  }

  return { ready, scratchDir };
}
