import { close, constants, ftruncate, open, write } from 'node:fs';
import { Writable } from 'node:stream';

/**
 * Writes a local file from its start, in place, as scp does: an existing file is not truncated when it is
 * opened but cut to the length written when the stream finishes, or when it is destroyed (a failed copy
 * leaves what it wrote, as a truncating writer would). Overwriting keeps the old contents' page-cache pages
 * for the new bytes; truncating first frees them all and faults in fresh ones, which measured as half the
 * CPU time of a download on a VM. A file that cannot be cut (a pipe, a terminal, `/dev/null`) is only
 * written. With `noFollow` the path must not be a symbolic link (O_NOFOLLOW: the open fails with ELOOP),
 * so a name chosen by a remote side cannot write through a link planted at it.
 */
export class InPlaceFileWriter extends Writable {
  private fd: number | null = null;
  /** Bytes written so far: the length the file is cut to. */
  private written = 0;
  private busy = false;
  /** Set while a write is in flight; destroying waits for it (it must not land after the cut or the close). */
  private settled: (() => void) | null = null;

  constructor(
    private readonly path: string,
    private readonly options: { noFollow?: boolean } = {},
  ) {
    super();
  }

  override _construct(callback: (err?: Error | null) => void): void {
    const flags = constants.O_WRONLY | constants.O_CREAT | (this.options.noFollow ? constants.O_NOFOLLOW : 0);
    open(this.path, flags, 0o666, (err, fd) => {
      if (!err) this.fd = fd;
      callback(err);
    });
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    const fd = this.fd as number;
    this.busy = true;
    const end = (err?: Error | null) => {
      this.busy = false;
      const settled = this.settled;
      this.settled = null;
      if (settled) settled();
      else callback(err);
    };
    // Sequential writes from offset 0 (opened without O_APPEND), so a pipe or a terminal works too.
    const step = (done: number) => {
      if (done === chunk.byteLength) {
        this.written += done;
        return end();
      }
      write(fd, chunk, done, chunk.byteLength - done, null, (err, bytes) => {
        if (err) return end(err);
        step(done + bytes);
      });
    };
    step(0);
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.cut(this.fd as number, callback);
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    const fd = this.fd;
    if (fd === null) {
      callback(err);
      return;
    }
    if (this.busy) {
      this.settled = () => this._destroy(err, callback);
      return;
    }
    this.fd = null;
    const release = () => close(fd, (closeErr) => callback(err ?? closeErr));
    // A finished stream was cut by _final; a destroyed one is cut where its writes ended.
    if (this.writableFinished) release();
    else this.cut(fd, () => release());
  }

  /** ftruncate to the bytes written; EINVAL is what a file that cannot be cut answers. */
  private cut(fd: number, callback: (err?: Error | null) => void): void {
    ftruncate(fd, this.written, (err) => callback(err?.code === 'EINVAL' ? null : err));
  }
}
