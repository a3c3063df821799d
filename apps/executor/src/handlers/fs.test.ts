import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileUri, RpcError } from '@tether/exec-protocol';
import { attachmentOf, encodeWithAttachment, type RpcClient } from '@tether/jsonrpc';
import { describe, expect, it } from 'vitest';
import { execServers } from '../__tests__/exec-server.js';
import { whileAttached } from './attached.js';
import { fsHandlers } from './fs.js';
import { httpHandlers } from './http.js';
import type { RequestContext } from './types.js';

const { ready, scratchDir } = execServers();

describe('fs handlers in the server', () => {
  it('apply the configured read limit and handle limit', async () => {
    const dir = scratchDir('tether-fs-handlers-');
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
    const dir = scratchDir('tether-fs-handlers-');
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

describe('binaryBlocks and fileHandleDigest (Tether extensions)', () => {
  const readyOver = (kind: 'websocket' | 'stdio') => ready({}, kind);
  const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');
  const dir = () => scratchDir('tether-fs-binary-');
  const writeBlock = (client: RpcClient, handleId: string, offset: number, data: Buffer, extra = {}) =>
    client.call('fs/writeBlock', undefined, {
      encode: (id) =>
        encodeWithAttachment(
          JSON.stringify({ id, method: 'fs/writeBlock', params: { handleId, offset, ...extra } }),
          data,
        ),
    });

  it('are advertised where binary attachments travel, binaryBlocks never over stdio', async () => {
    const ws = await readyOver('websocket');
    expect(ws.capabilities).toMatchObject({ binaryBlocks: true, fileHandleDigest: true });
    await expect(ws.client.call('environment/info', {})).resolves.toMatchObject({
      capabilities: { binaryBlocks: true },
    });
    const stdio = await readyOver('stdio');
    expect(stdio.capabilities.binaryBlocks).toBeUndefined();
    expect(stdio.capabilities.fileHandleDigest).toBe(true);
    const path = join(dir(), 'f');
    writeFileSync(path, 'abc');
    await stdio.client.call('fs/open', { handleId: 'r', path: pathToFileUri(path) });
    await expect(
      stdio.client.call('fs/readBlock', { handleId: 'r', offset: 0, len: 3, binary: true }),
    ).rejects.toMatchObject({
      code: -32602,
      message: '`binary` blocks need a WebSocket or relay connection, not stdio',
    });
    // The base64 form still works on the same handle.
    await expect(stdio.client.call('fs/readBlock', { handleId: 'r', offset: 0, len: 3 })).resolves.toEqual({
      chunk: 'YWJj',
      eof: false,
    });
  });

  it('write raw bytes and read them back raw, with the digests of both handles', async () => {
    const { client } = await readyOver('websocket');
    const path = join(dir(), 'f');
    const uri = pathToFileUri(path);
    const data = Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 31) & 0xff));
    await client.call('fs/open', { handleId: 'w', path: uri, mode: 'replace', digest: true });
    for (let offset = 0; offset < data.length; offset += 128 * 1024) {
      await expect(writeBlock(client, 'w', offset, data.subarray(offset, offset + 128 * 1024))).resolves.toEqual({});
    }
    await expect(client.call('fs/close', { handleId: 'w' })).resolves.toEqual({
      sha256: sha256(data),
      bytes: data.length,
    });
    expect(readFileSync(path).equals(data)).toBe(true);

    await client.call('fs/open', { handleId: 'r', path: uri, digest: true });
    // Four reads in flight complete in any order: the digest follows file order.
    const answers = await Promise.all(
      [0, 1, 2, 3].map((i) =>
        client.call<{ eof: boolean; chunk?: string }>('fs/readBlock', {
          handleId: 'r',
          offset: i * 100_000,
          len: 100_000,
          binary: true,
        }),
      ),
    );
    expect(answers.map((a) => [a.eof, 'chunk' in a])).toEqual([
      [false, false],
      [false, false],
      [false, false],
      [true, false],
    ]);
    expect(Buffer.concat(answers.map((a) => attachmentOf(a) as Buffer)).equals(data)).toBe(true);
    await expect(client.call('fs/close', { handleId: 'r' })).resolves.toEqual({
      sha256: sha256(data),
      bytes: data.length,
    });
  });

  it('give no digest unless the bytes ran from offset 0 without gaps, and none unless asked', async () => {
    const { client } = await readyOver('websocket');
    const uri = pathToFileUri(join(dir(), 'f'));
    await client.call('fs/open', { handleId: 'gap', path: uri, mode: 'replace', digest: true });
    await writeBlock(client, 'gap', 0, Buffer.from('ab'));
    await writeBlock(client, 'gap', 5, Buffer.from('cd'));
    await expect(client.call('fs/close', { handleId: 'gap' })).resolves.toEqual({});
    await client.call('fs/open', { handleId: 'retry', path: uri, mode: 'replace', digest: true });
    await writeBlock(client, 'retry', 0, Buffer.from('ab'));
    await writeBlock(client, 'retry', 0, Buffer.from('ab'));
    await expect(client.call('fs/close', { handleId: 'retry' })).resolves.toEqual({});
    await client.call('fs/open', { handleId: 'quiet', path: uri });
    await client.call('fs/readBlock', { handleId: 'quiet', offset: 0, len: 10 });
    await expect(client.call('fs/close', { handleId: 'quiet' })).resolves.toEqual({});
    await client.call('fs/open', { handleId: 'mid', path: uri, digest: true });
    await client.call('fs/readBlock', { handleId: 'mid', offset: 1, len: 10 });
    await expect(client.call('fs/close', { handleId: 'mid' })).resolves.toEqual({});
    // Nothing read is a run from 0 too: the digest of no bytes.
    await client.call('fs/open', { handleId: 'none', path: uri, digest: true });
    await expect(client.call('fs/close', { handleId: 'none' })).resolves.toEqual({
      sha256: sha256(Buffer.alloc(0)),
      bytes: 0,
    });
  });

  it('refuse a write with both a chunk and an attachment, and keep the handle', async () => {
    const { client } = await readyOver('websocket');
    const path = join(dir(), 'f');
    await client.call('fs/open', { handleId: 'w', path: pathToFileUri(path), mode: 'replace' });
    await expect(writeBlock(client, 'w', 0, Buffer.from('raw'), { chunk: 'YWJj' })).rejects.toMatchObject({
      code: -32602,
      message: '`chunk` and a binary attachment are exclusive',
    });
    await expect(writeBlock(client, 'nope', 0, Buffer.from('raw'))).rejects.toMatchObject({ code: -32004 });
    await writeBlock(client, 'w', 0, Buffer.from('raw'));
    await client.call('fs/close', { handleId: 'w' });
    expect(readFileSync(path, 'utf8')).toBe('raw');
  });
});
