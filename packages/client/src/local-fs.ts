/** This machine's files through node:fs, as an EnvironmentFs. */
import { type BigIntStats, createReadStream, constants as fsConstants } from 'node:fs';
import * as fsp from 'node:fs/promises';
import type { Writable } from 'node:stream';
import { mapBounded } from '@tether/bytes';
import { MODE_BITS } from '@tether/exec-protocol';
import { TetherError } from './errors.js';
import { InPlaceFileWriter } from './file-writer.js';
import {
  DEFAULT_BLOCK_SIZE,
  type DirectoryEntry,
  type EnvironmentFs,
  type FileMetadata,
  type FileReadStream,
  type ReadFilesLimits,
  type SmallFileRead,
  type SmallFileWrite,
  type SmallFileWritten,
  type StreamOptions,
  type UnixMetadata,
} from './fs.js';

function osError(err: unknown, path: string): TetherError {
  const e = err as NodeJS.ErrnoException;
  const code = e.code === 'ENOENT' ? 'not_found' : 'invalid_argument';
  return new TetherError(code, `${path}: ${e.message}`, { cause: err });
}

async function local<T>(path: string, action: () => Promise<T>): Promise<T> {
  try {
    return await action();
  } catch (err) {
    throw osError(err, path);
  }
}

/** Files one batch works on at once (the libuv pool runs their few syscalls side by side). */
const BATCH_PARALLELISM = 8;

/** Whole milliseconds from nanoseconds (the float milliseconds of a plain stat may fall just below). */
function unixMetadataOf(stats: BigIntStats): UnixMetadata {
  return {
    mode: Number(stats.mode) & MODE_BITS,
    modifiedAtMs: Number(stats.mtimeNs / 1_000_000n),
    accessedAtMs: Number(stats.atimeNs / 1_000_000n),
  };
}

/** Milliseconds as utimes' seconds; half a microsecond more, since libuv truncates the double to microseconds. */
function utimesSeconds(ms: number): number {
  return (ms + 0.0005) / 1000;
}

/** Applies times, then mode (a mode without write permission must not stop utimes), through an open file. */
async function applyMetadata(file: fsp.FileHandle, metadata: UnixMetadata): Promise<void> {
  await file.utimes(utimesSeconds(metadata.accessedAtMs), utimesSeconds(metadata.modifiedAtMs));
  await file.chmod(metadata.mode & MODE_BITS);
}

function notRegular(path: string): TetherError {
  return new TetherError('invalid_argument', `${path} is not a regular file`);
}

/**
 * One local file of a `readFiles`, opened (O_NONBLOCK: opening a FIFO does not wait for a writer; it is
 * refused right after) and stat-ed.
 */
async function openLocalSmall(path: string): Promise<{ file: fsp.FileHandle; stats: BigIntStats } | TetherError> {
  let file: fsp.FileHandle | undefined;
  try {
    file = await fsp.open(path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
    const stats = await file.stat({ bigint: true });
    if (!stats.isFile()) throw notRegular(path);
    return { file, stats };
  } catch (err) {
    await file?.close().catch(() => undefined);
    return err instanceof TetherError ? err : osError(err, path);
  }
}

/** Reads an opened file whole: one read of a byte more than its size; one that grew since is `tooLarge`. */
async function readLocalSmall(path: string, file: fsp.FileHandle, stats: BigIntStats): Promise<SmallFileRead> {
  const size = Number(stats.size);
  try {
    const buffer = Buffer.allocUnsafe(size + 1);
    let filled = 0;
    for (;;) {
      const { bytesRead } = await file.read(buffer, filled, buffer.length - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
      if (filled > size) return { kind: 'tooLarge', size: filled };
    }
    return { kind: 'data', data: buffer.subarray(0, filled), sha256: null, metadata: unixMetadataOf(stats) };
  } catch (err) {
    return { kind: 'error', error: osError(err, path) };
  }
}

/** Writes one local file whole: open (create or truncate), fstat (a regular file), write, metadata, close. */
async function writeLocalSmall(file: SmallFileWrite): Promise<SmallFileWritten> {
  let handle: fsp.FileHandle | undefined;
  try {
    const flags =
      fsConstants.O_WRONLY |
      fsConstants.O_CREAT |
      fsConstants.O_TRUNC |
      fsConstants.O_NONBLOCK |
      (file.noFollow ? fsConstants.O_NOFOLLOW : 0);
    handle = await fsp.open(file.path, flags, 0o666);
    if (!(await handle.stat()).isFile()) throw notRegular(file.path);
    let written = 0;
    while (written < file.data.length) {
      written += (await handle.write(file.data, written, file.data.length - written, written)).bytesWritten;
    }
    if (file.metadata) await applyMetadata(handle, file.metadata);
    await handle.close();
    handle = undefined;
    return { sha256: null };
  } catch (err) {
    return { error: err instanceof TetherError ? err : osError(err, file.path) };
  } finally {
    await handle?.close().catch(() => undefined);
  }
}

/** This machine's files (node:fs). */
export class LocalFs implements EnvironmentFs {
  readonly batching = true;
  readonly unixMetadata = true;

  /**
   * Reads whole files, BATCH_PARALLELISM at a time, the budget spent in the order of `paths` (the first
   * file that does not fit and every later one is `deferred`).
   */
  async readFiles(paths: readonly string[], limits: ReadFilesLimits): Promise<SmallFileRead[]> {
    let left = limits.maxTotalBytes;
    let deferring = false;
    const entries: SmallFileRead[] = [];
    for (let start = 0; start < paths.length; start += BATCH_PARALLELISM) {
      const window = paths.slice(start, start + BATCH_PARALLELISM);
      if (deferring) {
        for (const _ of window) entries.push({ kind: 'deferred' });
        continue;
      }
      const opened = await mapBounded(window, BATCH_PARALLELISM, openLocalSmall);
      const plan = opened.map((entry, index): SmallFileRead | null => {
        if (deferring) return { kind: 'deferred' };
        if (entry instanceof TetherError) return { kind: 'error', error: entry };
        const size = Number(entry.stats.size);
        if (size > limits.maxFileBytes) return { kind: 'tooLarge', size };
        if (size > left && start + index > 0) {
          deferring = true;
          return { kind: 'deferred' };
        }
        left -= size;
        return null;
      });
      entries.push(
        ...(await mapBounded(opened, BATCH_PARALLELISM, async (entry, index): Promise<SmallFileRead> => {
          if (entry instanceof TetherError) return plan[index] as SmallFileRead;
          try {
            return plan[index] ?? (await readLocalSmall(window[index] as string, entry.file, entry.stats));
          } finally {
            await entry.file.close().catch(() => undefined);
          }
        })),
      );
    }
    return entries;
  }

  writeFiles(files: readonly SmallFileWrite[]): Promise<SmallFileWritten[]> {
    return mapBounded(files, BATCH_PARALLELISM, writeLocalSmall);
  }

  getUnixMetadata(path: string): Promise<UnixMetadata> {
    return local(path, async () => unixMetadataOf(await fsp.stat(path, { bigint: true })));
  }

  /** Through the open path (O_NONBLOCK: a FIFO does not block the open; O_NOFOLLOW with `noFollow`). */
  setMetadata(path: string, metadata: UnixMetadata, options: { noFollow?: boolean } = {}): Promise<void> {
    return local(path, async () => {
      const flags = fsConstants.O_RDONLY | fsConstants.O_NONBLOCK | (options.noFollow ? fsConstants.O_NOFOLLOW : 0);
      const file = await fsp.open(path, flags);
      try {
        await applyMetadata(file, metadata);
      } finally {
        await file.close();
      }
    });
  }

  setMode(path: string, mode: number, options: { noFollow?: boolean } = {}): Promise<void> {
    return local(path, async () => {
      const flags = fsConstants.O_RDONLY | fsConstants.O_NONBLOCK | (options.noFollow ? fsConstants.O_NOFOLLOW : 0);
      const file = await fsp.open(path, flags);
      try {
        await file.chmod(mode & MODE_BITS);
      } finally {
        await file.close();
      }
    });
  }

  readFile(path: string, options: { maxBytes?: number } = {}): Promise<Buffer> {
    return local(path, async () => {
      if (options.maxBytes !== undefined) {
        const { size } = await fsp.stat(path);
        if (size > options.maxBytes) {
          throw new TetherError(
            'invalid_argument',
            `${path} is ${size} bytes, more than the limit of ${options.maxBytes}`,
          );
        }
      }
      return fsp.readFile(path);
    });
  }
  writeFile(path: string, data: Buffer | string): Promise<void> {
    return local(path, () => fsp.writeFile(path, data));
  }
  createDirectory(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    return local(path, async () => {
      await fsp.mkdir(path, { recursive: options.recursive ?? true });
    });
  }
  getMetadata(path: string): Promise<FileMetadata> {
    return local(path, async () => {
      const link = await fsp.lstat(path);
      const stat = link.isSymbolicLink() ? await fsp.stat(path) : link;
      return {
        isDirectory: stat.isDirectory(),
        isFile: stat.isFile(),
        isSymlink: link.isSymbolicLink(),
        size: stat.size,
        createdAtMs: Math.trunc(stat.birthtimeMs),
        modifiedAtMs: Math.trunc(stat.mtimeMs),
      };
    });
  }
  canonicalize(path: string): Promise<string> {
    return local(path, () => fsp.realpath(path));
  }
  readDirectory(path: string): Promise<DirectoryEntry[]> {
    return local(path, async () =>
      (await fsp.readdir(path, { withFileTypes: true })).map((entry) => ({
        fileName: entry.name,
        isDirectory: entry.isDirectory(),
        isFile: entry.isFile(),
        isSymlink: entry.isSymbolicLink(),
      })),
    );
  }
  remove(path: string, options: { recursive?: boolean; force?: boolean } = {}): Promise<void> {
    return local(path, () => fsp.rm(path, { recursive: options.recursive ?? true, force: options.force ?? true }));
  }
  copy(source: string, destination: string, options: { recursive?: boolean } = {}): Promise<void> {
    return local(source, () => fsp.cp(source, destination, { recursive: options.recursive ?? false }));
  }
  createReadStream(path: string, options: StreamOptions = {}): FileReadStream {
    // Node's own buffers: nothing to give back.
    return Object.assign(createReadStream(path, { highWaterMark: options.blockSize ?? DEFAULT_BLOCK_SIZE }), {
      giveBack: () => {},
    });
  }
  createWriteStream(path: string, options: StreamOptions = {}): Writable {
    return new InPlaceFileWriter(path, { noFollow: options.noFollow ?? false });
  }
}
