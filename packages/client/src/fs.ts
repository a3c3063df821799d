import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import * as fsp from 'node:fs/promises';
import { Readable, Writable } from 'node:stream';
import { encodeWriteBlockRequest } from '@tether/exec-protocol';
import { attachmentOf, encodeWithAttachment } from '@tether/jsonrpc';
import { TetherError } from './errors.js';
import { InPlaceFileWriter } from './file-writer.js';

export interface FileMetadata {
  isDirectory: boolean;
  isFile: boolean;
  isSymlink: boolean;
  size: number;
  createdAtMs: number;
  modifiedAtMs: number;
}

/** What an executor hashed of a handle's bytes (`fileHandleDigest`): the bytes it read or wrote, in order. */
export interface HandleDigest {
  sha256: string;
  bytes: number;
}

/** Options of streamed reads and writes. */
export interface StreamOptions {
  /** Bytes per `fs/readBlock` / `fs/writeBlock` (at most 1 MiB). */
  blockSize?: number;
  /** Blocks in flight. */
  depth?: number;
  /**
   * Called once the remote handle is closed, before the stream ends or finishes, with the executor's
   * SHA-256 of the bytes it read or wrote (when it offers `fileHandleDigest`), else null. Never called
   * for local files.
   */
  onDigest?: (digest: HandleDigest | null) => void;
  /**
   * Writes only: refuse to write through a symbolic link at the path itself (O_NOFOLLOW; the open fails
   * with ELOOP). Honoured for local files, where the harness protects its own machine from names a remote
   * side chose; a remote executor's own links are its business.
   */
  noFollow?: boolean;
}

export interface DirectoryEntry {
  fileName: string;
  isDirectory: boolean;
  isFile: boolean;
}

/**
 * Why `name` cannot be one entry of a directory, or null when it can: a single path component, not empty,
 * `.` or `..`, without `/` or NUL. An executor is untrusted input; a name like `../../x` joined to a
 * destination would land outside it. (`\` is an ordinary character of a POSIX name and is allowed here;
 * a copy to a local Windows path refuses it separately.)
 */
export function entryNameProblem(name: unknown): string | null {
  if (typeof name !== 'string') return 'is not a string';
  if (name === '') return 'is empty';
  if (name === '.' || name === '..') return `is ${JSON.stringify(name)}`;
  if (name.includes('/')) return 'contains "/"';
  if (name.includes('\0')) return 'contains a NUL byte';
  return null;
}

/** Checks an executor's `fs/readDirectory` answer: an array of entries with safe names and boolean kinds. */
function checkedEntries(answer: unknown, path: string): DirectoryEntry[] {
  const entries = (answer as { entries?: unknown } | null)?.entries;
  const bad = (what: string) => new TetherError('protocol', `the executor's listing of ${path} is unusable: ${what}`);
  if (!Array.isArray(entries)) throw bad('entries is not an array');
  return entries.map((entry: unknown) => {
    const { fileName, isDirectory, isFile } = (entry ?? {}) as Record<string, unknown>;
    const problem = entryNameProblem(fileName);
    if (problem) {
      const shown = typeof fileName === 'string' ? JSON.stringify(fileName) : String(fileName);
      throw bad(`entry name ${shown} ${problem} (an entry must be one path component)`);
    }
    if (typeof isDirectory !== 'boolean' || typeof isFile !== 'boolean') {
      throw bad(`entry ${JSON.stringify(fileName)} has no boolean isDirectory/isFile`);
    }
    return { fileName: fileName as string, isDirectory, isFile };
  });
}

/** Files of an environment; the same methods whether it is this machine or a remote executor. */
export interface EnvironmentFs {
  readFile(path: string, options?: { maxBytes?: number }): Promise<Buffer>;
  writeFile(path: string, data: Buffer | string): Promise<void>;
  createDirectory(path: string, options?: { recursive?: boolean }): Promise<void>;
  getMetadata(path: string): Promise<FileMetadata>;
  canonicalize(path: string): Promise<string>;
  readDirectory(path: string): Promise<DirectoryEntry[]>;
  remove(path: string, options?: { recursive?: boolean; force?: boolean }): Promise<void>;
  copy(source: string, destination: string, options?: { recursive?: boolean }): Promise<void>;
  /** Streams a file in blocks (never whole in memory). */
  createReadStream(path: string, options?: StreamOptions): Readable;
  /**
   * Streams into a file without holding it in memory where the executor can. The file is created, or
   * overwritten in place and cut to the length written when the stream finishes or fails (scp's way;
   * on an executor without `fileWriteOverwrite`, truncated when opened).
   */
  createWriteStream(path: string, options?: StreamOptions): Writable;
}

/** Default block for streamed reads and writes. */
export const DEFAULT_BLOCK_SIZE = 1024 * 1024;

/** Reads in flight by default: 3 × 1 MiB stays under the relay's 4 MiB backlog limit per harness. */
export const DEFAULT_READ_DEPTH = 3;
/** Largest block either executor accepts for `fs/readBlock` and `fs/writeBlock`. */
export const MAX_BLOCK_BYTES = 1024 * 1024;

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

/** This machine's files (node:fs). */
export class LocalFs implements EnvironmentFs {
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
      })),
    );
  }
  remove(path: string, options: { recursive?: boolean; force?: boolean } = {}): Promise<void> {
    return local(path, () => fsp.rm(path, { recursive: options.recursive ?? true, force: options.force ?? true }));
  }
  copy(source: string, destination: string, options: { recursive?: boolean } = {}): Promise<void> {
    return local(source, () => fsp.cp(source, destination, { recursive: options.recursive ?? false }));
  }
  createReadStream(path: string, options: StreamOptions = {}): Readable {
    return createReadStream(path, { highWaterMark: options.blockSize ?? DEFAULT_BLOCK_SIZE });
  }
  createWriteStream(path: string, options: StreamOptions = {}): Writable {
    return new InPlaceFileWriter(path, { noFollow: options.noFollow ?? false });
  }
}

/** What the remote fs needs from an executor connection. */
export interface FsCaller {
  /** `encode` writes the request bytes directly (hot path); `params` stay the logical parameters. */
  call<T = unknown>(
    method: string,
    params?: unknown,
    options?: { encode?: (id: string | number, allocate: (size: number) => Buffer) => Buffer },
  ): Promise<T>;
  /** Capabilities the executor advertised at initialize. */
  capabilities(): ReadonlySet<string>;
}

/** The digest in an `fs/close` answer, if it has a well-formed one. */
function digestOf(answer: Partial<HandleDigest> | undefined): HandleDigest | null {
  if (!answer || typeof answer.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(answer.sha256)) return null;
  if (typeof answer.bytes !== 'number') return null;
  return { sha256: answer.sha256, bytes: answer.bytes };
}

export function toFileUri(path: string): string {
  if (path.startsWith('file:')) return path;
  if (!path.startsWith('/')) throw new TetherError('invalid_argument', `remote paths must be absolute: ${path}`);
  return new URL(`file://${path.split('/').map(encodeURIComponent).join('/')}`).href;
}

/**
 * A remote executor's files over `fs/*` (exec-protocol §3.9). Reads stream through `fs/open` +
 * `fs/readBlock`; writes stream through the executor's advertised write extension when it has one,
 * else (a Codex executor) they are sent whole with `fs/writeFile`, up to `maxWholeWriteBytes`.
 */
export class RemoteFs implements EnvironmentFs {
  private handles = 0;

  constructor(
    private readonly caller: FsCaller,
    private readonly options: { maxWholeWriteBytes?: number } = {},
  ) {}

  async readFile(path: string, options: { maxBytes?: number } = {}): Promise<Buffer> {
    const answer = await this.caller.call<{ dataBase64?: unknown }>('fs/readFile', {
      path: toFileUri(path),
      ...(options.maxBytes !== undefined ? { maxBytes: options.maxBytes } : {}),
    });
    if (typeof answer?.dataBase64 !== 'string') {
      throw new TetherError('protocol', `the executor's fs/readFile answer for ${path} has no dataBase64`);
    }
    const data = Buffer.from(answer.dataBase64, 'base64');
    // The limit is the caller's: an executor that ignores it does not get to hand back more.
    if (options.maxBytes !== undefined && data.byteLength > options.maxBytes) {
      throw new TetherError(
        'protocol',
        `the executor answered ${data.byteLength} bytes of ${path}, more than the limit of ${options.maxBytes}`,
      );
    }
    return data;
  }
  async writeFile(path: string, data: Buffer | string): Promise<void> {
    const bytes = typeof data === 'string' ? Buffer.from(data) : data;
    await this.caller.call('fs/writeFile', { path: toFileUri(path), dataBase64: bytes.toString('base64') });
  }
  async createDirectory(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.caller.call('fs/createDirectory', { path: toFileUri(path), recursive: options.recursive ?? true });
  }
  getMetadata(path: string): Promise<FileMetadata> {
    return this.caller.call<FileMetadata>('fs/getMetadata', { path: toFileUri(path) });
  }
  async canonicalize(path: string): Promise<string> {
    const answer = await this.caller.call<{ path: string }>('fs/canonicalize', { path: toFileUri(path) });
    return answer.path.startsWith('file:') ? decodeURIComponent(new URL(answer.path).pathname) : answer.path;
  }
  async readDirectory(path: string): Promise<DirectoryEntry[]> {
    return checkedEntries(await this.caller.call<unknown>('fs/readDirectory', { path: toFileUri(path) }), path);
  }
  async remove(path: string, options: { recursive?: boolean; force?: boolean } = {}): Promise<void> {
    await this.caller.call('fs/remove', {
      path: toFileUri(path),
      recursive: options.recursive ?? true,
      force: options.force ?? true,
    });
  }
  async copy(source: string, destination: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.caller.call('fs/copy', {
      sourcePath: toFileUri(source),
      destinationPath: toFileUri(destination),
      recursive: options.recursive ?? false,
    });
  }

  /**
   * Reads in blocks with up to `depth` `fs/readBlock` requests in flight (default 3), so the round trip
   * through the relay overlaps with the transfer; blocks are delivered in order. The default keeps the
   * answers in flight (3 MiB) under the relay's backlog limit per harness (4 MiB by default), past which
   * the relay resets a harness that reads more slowly than the executor answers.
   */
  createReadStream(path: string, options: StreamOptions = {}): Readable {
    let blockSize = Math.min(Math.max(1, options.blockSize ?? DEFAULT_BLOCK_SIZE), MAX_BLOCK_BYTES);
    const depth = Math.max(1, options.depth ?? DEFAULT_READ_DEPTH);
    const handleId = this.nextHandleId('r');
    const { binary, digest } = this.streamExtensions(options);
    /** End of file delivered (or the stream failed): later reads take nothing more. */
    let finished = false;
    const caller = this.caller;
    let opened: Promise<void> | null = null;
    let open = false;
    let nextOffset = 0;
    let eof = false;
    let inflight: Array<{ offset: number; len: number; answer: Promise<{ chunk?: string; eof: boolean }> }> = [];
    // One close for every path that ends the stream (eof seen by overlapping reads, errors, destroy); only
    // the close at the end of the file reports the digest.
    let closing: Promise<void> | null = null;
    const close = (atEnd = false) => {
      closing ??= (async () => {
        if (opened) await opened.catch(() => undefined);
        if (!open) return;
        open = false;
        await Promise.allSettled(inflight.map((block) => block.answer));
        inflight = [];
        const answer = await caller.call<Partial<HandleDigest>>('fs/close', { handleId }).catch(() => undefined);
        if (atEnd) options.onDigest?.(digestOf(answer));
      })();
      return closing;
    };
    const request = (offset: number, len: number) => {
      const answer = caller.call<{ chunk?: string; eof: boolean }>('fs/readBlock', {
        handleId,
        offset,
        len,
        ...(binary ? { binary: true } : {}),
      });
      answer.catch(() => undefined); // awaited in order below
      inflight.push({ offset, len, answer });
    };
    return new Readable({
      highWaterMark: blockSize,
      async read() {
        if (finished) return;
        try {
          opened ??= caller.call('fs/open', { handleId, path: toFileUri(path), ...digest }).then(() => {
            open = true;
          });
          await opened;
          if (eof) {
            // An overlapping read after the last block: never take a block requested past the end.
            finished = true;
            await close(true);
            this.push(null);
            return;
          }
          while (!eof && inflight.length < depth) {
            request(nextOffset, blockSize);
            nextOffset += blockSize;
          }
          const block = inflight.shift();
          if (!block) {
            finished = true;
            await close();
            this.push(null);
            return;
          }
          const answer = await block.answer;
          const bytes = attachmentOf(answer) ?? Buffer.from(answer.chunk ?? '', 'base64');
          // Untrusted sizes: a block longer than asked would shift every later offset.
          if (bytes.byteLength > block.len) {
            throw new TetherError(
              'protocol',
              `fs/readBlock answered ${bytes.byteLength} bytes for a block of ${block.len} in ${path}`,
            );
          }
          if (answer.eof) eof = true;
          if (!answer.eof && bytes.byteLength < block.len) {
            // The executor caps blocks: what was asked beyond this one starts at the wrong offset.
            await Promise.allSettled(inflight.map((b) => b.answer));
            inflight = [];
            blockSize = Math.max(1, bytes.byteLength);
            nextOffset = block.offset + bytes.byteLength;
            if (bytes.byteLength === 0)
              throw new TetherError('protocol', `fs/readBlock returned nothing before EOF in ${path}`);
          }
          if (finished) return;
          if (eof) finished = true;
          if (bytes.byteLength > 0) this.push(bytes);
          if (eof) {
            await close(true);
            this.push(null);
          }
        } catch (err) {
          if (finished) return;
          finished = true;
          await close();
          this.destroy(err as Error);
        }
      },
      destroy(err, callback) {
        close().then(
          () => callback(err),
          () => callback(err),
        );
      },
    });
  }

  /**
   * Streams with `fs/open` + positional `fs/writeBlock` (capability `fileWriteStreaming`, Codex's and ours),
   * up to `depth` blocks in flight: mode `overwrite` where the executor offers it (`fileWriteOverwrite`:
   * in place, cut to length at close), else Codex's `replace`. Without streaming, buffers and sends one
   * `fs/writeFile` (refusing files over `maxWholeWriteBytes`).
   */
  createWriteStream(path: string, options: StreamOptions = {}): Writable {
    if (!this.caller.capabilities().has('fileWriteStreaming')) return this.wholeFileWriter(path);
    const { binary, digest } = this.streamExtensions(options);
    const blockSize = Math.min(options.blockSize ?? DEFAULT_BLOCK_SIZE, MAX_BLOCK_BYTES);
    const depth = Math.max(1, options.depth ?? 4);
    const handleId = this.nextHandleId('w');
    const caller = this.caller;
    const mode = caller.capabilities().has('fileWriteOverwrite') ? 'overwrite' : 'replace';
    let opened: Promise<unknown> | null = null;
    let isOpen = false;
    let offset = 0;
    let pending: Buffer = Buffer.alloc(0);
    const inflight = new Set<Promise<unknown>>();
    let failure: Error | null = null;
    const open = async () => {
      opened ??= caller.call('fs/open', { handleId, path: toFileUri(path), mode, ...digest }).then(() => {
        isOpen = true;
      });
      await opened;
    };
    const send = async (block: Buffer) => {
      const at = offset;
      offset += block.byteLength;
      const request = caller
        .call(
          'fs/writeBlock',
          { handleId, offset: at },
          {
            encode: binary
              ? (id, allocate) =>
                  encodeWithAttachment(
                    JSON.stringify({ id, method: 'fs/writeBlock', params: { handleId, offset: at } }),
                    block,
                    allocate,
                  )
              : (id, allocate) => encodeWriteBlockRequest(id, handleId, at, block, allocate),
          },
        )
        .catch((err: Error) => {
          failure ??= err;
        });
      inflight.add(request);
      void request.finally(() => inflight.delete(request));
      while (inflight.size >= depth) await Promise.race(inflight);
      if (failure) throw failure;
    };
    const closeHandle = async (atEnd: boolean) => {
      if (!isOpen) return;
      isOpen = false;
      const answer = await caller.call<Partial<HandleDigest>>('fs/close', { handleId });
      if (atEnd) options.onDigest?.(digestOf(answer));
    };
    return new Writable({
      highWaterMark: blockSize,
      write(chunk: Buffer, _encoding, callback) {
        (async () => {
          await open();
          pending = pending.byteLength === 0 ? chunk : Buffer.concat([pending, chunk]);
          while (pending.byteLength >= blockSize) {
            const block = pending.subarray(0, blockSize);
            pending = pending.subarray(blockSize);
            await send(block); // encoded (copied) by the time the call is made
          }
          // What waits for the next chunk is a copy: no chunk is kept past its write's callback, so a
          // writer may reuse its buffer from then on (the harness's cp does).
          if (pending.byteLength > 0 && pending.buffer === chunk.buffer) pending = Buffer.from(pending);
        })().then(
          () => callback(),
          (err: Error) => callback(err),
        );
      },
      final(callback) {
        (async () => {
          await open(); // an empty file is still created
          if (pending.byteLength > 0) await send(pending);
          pending = Buffer.alloc(0);
          await Promise.all(inflight);
          if (failure) throw failure;
          await closeHandle(true);
        })().then(
          () => callback(),
          (err: Error) => callback(err),
        );
      },
      destroy(err, callback) {
        // An open still in flight would leave a handle behind: wait for it, then close.
        Promise.allSettled([...(opened ? [opened] : []), ...inflight])
          .then(() => closeHandle(false))
          .then(
            () => callback(err),
            () => callback(err),
          );
      },
    });
  }

  /**
   * The extensions a stream uses: raw blocks where the executor takes them (`binaryBlocks`), and `fs/open`'s
   * `digest` only when someone wants the digest and the executor offers it (hashing costs it CPU).
   */
  private streamExtensions(options: StreamOptions): { binary: boolean; digest: { digest?: true } } {
    const capabilities = this.caller.capabilities();
    const digest = options.onDigest !== undefined && capabilities.has('fileHandleDigest');
    return { binary: capabilities.has('binaryBlocks'), digest: digest ? { digest: true } : {} };
  }

  private nextHandleId(prefix: string): string {
    // Handle ids are at most 32 bytes (both executors).
    return `${prefix}${++this.handles}-${randomUUID().slice(0, 8)}`;
  }

  private wholeFileWriter(path: string): Writable {
    const limit = this.options.maxWholeWriteBytes ?? 64 * 1024 * 1024;
    const parts: Buffer[] = [];
    let size = 0;
    const caller = this.caller;
    return new Writable({
      write(chunk: Buffer, _encoding, callback) {
        size += chunk.byteLength;
        if (size > limit) {
          callback(
            new TetherError(
              'invalid_argument',
              `this executor has no streaming write; files over ${limit} bytes cannot be written to it`,
            ),
          );
          return;
        }
        parts.push(chunk);
        callback();
      },
      final(callback) {
        caller
          .call('fs/writeFile', { path: toFileUri(path), dataBase64: Buffer.concat(parts).toString('base64') })
          .then(
            () => callback(),
            (err: Error) => callback(err),
          );
      },
    });
  }
}
