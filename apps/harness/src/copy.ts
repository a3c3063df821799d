import { createHash, type Hash } from 'node:crypto';
import { lstat, open } from 'node:fs/promises';
import path, { basename, posix } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import {
  type Environment,
  type EnvironmentFs,
  entryNameProblem,
  giveBack,
  type HandleDigest,
  TetherError,
} from '@tether/client';

/** One side of a copy: a filesystem and, when remote, the environment to hash on. */
export interface Endpoint {
  fs: EnvironmentFs;
  /** Remote: where `sha256sum` runs. Local: null (hashed in process). */
  env: Environment | null;
  path: string;
  label: string;
}

export interface CopyStats {
  files: number;
  directories: number;
  bytes: number;
}

export interface CopyOptions {
  recursive: boolean;
  /** Called as bytes move (for a progress line). */
  onProgress?: (file: string, done: number, total: number) => void;
  /** Called when a file has been copied and verified. */
  onFile?: (file: string, bytes: number, sha256: string) => void;
}

/**
 * Deepest directory nesting a recursive copy descends into: a listing that never ends (a hostile executor
 * answering every directory with another one, or a link loop it follows) stops here with an error.
 */
export const MAX_TREE_DEPTH = 256;

/**
 * Copies a file or (recursively) a directory between any two endpoints, streaming, and checks every
 * file's SHA-256 at the destination against what was read at the source.
 *
 * The source side is untrusted input (an executor chooses the names in its listings). Every entry name
 * must be one path component, every destination path must resolve under the destination root, and no
 * symbolic link is ever created: a link in a remote tree arrives as what it points to (the executor
 * follows links in `fs/readDirectory`), as `cp -rL` and `scp -r` copy. Under a local destination root,
 * an existing link where a file or directory would go is refused rather than written through; the root
 * itself is the user's choice and is followed.
 */
export async function copy(source: Endpoint, destination: Endpoint, options: CopyOptions): Promise<CopyStats> {
  const stats: CopyStats = { files: 0, directories: 0, bytes: 0 };
  const meta = await source.fs.getMetadata(source.path);
  let target = destination.path;
  const existing = await destination.fs.getMetadata(target).catch(() => null);
  if (existing?.isDirectory) target = posix.join(target, basename(source.path));
  if (meta.isDirectory) {
    if (!options.recursive) {
      throw new TetherError('invalid_argument', `${source.label} is a directory (use -r to copy directories)`);
    }
    await copyTree(source, source.path, destination, { root: target, to: target, depth: 0 }, options, stats);
  } else {
    await copyFile(source, source.path, destination, target, meta.size, options, stats);
  }
  return stats;
}

/** Where a tree copy writes: the destination root (checked against), this directory, and its depth. */
interface TreePlace {
  root: string;
  to: string;
  depth: number;
}

async function copyTree(
  source: Endpoint,
  from: string,
  destination: Endpoint,
  place: TreePlace,
  options: CopyOptions,
  stats: CopyStats,
): Promise<void> {
  if (place.depth > MAX_TREE_DEPTH) {
    throw new TetherError('protocol', `${from} nests directories deeper than ${MAX_TREE_DEPTH} levels; not following`);
  }
  if (place.depth > 0) await refuseLocalLink(destination, place.to);
  await destination.fs.createDirectory(place.to, { recursive: true });
  if (place.depth > 0) await refuseLocalLink(destination, place.to); // nothing was swapped in meanwhile
  stats.directories++;
  for (const entry of await source.fs.readDirectory(from)) {
    const child = posix.join(from, entry.fileName);
    const target = childPath(destination, place, from, entry.fileName);
    if (entry.isDirectory) {
      await copyTree(source, child, destination, { ...place, to: target, depth: place.depth + 1 }, options, stats);
    } else if (entry.isFile) {
      const { size } = await source.fs.getMetadata(child);
      await refuseLocalLink(destination, target);
      await copyFile(source, child, destination, target, size, options, stats, { noFollow: true });
    }
    // Anything else (sockets, devices, dangling links) is skipped, as cp -r of regular content.
  }
}

/**
 * The destination path of one listed entry, or a clear error: the name must be a single component (not
 * empty, `.`, `..`, nor holding `/`, NUL, or on a local Windows destination `\\`), and the joined path must
 * still lie under the destination root once resolved.
 */
function childPath(destination: Endpoint, place: TreePlace, from: string, name: string): string {
  const problem =
    entryNameProblem(name) ??
    (destination.env === null && path.sep === '\\' && name.includes('\\') ? 'contains "\\"' : null);
  if (problem) {
    throw new TetherError(
      'protocol',
      `refusing entry ${JSON.stringify(name)} listed in ${from}: the name ${problem} (an entry must be one path component)`,
    );
  }
  const paths = destination.env === null ? path : posix;
  const target = paths.join(place.to, name);
  const relative = paths.relative(paths.resolve(place.root), paths.resolve(target));
  if (relative === '' || relative === '..' || relative.startsWith(`..${paths.sep}`) || paths.isAbsolute(relative)) {
    throw new TetherError(
      'protocol',
      `refusing entry ${JSON.stringify(name)} listed in ${from}: it would be written outside ${place.root}`,
    );
  }
  return target;
}

/**
 * Under a local destination, a symbolic link where the copy would write is refused: writing through it
 * (or descending into it) would put a remote side's bytes wherever the link points.
 */
async function refuseLocalLink(destination: Endpoint, target: string): Promise<void> {
  if (destination.env !== null) return;
  const info = await lstat(target).catch(() => null);
  if (info?.isSymbolicLink()) {
    throw new TetherError(
      'invalid_state',
      `refusing to write through the symbolic link ${target} inside the destination; remove it or copy elsewhere`,
    );
  }
}

async function copyFile(
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
    if (actual !== expected) {
      throw new TetherError(
        'protocol',
        `integrity check failed for ${to}: sha256 ${actual} ${where}, ${expected} read from the source`,
      );
    }
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
const LOCAL_READ_BYTES = 1024 * 1024;

/**
 * Streams a local file into `sink` through two buffers used in turn: one is read into while the other's
 * write is in flight, and a buffer is read into again only after its write's callback (when a write
 * stream no longer refers to a chunk). A read stream would hand out a fresh megabyte per read, which V8
 * collects with a full mark-compact every few dozen reads.
 */
async function pumpLocalFile(path: string, sink: Writable, onChunk: (chunk: Buffer) => void): Promise<void> {
  await fill(sink, async () => {
    const file = await open(path, 'r');
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
 * Streams a remote file's chunks into `sink` and gives each back once written (`giveBack`): the
 * read stream keeps fetching ahead meanwhile, and the blocks' buffers serve the next ones.
 */
async function pumpRemoteFile(chunks: Readable, sink: Writable, onChunk: (chunk: Buffer) => void): Promise<void> {
  await fill(
    sink,
    async () => {
      for await (const chunk of chunks) {
        onChunk(chunk as Buffer);
        await write(sink, chunk as Buffer);
        giveBack(chunk as Buffer); // the sink called back: it holds no reference to it
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
