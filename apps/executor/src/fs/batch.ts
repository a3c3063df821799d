import { createHash } from 'node:crypto';
import { type BigIntStats, constants as fsConstants } from 'node:fs';
import { chmod, type FileHandle, open, stat, utimes } from 'node:fs/promises';
import { mapBounded } from '@tether/bytes';
import {
  type FsBatchError,
  type FsReadFilesEntry,
  type FsUnixMetadata,
  type FsWriteFilesEntry,
  MAX_BATCH_BYTES,
  MODE_BITS,
  RpcError,
} from '@tether/exec-protocol';
import { notAFile } from './file-kind.js';
import { fsError, osCall } from './os-error.js';

/**
 * Files of one `fs/readFiles` or `fs/writeFiles` request worked on at once: small files cost a few
 * syscalls each, which the libuv pool (4 threads by default) runs side by side.
 */
export const BATCH_PARALLELISM = 8;

/** The `{code, message}` of a failure, as the single-file method would answer it. */
export function batchError(err: unknown): { error: FsBatchError } {
  const rpc = fsError(err);
  return { error: { code: rpc.code, message: rpc.message } };
}

/**
 * Permission bits and times of `info` (`fileMetadata`), in whole milliseconds. From the nanoseconds: the
 * float milliseconds of a plain stat can land just below the millisecond a client set.
 */
export function unixMetadataOf(info: BigIntStats): FsUnixMetadata {
  return {
    mode: Number(info.mode) & MODE_BITS,
    modifiedAtMs: Number(info.mtimeNs / 1_000_000n),
    accessedAtMs: Number(info.atimeNs / 1_000_000n),
  };
}

/** What of a path's metadata to set: permission bits, and the two times (both or neither). */
export interface MetadataChange {
  mode?: number | undefined;
  modifiedAtMs?: number | undefined;
  accessedAtMs?: number | undefined;
}

/**
 * A time in whole milliseconds as the seconds utimes takes. 1_000_000_000.456 as a double is just below .456,
 * and libuv truncates (to microseconds on Node 20, nanoseconds on 22+): half a microsecond more keeps the
 * millisecond, which is what a stat read back in milliseconds gives.
 */
export function utimesSeconds(ms: number): number {
  return (ms + 0.0005) / 1000;
}

function times(change: MetadataChange): [number, number] | null {
  if (change.modifiedAtMs === undefined && change.accessedAtMs === undefined) return null;
  if (change.modifiedAtMs === undefined || change.accessedAtMs === undefined) {
    throw RpcError.invalidParams('modifiedAtMs and accessedAtMs are set together: give both or neither');
  }
  return [utimesSeconds(change.accessedAtMs), utimesSeconds(change.modifiedAtMs)];
}

/** `fs/setMetadata`: times first, then the mode (a mode without write permission must not stop utimes). */
export async function setMetadata(path: string, change: MetadataChange): Promise<void> {
  const pair = times(change);
  if (pair) await osCall(() => utimes(path, pair[0], pair[1]));
  if (change.mode !== undefined) await osCall(() => chmod(path, change.mode as number));
}

/** A file of an `fs/readFiles` request, opened and stat-ed; or why it could not be. */
type Opened = { file: FileHandle; info: { size: number; stats: BigIntStats } } | { failed: FsReadFilesEntry };

/** Opens for reading (O_NONBLOCK, so opening a FIFO does not block; it is refused right after) and fstats. */
async function openSmallFile(path: string): Promise<Opened> {
  let file: FileHandle | undefined;
  try {
    file = await open(path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
    const stats = await file.stat({ bigint: true });
    if (!stats.isFile()) throw notAFile(path);
    return { file, info: { size: Number(stats.size), stats } };
  } catch (err) {
    await file?.close().catch(() => undefined);
    return { failed: batchError(err) };
  }
}

/**
 * Reads an opened file of `size` bytes (its fstat) with one read of one byte more; a file that grew
 * since is `tooLarge` (its size unknown: the bytes seen so far), for the client to stream with fs/open.
 */
async function readOpened(file: FileHandle, info: { size: number; stats: BigIntStats }): Promise<FsReadFilesEntry> {
  try {
    const buffer = Buffer.allocUnsafe(info.size + 1);
    let filled = 0;
    for (;;) {
      const { bytesRead } = await file.read(buffer, filled, buffer.length - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
      if (filled > info.size) return { tooLarge: true, size: filled };
    }
    const data = buffer.subarray(0, filled);
    return {
      dataBase64: data.toString('base64'),
      sha256: createHash('sha256').update(data).digest('hex'),
      ...unixMetadataOf(info.stats),
    };
  } catch (err) {
    return batchError(err);
  }
}

/**
 * `fs/readFiles`: each regular file read whole, at most `maxFileBytes` (a larger file is `tooLarge`) and
 * `maxTotalBytes` together, both capped at MAX_BATCH_BYTES and the executor's `max_read_file_bytes`. The
 * budget is spent in the order of `paths`: the first file that does not fit in what is left is `deferred`,
 * and so is every later one, so a client that asks again gets them in order (the first file of a request
 * is never deferred while `maxFileBytes` ≤ `maxTotalBytes`). Files are opened, stat-ed and read
 * BATCH_PARALLELISM at a time; no more descriptors than that are open at once.
 */
export async function readFiles(
  paths: readonly string[],
  maxFileBytes: number,
  maxTotalBytes: number,
  readLimit: number,
): Promise<FsReadFilesEntry[]> {
  const perFile = Math.min(maxFileBytes, readLimit, MAX_BATCH_BYTES);
  let left = Math.min(maxTotalBytes, MAX_BATCH_BYTES);
  const entries: FsReadFilesEntry[] = [];
  let deferring = false;
  for (let start = 0; start < paths.length; start += BATCH_PARALLELISM) {
    const window = paths.slice(start, start + BATCH_PARALLELISM);
    if (deferring) {
      for (const _ of window) entries.push({ deferred: true });
      continue;
    }
    const opened = await mapBounded(window, BATCH_PARALLELISM, openSmallFile);
    // Decided in order: what fits is read; from the first file that does not, the rest waits.
    const plan = opened.map((entry): FsReadFilesEntry | 'read' => {
      if (deferring) return { deferred: true };
      if ('failed' in entry) return entry.failed;
      if (entry.info.size > perFile) return { tooLarge: true, size: entry.info.size };
      if (entry.info.size > left) {
        deferring = true;
        return { deferred: true };
      }
      left -= entry.info.size;
      return 'read';
    });
    entries.push(
      ...(await mapBounded(opened, BATCH_PARALLELISM, async (entry, index): Promise<FsReadFilesEntry> => {
        if ('failed' in entry) return plan[index] as FsReadFilesEntry;
        try {
          const planned = plan[index] as FsReadFilesEntry | 'read';
          return planned === 'read' ? await readOpened(entry.file, entry.info) : planned;
        } finally {
          await entry.file.close().catch(() => undefined);
        }
      })),
    );
  }
  return entries;
}

/** One file of an `fs/writeFiles` request, its data decoded. */
export interface FileToWrite extends MetadataChange {
  path: string;
  data: Buffer;
}

/**
 * Writes one whole file: open (create or truncate; O_NONBLOCK, so a FIFO does not block the open, and is
 * refused right after), write, the times and mode through the open file, close. The digest is of the
 * bytes written.
 */
async function writeSmallFile(file: FileToWrite): Promise<FsWriteFilesEntry> {
  let handle: FileHandle | undefined;
  try {
    const pair = times(file);
    handle = await open(
      file.path,
      fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_NONBLOCK | fsConstants.O_TRUNC,
      0o666,
    ).catch((err: NodeJS.ErrnoException) => {
      throw err.code === 'ENXIO' ? notAFile(file.path) : err; // a FIFO without a reader
    });
    if (!(await handle.stat()).isFile()) throw notAFile(file.path);
    let written = 0;
    while (written < file.data.length) {
      written += (await handle.write(file.data, written, file.data.length - written, written)).bytesWritten;
    }
    if (pair) await handle.utimes(pair[0], pair[1]);
    if (file.mode !== undefined) await handle.chmod(file.mode);
    await handle.close();
    handle = undefined;
    return { sha256: createHash('sha256').update(file.data).digest('hex'), bytes: written };
  } catch (err) {
    return batchError(err);
  } finally {
    await handle?.close().catch(() => undefined);
  }
}

/**
 * `fs/writeFiles`: every file written (see `writeSmallFile`), a failure answered in its own entry. Files are
 * written several at once; a request naming one path twice is written one file after another, in order, so
 * the last entry wins whole (two truncating writes at once would leave one file's bytes over the other's).
 */
export function writeFiles(files: readonly FileToWrite[]): Promise<FsWriteFilesEntry[]> {
  const distinct = new Set(files.map((file) => file.path)).size === files.length;
  return mapBounded(files, distinct ? BATCH_PARALLELISM : 1, writeSmallFile);
}

/** `fs/getMetadata {unix: true}`'s additions: permission bits and access time (links followed). */
export async function unixMetadata(path: string): Promise<FsUnixMetadata> {
  return unixMetadataOf(await osCall(() => stat(path, { bigint: true })));
}
