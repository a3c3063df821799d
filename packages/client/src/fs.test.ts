import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type PeerHandle, type PeerKind, startPeer } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Environment } from './environment-node.js';
import { DEFAULT_READ_DEPTH, type EnvironmentFs } from './fs.js';
import { RemoteFs } from './remote-fs-node.js';

const work = mkdtempSync(join(tmpdir(), 'tether-client-fs-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

type Case = 'local' | `remote ${PeerKind}`;

describe.each<Case>(['local', 'remote tether', 'remote codex'])('Environment.fs: %s', (kind) => {
  let env: Environment;
  let peer: PeerHandle | null = null;
  let fs: EnvironmentFs;
  let calls: string[] = [];
  /** How block data travelled: `raw` (binary attachment) or `base64`, per fs/readBlock and fs/writeBlock. */
  let forms: string[] = [];
  /** The mode of every fs/open. */
  let modes: string[] = [];

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
      call: (
        method: string,
        params?: unknown,
        options?: { encode?: (id: string | number, allocate: (n: number) => Buffer) => Buffer },
      ) => {
        calls.push(method);
        if (method === 'fs/open') modes.push((params as { mode?: string }).mode ?? 'read');
        if (method === 'fs/readBlock') forms.push((params as { binary?: boolean }).binary ? 'raw' : 'base64');
        if (method === 'fs/writeBlock' && options?.encode) {
          forms.push(options.encode(0, (n) => Buffer.alloc(n))[0] === 0x01 ? 'raw' : 'base64');
        }
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
    forms = [];
    const digests: unknown[] = [];
    const sha256 = createHash('sha256').update(data).digest('hex');
    await pipeline(
      Readable.from([data.subarray(0, 1_000_000), data.subarray(1_000_000)]),
      fs.createWriteStream(path, { onDigest: (d) => digests.push(d) }),
    );
    expect(createHash('sha256').update(readFileSync(path)).digest('hex')).toBe(sha256);
    if (kind !== 'local') {
      // Streamed (both executors advertise fileWriteStreaming), never sent whole.
      expect(calls).not.toContain('fs/writeFile');
      expect(calls.filter((m) => m === 'fs/writeBlock').length).toBe(6);
    }
    calls = [];
    const parts: Buffer[] = [];
    const stream = fs.createReadStream(path, { blockSize: 1024 * 1024, onDigest: (d) => digests.push(d) });
    for await (const chunk of stream) parts.push(chunk as Buffer);
    expect(Buffer.concat(parts).equals(data)).toBe(true);
    if (kind !== 'local') {
      expect(calls[0]).toBe('fs/open');
      expect(calls.at(-1), calls.join(',')).toBe('fs/close');
      expect(calls).not.toContain('fs/readFile');
    }
    // Tether's executor takes and gives raw bytes and hashes what passed through each handle; Codex's
    // gets base64 and no digest request; local files have no digest to report.
    const expected = {
      local: { form: null, digests: [] },
      'remote tether': {
        form: 'raw',
        digests: [
          { sha256, bytes: data.length },
          { sha256, bytes: data.length },
        ],
      },
      'remote codex': { form: 'base64', digests: [null, null] },
    }[kind];
    // 6 blocks written, at least 6 read (reads in flight may ask past the end).
    if (expected.form) expect(forms.length).toBeGreaterThanOrEqual(12);
    expect(new Set(forms)).toEqual(new Set(expected.form ? [expected.form] : []));
    expect(digests).toEqual(expected.digests);
  });

  it('keeps no chunk past its write callback: a writer may reuse one buffer for every write', async () => {
    const path = join(work, `${kind.replace(' ', '-')}-reuse.bin`);
    const data = randomBytes(3 * 1024 * 1024 + 12_345);
    const stream = fs.createWriteStream(path);
    const buffer = Buffer.alloc(700_000); // not a multiple of the block: parts of chunks wait for the next
    for (let at = 0; at < data.length; at += buffer.length) {
      const n = data.copy(buffer, 0, at, at + buffer.length);
      await new Promise<void>((resolve, reject) =>
        stream.write(buffer.subarray(0, n), (err) => (err ? reject(err) : resolve())),
      );
      buffer.fill(0xee); // what a reused buffer does to anything that kept a view of it
    }
    await new Promise<void>((resolve, reject) => stream.end((err?: Error | null) => (err ? reject(err) : resolve())));
    expect(
      createHash('sha256')
        .update(await fs.readFile(path))
        .digest('hex'),
    ).toBe(createHash('sha256').update(data).digest('hex'));
  });

  it('an empty stream still creates the file', async () => {
    const path = join(work, `${kind.replace(' ', '-')}-empty.bin`);
    writeFileSync(path, 'old contents');
    await pipeline(Readable.from([]), fs.createWriteStream(path));
    expect(readFileSync(path).byteLength).toBe(0);
  });

  it('writes over a longer file in place and cuts it to the new length (Codex: truncated when opened)', async () => {
    const path = join(work, `${kind.replace(' ', '-')}-overwrite.bin`);
    const old = randomBytes(3 * 1024 * 1024);
    writeFileSync(path, old);
    const inode = statSync(path).ino;
    const block = randomBytes(1024 * 1024); // one whole block: a remote writer sends it at once
    modes = [];
    const stream = fs.createWriteStream(path);
    await new Promise<void>((resolve, reject) => stream.write(block, (err) => (err ? reject(err) : resolve())));
    // In place: until the stream ends, the file keeps its length and the old bytes past what was written.
    const inPlace = kind !== 'remote codex';
    await expect.poll(() => readFileSync(path).subarray(0, block.length).equals(block)).toBe(true);
    expect(readFileSync(path).length).toBe(inPlace ? old.length : block.length);
    await new Promise<void>((resolve, reject) =>
      stream.end(Buffer.from('tail'), (err?: Error | null) => (err ? reject(err) : resolve())),
    );
    expect(readFileSync(path).equals(Buffer.concat([block, Buffer.from('tail')]))).toBe(true);
    expect(statSync(path).ino).toBe(inode);
    if (kind !== 'local') expect(modes).toEqual([inPlace ? 'overwrite' : 'replace']);
  });

  it('a write stream destroyed part way leaves only what it wrote, none of the old contents', async () => {
    const path = join(work, `${kind.replace(' ', '-')}-destroyed.bin`);
    writeFileSync(path, randomBytes(3 * 1024 * 1024));
    const block = randomBytes(1024 * 1024);
    const stream = fs.createWriteStream(path);
    await new Promise<void>((resolve, reject) => stream.write(block, (err) => (err ? reject(err) : resolve())));
    const failed = new Promise((resolve) => stream.once('error', resolve));
    const closed = new Promise((resolve) => stream.once('close', resolve));
    stream.destroy(new Error('the source failed'));
    expect(await failed).toMatchObject({ message: 'the source failed' });
    await closed;
    expect(readFileSync(path).equals(block)).toBe(true);
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

describe('RemoteFs reads in flight', () => {
  it('keeps at most DEFAULT_READ_DEPTH (3) fs/readBlock requests in flight unless told otherwise', async () => {
    const file = Buffer.alloc(10 * 100, 9);
    const run = async (depth?: number) => {
      let inFlight = 0;
      let most = 0;
      const fs = new RemoteFs({
        capabilities: () => new Set(),
        call: async <T>(method: string, params?: unknown) => {
          if (method !== 'fs/readBlock') return {} as T;
          inFlight++;
          most = Math.max(most, inFlight);
          await new Promise((resolve) => setTimeout(resolve, 2));
          inFlight--;
          const { offset, len } = params as { offset: number; len: number };
          const chunk = file.subarray(offset, offset + len);
          return { chunk: chunk.toString('base64'), eof: chunk.length < len } as T;
        },
      });
      const parts: Buffer[] = [];
      for await (const part of fs.createReadStream('/f', { blockSize: 100, ...(depth ? { depth } : {}) })) {
        parts.push(part as Buffer);
      }
      expect(Buffer.concat(parts).equals(file)).toBe(true);
      return most;
    };
    expect(DEFAULT_READ_DEPTH).toBe(3);
    expect(await run()).toBe(3);
    expect(await run(5)).toBe(5);
  });
});
