import { close, constants, fstat, ftruncate, open, write } from 'node:fs';
import { Writable } from 'node:stream';

/**
 * Writes a local file from its start, in place, as scp does: an existing file is not truncated when it is
 * opened but cut to the length written when the stream finishes, or when it is destroyed (a failed copy
 * leaves what it wrote, as a truncating writer would). Overwriting keeps the old contents' page-cache pages
 * for the new bytes; truncating first frees them all and faults in fresh ones, which measured as half the
 * CPU time of a download on a VM. A file that is not regular (a pipe, a terminal, `/dev/null`) is written
 * sequentially and never cut.
 */
export class InPlaceFileWriter extends Writable {
  private fd: number | null = null;
  private regular = false;
  /** Bytes written so far: the next write's offset, and the length the file is cut to. */
  private written = 0;
  private cut = false;
  /** Set while a write is in flight; destroying waits for it (it must not land after the cut or the close). */
  private settled: (() => void) | null = null;
  private busy = false;

  constructor(
    private readonly path: string,
    options: { highWaterMark?: number } = {},
  ) {
    super({ highWaterMark: options.highWaterMark });
  }

  override _construct(callback: (err?: Error | null) => void): void {
    open(this.path, constants.O_WRONLY | constants.O_CREAT, 0o666, (err, fd) => {
      if (err) return callback(err);
      this.fd = fd;
      fstat(fd, (statErr, stats) => {
        if (statErr) return callback(statErr); // _destroy closes the descriptor
        this.regular = stats.isFile();
        callback();
      });
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
    const step = (done: number) => {
      if (done === chunk.byteLength) {
        this.written += done;
        return end();
      }
      // Positional on a regular file; a pipe or a terminal takes its bytes where it is.
      const position = this.regular ? this.written + done : null;
      write(fd, chunk, done, chunk.byteLength - done, position, (err, bytes) => {
        if (err) return end(err);
        step(done + bytes);
      });
    };
    step(0);
  }

  override _final(callback: (err?: Error | null) => void): void {
    if (!this.regular) {
      callback();
      return;
    }
    ftruncate(this.fd as number, this.written, (err) => {
      if (!err) this.cut = true;
      callback(err);
    });
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
    if (this.regular && !this.cut) ftruncate(fd, this.written, () => release());
    else release();
  }
}
