import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type PeerHandle, type PeerKind, startPeer } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Environment } from './environment.js';
import { type EnvironmentFs, RemoteFs } from './fs.js';

const work = mkdtempSync(join(tmpdir(), 'tether-client-fs-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

type Case = 'local' | `remote ${PeerKind}`;

describe.each<Case>(['local', 'remote tether', 'remote codex'])('Environment.fs: %s', (kind) => {
  let env: Environment;
  let peer: PeerHandle | null = null;
  let fs: EnvironmentFs;
  let calls: string[] = [];

  beforeAll(async () => {
    if (kind === 'local') {
      env = Environment.local();
      fs = env.fs;
      return;
    }
    peer = await startPeer({ kind: kind === 'remote tether' ? 'tether' : 'codex', transport: 'ws' });
    env = await Environment.connectWebSocket(peer.url!);
    // The environment's own fs, with every method it sends recorded.
    const inner = env.fs as RemoteFs;
    const caller = (inner as unknown as { caller: { call: RemoteFs['readFile']; capabilities(): ReadonlySet<string> } })
      .caller;
    fs = new RemoteFs({
      call: (method: string, params?: unknown, options?: { encode?: (id: string | number) => Buffer }) => {
        calls.push(method);
        return (caller.call as unknown as (m: string, p?: unknown, o?: unknown) => Promise<never>)(
          method,
          params,
          options,
        );
      },
      capabilities: () => caller.capabilities(),
    });
  });
  afterAll(async () => {
    await env?.close();
    await peer?.close();
  });

  it('writes, reads, lists, describes, copies and removes', async () => {
    const dir = join(work, `${kind.replace(' ', '-')}-basic`);
    await fs.createDirectory(join(dir, 'sub'), { recursive: true });
    await fs.writeFile(join(dir, 'a.txt'), 'alpha');
    expect((await fs.readFile(join(dir, 'a.txt'))).toString()).toBe('alpha');
    const meta = await fs.getMetadata(join(dir, 'a.txt'));
    expect(meta).toMatchObject({ isFile: true, isDirectory: false, size: 5 });
    await fs.copy(join(dir, 'a.txt'), join(dir, 'sub', 'b.txt'));
    const entries = (await fs.readDirectory(dir)).map((e) => `${e.fileName}:${e.isDirectory ? 'd' : 'f'}`).sort();
    expect(entries).toEqual(['a.txt:f', 'sub:d']);
    expect(await fs.canonicalize(join(dir, 'sub', '..', 'a.txt'))).toBe(join(dir, 'a.txt'));
    await fs.remove(dir, { recursive: true });
    await expect(fs.getMetadata(dir)).rejects.toMatchObject({ name: 'TetherError' });
  });

  it('reports a missing file as not found', async () => {
    const error = await fs.readFile(join(work, 'missing.txt')).catch((err: unknown) => err);
    expect(error).toMatchObject({ name: 'TetherError' });
    expect(kind === 'local' ? (error as { code: string }).code : (error as { rpcCode: number }).rpcCode).toBe(
      kind === 'local' ? 'not_found' : -32004,
    );
  });

  it('streams 5 MiB in and out in blocks, bytes intact', async () => {
    const data = randomBytes(5 * 1024 * 1024 + 123);
    const path = join(work, `${kind.replace(' ', '-')}-stream.bin`);
    calls = [];
    await pipeline(Readable.from([data.subarray(0, 1_000_000), data.subarray(1_000_000)]), fs.createWriteStream(path));
    expect(createHash('sha256').update(readFileSync(path)).digest('hex')).toBe(
      createHash('sha256').update(data).digest('hex'),
    );
    if (kind !== 'local') {
      // Streamed (both executors advertise fileWriteStreaming), never sent whole.
      expect(calls).not.toContain('fs/writeFile');
      expect(calls.filter((m) => m === 'fs/writeBlock').length).toBe(6);
    }
    calls = [];
    const parts: Buffer[] = [];
    for await (const chunk of fs.createReadStream(path, { blockSize: 1024 * 1024 })) parts.push(chunk as Buffer);
    expect(Buffer.concat(parts).equals(data)).toBe(true);
    if (kind !== 'local') {
      expect(calls[0]).toBe('fs/open');
      expect(calls.at(-1), calls.join(',')).toBe('fs/close');
      expect(calls).not.toContain('fs/readFile');
    }
  });

  it('an empty stream still creates the file', async () => {
    const path = join(work, `${kind.replace(' ', '-')}-empty.bin`);
    writeFileSync(path, 'old contents');
    await pipeline(Readable.from([]), fs.createWriteStream(path));
    expect(readFileSync(path).byteLength).toBe(0);
  });

  it('reading a directory as a stream fails cleanly', async () => {
    const stream = fs.createReadStream(work);
    await expect(
      (async () => {
        for await (const _ of stream) {
          // nothing expected
        }
      })(),
    ).rejects.toBeDefined();
  });
});
