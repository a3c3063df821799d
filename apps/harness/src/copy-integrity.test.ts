/** cp checks every file's SHA-256: a destination that does not hash like the source is an error. */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const work = mkdtempSync(join(tmpdir(), 'tether-harness-integrity-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('copy integrity', () => {
  it('fails when the destination does not hash like the source', async () => {
    const { copy } = await import('./copy.js');
    const { LocalFs } = await import('@tether/client');
    const { Transform } = await import('node:stream');
    const source = join(work, 'integrity-src.bin');
    writeFileSync(source, randomBytes(50_000));
    const real = new LocalFs();
    // A destination that flips one byte on its way to disk, as a faulty transport or disk would.
    const corrupting = Object.create(real) as InstanceType<typeof LocalFs>;
    corrupting.createWriteStream = (path: string) => {
      const sink = real.createWriteStream(path);
      let flipped = false;
      const flip = new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          if (!flipped) {
            chunk = Buffer.from(chunk);
            chunk[0] = (chunk[0] ?? 0) ^ 0xff;
            flipped = true;
          }
          callback(null, chunk);
        },
      });
      flip.pipe(sink);
      return flip;
    };
    const destination = join(work, 'integrity-dst.bin');
    await expect(
      copy(
        { fs: real, env: null, path: source, label: source },
        { fs: corrupting, env: null, path: destination, label: destination },
        { recursive: false },
      ),
    ).rejects.toThrow(/integrity check failed/);
  });

  it('trusts executor digests instead of reading the file again, and fails when one disagrees', async () => {
    const { copy } = await import('./copy.js');
    const { LocalFs } = await import('@tether/client');
    const { createHash } = await import('node:crypto');
    const { Readable, Writable } = await import('node:stream');
    type Fs = InstanceType<typeof LocalFs>;
    const data = randomBytes(70_000);
    const sha256 = createHash('sha256').update(data).digest('hex');
    const source = join(work, 'digest-src.bin');
    writeFileSync(source, data);
    const real = new LocalFs();
    // Stand-ins for remote endpoints: local files whose handles report the given digest when done.
    const reporting = (digest: string): Fs => {
      const fs = Object.create(real) as Fs;
      const report = (options: { onDigest?: (d: { sha256: string; bytes: number }) => void }) =>
        options.onDigest?.({ sha256: digest, bytes: data.length });
      fs.createReadStream = (path, options = {}) =>
        Readable.from(
          (async function* () {
            for await (const chunk of real.createReadStream(path)) yield chunk as Buffer;
            report(options); // before the stream ends, as RemoteFs does
          })(),
        );
      fs.createWriteStream = (path, options = {}) => {
        const sink = real.createWriteStream(path);
        return new Writable({
          write(chunk: Buffer, _encoding, callback) {
            sink.write(chunk, callback);
          },
          final(callback) {
            sink.end(() => {
              report(options);
              callback();
            });
          },
        });
      };
      return fs;
    };
    // An env whose `sha256sum` must not be needed.
    const noExec = { exec: () => Promise.reject(new Error('sha256sum should not run')) } as never;
    const destination = join(work, 'digest-dst.bin');
    const endpoint = (fs: Fs, path: string, env: unknown = null) => ({ fs, env: env as never, path, label: path });

    await expect(
      copy(endpoint(real, source), endpoint(reporting(sha256), destination, noExec), { recursive: false }),
    ).resolves.toMatchObject({ files: 1, bytes: data.length });
    await expect(
      copy(endpoint(reporting(sha256), source, noExec), endpoint(real, destination), { recursive: false }),
    ).resolves.toMatchObject({ files: 1, bytes: data.length });

    const wrong = 'f'.repeat(64);
    await expect(
      copy(endpoint(real, source), endpoint(reporting(wrong), destination, noExec), { recursive: false }),
    ).rejects.toThrow(`sha256 ${wrong} at the destination, ${sha256} read from the source`);
    await expect(
      copy(endpoint(reporting(wrong), source, noExec), endpoint(real, destination), { recursive: false }),
    ).rejects.toThrow(`sha256 ${sha256} received, ${wrong} read from the source`);
  });
});
