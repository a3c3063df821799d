import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { StdinWriter } from './stdin-writer.js';

/** A sink that takes chunks only when the test says so. */
class ManualSink extends Writable {
  readonly taken: string[] = [];
  readonly #pending: (() => void)[] = [];
  ended = false;

  constructor() {
    super({ highWaterMark: 1 << 30 });
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.#pending.push(() => {
      this.taken.push(chunk.toString());
      callback();
    });
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.ended = true;
    callback();
  }

  /** Lets the kernel take the oldest outstanding chunk. */
  async flushOne(): Promise<void> {
    this.#pending.shift()?.();
    await new Promise((resolve) => setImmediate(resolve));
  }
}

const settledState = async (promise: Promise<unknown>) => {
  let state = 'pending';
  promise.then(
    () => {
      state = 'fulfilled';
    },
    () => {
      state = 'rejected';
    },
  );
  await new Promise((resolve) => setImmediate(resolve));
  return state;
};

describe('StdinWriter', () => {
  it('refuses waiting writes when the sink was destroyed under an in-flight write that then completes', async () => {
    // Node completes a write on a destroyed stream with no error; that must not let waiting writes through.
    let complete: (() => void) | null = null;
    const sink = new Writable({
      highWaterMark: 1 << 30,
      write(_chunk, _encoding, callback) {
        complete = () => callback(null);
      },
    });
    const writer = new StdinWriter(sink, 4);
    await writer.write(Buffer.from('abcd'));
    const waiting = writer.write(Buffer.from('e'));
    expect(await settledState(waiting)).toBe('pending');
    sink.destroy();
    (complete as (() => void) | null)?.();
    expect(await settledState(waiting)).toBe('rejected');
    await expect(waiting).rejects.toMatchObject({ code: 'write_failed' });
  });

  it('hands writes over in order and waits while the in-flight bytes would exceed the bound', async () => {
    const sink = new ManualSink();
    const writer = new StdinWriter(sink, 4);
    await writer.write(Buffer.from('ab'));
    await writer.write(Buffer.from('cd'));
    const third = writer.write(Buffer.from('ef'));
    const fourth = writer.write(Buffer.from('g'));
    expect(await settledState(third)).toBe('pending');
    expect(await settledState(fourth)).toBe('pending');

    await sink.flushOne(); // 'ab' consumed: 'ef' fits, 'g' does not yet
    expect(await settledState(third)).toBe('fulfilled');
    expect(await settledState(fourth)).toBe('pending');
    await sink.flushOne();
    expect(await settledState(fourth)).toBe('fulfilled');
    await sink.flushOne();
    await sink.flushOne();
    expect(sink.taken).toEqual(['ab', 'cd', 'ef', 'g']);
  });

  it('lets one write larger than the bound through once nothing is in flight', async () => {
    const sink = new ManualSink();
    const writer = new StdinWriter(sink, 4);
    await writer.write(Buffer.from('0123456789'));
    const next = writer.write(Buffer.from('x'));
    expect(await settledState(next)).toBe('pending');
    await sink.flushOne();
    expect(await settledState(next)).toBe('fulfilled');
  });

  it('fails a write at once when the waiting line is full too', async () => {
    const sink = new ManualSink();
    const writer = new StdinWriter(sink, 4);
    await writer.write(Buffer.from('abcd'));
    const waiting = writer.write(Buffer.from('efg'));
    await expect(writer.write(Buffer.from('hi'))).rejects.toMatchObject({
      code: 'write_failed',
      message: 'failed to write to process stdin: the child is not reading (7 bytes queued)',
    });
    expect(await settledState(waiting)).toBe('pending');
  });

  it("gives each chunk's memory back once the sink has taken it, or at once when the write is refused or dropped", async () => {
    const sink = new ManualSink();
    const writer = new StdinWriter(sink, 4);
    const released: string[] = [];
    const write = (text: string) => writer.write(Buffer.from(text), () => released.push(text)).catch(() => undefined);
    await write('abcd');
    const waiting = write('ef');
    void write('ghi'); // the waiting line is full: refused, given back at once
    expect(released).toEqual(['ghi']);
    await sink.flushOne(); // 'abcd' written: given back; 'ef' goes to the sink
    expect(released).toEqual(['ghi', 'abcd']);
    await waiting;
    expect(released).toEqual(['ghi', 'abcd']);
    await sink.flushOne();
    expect(released).toEqual(['ghi', 'abcd', 'ef']);
    // A write left waiting when the stream breaks is dropped, and given back.
    await write('1234');
    const dropped = write('5');
    sink.destroy(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' }));
    await dropped;
    expect(released.slice(3)).toEqual(['5']);
    await sink.flushOne(); // the in-flight write completes (a socket reports it failed): given back
    expect(released.slice(3)).toEqual(['5', '1234']);
    await write('late');
    expect(released.at(-1)).toBe('late');
  });

  it('fails waiting and later writes when the stream breaks', async () => {
    const sink = new ManualSink();
    const writer = new StdinWriter(sink, 2);
    await writer.write(Buffer.from('ab'));
    const waiting = writer.write(Buffer.from('cd'));
    sink.destroy(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' }));
    await expect(waiting).rejects.toMatchObject({ code: 'write_failed', message: 'failed to write to process stdin' });
    expect(writer.broken).toBe(true);
    await expect(writer.write(Buffer.from('x'))).rejects.toMatchObject({ code: 'write_failed' });
  });

  it('ends the stream only after queued writes were handed over', async () => {
    const sink = new ManualSink();
    const writer = new StdinWriter(sink, 2);
    await writer.write(Buffer.from('ab'));
    const waiting = writer.write(Buffer.from('cd'));
    writer.end();
    expect(writer.ending).toBe(true);
    await expect(writer.write(Buffer.from('late'))).rejects.toMatchObject({ code: 'write_failed' });
    await sink.flushOne();
    await waiting;
    await sink.flushOne();
    expect(sink.taken).toEqual(['ab', 'cd']);
    expect(sink.ended).toBe(true);
  });
});
