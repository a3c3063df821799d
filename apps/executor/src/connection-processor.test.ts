import { BufferPool } from '@tether/bytes';
import { METHOD_TABLE, Method } from '@tether/exec-protocol';
import { createMemoryTransportPair, RpcConnection } from '@tether/jsonrpc';
import { afterEach, describe, expect, it } from 'vitest';
import { ConnectionProcessor, connectionBuffers } from './connection-processor.js';
import { environmentInfo } from './environment-info.js';
import { silentLogger } from './logger.js';
import { ExecServer } from './server.js';

const servers: ExecServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

function serve(server: ExecServer) {
  const [serverSide, clientSide] = createMemoryTransportPair();
  const processor = server.serve(new RpcConnection(serverSide));
  const client = new RpcConnection(clientSide);
  client.start({ onMessage: () => {} });
  return { processor, client };
}

describe('ConnectionProcessor buffers', () => {
  it('are per connection, and closing a connection closes its pools alone', async () => {
    const server = new ExecServer({ config: { pingIntervalMs: 0 }, reaper: false });
    servers.push(server);
    const a = serve(server);
    const b = serve(server);
    expect(a.processor.buffers.output).not.toBe(b.processor.buffers.output);
    expect(a.processor.buffers.blocks).not.toBe(b.processor.buffers.blocks);
    expect(a.processor.buffers.output).not.toBe(a.processor.buffers.blocks);
    a.processor.buffers.blocks.lease(128 * 1024).release();
    expect(a.processor.buffers.blocks.pooledBytes).toBe(128 * 1024);
    a.client.close('bye');
    await a.processor.done;
    expect(a.processor.buffers.output.closed).toBe(true);
    expect(a.processor.buffers.blocks.closed).toBe(true);
    expect(a.processor.buffers.blocks.pooledBytes).toBe(0);
    expect(b.processor.buffers.output.closed).toBe(false);
    expect(b.processor.buffers.blocks.closed).toBe(false);
  });

  it('given by the creator stay open when the connection closes (their creator closes them)', async () => {
    const server = new ExecServer({ config: { pingIntervalMs: 0 }, reaper: false });
    servers.push(server);
    const given = { output: new BufferPool(), blocks: new BufferPool() };
    const [serverSide, clientSide] = createMemoryTransportPair();
    const processor = new ConnectionProcessor(new RpcConnection(serverSide), {
      registry: server.registry,
      concurrency: 4,
      environmentInfo: environmentInfo(),
      logger: silentLogger(),
      buffers: given,
    });
    processor.start();
    expect(processor.buffers).toBe(given);
    new RpcConnection(clientSide).close('bye');
    await processor.done;
    expect(given.output.closed).toBe(false);
    expect(given.blocks.closed).toBe(false);
    expect(connectionBuffers().output).not.toBe(connectionBuffers().output);
  });
});

describe('ConnectionProcessor methods', () => {
  it('answer exactly the request methods of exec-protocol’s table, each gated by a capability we advertise', async () => {
    const server = new ExecServer({ config: { pingIntervalMs: 0 }, reaper: false });
    servers.push(server);
    const { processor, client } = serve(server);
    const table = Object.keys(METHOD_TABLE).filter((method) => method !== Method.initialize);
    expect([...processor.methods].sort()).toEqual(table.sort());
    const advertised = environmentInfo().capabilities ?? {};
    for (const spec of Object.values(METHOD_TABLE)) {
      if ('capability' in spec) expect(advertised[spec.capability], spec.capability).toBe(true);
    }
    client.close('bye');
    await processor.done;
  });
});
