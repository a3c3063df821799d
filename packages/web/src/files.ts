import { MAX_BLOCK_BYTES } from '@tether/bytes/bounds';
import {
  type Environment,
  type ExecServerClient,
  type HandleDigest,
  handleDigestOf,
  TetherError,
  toFileUri,
  writeBlockEncoder,
} from '@tether/client/browser';
import { Method, type MethodResult } from '@tether/exec-protocol';
import { attachmentOf } from '@tether/jsonrpc';
import { element } from './dom.js';
import { formatBytes, formatRate, Sha256 } from './sha256.js';

/**
 * File transfer between this page and the environment, over the executor's block protocol (`fs/open`,
 * `fs/writeBlock` / `fs/readBlock`, `fs/close`). RemoteFs's streams are Node streams, which a page does not
 * have; the blocks here are the same calls, fed from a File's slices and gathered into a Blob. Each side
 * hashes what it sent or received and, where the executor offers `fileHandleDigest`, compares it with the
 * executor's SHA-256 of what it wrote or read.
 */

/** Bytes per block: the most either executor takes. */
/** Writes in flight (as RemoteFs's write stream). */
const WRITE_DEPTH = 4;
/** Reads in flight: 3 × 1 MiB stays under the relay's 4 MiB backlog per harness (as RemoteFs's read stream). */
const READ_DEPTH = 3;

export type TransferState = 'running' | 'done' | 'error';

export interface TransferRecord {
  name: string;
  direction: 'upload' | 'download';
  state: TransferState;
  /** Bytes moved so far. */
  bytes: number;
  /** SHA-256 of the bytes moved (hex), once done. */
  sha256: string | null;
  /** Whether the executor's own digest was compared (it matched, else the transfer failed). */
  verified: boolean;
  /** Milliseconds from start to the end, once done. */
  elapsedMs: number | null;
  error?: string;
}

function handleId(prefix: 'r' | 'w'): string {
  // At most 32 bytes (both executors).
  return `web${prefix}-${crypto.randomUUID().replaceAll('-', '').slice(0, 24)}`;
}

function executorOf(env: Environment): ExecServerClient {
  if (!env.client) throw new TetherError('invalid_state', 'this environment is not a remote executor');
  return env.client;
}

function checkDigest(what: string, ours: HandleDigest, theirs: HandleDigest | null): boolean {
  if (theirs === null) return false;
  if (theirs.sha256 !== ours.sha256 || theirs.bytes !== ours.bytes) {
    throw new TetherError(
      'protocol',
      `${what}: the executor hashed ${theirs.bytes} bytes to ${theirs.sha256}, the page ${ours.bytes} bytes to ${ours.sha256}`,
    );
  }
  return true;
}

/** Joins a directory and a file name as a remote absolute path. */
export function remotePath(directory: string, name: string): string {
  if (!directory.startsWith('/')) throw new TetherError('invalid_argument', `not an absolute path: ${directory}`);
  if (name === '' || name === '.' || name === '..' || name.includes('/'))
    throw new TetherError('invalid_argument', `not a file name: ${name}`);
  return `${directory.replace(/\/+$/, '')}/${name}`;
}

/** The last component of a remote path (what a download is saved as). */
export function baseName(path: string): string {
  const name = path.replace(/\/+$/, '').split('/').pop() ?? '';
  return name === '' ? 'download' : name;
}

/**
 * Writes `file` to `path` on the executor, in blocks with up to WRITE_DEPTH in flight; `progress` is told
 * the bytes acknowledged so far. Resolves with the page's SHA-256 and whether the executor's agreed.
 */
export async function uploadFile(
  env: Environment,
  file: Blob,
  path: string,
  progress: (bytes: number) => void,
): Promise<{ sha256: string; bytes: number; verified: boolean }> {
  const client = executorOf(env);
  const capabilities = client.capabilities;
  if (!capabilities.has('fileWriteStreaming'))
    throw new TetherError('invalid_state', 'this executor has no streaming write (fileWriteStreaming)');
  const binary = capabilities.has('binaryBlocks');
  const digest = capabilities.has('fileHandleDigest');
  const mode = capabilities.has('fileWriteOverwrite') ? 'overwrite' : 'replace';
  const id = handleId('w');
  await client.call(Method.fsOpen, { handleId: id, path: toFileUri(path), mode, ...(digest ? { digest: true } : {}) });
  const hash = new Sha256();
  const inflight = new Set<Promise<unknown>>();
  let failure: Error | null = null;
  let acknowledged = 0;
  let closed = false;
  try {
    let next: Promise<ArrayBuffer> | null = file.size > 0 ? file.slice(0, MAX_BLOCK_BYTES).arrayBuffer() : null;
    let offset = 0;
    while (next !== null) {
      const block = Buffer.from(await next);
      const at = offset;
      offset += block.byteLength;
      // The next slice is read from disk while this one is sent.
      next = offset < file.size ? file.slice(offset, offset + MAX_BLOCK_BYTES).arrayBuffer() : null;
      hash.update(block);
      const request = client
        .call(Method.fsWriteBlock, { handleId: id, offset: at }, { encode: writeBlockEncoder(id, at, block, binary) })
        .then(
          () => {
            acknowledged += block.byteLength;
            progress(acknowledged);
          },
          (err: Error) => {
            failure ??= err;
          },
        );
      inflight.add(request);
      void request.finally(() => inflight.delete(request));
      while (inflight.size >= WRITE_DEPTH) await Promise.race(inflight);
      if (failure) throw failure;
    }
    await Promise.all(inflight);
    if (failure) throw failure;
    closed = true;
    const answer = await client.call(Method.fsClose, { handleId: id });
    const ours = { sha256: hash.hex(), bytes: offset };
    const verified = checkDigest(`upload to ${path}`, ours, digest ? handleDigestOf(answer) : null);
    return { ...ours, verified };
  } finally {
    if (!closed) {
      await Promise.allSettled(inflight);
      await client.call(Method.fsClose, { handleId: id }).catch(() => undefined);
    }
  }
}

/**
 * Reads `path` from the executor into memory, in blocks with up to READ_DEPTH in flight, delivered in
 * order; `progress` is told the bytes received so far. `sizeHint` (the file's size when asked) sizes the
 * buffer the blocks are gathered in; a file that grew meanwhile still arrives whole. The SHA-256 is taken
 * at the end by WebCrypto (native; the page's own runs at about the speed of the transfer).
 */
export async function downloadFile(
  env: Environment,
  path: string,
  progress: (bytes: number) => void,
  sizeHint = 0,
): Promise<{ data: Uint8Array; sha256: string; bytes: number; verified: boolean }> {
  const client = executorOf(env);
  const capabilities = client.capabilities;
  const binary = capabilities.has('binaryBlocks');
  const digest = capabilities.has('fileHandleDigest');
  const id = handleId('r');
  await client.call(Method.fsOpen, { handleId: id, path: toFileUri(path), ...(digest ? { digest: true } : {}) });
  const gathered = new ByteGatherer(sizeHint);
  let inflight: Array<{ offset: number; len: number; answer: Promise<MethodResult<typeof Method.fsReadBlock>> }> = [];
  let blockSize = MAX_BLOCK_BYTES;
  let nextOffset = 0;
  let eof = false;
  let closed = false;
  const request = (offset: number, len: number) => {
    const answer = client.call(Method.fsReadBlock, {
      handleId: id,
      offset,
      len,
      ...(binary ? { binary: true } : {}),
    });
    answer.catch(() => undefined); // awaited in order below
    inflight.push({ offset, len, answer });
  };
  try {
    while (!eof) {
      while (inflight.length < READ_DEPTH) {
        request(nextOffset, blockSize);
        nextOffset += blockSize;
      }
      const block = inflight.shift();
      if (!block) break;
      const answer = await block.answer;
      const attached = attachmentOf(answer);
      // Copied into `gathered` below: an attachment may be a view of a buffer the connection reuses.
      const bytes = attached ?? Buffer.from(answer.chunk ?? '', 'base64');
      if (bytes.byteLength > block.len)
        throw new TetherError('protocol', `fs/readBlock answered ${bytes.byteLength} bytes for ${block.len}`);
      if (answer.eof === true) eof = true;
      else if (bytes.byteLength < block.len) {
        // The executor caps blocks: what was asked past this one starts at the wrong offset.
        if (bytes.byteLength === 0) throw new TetherError('protocol', `fs/readBlock returned nothing before EOF`);
        await Promise.allSettled(inflight.map((b) => b.answer));
        inflight = [];
        blockSize = bytes.byteLength;
        nextOffset = block.offset + bytes.byteLength;
      }
      if (bytes.byteLength > 0) {
        gathered.append(bytes);
        progress(gathered.length);
      }
    }
    await Promise.allSettled(inflight.map((b) => b.answer));
    closed = true;
    const answer = await client.call(Method.fsClose, { handleId: id });
    const data = gathered.bytes();
    const ours = { sha256: await webCryptoSha256(data), bytes: data.byteLength };
    const verified = checkDigest(`download of ${path}`, ours, digest ? handleDigestOf(answer) : null);
    return { data, ...ours, verified };
  } finally {
    if (!closed) {
      await Promise.allSettled(inflight.map((b) => b.answer));
      await client.call(Method.fsClose, { handleId: id }).catch(() => undefined);
    }
  }
}

/**
 * The most a size hint reserves up front: the hint is the executor's word, and a larger file grows the
 * buffer as its bytes actually arrive.
 */
export const GATHER_RESERVE_LIMIT = 256 * 1024 * 1024;

/** Bytes appended into one buffer, grown by doubling past its first size. */
export class ByteGatherer {
  private buffer: Uint8Array;
  private filled = 0;

  constructor(sizeHint: number) {
    const reserve = Number.isSafeInteger(sizeHint) ? Math.min(Math.max(0, sizeHint), GATHER_RESERVE_LIMIT) : 0;
    this.buffer = new Uint8Array(reserve);
  }

  /** Bytes the buffer holds now (appended or not). */
  get capacity(): number {
    return this.buffer.byteLength;
  }

  get length(): number {
    return this.filled;
  }

  append(bytes: Uint8Array): void {
    const needed = this.filled + bytes.byteLength;
    if (needed > this.buffer.byteLength) {
      const grown = new Uint8Array(Math.max(needed, this.buffer.byteLength * 2, 64 * 1024));
      grown.set(this.buffer.subarray(0, this.filled));
      this.buffer = grown;
    }
    this.buffer.set(bytes, this.filled);
    this.filled = needed;
  }

  /** What was appended (a view of the buffer: appending again may replace it). */
  bytes(): Uint8Array {
    return this.buffer.subarray(0, this.filled);
  }
}

/** SHA-256 of `data` in hex, by WebCrypto. */
export async function webCryptoSha256(data: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', data as Uint8Array<ArrayBuffer>));
  return Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Hands bytes to the browser as a download named `name`. */
function save(data: Uint8Array, name: string): void {
  const url = URL.createObjectURL(new Blob([data as Uint8Array<ArrayBuffer>], { type: 'application/octet-stream' }));
  const link = document.createElement('a');
  link.href = url;
  link.download = name;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  // The download has started from the URL by the time this runs; revoking frees the bytes.
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** One row of `#transfers`, kept in step with its record. */
class TransferRow {
  readonly record: TransferRecord;
  private readonly item = document.createElement('li');
  private readonly bar = document.createElement('progress');
  private readonly text = document.createElement('span');
  private readonly started = performance.now();

  constructor(list: HTMLElement, name: string, direction: TransferRecord['direction'], total: number | null) {
    this.record = { name, direction, state: 'running', bytes: 0, sha256: null, verified: false, elapsedMs: null };
    const label = document.createElement('span');
    label.className = 'name';
    label.textContent = `${direction === 'upload' ? '↑' : '↓'} ${name}`;
    if (total !== null) this.bar.max = Math.max(1, total);
    this.text.className = 'detail';
    this.item.append(label, this.bar, this.text);
    this.item.dataset.direction = direction;
    list.prepend(this.item);
    this.update();
  }

  setTotal(total: number): void {
    this.bar.max = Math.max(1, total);
    this.update();
  }

  progress(bytes: number): void {
    this.record.bytes = bytes;
    this.update();
  }

  done(result: { sha256: string; bytes: number; verified: boolean }): void {
    this.record.elapsedMs = performance.now() - this.started;
    this.record.bytes = result.bytes;
    this.record.sha256 = result.sha256;
    this.record.verified = result.verified;
    this.record.state = 'done';
    this.bar.max = Math.max(1, result.bytes);
    this.bar.value = this.bar.max;
    this.update();
  }

  fail(error: Error): void {
    this.record.elapsedMs = performance.now() - this.started;
    this.record.state = 'error';
    this.record.error = error.message;
    this.update();
  }

  private update(): void {
    const { state, bytes, sha256, error, elapsedMs, verified } = this.record;
    this.item.dataset.state = state;
    if (sha256 !== null) this.item.dataset.sha256 = sha256;
    if (this.bar.hasAttribute('max')) this.bar.value = Math.min(bytes, this.bar.max);
    else if (state !== 'running') this.bar.value = 1;
    const elapsed = elapsedMs ?? performance.now() - this.started;
    const parts = [formatBytes(bytes), formatRate(bytes, elapsed)];
    if (state === 'done' && sha256 !== null)
      parts.push(`sha256 ${sha256.slice(0, 16)}…${verified ? ' (the executor’s matches)' : ''}`);
    if (state === 'error') parts.push(error ?? 'failed');
    this.text.textContent = parts.join(' · ');
    this.item.title = sha256 ?? error ?? '';
  }
}

export interface FilesPanel {
  /** Every transfer of this page, newest last. */
  transfers(): TransferRecord[];
}

/** Wires `#files`: uploads by picker or drop into `#remote-dir`, downloads of `#download-path`. */
export function mountFiles(env: Environment): FilesPanel {
  const upload = element<HTMLInputElement>('upload');
  const drop = element<HTMLElement>('drop');
  const remoteDir = element<HTMLInputElement>('remote-dir');
  const downloadPath = element<HTMLInputElement>('download-path');
  const downloadButton = element<HTMLButtonElement>('download');
  const list = element<HTMLElement>('transfers');
  const rows: TransferRow[] = [];

  const startUpload = async (file: File) => {
    const row = new TransferRow(list, file.name, 'upload', file.size);
    rows.push(row);
    try {
      const path = remotePath(remoteDir.value.trim() || '/tmp', file.name);
      row.done(await uploadFile(env, file, path, (bytes) => row.progress(bytes)));
    } catch (err) {
      row.fail(err as Error);
    }
  };
  const uploadAll = async (files: Iterable<File>) => {
    // One after another: they share the connection, and each row's rate is then its own.
    for (const file of files) await startUpload(file);
  };

  upload.addEventListener('change', () => {
    const files = [...(upload.files ?? [])];
    upload.value = '';
    void uploadAll(files);
  });
  drop.addEventListener('dragover', (event) => {
    event.preventDefault();
    if (event.dataTransfer) event.dataTransfer.dropEffect = 'copy';
    drop.classList.add('over');
  });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (event) => {
    event.preventDefault();
    drop.classList.remove('over');
    void uploadAll([...(event.dataTransfer?.files ?? [])]);
  });

  const startDownload = async () => {
    const path = downloadPath.value.trim();
    if (path === '') return;
    const row = new TransferRow(list, path, 'download', null);
    rows.push(row);
    downloadButton.disabled = true;
    try {
      const size = (await env.fs.getMetadata(path)).size;
      row.setTotal(size);
      const result = await downloadFile(env, path, (bytes) => row.progress(bytes), size);
      // Done once the bytes are in the page and their SHA-256 checked; then handed to the browser's downloads.
      row.done(result);
      save(result.data, baseName(path));
    } catch (err) {
      row.fail(err as Error);
    } finally {
      downloadButton.disabled = false;
    }
  };
  downloadButton.addEventListener('click', () => void startDownload());
  downloadPath.addEventListener('keydown', (event) => {
    if (event.key === 'Enter') void startDownload();
  });

  return {
    transfers: () =>
      rows.map(({ record }) => ({
        name: record.name,
        direction: record.direction,
        state: record.state,
        bytes: record.bytes,
        sha256: record.sha256,
        verified: record.verified,
        elapsedMs: record.elapsedMs,
        ...(record.error === undefined ? {} : { error: record.error }),
      })),
  };
}
