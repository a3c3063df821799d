import { mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileUri, RpcError } from '@tether/exec-protocol';
import { createMemoryTransportPair, RpcClient, RpcConnection } from '@tether/jsonrpc';
import { afterEach, describe, expect, it } from 'vitest';
import { ExecServer } from '../server.js';
import { whileAttached } from './attached.js';
import { fsHandlers } from './fs.js';
import { httpHandlers } from './http.js';
import type { RequestContext } from './types.js';

const servers: ExecServer[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function ready(config: ConstructorParameters<typeof ExecServer>[0] = {}) {
  const server = new ExecServer({ ...config, config: { pingIntervalMs: 0, ...config.config }, reaper: false });
  servers.push(server);
  const [serverSide, clientSide] = createMemoryTransportPair();
  const processor = server.serve(new RpcConnection(serverSide));
  const connection = new RpcConnection(clientSide);
  const client = new RpcClient(connection, { onNotification: () => {}, callTimeoutMs: 10_000 });
  await client.call('initialize', { clientName: 'test' });
  client.notify('initialized', {});
  return { server, client, connection, processor };
}

describe('fs handlers in the server', () => {
  it('apply the configured read limit and handle limit', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tether-fs-handlers-'));
    dirs.push(dir);
    writeFileSync(join(dir, 'f'), '0123456789');
    const { client } = await ready({ config: { maxReadFileBytes: 9, maxFileHandles: 1 } });
    const path = pathToFileUri(join(dir, 'f'));
    await expect(client.call('fs/readFile', { path })).rejects.toMatchObject({
      code: -32600,
      message: 'file is too large to read: limit is 9 bytes',
    });
    await client.call('fs/open', { handleId: 'a', path });
    await expect(client.call('fs/open', { handleId: 'b', path })).rejects.toMatchObject({
      code: -32600,
      message: 'at most 1 file handles may be open per connection',
    });
  });
});

/** Paths this process has open, from /proc/self/fd. */
function openPaths(): string[] {
  const paths: string[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      paths.push(readlinkSync(`/proc/self/fd/${fd}`));
    } catch {
      // closed between the listing and the readlink
    }
  }
  return paths;
}

describe('connection end', () => {
  it('closes every file the connection opened before `done` resolves', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tether-fs-handlers-'));
    dirs.push(dir);
    writeFileSync(join(dir, 'r'), 'read me');
    const { client, connection, processor } = await ready();
    await client.call('fs/open', { handleId: 'r', path: pathToFileUri(join(dir, 'r')) });
    await client.call('fs/open', { handleId: 'w', path: pathToFileUri(join(dir, 'w')), mode: 'replace' });
    expect(
      openPaths()
        .filter((path) => path.startsWith(dir))
        .sort(),
    ).toEqual([join(dir, 'r'), join(dir, 'w')]);
    connection.close('test over');
    await processor.done;
    expect(openPaths().filter((path) => path.startsWith(dir))).toEqual([]);
  });
});

describe('whileAttached', () => {
  it('refuses before the handler runs when the connection no longer holds its session', async () => {
    let ran = 0;
    const table = whileAttached({ 'fs/x': () => ++ran });
    const takenOver = RpcError.invalidRequest('session has been resumed by another connection');
    const ctx = (attached: boolean) =>
      ({
        session: () => {
          if (!attached) throw takenOver;
          return {};
        },
      }) as unknown as RequestContext;
    expect(() => table['fs/x']!({}, ctx(false))).toThrow(takenOver);
    expect(ran).toBe(0);
    expect(table['fs/x']!({}, ctx(true))).toBe(1);
  });

  it('guards every fs and http method', () => {
    for (const [method, handler] of Object.entries({ ...fsHandlers, ...httpHandlers })) {
      const ctx = {
        session: () => {
          throw new Error(`guarded ${method}`);
        },
      } as unknown as RequestContext;
      expect(() => handler({}, ctx)).toThrow(`guarded ${method}`);
    }
  });
});
