import { createHash } from 'node:crypto';
import { READ_BUFFER_BYTES, ReadBufferPool } from '@tether/bytes';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from './__tests__/helpers.js';
import { PipeGrowth } from './pipe-growth.js';
import { ProcessTable } from './process-table.js';
import type { ProcessEvent, ProcessTableOptions } from './types.js';

/** 4-byte big-endian word i at offset 4i: any byte out of place or overwritten shows in the hash. */
const PATTERN_SCRIPT =
  'const total = Number(process.argv[1]); const block = Buffer.alloc(1 << 20);' +
  'let w = 0; (function next() { while (w * 4 < total) { for (let i = 0; i < block.length; i += 4) block.writeUInt32BE(w++, i);' +
  'if (!process.stdout.write(block)) return process.stdout.once("drain", next); } })();';

/** Process `processId` of `table`: Node running `script` with `args`, its output on pipes. */
function startScript(table: ProcessTable, processId: string, script: string, ...args: string[]) {
  return table.start({
    processId,
    argv: [process.execPath, '-e', script, ...args],
    cwd: process.cwd(),
    env: {},
    tty: false,
    pipeStdin: false,
  });
}

/** Process `p` of `table`, printing `total` bytes of the pattern. */
function startPattern(table: ProcessTable, total: number) {
  return startScript(table, 'p', PATTERN_SCRIPT, String(total));
}

function expectedPattern(total: number): Buffer {
  const out = Buffer.alloc(total);
  for (let i = 0; i < total; i += 4) out.writeUInt32BE(i / 4, i);
  return out;
}

describe('ProcessTable with recycled read buffers', () => {
  const tables: ProcessTable[] = [];
  afterEach(async () => {
    await Promise.all(tables.splice(0).map((t) => t.shutdown()));
  });

  it('quiet processes hold no pool buffer; a stream moves to the pool once its reads fill what it has', async () => {
    const pool = new ReadBufferPool();
    const table = new ProcessTable({ readBuffers: pool });
    tables.push(table);
    for (let i = 0; i < 20; i++) {
      await table.start({
        processId: `quiet-${i}`,
        argv: ['sh', '-c', 'echo hi; exec sleep 30'],
        cwd: '/',
        env: {},
        tty: false,
        pipeStdin: false,
      });
    }
    await waitFor(async () => (await table.read('quiet-19')).chunks.length > 0, 'the quiet ones to print');
    expect(pool.createdBuffers).toBe(0);
    await table.start({
      processId: 'bulk',
      argv: ['head', '-c', '4194304', '/dev/zero'],
      cwd: '/',
      env: {},
      tty: false,
      pipeStdin: false,
    });
    await waitFor(() => table.list().find((p) => p.processId === 'bulk')?.state === 'closed', 'bulk to close');
    expect(pool.createdBuffers).toBeGreaterThan(0);
  });

  function start(total: number, options: ProcessTableOptions) {
    const table = new ProcessTable(options);
    tables.push(table);
    return startPattern(table, total);
  }

  it('delivers every byte in order while retention recycles the buffers, and keeps what it retains intact', async () => {
    const total = 16 * 1024 * 1024;
    const pool = new ReadBufferPool();
    const hash = createHash('sha256');
    let bytes = 0;
    let closed = false;
    const started = start(total, {
      readBuffers: pool,
      retainedOutputBytes: 256 * 1024,
      onEvent: (event: ProcessEvent) => {
        // Consumed synchronously, as the contract requires.
        if (event.kind === 'output') {
          hash.update(event.chunk);
          bytes += event.chunk.length;
        }
        if (event.kind === 'closed') closed = true;
      },
    });
    const table = tables[0] as ProcessTable;
    await started;
    await waitFor(() => closed, 'the process to close', 30_000);
    expect(bytes).toBe(total);
    const expected = expectedPattern(total);
    expect(hash.digest('hex')).toBe(createHash('sha256').update(expected).digest('hex'));
    // Reads went into the pool, and far fewer buffers than reads: dropped chunks' buffers were read into again.
    expect(pool.createdBuffers).toBeGreaterThan(0);
    expect(pool.createdBuffers).toBeLessThan(total / READ_BUFFER_BYTES / 4);
    // What retention still holds is the tail of the output, untouched by the recycled reads.
    const read = await table.read('p', { afterSeq: 0 });
    const retained = Buffer.concat(read.chunks.map((c) => c.chunk));
    expect(retained.length).toBeGreaterThan(0);
    expect(retained.equals(expected.subarray(total - retained.length))).toBe(true);
  });

  it('keeps what it retains intact when a slow child fills the small buffer read after read', async () => {
    // Each block fills the stream's own 8 KiB buffer, which every later short read reuses: a retained chunk
    // must be a copy of it, not a view (a view showed the last block's bytes on a later process/read).
    const script =
      'let i = 0; const t = setInterval(() => { process.stdout.write(Buffer.alloc(8192, 65 + i)); ' +
      'if (++i === 12) clearInterval(t); }, 15);';
    let closed = false;
    const table = new ProcessTable({
      readBuffers: new ReadBufferPool(),
      onEvent: (event: ProcessEvent) => {
        if (event.kind === 'closed') closed = true;
      },
    });
    tables.push(table);
    await startScript(table, 'slow', script);
    await waitFor(() => closed, 'the process to close');
    const read = await table.read('slow', { afterSeq: 0 });
    const retained = Buffer.concat(read.chunks.map((c) => c.chunk));
    const expected = Buffer.concat(Array.from({ length: 12 }, (_, i) => Buffer.alloc(8192, 65 + i)));
    expect(retained.toString('latin1')).toBe(expected.toString('latin1'));
  });

  it('stops reading while output is paused and loses nothing when resumed', async () => {
    const total = 4 * 1024 * 1024;
    const pool = new ReadBufferPool();
    const chunks: Buffer[] = [];
    let closed = false;
    const options: ProcessTableOptions = {
      readBuffers: pool,
      retainedOutputBytes: 128 * 1024,
      onEvent: (event) => {
        if (event.kind === 'output') chunks.push(Buffer.from(event.chunk)); // a copy: the buffer is recycled
        if (event.kind === 'closed') closed = true;
      },
    };
    const started = start(total, options);
    const table = tables[0] as ProcessTable;
    table.pauseOutput();
    await started;
    await new Promise((r) => setTimeout(r, 200));
    const whilePaused = chunks.length;
    await new Promise((r) => setTimeout(r, 200));
    expect(chunks.length).toBe(whilePaused); // nothing read while paused (the child blocks on its pipe)
    expect(closed).toBe(false);
    table.resumeOutput();
    await waitFor(() => closed, 'the process to close', 30_000);
    expect(Buffer.concat(chunks).equals(expectedPattern(total))).toBe(true);
  });
});

describe('ProcessTable with raised pipes (PipeGrowth)', () => {
  const tables: ProcessTable[] = [];
  afterEach(async () => {
    await Promise.all(tables.splice(0).map((t) => t.shutdown()));
  });

  function table(options: ProcessTableOptions): ProcessTable {
    const made = new ProcessTable(options);
    tables.push(made);
    return made;
  }

  it('raises a streaming child’s pipe, reads it in bulk buffers, loses nothing and gives the share back', async () => {
    const total = 16 * 1024 * 1024;
    const pool = new ReadBufferPool({ bulkBufferBytes: 4 * READ_BUFFER_BYTES });
    const growth = new PipeGrowth();
    const hash = createHash('sha256');
    let bytes = 0;
    let largest = 0;
    let raisedWhileRunning = 0;
    let closed = false;
    const t = table({
      readBuffers: pool,
      pipeGrowth: growth,
      onEvent: (event: ProcessEvent) => {
        if (event.kind === 'output') {
          hash.update(event.chunk);
          bytes += event.chunk.length;
          largest = Math.max(largest, event.chunk.length);
          raisedWhileRunning = Math.max(raisedWhileRunning, growth.raised);
        }
        if (event.kind === 'closed') closed = true;
      },
    });
    await startPattern(t, total);
    await waitFor(() => closed, 'the process to close', 30_000);
    expect(bytes).toBe(total);
    expect(hash.digest('hex')).toBe(createHash('sha256').update(expectedPattern(total)).digest('hex'));
    expect(raisedWhileRunning).toBe(1);
    // More than the 64 KiB an unraised pipe holds came in one read.
    expect(largest).toBeGreaterThan(READ_BUFFER_BYTES);
    expect(growth.raised).toBe(0);
  });

  it('raises no more pipes at once than its budget allows, and gives each share back', async () => {
    const growth = new PipeGrowth({ maxPipes: 1 });
    const t = table({ readBuffers: new ReadBufferPool(), pipeGrowth: growth });
    let most = 0;
    const watch = setInterval(() => {
      most = Math.max(most, growth.raised);
    }, 1);
    try {
      // Both stream until terminated: they run side by side while the budget is watched.
      for (const id of ['a', 'b']) {
        await t.start({ processId: id, argv: ['cat', '/dev/zero'], cwd: '/', env: {}, tty: false, pipeStdin: false });
      }
      await waitFor(() => growth.raised === 1, 'a pipe to be raised');
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(most).toBe(1);
      for (const id of ['a', 'b']) t.terminate(id);
      await waitFor(() => t.list().every((p) => p.state === 'closed'), 'both to close');
      expect(growth.raised).toBe(0);
    } finally {
      clearInterval(watch);
    }
  });

  it('raises no pipe of a process whose flow window is smaller than a few bulk reads', async () => {
    const growth = new PipeGrowth();
    const chunks: number[] = [];
    const t = table({
      readBuffers: new ReadBufferPool(),
      pipeGrowth: growth,
      onEvent: (event: ProcessEvent) => {
        if (event.kind === 'output') chunks.push(event.chunk.length);
      },
    });
    const window = 512 * 1024;
    await t.start({
      processId: 'w',
      argv: ['cat', '/dev/zero'],
      cwd: '/',
      env: {},
      tty: false,
      pipeStdin: false,
      flowWindowBytes: window,
    });
    // Nothing acknowledges: the window fills with full reads, and then reading stops.
    await waitFor(() => chunks.reduce((sum, n) => sum + n, 0) >= window, 'the window to fill');
    expect(Math.max(...chunks)).toBe(READ_BUFFER_BYTES);
    expect(growth.raised).toBe(0);
  });

  it('raises a child’s stdin pipe when a large write comes, and every byte arrives', async () => {
    const growth = new PipeGrowth();
    let stdout = '';
    let closed = false;
    const t = table({
      pipeGrowth: growth,
      onEvent: (event: ProcessEvent) => {
        if (event.kind === 'output') stdout += event.chunk.toString();
        if (event.kind === 'closed') closed = true;
      },
    });
    await t.start({ processId: 'in', argv: ['wc', '-c'], cwd: '/', env: {}, tty: false, pipeStdin: true });
    const piece = Buffer.alloc(256 * 1024, 7);
    await t.write('in', Buffer.from('small'));
    expect(growth.raised).toBe(0);
    await t.write('in', piece);
    expect(growth.raised).toBe(1);
    await t.write('in', piece);
    t.closeStdin('in');
    await waitFor(() => closed, 'the process to close');
    expect(stdout.trim()).toBe(String(2 * piece.length + 5));
    expect(growth.raised).toBe(0);
  });
});
