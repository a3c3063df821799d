import {
  DecodeError,
  decode,
  decodeBase64Codex,
  encodeBase64Response,
  FileUriError,
  FsCloseParams,
  FsCopyParams,
  FsCreateDirectoryParams,
  FsExtensionMethod,
  FsGetMetadataParams,
  FsOpenParams,
  FsPathParams,
  FsReadBlockParams,
  FsReadFileParams,
  FsReadFilesParams,
  FsRemoveParams,
  FsSetMetadataParams,
  FsWalkParams,
  FsWriteBlockBinaryParams,
  FsWriteBlockParams,
  FsWriteFileParams,
  FsWriteFilesParams,
  fileUriToPath,
  MAX_BATCH_BYTES,
  Method,
  parseSandbox,
  RpcError,
} from '@tether/exec-protocol';
import { attachmentOf, type BufferLease, encodeWithAttachment, giveBack } from '@tether/jsonrpc';
import { type FileToWrite, readFiles, setMetadata, unixMetadata, writeFiles } from '../fs/batch.js';
import { MAX_BLOCK_BYTES } from '../fs/file-handles.js';
import {
  canonicalize,
  copy,
  createDirectory,
  metadata,
  readDirectory,
  readWholeFile,
  remove,
  writeWholeFile,
} from '../fs/operations.js';
import { walk } from '../fs/walk.js';
import { whileAttached } from './attached.js';
import { EncodedResult, type HandlerTable } from './types.js';

function releasing(block: BufferLease, encoded: Buffer): Buffer {
  block.release();
  return encoded;
}

/**
 * A `file:` URI to a native path, with Codex's codes: a string that is not a file URI fails decoding
 * (-32602), a file URI of another host's convention is an invalid request (-32600).
 */
export function nativePath(uri: string): string {
  try {
    return fileUriToPath(uri);
  } catch (err) {
    if (err instanceof FileUriError) {
      throw err.kind === 'syntax' ? RpcError.invalidParams(err.message) : RpcError.invalidRequest(err.message);
    }
    throw err;
  }
}

/**
 * This executor has no filesystem sandbox. A profile that restricts the filesystem is refused rather
 * than ignored (Codex runs the call in a sandboxed helper); profiles that restrict nothing here
 * (`disabled`, `external`, managed with an unrestricted filesystem) run the call directly.
 */
export function checkSandbox(method: string, sandbox: unknown): void {
  let request: ReturnType<typeof parseSandbox>;
  try {
    request = parseSandbox(sandbox);
  } catch (err) {
    if (err instanceof DecodeError) throw RpcError.invalidParams(err.message);
    throw err;
  }
  if (request === 'restricted') {
    throw RpcError.invalidParams(
      `${method}: a restricted filesystem sandbox is not supported by this exec-server; ` +
        'omit `sandbox` or use a profile without filesystem restrictions',
    );
  }
}

export const fsHandlers: HandlerTable = whileAttached({
  [Method.fsReadFile]: async (raw, ctx) => {
    const params = decode(FsReadFileParams, raw);
    checkSandbox(Method.fsReadFile, params.sandbox);
    const path = nativePath(params.path);
    const limit = Math.min(params.maxBytes ?? Number.POSITIVE_INFINITY, ctx.maxReadFileBytes);
    const data = await readWholeFile(path, limit);
    return new EncodedResult((id, allocate) => encodeBase64Response(id, 'dataBase64', data, {}, allocate));
  },

  [Method.fsWriteFile]: async (raw) => {
    const params = decode(FsWriteFileParams, raw);
    checkSandbox(Method.fsWriteFile, params.sandbox);
    const path = nativePath(params.path);
    let data: Buffer;
    try {
      data = decodeBase64Codex(params.dataBase64);
    } catch (err) {
      throw RpcError.invalidRequest(`fs/writeFile requires valid base64 dataBase64: ${(err as Error).message}`);
    }
    await writeWholeFile(path, data);
    return {};
  },

  [Method.fsCreateDirectory]: async (raw) => {
    const params = decode(FsCreateDirectoryParams, raw);
    checkSandbox(Method.fsCreateDirectory, params.sandbox);
    await createDirectory(nativePath(params.path), params.recursive ?? true);
    return {};
  },

  [Method.fsGetMetadata]: async (raw) => {
    const params = decode(FsGetMetadataParams, raw);
    checkSandbox(Method.fsGetMetadata, params.sandbox);
    const path = nativePath(params.path);
    const answer = await metadata(path);
    // fileMetadata: only a client that asks gets more than Codex answers.
    if (params.unix !== true) return answer;
    const { mode, accessedAtMs } = await unixMetadata(path);
    return { ...answer, mode, accessedAtMs };
  },

  // fileMetadata (Tether): permission bits and times of a path, for `cp -p`.
  [FsExtensionMethod.setMetadata]: async (raw) => {
    const params = decode(FsSetMetadataParams, raw);
    checkSandbox(FsExtensionMethod.setMetadata, params.sandbox);
    await setMetadata(nativePath(params.path), params);
    return {};
  },

  // fileBatch (Tether): many small files in one request, each with its own SHA-256.
  [FsExtensionMethod.readFiles]: async (raw, ctx) => {
    const params = decode(FsReadFilesParams, raw);
    checkSandbox(FsExtensionMethod.readFiles, params.sandbox);
    const paths = params.paths.map(nativePath);
    return {
      files: await readFiles(paths, params.maxFileBytes, params.maxTotalBytes, ctx.maxReadFileBytes),
    };
  },

  [FsExtensionMethod.writeFiles]: async (raw) => {
    const params = decode(FsWriteFilesParams, raw);
    checkSandbox(FsExtensionMethod.writeFiles, params.sandbox);
    let total = 0;
    const files = params.files.map((file): FileToWrite => {
      let data: Buffer;
      try {
        data = decodeBase64Codex(file.dataBase64);
      } catch (err) {
        throw RpcError.invalidParams(`fs/writeFiles requires valid base64 dataBase64: ${(err as Error).message}`);
      }
      total += data.byteLength;
      if (total > MAX_BATCH_BYTES) {
        throw RpcError.invalidParams(`fs/writeFiles carries at most ${MAX_BATCH_BYTES} bytes of file data`);
      }
      const { path, dataBase64: _, ...change } = file;
      return { ...change, path: nativePath(path), data };
    });
    return { files: await writeFiles(files) };
  },

  [Method.fsCanonicalize]: async (raw) => {
    const params = decode(FsPathParams, raw);
    checkSandbox(Method.fsCanonicalize, params.sandbox);
    return { path: await canonicalize(nativePath(params.path)) };
  },

  [Method.fsReadDirectory]: async (raw) => {
    const params = decode(FsPathParams, raw);
    checkSandbox(Method.fsReadDirectory, params.sandbox);
    return { entries: await readDirectory(nativePath(params.path)) };
  },

  [Method.fsRemove]: async (raw) => {
    const params = decode(FsRemoveParams, raw);
    checkSandbox(Method.fsRemove, params.sandbox);
    await remove(nativePath(params.path), params.recursive ?? true, params.force ?? true);
    return {};
  },

  [Method.fsCopy]: async (raw) => {
    const params = decode(FsCopyParams, raw);
    checkSandbox(Method.fsCopy, params.sandbox);
    await copy(nativePath(params.sourcePath), nativePath(params.destinationPath), params.recursive);
    return {};
  },

  [Method.fsOpen]: async (raw, ctx) => {
    const params = decode(FsOpenParams, raw);
    checkSandbox(Method.fsOpen, params.sandbox);
    await ctx.files.open(params.handleId, nativePath(params.path), params.mode ?? 'read', params.digest === true);
    return { handleId: params.handleId };
  },

  [Method.fsReadBlock]: async (raw, ctx) => {
    const params = decode(FsReadBlockParams, raw);
    if (params.binary && !ctx.carriesAttachments) {
      throw RpcError.invalidParams('`binary` blocks need a WebSocket or relay connection, not stdio');
    }
    // The connection's block buffers (ConnectionBuffers): a fresh megabyte per block would bring V8's
    // full collections every few dozen blocks.
    const block = ctx.blocks.lease(Math.max(1, Math.min(params.len, MAX_BLOCK_BYTES)));
    let read: { chunk: Buffer; eof: boolean };
    try {
      read = await ctx.files.readBlock(params.handleId, params.offset, params.len, block.buffer);
    } catch (err) {
      block.release();
      throw err;
    }
    const { chunk, eof } = read;
    // The response is a copy (JSON with base64, or an attachment): the block is free once it is encoded.
    // (A response never sent, the connection gone, leaves the lease to the garbage collector.)
    if (params.binary) {
      // binaryBlocks: `{eof}` as JSON, the bytes as the message's attachment.
      return new EncodedResult((id, allocate) =>
        releasing(block, encodeWithAttachment(JSON.stringify({ id, result: { eof } }), chunk, allocate)),
      );
    }
    return new EncodedResult((id, allocate) =>
      releasing(block, encodeBase64Response(id, 'chunk', chunk, { eof }, allocate)),
    );
  },

  [Method.fsWriteBlock]: async (raw, ctx) => {
    const attachment = attachmentOf(raw);
    let params: { handleId: string; offset: number };
    let data: Buffer;
    let block: BufferLease | null = null;
    if (attachment) {
      // binaryBlocks: the bytes are the request's attachment; a `chunk` as well would be ambiguous.
      params = decode(FsWriteBlockBinaryParams, raw);
      if ('chunk' in params) throw RpcError.invalidParams('`chunk` and a binary attachment are exclusive');
      data = attachment;
    } else {
      const textual = decode(FsWriteBlockParams, raw);
      params = textual;
      try {
        data = decodeBase64Codex(textual.chunk, (size) => {
          block = ctx.blocks.lease(size);
          return block.buffer;
        });
      } catch (err) {
        (block as BufferLease | null)?.release();
        throw RpcError.invalidParams((err as Error).message);
      }
    }
    try {
      await ctx.files.writeBlock(params.handleId, params.offset, data);
    } finally {
      // Written (and hashed, when digested) by now: nothing refers to the block any more. An attachment
      // assembled in a lent buffer (a relay stream's large message) goes back to its pool.
      (block as BufferLease | null)?.release();
      if (attachment) giveBack(attachment);
    }
    return {};
  },

  [Method.fsClose]: async (raw, ctx) => {
    const params = decode(FsCloseParams, raw);
    // fileHandleDigest: only a handle opened with `digest` has one, so a Codex client's `{}` stays `{}`.
    return (await ctx.files.close(params.handleId)) ?? {};
  },

  [Method.fsWalk]: async (raw) => {
    const params = decode(FsWalkParams, raw);
    checkSandbox(Method.fsWalk, params.sandbox);
    return walk(nativePath(params.path), params.options);
  },
});
