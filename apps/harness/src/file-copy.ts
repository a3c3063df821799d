/** One file copied (streamed, hashed on both sides), and the SHA-256 of a file wherever it is. */
import { createHash, type Hash } from 'node:crypto';
import { open } from 'node:fs/promises';
import type { Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { DEFAULT_BLOCK_SIZE, type Environment, type FileReadStream, type HandleDigest } from '@tether/client';
import { type CopyOptions, type CopyStats, type Endpoint, integrityError } from './copy-types.js';
import { pathError } from './fs-errors.js';

export async function copyFile(
  source: Endpoint,
  from: string,
  destination: Endpoint,
  to: string,
  size: number,
  options: CopyOptions,
  stats: CopyStats,
  sinkOptions: { noFollow?: boolean } = {},
): Promise<void> {
  const hash = createHash('sha256');
  let done = 0;
  const meter = (chunk: Buffer) => {
    hash.update(chunk);
    done += chunk.byteLength;
    options.onProgress?.(from, done, size);
  };
  // Executors with `fileHandleDigest` hash what they read or wrote through the handle as it passes, so
  // neither side has to read the file again: the source's digest (a remote source) or the destination's
  // (a remote destination) is compared with the hash of the bytes that went through this process.
  const remote: { source: HandleDigest | null; destination: HandleDigest | null } = {
    source: null,
    destination: null,
  };
  const sink = destination.fs.createWriteStream(to, {
    ...(sinkOptions.noFollow ? { noFollow: true } : {}),
    onDigest: (digest) => {
      remote.destination = digest;
    },
  });
  if (source.env === null) {
    await pumpLocalFile(from, sink, meter);
  } else {
    await pumpRemoteFile(
      source.fs.createReadStream(from, {
        onDigest: (digest) => {
          remote.source = digest;
        },
      }),
      sink,
      meter,
    );
  }
  const passed = hash.digest('hex');
  const check = (where: string, actual: string, expected: string) => {
    if (actual !== expected) throw integrityError(to, where, actual, expected);
  };
  // What the source read must be what passed through here…
  const expected = remote.source?.sha256 ?? passed;
  if (remote.source) check('received', passed, expected);
  // …and what the destination holds must be that too: its executor's digest of what it wrote; for a local
  // destination fed the checked bytes of a remote source, what this process wrote; else read back.
  let atDestination: string;
  if (remote.destination) atDestination = remote.destination.sha256;
  else if (remote.source && !destination.env) atDestination = passed;
  else atDestination = await sha256Of(destination, to);
  check('at the destination', atDestination, expected);
  stats.files++;
  stats.bytes += done;
  options.onFile?.(to, done, expected);
}

/** Bytes per read of a local source: the block a remote write sends. */
const LOCAL_READ_BYTES = DEFAULT_BLOCK_SIZE;

/**
 * Streams a local file into `sink` through two buffers used in turn: one is read into while the other's
 * write is in flight, and a buffer is read into again only after its write's callback (when a write
 * stream no longer refers to a chunk). A read stream would hand out a fresh megabyte per read, which V8
 * collects with a full mark-compact every few dozen reads.
 */
async function pumpLocalFile(path: string, sink: Writable, onChunk: (chunk: Buffer) => void): Promise<void> {
  await fill(sink, async () => {
    const file = await open(path, 'r').catch((err: unknown) => {
      throw pathError(err, path);
    });
    try {
      const buffers = [Buffer.allocUnsafeSlow(LOCAL_READ_BYTES), Buffer.allocUnsafeSlow(LOCAL_READ_BYTES)];
      let writing: Promise<void> = Promise.resolve();
      for (let turn = 0, position = 0; ; turn ^= 1) {
        const { bytesRead } = await file.read(buffers[turn] as Buffer, 0, LOCAL_READ_BYTES, position);
        await writing; // the other buffer's write: its bytes are taken, it may be read into next
        if (bytesRead === 0) break;
        position += bytesRead;
        const chunk = (buffers[turn] as Buffer).subarray(0, bytesRead);
        onChunk(chunk);
        writing = write(sink, chunk);
        writing.catch(() => undefined); // awaited on the next turn; a failure there ends the loop
      }
    } finally {
      await file.close();
    }
  });
}

/**
 * Streams a remote file's chunks into `sink` and gives each back to its stream once written (`giveBack`):
 * the read stream keeps fetching ahead meanwhile, and the blocks' buffers serve the next ones.
 */
async function pumpRemoteFile(chunks: FileReadStream, sink: Writable, onChunk: (chunk: Buffer) => void): Promise<void> {
  await fill(
    sink,
    async () => {
      for await (const chunk of chunks) {
        onChunk(chunk as Buffer);
        await write(sink, chunk as Buffer);
        chunks.giveBack?.(chunk as Buffer); // the sink called back: it holds no reference to it
      }
    },
    () => chunks.destroy(),
  );
}

/**
 * Runs `produce` (which writes into `sink`), then ends `sink` and waits until it finished. On a failure
 * `sink` is destroyed (a remote handle closes), `onError` stops the producer's source, and the error
 * thrown is the sink's own when it failed first (a later write only reports that it was destroyed).
 */
async function fill(sink: Writable, produce: () => Promise<void>, onError?: () => void): Promise<void> {
  let failure: Error | null = null;
  const onSinkError = (err: Error) => {
    failure ??= err;
  };
  sink.on('error', onSinkError);
  try {
    await produce();
    sink.end();
    await finished(sink);
  } catch (err) {
    onError?.();
    sink.destroy(failure ?? (err as Error));
    await finished(sink).catch(() => undefined);
    throw failure ?? err;
  } finally {
    sink.off('error', onSinkError);
  }
}

/** Writes a chunk; resolves at its callback (the write stream is done with the chunk). */
function write(sink: Writable, chunk: Buffer): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    sink.write(chunk, (err) => (err ? reject(err) : resolve()));
  });
}

/**
 * The umask new files get at the destination: this process's here; on an environment, its shell's (`umask`
 * as the executor's children have it), else the usual 022.
 */
export async function destinationUmask(destination: Endpoint): Promise<number> {
  if (destination.env === null) return process.umask();
  try {
    const { exitCode, stdout } = await destination.env.exec(['/bin/sh', '-c', 'umask']);
    const match = /^\s*(0?[0-7]{1,4})\s*$/.exec(stdout.toString());
    if (exitCode === 0 && match) return Number.parseInt(match[1] as string, 8) & 0o777;
  } catch {
    // the usual umask below
  }
  return 0o022;
}

/** `sha256sum`'s answer is one line; an executor that sends more than this is not answering it. */
export const SHA256SUM_OUTPUT_BYTES = 64 * 1024;

/**
 * `sha256sum -- path` on the environment, its stdout kept up to SHA256SUM_OUTPUT_BYTES (the process is
 * terminated past that): the digest, or undefined when it failed or did not answer as sha256sum does.
 */
async function remoteSha256(env: Environment, path: string): Promise<string | undefined> {
  const handle = await env.spawn(['sha256sum', '--', path]);
  const parts: Buffer[] = [];
  let size = 0;
  try {
    for await (const event of handle) {
      if (event.kind !== 'output' || event.stream !== 'stdout') continue;
      size += event.chunk.byteLength;
      if (size > SHA256SUM_OUTPUT_BYTES) {
        await handle.terminate().catch(() => undefined);
        return undefined;
      }
      parts.push(event.chunk);
    }
    if ((await handle.completion).exitCode !== 0) return undefined;
  } finally {
    handle.dispose();
  }
  return /^([0-9a-f]{64})\s/.exec(Buffer.concat(parts).toString())?.[1];
}

/** SHA-256 of a file where it lives: `sha256sum` on a remote environment, else read back and hashed. */
export async function sha256Of(endpoint: Endpoint, path: string): Promise<string> {
  if (endpoint.env) {
    const digest = await remoteSha256(endpoint.env, path).catch(() => undefined);
    if (digest) return digest;
  }
  const hash: Hash = createHash('sha256');
  for await (const chunk of endpoint.fs.createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}
