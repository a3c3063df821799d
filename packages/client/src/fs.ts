/**
 * Files of an environment, the same methods whether it is this machine (local-fs.ts) or a remote executor
 * (remote-fs.ts): the interface, its types and the rules both sides share.
 */

import type { Readable, Writable } from 'node:stream';
import { MAX_BLOCK_BYTES } from '@tether/bytes';
import { TetherError } from './errors.js';

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
  /**
   * The entry is a symbolic link: locally always said; from an executor that offers `directoryLinks` (whose
   * `isDirectory`/`isFile` are then the target's, both false for a dangling link); undefined from one that
   * does not say (Codex's follows links and leaves dangling ones out).
   */
  isSymlink?: boolean;
}

/** Permission bits (`0o7777` at most) and times, in whole milliseconds, of a path (`cp -p`). */
export interface UnixMetadata {
  mode: number;
  modifiedAtMs: number;
  accessedAtMs: number;
}

/** Limits of one `readFiles`: bytes per file (a larger one is `tooLarge`) and together (the rest `deferred`). */
export interface ReadFilesLimits {
  maxFileBytes: number;
  maxTotalBytes: number;
}

/**
 * One file of a `readFiles`, in the order asked: its bytes (with the executor's SHA-256 of what it read,
 * or null when read in this process) and metadata; `tooLarge` (stream it); `deferred` (it did not fit in
 * `maxTotalBytes`: ask again; never the first file); or the error reading it.
 */
export type SmallFileRead =
  | { kind: 'data'; data: Buffer; sha256: string | null; metadata: UnixMetadata }
  | { kind: 'tooLarge'; size: number }
  | { kind: 'deferred' }
  | { kind: 'error'; error: TetherError };

/** One file of a `writeFiles`: written whole (created or truncated), then given `metadata` if set. */
export interface SmallFileWrite {
  path: string;
  data: Buffer;
  metadata?: UnixMetadata;
  /** Local files: refuse a symbolic link at the path itself (O_NOFOLLOW), as `StreamOptions.noFollow`. */
  noFollow?: boolean;
}

/** What became of one file of a `writeFiles`: the executor's SHA-256 of what it wrote (null locally), or why not. */
export type SmallFileWritten = { sha256: string | null } | { error: TetherError };

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
  createReadStream(path: string, options?: StreamOptions): FileReadStream;
  /**
   * Streams into a file without holding it in memory where the executor can. The file is created, or
   * overwritten in place and cut to the length written when the stream finishes or fails (scp's way;
   * on an executor without `fileWriteOverwrite`, truncated when opened).
   */
  createWriteStream(path: string, options?: StreamOptions): Writable;
  /**
   * Whether `readFiles`/`writeFiles` carry many files per request: always for local files, for an
   * executor with `fileBatch`. Without it they throw; copy file by file instead.
   */
  readonly batching: boolean;
  /** Whether `getUnixMetadata`/`setMetadata` work: always locally, for an executor with `fileMetadata`. */
  readonly unixMetadata: boolean;
  /** Reads small files whole, in order, within `limits` (see SmallFileRead). At most MAX_BATCH_FILES paths. */
  readFiles(paths: readonly string[], limits: ReadFilesLimits): Promise<SmallFileRead[]>;
  /** Writes small files whole (see SmallFileWrite); at most MAX_BATCH_FILES and MAX_BATCH_BYTES together. */
  writeFiles(files: readonly SmallFileWrite[]): Promise<SmallFileWritten[]>;
  /** Permission bits and times (links followed). */
  getUnixMetadata(path: string): Promise<UnixMetadata>;
  /** Sets permission bits and times; with `noFollow` (local files) a link at the path is refused. */
  setMetadata(path: string, metadata: UnixMetadata, options?: { noFollow?: boolean }): Promise<void>;
  /**
   * Sets the permission bits alone (chmod), as `cp` gives a new file its source's mode; needs what
   * `setMetadata` needs (`unixMetadata`). `noFollow` as for `setMetadata` (local only).
   */
  setMode(path: string, mode: number, options?: { noFollow?: boolean }): Promise<void>;
}

/** An environment's files without Node streams: what the browser entry's `Environment.fs` offers. */
export type PortableFs = Omit<EnvironmentFs, 'createReadStream' | 'createWriteStream'>;

/**
 * A file's read stream. A chunk may sit in a pooled buffer of the connection (a block that came in one
 * message): `giveBack(chunk)` once nothing reads it any more, and the buffer serves a later block. Optional:
 * a chunk never given back is garbage like any other, and other chunks are ignored.
 */
export interface FileReadStream extends Readable {
  giveBack?(chunk: Uint8Array): void;
}

/** Default block for streamed reads and writes. */
export const DEFAULT_BLOCK_SIZE = MAX_BLOCK_BYTES;

/** Reads in flight by default: 3 × 1 MiB stays under the relay's 4 MiB backlog limit per harness. */
export const DEFAULT_READ_DEPTH = 3;
export function toFileUri(path: string): string {
  if (path.startsWith('file:')) return path;
  if (!path.startsWith('/')) throw new TetherError('invalid_argument', `remote paths must be absolute: ${path}`);
  return new URL(`file://${path.split('/').map(encodeURIComponent).join('/')}`).href;
}
