import {
  DIRECTORY_LINKS_CAPABILITY,
  decodeBase64,
  encodeWriteBlockRequest,
  FsExtensionMethod,
  MAX_BATCH_BYTES,
  MAX_BATCH_FILES,
  Method,
  type MethodParams,
  type MethodResult,
  MODE_BITS,
  type RequestMethod,
} from '@tether/exec-protocol';
import { encodeWithAttachment } from '@tether/jsonrpc';
import { TetherError } from './errors.js';
import {
  type DirectoryEntry,
  entryNameProblem,
  type FileMetadata,
  type HandleDigest,
  type PortableFs,
  type ReadFilesLimits,
  type SmallFileRead,
  type SmallFileWrite,
  type SmallFileWritten,
  type StreamOptions,
  toFileUri,
  type UnixMetadata,
} from './fs.js';

/** A decoded listing's entries, each name one path component (the schema checked the rest of their shape). */
function checkedEntries(answer: MethodResult<typeof Method.fsReadDirectory>, path: string): DirectoryEntry[] {
  return answer.entries.map(({ fileName, isDirectory, isFile, isSymlink }) => {
    const problem = entryNameProblem(fileName);
    if (problem) {
      throw new TetherError(
        'protocol',
        `the executor's listing of ${path} is unusable: entry name ${JSON.stringify(fileName)} ${problem} (an entry must be one path component)`,
      );
    }
    return { fileName, isDirectory, isFile, ...(isSymlink === undefined ? {} : { isSymlink }) };
  });
}

/** What the remote fs needs from an executor connection. */
export interface FsCaller {
  /** `encode` writes the request bytes directly (hot path); `params` stay the logical parameters. */
  call<M extends RequestMethod>(
    method: M,
    params: MethodParams<M>,
    options?: { encode?: (id: string | number, allocate: (size: number) => Buffer) => Buffer },
  ): Promise<MethodResult<M>>;
  /** Capabilities the executor advertised at initialize. */
  capabilities(): ReadonlySet<string>;
}

/** The digest in a decoded `fs/close` answer, when it has one (an executor without `fileHandleDigest` answers `{}`). */
export function handleDigestOf(answer: MethodResult<typeof Method.fsClose> | undefined): HandleDigest | null {
  if (answer?.sha256 === undefined || answer.bytes === undefined) return null;
  return { sha256: answer.sha256, bytes: answer.bytes };
}

/**
 * The bytes of an `fs/writeBlock` request, written straight into the connection's buffer: the block as a binary
 * attachment (`binaryBlocks`), else Codex's base64 `chunk` encoded in place (no JSON.stringify of a large string).
 */
export function writeBlockEncoder(
  handleId: string,
  offset: number,
  block: Buffer,
  binary: boolean,
): (id: string | number, allocate: (size: number) => Buffer) => Buffer {
  return binary
    ? (id, allocate) =>
        encodeWithAttachment(
          JSON.stringify({ id, method: Method.fsWriteBlock, params: { handleId, offset } }),
          block,
          allocate,
        )
    : (id, allocate) => encodeWriteBlockRequest(id, handleId, offset, block, allocate);
}

/**
 * A remote executor's files over `fs/*` (exec-protocol §3.9), every call but the streams (remote-fs-node.ts).
 */
export class RemoteFs implements PortableFs {
  private handles = 0;

  constructor(
    protected readonly caller: FsCaller,
    protected readonly options: { maxWholeWriteBytes?: number } = {},
  ) {}

  get batching(): boolean {
    return this.caller.capabilities().has('fileBatch');
  }

  get unixMetadata(): boolean {
    return this.caller.capabilities().has('fileMetadata');
  }

  private require(capability: 'fileBatch' | 'fileMetadata', what: string): void {
    if (!this.caller.capabilities().has(capability)) {
      throw new TetherError(
        'invalid_state',
        `this executor does not offer ${capability} (Tether's ${what}); a Codex exec-server has no such method`,
      );
    }
  }

  /**
   * `fs/readFiles` (`fileBatch`). The answer is checked as untrusted input: one entry per path, no file
   * longer than `maxFileBytes` nor all longer than `maxTotalBytes`, well-formed digests and metadata, and
   * never the first file deferred (a client asking again would never get it).
   */
  async readFiles(paths: readonly string[], limits: ReadFilesLimits): Promise<SmallFileRead[]> {
    this.require('fileBatch', 'many small files per request');
    if (paths.length > MAX_BATCH_FILES) {
      throw new TetherError('invalid_argument', `at most ${MAX_BATCH_FILES} files per readFiles`);
    }
    const maxFileBytes = Math.min(limits.maxFileBytes, MAX_BATCH_BYTES);
    const maxTotalBytes = Math.min(Math.max(limits.maxTotalBytes, maxFileBytes), MAX_BATCH_BYTES);
    const { files } = await this.caller.call(FsExtensionMethod.readFiles, {
      paths: paths.map(toFileUri),
      maxFileBytes,
      maxTotalBytes,
    });
    const bad = (what: string) =>
      new TetherError('protocol', `the executor's fs/readFiles answer is unusable: ${what}`);
    if (files.length !== paths.length) throw bad(`expected ${paths.length} entries, got ${files.length}`);
    let total = 0;
    return files.map((entry, index): SmallFileRead => {
      const path = paths[index] as string;
      if ('dataBase64' in entry) {
        let data: Buffer;
        try {
          data = decodeBase64(entry.dataBase64);
        } catch {
          throw bad(`${path}: dataBase64 is not base64`);
        }
        total += data.byteLength;
        if (data.byteLength > maxFileBytes || total > maxTotalBytes) {
          throw bad(
            `${path}: more bytes than asked for (${data.byteLength} of at most ${maxFileBytes}, ${total} in all)`,
          );
        }
        const { sha256, mode, modifiedAtMs, accessedAtMs } = entry;
        return { kind: 'data', data, sha256, metadata: { mode, modifiedAtMs, accessedAtMs } };
      }
      if ('tooLarge' in entry) return { kind: 'tooLarge', size: entry.size };
      if ('deferred' in entry) {
        if (index === 0) throw bad(`${path}: the first file was deferred`);
        return { kind: 'deferred' };
      }
      return {
        kind: 'error',
        error: new TetherError('rpc', `fs/readFiles: ${path}: ${entry.error.message}`, { rpcCode: entry.error.code }),
      };
    });
  }

  /** `fs/writeFiles` (`fileBatch`); each answer entry is checked (a digest, or an error). */
  async writeFiles(files: readonly SmallFileWrite[]): Promise<SmallFileWritten[]> {
    this.require('fileBatch', 'many small files per request');
    if (files.length > MAX_BATCH_FILES) {
      throw new TetherError('invalid_argument', `at most ${MAX_BATCH_FILES} files per writeFiles`);
    }
    const { files: entries } = await this.caller.call(FsExtensionMethod.writeFiles, {
      files: files.map((file) => ({
        path: toFileUri(file.path),
        dataBase64: file.data.toString('base64'),
        ...(file.metadata ? { ...file.metadata, mode: file.metadata.mode & MODE_BITS } : {}),
      })),
    });
    if (entries.length !== files.length) {
      throw new TetherError(
        'protocol',
        `the executor's fs/writeFiles answer is unusable: expected ${files.length} entries, got ${entries.length}`,
      );
    }
    return entries.map((entry, index): SmallFileWritten => {
      if ('sha256' in entry) return { sha256: entry.sha256 };
      const path = (files[index] as SmallFileWrite).path;
      return {
        error: new TetherError('rpc', `fs/writeFiles: ${path}: ${entry.error.message}`, { rpcCode: entry.error.code }),
      };
    });
  }

  /** `fs/getMetadata {unix: true}` (`fileMetadata`). */
  async getUnixMetadata(path: string): Promise<UnixMetadata> {
    this.require('fileMetadata', 'file modes and times');
    const { mode, modifiedAtMs, accessedAtMs } = await this.caller.call(Method.fsGetMetadata, {
      path: toFileUri(path),
      unix: true,
    });
    if (mode === undefined || accessedAtMs === undefined) {
      throw new TetherError('protocol', `the executor's fs/getMetadata answer for ${path} has no mode and access time`);
    }
    return { mode, modifiedAtMs, accessedAtMs };
  }

  /** `fs/setMetadata` (`fileMetadata`); the executor follows links at the path (its own business). */
  async setMetadata(path: string, metadata: UnixMetadata): Promise<void> {
    this.require('fileMetadata', 'file modes and times');
    await this.caller.call(FsExtensionMethod.setMetadata, {
      path: toFileUri(path),
      mode: metadata.mode & MODE_BITS,
      modifiedAtMs: metadata.modifiedAtMs,
      accessedAtMs: metadata.accessedAtMs,
    });
  }

  /** `fs/setMetadata {mode}` (`fileMetadata`): the times are left as they are. */
  async setMode(path: string, mode: number): Promise<void> {
    this.require('fileMetadata', 'file modes and times');
    await this.caller.call(FsExtensionMethod.setMetadata, { path: toFileUri(path), mode: mode & MODE_BITS });
  }

  async readFile(path: string, options: { maxBytes?: number } = {}): Promise<Buffer> {
    const answer = await this.caller.call(Method.fsReadFile, {
      path: toFileUri(path),
      ...(options.maxBytes !== undefined ? { maxBytes: options.maxBytes } : {}),
    });
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
    await this.caller.call(Method.fsWriteFile, { path: toFileUri(path), dataBase64: bytes.toString('base64') });
  }
  async createDirectory(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.caller.call(Method.fsCreateDirectory, { path: toFileUri(path), recursive: options.recursive ?? true });
  }
  async getMetadata(path: string): Promise<FileMetadata> {
    const { isDirectory, isFile, isSymlink, size, createdAtMs, modifiedAtMs } = await this.caller.call(
      Method.fsGetMetadata,
      { path: toFileUri(path) },
    );
    return { isDirectory, isFile, isSymlink, size, createdAtMs, modifiedAtMs };
  }
  async canonicalize(path: string): Promise<string> {
    const answer = await this.caller.call(Method.fsCanonicalize, { path: toFileUri(path) });
    return answer.path.startsWith('file:') ? decodeURIComponent(new URL(answer.path).pathname) : answer.path;
  }
  async readDirectory(path: string): Promise<DirectoryEntry[]> {
    // Where the executor offers it, links are marked (and dangling ones listed); Codex's params otherwise.
    const links = this.caller.capabilities().has(DIRECTORY_LINKS_CAPABILITY);
    return checkedEntries(
      await this.caller.call(Method.fsReadDirectory, { path: toFileUri(path), ...(links ? { links } : {}) }),
      path,
    );
  }
  async remove(path: string, options: { recursive?: boolean; force?: boolean } = {}): Promise<void> {
    await this.caller.call(Method.fsRemove, {
      path: toFileUri(path),
      recursive: options.recursive ?? true,
      force: options.force ?? true,
    });
  }
  async copy(source: string, destination: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.caller.call(Method.fsCopy, {
      sourcePath: toFileUri(source),
      destinationPath: toFileUri(destination),
      recursive: options.recursive ?? false,
    });
  }

  /**
   * The extensions a stream uses: raw blocks where the executor takes them (`binaryBlocks`), and `fs/open`'s
   * `digest` only when someone wants the digest and the executor offers it (hashing costs it CPU).
   */
  protected streamExtensions(options: StreamOptions): { binary: boolean; digest: { digest?: true } } {
    const capabilities = this.caller.capabilities();
    const digest = options.onDigest !== undefined && capabilities.has('fileHandleDigest');
    return { binary: capabilities.has('binaryBlocks'), digest: digest ? { digest: true } : {} };
  }

  protected nextHandleId(prefix: string): string {
    // Handle ids are at most 32 bytes (both executors).
    return `${prefix}${++this.handles}-${crypto.randomUUID().slice(0, 8)}`;
  }
}
