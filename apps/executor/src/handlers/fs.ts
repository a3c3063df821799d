import { type BufferLease, MAX_BLOCK_BYTES } from '@tether/bytes';
import {
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
  FsReadDirectoryParams,
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
  RpcError,
} from '@tether/exec-protocol';
import { attachmentOf, encodeWithAttachment, releaseAttachment } from '@tether/jsonrpc';
import { type FileToWrite, readFiles, setMetadata, unixMetadata, writeFiles } from '../fs/batch.js';
import { confinement, openConfined, runConfined } from '../fs/confined.js';
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

/** Tether's batch extensions do not run confined: a restricting profile is refused (use Codex's methods). */
function refuseConfined(method: string, sandbox: unknown): void {
  if (confinement(sandbox) !== null) {
    throw RpcError.invalidRequest(
      `${method} does not run under a restricted filesystem sandbox; use fs/readFile and fs/writeFile`,
    );
  }
}

export const fsHandlers: HandlerTable = whileAttached({
  [Method.fsReadFile]: async (raw, ctx) => {
    const params = decode(FsReadFileParams, raw);
    const confined = confinement(params.sandbox);
    const path = nativePath(params.path);
    const limit = Math.min(params.maxBytes ?? Number.POSITIVE_INFINITY, ctx.maxReadFileBytes);
    if (confined) return runConfined(ctx, confined, 'readFile', { path, limit });
    const data = await readWholeFile(path, limit);
    return new EncodedResult((id, allocate) => encodeBase64Response(id, 'dataBase64', data, {}, allocate));
  },

  [Method.fsWriteFile]: async (raw, ctx) => {
    const params = decode(FsWriteFileParams, raw);
    const confined = confinement(params.sandbox);
    const path = nativePath(params.path);
    let data: Buffer;
    try {
      data = decodeBase64Codex(params.dataBase64);
    } catch (err) {
      throw RpcError.invalidRequest(`fs/writeFile requires valid base64 dataBase64: ${(err as Error).message}`);
    }
    if (confined) {
      const dataBase64 = data.toString('base64');
      return runConfined(ctx, confined, 'writeFile', { path, dataBase64 });
    }
    await writeWholeFile(path, data);
    return {};
  },

  [Method.fsCreateDirectory]: async (raw, ctx) => {
    const params = decode(FsCreateDirectoryParams, raw);
    const confined = confinement(params.sandbox);
    const path = nativePath(params.path);
    const recursive = params.recursive ?? true;
    if (confined) return runConfined(ctx, confined, 'createDirectory', { path, recursive });
    await createDirectory(path, recursive);
    return {};
  },

  [Method.fsGetMetadata]: async (raw, ctx) => {
    const params = decode(FsGetMetadataParams, raw);
    const confined = confinement(params.sandbox);
    const path = nativePath(params.path);
    if (confined) return runConfined(ctx, confined, 'getMetadata', { path, unix: params.unix === true });
    const answer = await metadata(path);
    // fileMetadata: only a client that asks gets more than Codex answers.
    if (params.unix !== true) return answer;
    const { mode, accessedAtMs } = await unixMetadata(path);
    return { ...answer, mode, accessedAtMs };
  },

  // fileMetadata (Tether): permission bits and times of a path, for `cp -p`.
  [FsExtensionMethod.setMetadata]: async (raw, ctx) => {
    const params = decode(FsSetMetadataParams, raw);
    const confined = confinement(params.sandbox);
    const path = nativePath(params.path);
    if (confined) {
      const { sandbox: _, path: __, ...change } = params;
      return runConfined(ctx, confined, 'setMetadata', { path, change });
    }
    await setMetadata(path, params);
    return {};
  },

  // fileBatch (Tether): many small files in one request, each with its own SHA-256.
  [FsExtensionMethod.readFiles]: async (raw, ctx) => {
    const params = decode(FsReadFilesParams, raw);
    refuseConfined(FsExtensionMethod.readFiles, params.sandbox);
    const paths = params.paths.map(nativePath);
    return {
      files: await readFiles(paths, params.maxFileBytes, params.maxTotalBytes, ctx.maxReadFileBytes),
    };
  },

  [FsExtensionMethod.writeFiles]: async (raw) => {
    const params = decode(FsWriteFilesParams, raw);
    refuseConfined(FsExtensionMethod.writeFiles, params.sandbox);
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

  [Method.fsCanonicalize]: async (raw, ctx) => {
    const params = decode(FsPathParams, raw);
    const confined = confinement(params.sandbox);
    const path = nativePath(params.path);
    if (confined) return runConfined(ctx, confined, 'canonicalize', { path });
    return { path: await canonicalize(path) };
  },

  [Method.fsReadDirectory]: async (raw, ctx) => {
    const params = decode(FsReadDirectoryParams, raw);
    const confined = confinement(params.sandbox);
    const path = nativePath(params.path);
    // Confined, the listing is Codex's (no link marks): the sandboxed helper lists as Codex does.
    if (confined) return runConfined(ctx, confined, 'readDirectory', { path });
    return { entries: await readDirectory(path, params.links === true) };
  },

  [Method.fsRemove]: async (raw, ctx) => {
    const params = decode(FsRemoveParams, raw);
    const confined = confinement(params.sandbox);
    const path = nativePath(params.path);
    const recursive = params.recursive ?? true;
    const force = params.force ?? true;
    if (confined) return runConfined(ctx, confined, 'remove', { path, recursive, force });
    await remove(path, recursive, force);
    return {};
  },

  [Method.fsCopy]: async (raw, ctx) => {
    const params = decode(FsCopyParams, raw);
    const confined = confinement(params.sandbox);
    const source = nativePath(params.sourcePath);
    const destination = nativePath(params.destinationPath);
    if (confined) {
      const args = { source, destination, recursive: params.recursive };
      return runConfined(ctx, confined, 'copy', args);
    }
    await copy(source, destination, params.recursive);
    return {};
  },

  [Method.fsOpen]: async (raw, ctx) => {
    const params = decode(FsOpenParams, raw);
    const confined = confinement(params.sandbox);
    const path = nativePath(params.path);
    const mode = params.mode ?? 'read';
    if (confined) {
      // Opened (and for `replace` truncated) inside the sandbox, which hands the open file back: the handle is
      // that file for its whole life, whatever becomes of the path (sandboxedFileStreaming).
      ctx.files.checkOpenable(params.handleId);
      const opened = await openConfined(ctx, confined, path, mode);
      await ctx.files.open(params.handleId, path, mode, params.digest === true, opened);
      return { handleId: params.handleId };
    }
    await ctx.files.open(params.handleId, path, mode, params.digest === true);
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
      // in a pooled buffer (a relay stream's or a socket's large message) goes back through its message.
      (block as BufferLease | null)?.release();
      if (attachment) releaseAttachment(raw);
    }
    return {};
  },

  [Method.fsClose]: async (raw, ctx) => {
    const params = decode(FsCloseParams, raw);
    // fileHandleDigest: only a handle opened with `digest` has one, so a Codex client's `{}` stays `{}`.
    return (await ctx.files.close(params.handleId)) ?? {};
  },

  [Method.fsWalk]: async (raw, ctx) => {
    const params = decode(FsWalkParams, raw);
    const confined = confinement(params.sandbox);
    const path = nativePath(params.path);
    if (confined) return runConfined(ctx, confined, 'walk', { path, options: params.options });
    return walk(path, params.options);
  },
});
