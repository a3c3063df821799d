import { createHash, type Hash } from 'node:crypto';
import { closeSync, constants as fsConstants } from 'node:fs';
import { type FileHandle, open, stat } from 'node:fs/promises';
import { MAX_BLOCK_BYTES } from '@tether/bytes';
import { ErrorCode, type FsOpenMode, RpcError } from '@tether/exec-protocol';
import { isFifo, notAFile } from './file-kind.js';
import { fsError, osCall } from './os-error.js';

/** Codex's limits (`file_read.rs`): block length, handles per connection, handle id length. */
export const DEFAULT_MAX_FILE_HANDLES = 128;
export const MAX_HANDLE_ID_BYTES = 32;

/** Read blocks that completed ahead of the digest's position, kept until the gap fills (else no digest). */
const MAX_DIGEST_REORDER = 16;

/**
 * SHA-256 of a handle's bytes in file order, for `fs/close` (Tether's `fileHandleDigest`): the bytes
 * written, or the bytes read, as long as they form one run from offset 0. Writes are hashed as they
 * arrive (requests start in arrival order); reads as they complete, reordered by offset. Any gap,
 * overlap or retry gives up, and `fs/close` then reports no digest.
 */
class HandleDigest {
  private hash: Hash | null = createHash('sha256');
  private position = 0;
  private readonly ahead = new Map<number, Buffer>();

  /** `reorder`: a block ahead of the position is kept until the gap fills (reads), else it ends the digest. */
  add(offset: number, data: Buffer, reorder: boolean): void {
    if (!this.hash || data.length === 0) return;
    if (offset !== this.position) {
      if (!reorder || offset < this.position || this.ahead.size >= MAX_DIGEST_REORDER) this.giveUp();
      else this.ahead.set(offset, Buffer.from(data)); // a copy: the caller reuses its block buffers
      return;
    }
    this.hash.update(data);
    this.position += data.length;
    for (let next = this.ahead.get(this.position); next; next = this.ahead.get(this.position)) {
      this.ahead.delete(this.position);
      this.hash.update(next);
      this.position += next.length;
    }
  }

  giveUp(): void {
    this.hash = null;
    this.ahead.clear();
  }

  /** Hex digest and byte count, or null if the bytes were not one run from 0. */
  finish(): { sha256: string; bytes: number } | null {
    if (!this.hash || this.ahead.size > 0) return null;
    return { sha256: this.hash.digest('hex'), bytes: this.position };
  }
}

interface OpenFile {
  mode: FsOpenMode;
  file: FileHandle;
  /** Only for handles opened with `digest` (hashing costs ≈ 1 ms per MiB). */
  digest: HandleDigest | null;
  /** The handle's last write: the next one starts after it (see `writeBlock`). */
  writing: Promise<unknown>;
  /** The furthest byte written through the handle: where an `overwrite` handle cuts the file as it closes. */
  end: number;
}

/**
 * The open files of one connection (`fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`). Each
 * handle keeps its descriptor open, so a large file is read or written block by block with positional
 * I/O and no re-open. Ids are the client's; at most `limit` are open at once (a further open is
 * refused); `closeAll()` runs when the connection ends, after which every open is refused.
 */
export class FileHandleTable {
  private readonly files = new Map<string, OpenFile>();
  /** Ids whose open is in flight: counted against the limit and refused as duplicates. */
  private readonly opening = new Set<string>();
  private closed = false;

  constructor(private readonly limit = DEFAULT_MAX_FILE_HANDLES) {}

  get size(): number {
    return this.files.size + this.opening.size;
  }

  /** The checks `open` makes before opening anything (id length, duplicate, limit). */
  checkOpenable(id: string): void {
    if (Buffer.byteLength(id, 'utf8') > MAX_HANDLE_ID_BYTES) {
      throw RpcError.invalidRequest(`file handle ID must not exceed ${MAX_HANDLE_ID_BYTES} bytes`);
    }
    if (this.files.has(id) || this.opening.has(id))
      throw RpcError.invalidRequest(`file handle \`${id}\` already exists`);
    if (this.closed) throw RpcError.invalidRequest('connection is closing');
    if (this.size >= this.limit) {
      throw RpcError.invalidRequest(`at most ${this.limit} file handles may be open per connection`);
    }
  }

  /**
   * Opens `path` as handle `id`. With `opened` (a sandboxed open: the descriptor the sandbox opened the path
   * with, and for `replace` truncated it, confined.ts) the path is not opened here: that very file is, through
   * the descriptor, which this closes whatever happens.
   */
  async open(id: string, path: string, mode: FsOpenMode, digest = false, opened?: number): Promise<void> {
    try {
      this.checkOpenable(id);
    } catch (err) {
      if (opened !== undefined) closeSync(opened);
      throw err;
    }
    this.opening.add(id);
    let file: FileHandle | undefined;
    try {
      if (opened !== undefined) {
        // The open file itself, not a name that could now lead elsewhere; with no more access than it has, and
        // non-blocking, so that what the helper sent cannot park a worker even if it were a FIFO (a regular
        // file ignores the flag).
        const access = mode === 'read' ? fsConstants.O_RDONLY : fsConstants.O_WRONLY;
        file = await osCall(() => open(`/proc/self/fd/${opened}`, access | fsConstants.O_NONBLOCK));
        if (!(await osCall(() => file!.stat())).isFile()) throw notAFile(path);
      } else if (mode === 'read') {
        // Checked before opening: opening a FIFO for reading would block until a writer appears.
        if (!(await osCall(() => stat(path))).isFile()) throw notAFile(path);
        file = await osCall(() => open(path, 'r'));
        if (!(await osCall(() => file!.stat())).isFile()) throw notAFile(path);
      } else if (await isFifo(path)) {
        // Opening a FIFO for writing blocks (a libuv worker) until a reader appears: refuse it.
        throw notAFile(path);
      } else if (mode === 'replace') {
        file = await osCall(() => open(path, 'w'));
      } else {
        // update and overwrite: create if absent, never truncate at open; a directory fails like replace
        // (EISDIR). Overwriting in place reuses the old contents' pages instead of freeing them all first
        // and faulting in new ones (scp writes the same way); the file is cut to length at close.
        file = await osCall(() => open(path, fsConstants.O_WRONLY | fsConstants.O_CREAT, 0o666));
        if (!(await osCall(() => file!.stat())).isFile()) throw notAFile(path);
      }
      if (this.closed) throw RpcError.invalidRequest('connection is closing');
      this.files.set(id, {
        mode,
        file,
        digest: digest ? new HandleDigest() : null,
        writing: Promise.resolve(),
        end: 0,
      });
    } catch (err) {
      await file?.close().catch(() => undefined);
      throw err;
    } finally {
      this.opening.delete(id);
      if (opened !== undefined) closeSync(opened);
    }
  }

  private lookup(id: string): OpenFile {
    const entry = this.files.get(id);
    if (!entry) throw new RpcError(ErrorCode.notFound, `unknown file handle \`${id}\``);
    return entry;
  }

  /**
   * Reads up to `len` bytes at `offset` (into `into` when given and large enough; the chunk is then a
   * view of it); `eof` when fewer than `len` were left. The handle stays open at EOF; an OS error while
   * reading closes it.
   */
  async readBlock(id: string, offset: number, len: number, into?: Buffer): Promise<{ chunk: Buffer; eof: boolean }> {
    if (len < 1 || len > MAX_BLOCK_BYTES) {
      throw RpcError.invalidRequest(`file read block length must be between 1 and ${MAX_BLOCK_BYTES}`);
    }
    const entry = this.lookup(id);
    const buffer = into && into.length >= len ? into : Buffer.allocUnsafe(len);
    let filled = 0;
    try {
      while (filled < len) {
        const { bytesRead } = await entry.file.read(buffer, filled, len - filled, offset + filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
    } catch (err) {
      // A failed read closes the handle, as Codex does (a failed write does not).
      if (this.files.get(id) === entry) this.files.delete(id);
      await entry.file.close().catch(() => undefined);
      throw fsError(err);
    }
    const chunk = buffer.subarray(0, filled);
    entry.digest?.add(offset, chunk, true);
    return { chunk, eof: filled < len };
  }

  /**
   * Writes `data` at `offset` (positional: blocks may arrive in any order, a retry rewrites the same bytes).
   * A handle's writes run one at a time, in arrival order: several writes in flight to one file from the
   * libuv pool only contend for the file's lock (measured: up to twice the CPU for the same bytes).
   */
  async writeBlock(id: string, offset: number, data: Buffer): Promise<void> {
    if (data.length < 1 || data.length > MAX_BLOCK_BYTES) {
      throw RpcError.invalidRequest(`file write block length must be between 1 and ${MAX_BLOCK_BYTES}`);
    }
    const entry = this.lookup(id);
    const { file, digest } = entry;
    digest?.add(offset, data, false);
    const write = entry.writing.then(async () => {
      let written = 0;
      while (written < data.length) {
        const result = await file.write(data, written, data.length - written, offset + written);
        written += result.bytesWritten;
      }
      entry.end = Math.max(entry.end, offset + data.length);
    });
    entry.writing = write.catch(() => undefined);
    try {
      await write;
    } catch (err) {
      digest?.giveUp();
      throw fsError(err);
    }
  }

  /**
   * Closes a handle; an unknown id is not an error (Codex answers `{}`). An `overwrite` handle first cuts
   * the file at the furthest byte written through it. For a handle opened with `digest`, returns the
   * SHA-256 of the bytes read or written through it when they formed one run from offset 0
   * (`HandleDigest`); else null.
   */
  async close(id: string): Promise<{ sha256: string; bytes: number } | null> {
    const entry = this.files.get(id);
    if (!entry) return null;
    this.files.delete(id);
    await release(entry);
    return entry.digest?.finish() ?? null;
  }

  /** Closes every handle and refuses new ones (the connection ended); `overwrite` handles are cut first. */
  async closeAll(): Promise<void> {
    this.closed = true;
    const all = [...this.files.values()];
    this.files.clear();
    await Promise.all(all.map((entry) => release(entry).catch(() => undefined)));
  }
}

/**
 * Closes a handle's descriptor once its queued writes have landed (they run one at a time: closing first
 * would fail the ones still waiting), after cutting an `overwrite` handle's file where its writes ended.
 */
async function release(entry: OpenFile): Promise<void> {
  try {
    await entry.writing;
    if (entry.mode === 'overwrite') await osCall(() => entry.file.truncate(entry.end));
  } finally {
    await osCall(() => entry.file.close());
  }
}
