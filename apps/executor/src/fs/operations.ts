import { constants as fsConstants } from 'node:fs';
import {
  copyFile,
  lstat,
  mkdir,
  open,
  readdir,
  readlink,
  realpath,
  rm,
  rmdir,
  stat,
  symlink,
  unlink,
  writeFile,
} from 'node:fs/promises';
import { basename, dirname, join, resolve, sep } from 'node:path';
import { type FsDirectoryEntry, type FsMetadata, pathToFileUri, RpcError } from '@tether/exec-protocol';
import { isFifo, notAFile } from './file-kind.js';
import { fsError, osCall } from './os-error.js';

/** Codex's default `[filesystem] max_read_file_bytes`. */
export const DEFAULT_MAX_READ_FILE_BYTES = 512 * 1024 * 1024;

/**
 * Largest file one `fs/readFile` answer can carry: its base64 (4/3 of it) must fit in one V8 string
 * (2^29 − 24 chars), together with the JSON around it. Larger files, below the configured limit, are
 * refused with a pointer to `fs/open` + `fs/readBlock`.
 */
export const MAX_INLINE_READ_BYTES = 360 * 1024 * 1024;

export function tooLarge(limit: number): RpcError {
  return RpcError.invalidRequest(`file is too large to read: limit is ${limit} bytes`);
}

/** Reads a whole regular file of at most `limit` bytes (checked before reading and while reading). */
export async function readWholeFile(
  path: string,
  limit: number,
  inlineLimit: number = MAX_INLINE_READ_BYTES,
): Promise<Buffer> {
  if (!(await osCall(() => stat(path))).isFile()) throw notAFile(path);
  const file = await osCall(() => open(path, fsConstants.O_RDONLY));
  try {
    const info = await osCall(() => file.stat());
    if (!info.isFile()) throw notAFile(path);
    if (info.size > limit) throw tooLarge(limit);
    if (info.size > inlineLimit) {
      throw RpcError.invalidRequest(
        `file is too large to read in one response: limit is ${inlineLimit} bytes; read it with fs/open and fs/readBlock`,
      );
    }
    limit = Math.min(limit, inlineLimit);
    // One byte more than the limit tells a file that grew since the stat from one that did not.
    const capacity = Math.min(limit + 1, Math.max(info.size + 1, 1));
    let buffer = Buffer.allocUnsafe(capacity);
    let filled = 0;
    for (;;) {
      if (filled === buffer.length) {
        if (filled > limit) throw tooLarge(limit);
        const grown = Buffer.allocUnsafe(Math.min(limit + 1, buffer.length * 2));
        buffer.copy(grown, 0, 0, filled);
        buffer = grown;
      }
      const { bytesRead } = await osCall(() => file.read(buffer, filled, buffer.length - filled, filled));
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    if (filled > limit) throw tooLarge(limit);
    return buffer.subarray(0, filled);
  } finally {
    await file.close().catch(() => undefined);
  }
}

export async function writeWholeFile(path: string, data: Buffer): Promise<void> {
  if (await isFifo(path)) throw notAFile(path); // opening it for writing would block until a reader came
  await osCall(() => writeFile(path, data));
}

export async function createDirectory(path: string, recursive: boolean): Promise<void> {
  await osCall(() => (recursive ? createDirectoryAll(path) : mkdir(path)));
}

/**
 * Rust's `create_dir_all`, which Codex calls: the directory, else its parent first. Node's own recursive
 * mkdir answers a read-only file system's refusal with the ENOENT of a stat it makes afterwards.
 */
async function createDirectoryAll(path: string): Promise<void> {
  try {
    await mkdir(path);
    return;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code !== 'ENOENT') {
      if (
        await stat(path).then(
          (info) => info.isDirectory(),
          () => false,
        )
      )
        return;
      throw err;
    }
  }
  const parent = dirname(path);
  if (parent === path) throw Object.assign(new Error('failed to create whole tree'), { code: 'ENOENT' });
  await createDirectoryAll(parent);
  try {
    await mkdir(path);
  } catch (err) {
    if (
      !(await stat(path).then(
        (info) => info.isDirectory(),
        () => false,
      ))
    )
      throw err;
  }
}

/** Follows symlinks for everything but `isSymlink`; a dangling link is not found. */
export async function metadata(path: string): Promise<FsMetadata> {
  const link = await osCall(() => lstat(path));
  const info = link.isSymbolicLink() ? await osCall(() => stat(path)) : link;
  return {
    isDirectory: info.isDirectory(),
    isFile: info.isFile(),
    isSymlink: link.isSymbolicLink(),
    size: info.size,
    createdAtMs: Math.max(0, Math.floor(info.birthtimeMs)),
    modifiedAtMs: Math.floor(info.mtimeMs),
  };
}

export async function canonicalize(path: string): Promise<string> {
  return pathToFileUri(await osCall(() => realpath(path)));
}

/**
 * Entries with symlinks followed for the type; dangling links are left out, as Codex does. With `links`
 * (Tether's `directoryLinks`), each link is marked `isSymlink` and a dangling one is listed too.
 */
export async function readDirectory(path: string, links = false): Promise<FsDirectoryEntry[]> {
  const dirents = await osCall(() => readdir(path, { withFileTypes: true }));
  const entries: FsDirectoryEntry[] = [];
  for (const dirent of dirents) {
    if (dirent.isSymbolicLink()) {
      const target = await stat(join(path, dirent.name)).catch(() => null);
      if (target === null) {
        if (links) entries.push({ fileName: dirent.name, isDirectory: false, isFile: false, isSymlink: true });
        continue;
      }
      entries.push({
        fileName: dirent.name,
        isDirectory: target.isDirectory(),
        isFile: target.isFile(),
        ...(links ? { isSymlink: true } : {}),
      });
      continue;
    }
    if (links) {
      entries.push({
        fileName: dirent.name,
        isDirectory: dirent.isDirectory(),
        isFile: dirent.isFile(),
        isSymlink: false,
      });
      continue;
    }
    entries.push({ fileName: dirent.name, isDirectory: dirent.isDirectory(), isFile: dirent.isFile() });
  }
  return entries;
}

/** Removes a file, a symlink (never its target) or a directory (its tree only when `recursive`). */
export async function remove(path: string, recursive: boolean, force: boolean): Promise<void> {
  let info: Awaited<ReturnType<typeof lstat>>;
  try {
    info = await lstat(path);
  } catch (err) {
    if (force && (err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw fsError(err);
  }
  if (info.isDirectory()) {
    await osCall(() => (recursive ? rm(path, { recursive: true, force }) : rmdir(path)));
    return;
  }
  await osCall(() => unlink(path));
}

const UNSUPPORTED_COPY = 'fs/copy only supports regular files, directories, and symlinks';

/**
 * Copies a file, a symlink (as a link) or, with `recursive`, a directory tree into `destination`
 * (merging into an existing directory). Copying a file onto itself keeps it intact.
 */
export async function copy(source: string, destination: string, recursive: boolean): Promise<void> {
  const info = await osCall(() => lstat(source));
  if (info.isDirectory()) {
    if (!recursive) throw RpcError.invalidRequest('fs/copy requires recursive: true when sourcePath is a directory');
    const sourceReal = await osCall(() => realpath(source));
    const destinationReal = await realpathOfNew(destination);
    if (destinationReal === sourceReal || destinationReal.startsWith(sourceReal + sep)) {
      throw RpcError.invalidRequest('fs/copy cannot copy a directory to itself or one of its descendants');
    }
    await copyTree(source, destination);
    return;
  }
  await copyLeaf(source, destination, info);
}

async function realpathOfNew(path: string): Promise<string> {
  const absolute = resolve(path);
  try {
    return await realpath(absolute);
  } catch {
    const parent = await realpath(dirname(absolute)).catch(() => dirname(absolute));
    return join(parent, basename(absolute));
  }
}

async function copyLeaf(source: string, destination: string, info: Awaited<ReturnType<typeof lstat>>): Promise<void> {
  if (info.isSymbolicLink()) {
    const target = await osCall(() => readlink(source));
    await osCall(() => symlink(target, destination));
    return;
  }
  if (!info.isFile()) throw RpcError.invalidRequest(UNSUPPORTED_COPY);
  await osCall(() => copyFile(source, destination));
}

async function copyTree(source: string, destination: string): Promise<void> {
  await osCall(() => mkdir(destination, { recursive: true }));
  const dirents = await osCall(() => readdir(source, { withFileTypes: true }));
  for (const dirent of dirents) {
    const from = join(source, dirent.name);
    const to = join(destination, dirent.name);
    const info = await osCall(() => lstat(from));
    if (info.isDirectory()) await copyTree(from, to);
    else await copyLeaf(from, to, info);
  }
}
