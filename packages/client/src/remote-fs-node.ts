/**
 * A remote executor's files as an EnvironmentFs (Node): remote-fs.ts's calls plus Node streams. Reads stream
 * through `fs/open` + `fs/readBlock`; writes stream through the executor's advertised write extension when it
 * has one, else (a Codex executor) they are sent whole with `fs/writeFile`, up to `maxWholeWriteBytes`.
 */
import { Readable, Writable } from 'node:stream';
import { HandedChunks, MAX_BLOCK_BYTES } from '@tether/bytes';
import { Method, type MethodResult } from '@tether/exec-protocol';
import { attachmentOf, takeAttachmentRelease } from '@tether/jsonrpc';
import { TetherError } from './errors.js';
import {
  DEFAULT_BLOCK_SIZE,
  DEFAULT_READ_DEPTH,
  type EnvironmentFs,
  type FileReadStream,
  type StreamOptions,
  toFileUri,
} from './fs.js';

import { handleDigestOf, RemoteFs as PortableRemoteFs, writeBlockEncoder } from './remote-fs.js';

export class RemoteFs extends PortableRemoteFs implements EnvironmentFs {
  /**
   * Reads in blocks with up to `depth` `fs/readBlock` requests in flight (default 3), so the round trip
   * through the relay overlaps with the transfer; blocks are delivered in order. The default keeps the
   * answers in flight (3 MiB) under the relay's backlog limit per harness (4 MiB by default), past which
   * the relay resets a harness that reads more slowly than the executor answers.
   */
  createReadStream(path: string, options: StreamOptions = {}): FileReadStream {
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
    let inflight: Array<{ offset: number; len: number; answer: Promise<MethodResult<typeof Method.fsReadBlock>> }> = [];
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
        const answer = await caller.call(Method.fsClose, { handleId }).catch(() => undefined);
        if (atEnd) options.onDigest?.(handleDigestOf(answer));
      })();
      return closing;
    };
    const request = (offset: number, len: number) => {
      const answer = caller.call(Method.fsReadBlock, {
        handleId,
        offset,
        len,
        ...(binary ? { binary: true } : {}),
      });
      answer.catch(() => undefined); // awaited in order below
      inflight.push({ offset, len, answer });
    };
    /** Blocks pushed in pooled buffers (a whole block in one relay message), until the consumer gives them back. */
    const handed = new HandedChunks();
    const stream = new Readable({
      highWaterMark: blockSize,
      async read() {
        if (finished) return;
        try {
          opened ??= caller.call(Method.fsOpen, { handleId, path: toFileUri(path), ...digest }).then(() => {
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
          const release = takeAttachmentRelease(answer);
          if (release) {
            if (bytes.byteLength > 0 && bytes.byteLength <= block.len) handed.hand(bytes, release);
            else release(); // not pushed: nobody else reads it
          }
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
    return Object.assign(stream, { giveBack: (chunk: Uint8Array) => handed.giveBack(chunk) });
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
      opened ??= caller.call(Method.fsOpen, { handleId, path: toFileUri(path), mode, ...digest }).then(() => {
        isOpen = true;
      });
      await opened;
    };
    const send = async (block: Buffer) => {
      const at = offset;
      offset += block.byteLength;
      const request = caller
        .call(
          Method.fsWriteBlock,
          { handleId, offset: at },
          {
            encode: writeBlockEncoder(handleId, at, block, binary),
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
      const answer = await caller.call(Method.fsClose, { handleId });
      if (atEnd) options.onDigest?.(handleDigestOf(answer));
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
          .call(Method.fsWriteFile, { path: toFileUri(path), dataBase64: Buffer.concat(parts).toString('base64') })
          .then(
            () => callback(),
            (err: Error) => callback(err),
          );
      },
    });
  }
}
