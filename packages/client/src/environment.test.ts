import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MAX_RECORD_PLAINTEXT_BYTES } from '@tether/relay-frames';
import { type PeerHandle, type Stack, startPeer, startStack, tetherMainPath } from '@tether/test-kit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { executorOnRendezvous } from './__tests__/rendezvous-executor.js';
import type { ProcessEvent } from './backend.js';
import { Environment } from './environment-node.js';
import { TetherError } from './errors.js';

const work = mkdtempSync(join(tmpdir(), 'tether-client-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** Resolves true if `promise` has settled once everything already queued has run. */
async function isSettled(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  promise.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  await new Promise((resolve) => setImmediate(resolve));
  return settled;
}

/** A process that prints `count × size` bytes, then exits with `code`. */
function printer(count: number, size: number, code = 0): string[] {
  return ['/bin/sh', '-c', `head -c ${count * size} /dev/zero | tr '\\0' x; exit ${code}`];
}

type Backend = 'local' | 'remote (ws)' | 'remote (rendezvous)' | 'remote (stdio)';

describe.each<Backend>(['local', 'remote (ws)', 'remote (rendezvous)', 'remote (stdio)'])('Environment: %s', (kind) => {
  let env: Environment;
  let peer: PeerHandle | null = null;
  let stack: Stack | null = null;

  beforeAll(async () => {
    if (kind === 'local') {
      env = Environment.local();
    } else if (kind === 'remote (stdio)') {
      env = await Environment.connectStdio([process.execPath, tetherMainPath(), '--listen', 'stdio'], {
        clientName: 'client-test',
      });
    } else if (kind === 'remote (ws)') {
      peer = await startPeer({ kind: 'tether', transport: 'ws' });
      env = await Environment.connectWebSocket(peer.url!, { clientName: 'client-test' });
    } else {
      // The real registry, relay and `executor --remote` processes.
      stack = await startStack();
      peer = await stack.startExecutor('tether', 'env-client');
      env = await Environment.connectRendezvous({
        registryUrl: stack.registryUrl,
        apiKey: stack.keys.harness,
        environmentId: 'env-client',
        clientName: 'client-test',
      });
    }
  });

  afterAll(async () => {
    await env?.close();
    await peer?.close();
    await stack?.close();
  });

  it('exec collects output by stream and the exit code', async () => {
    const result = await env.exec(['/bin/sh', '-c', 'printf out; printf err >&2; exit 3'], { cwd: work });
    expect(result.exitCode).toBe(3);
    expect(result.stdout.toString()).toBe('out');
    expect(result.stderr.toString()).toBe('err');
  });

  it('delivers every event once, in seq order, close last', async () => {
    const handle = await env.spawn(printer(200, 100, 5), { cwd: work });
    const events: ProcessEvent[] = [];
    for await (const event of handle) events.push(event);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.at(-1)?.kind).toBe('closed');
    expect(events.filter((e) => e.kind === 'exited')).toMatchObject([{ exitCode: 5 }]);
    const bytes = events.reduce((n, e) => n + (e.kind === 'output' ? e.chunk.byteLength : 0), 0);
    expect(bytes).toBe(200 * 100);
    await expect(handle.completion).resolves.toEqual({ exitCode: 5 });
  });

  it('writes stdin and closes it', async () => {
    const handle = await env.spawn(['/bin/sh', '-c', 'cat; echo done'], { cwd: work, stdin: true });
    expect(await handle.write('hello ')).toBe('accepted');
    expect(await handle.write(Buffer.from('world\n'))).toBe('accepted');
    await handle.closeStdin();
    const result = await handle.collect();
    expect(result.stdout.toString()).toBe('hello world\ndone\n');
  });

  it('signals the process group', async () => {
    const handle = await env.spawn(['/bin/sh', '-c', 'trap "exit 42" INT; echo ready; while :; do sleep 0.05; done'], {
      cwd: work,
    });
    const iterator = handle[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.value).toMatchObject({ kind: 'output' });
    await handle.signal('interrupt');
    for (let r = await iterator.next(); !r.done; r = await iterator.next()) {
      // drain
    }
    await expect(handle.completion).resolves.toEqual({ exitCode: 42 });
  });

  it('completion waits until buffered events are drained (run handles)', async () => {
    const handle = await env.spawn(printer(1024, 1024), { cwd: work });
    const iterator = handle[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.done).toBe(false);
    // The process is long finished on the executor side, yet nothing reports completion while events
    // are still undelivered.
    for (;;) {
      const probe = await env.spawn(['true'], { cwd: work });
      await probe.wait();
      if (handle.bufferedBytes > 0 || handle.deliveryStats.switchesToPull > 0) break;
    }
    expect(await isSettled(handle.completion)).toBe(false);
    let outputBytes = first.value.kind === 'output' ? first.value.chunk.byteLength : 0;
    let last: ProcessEvent | undefined;
    for (let r = await iterator.next(); !r.done; r = await iterator.next()) {
      if (r.value.kind === 'output') outputBytes += r.value.chunk.byteLength;
      last = r.value;
    }
    expect(last?.kind).toBe('closed');
    expect(outputBytes).toBe(1024 * 1024);
    await expect(handle.completion).resolves.toEqual({ exitCode: 0 });
  });

  it('giving up the events does not skip the exit status: the rest is drained, then completion resolves', async () => {
    const handle = await env.spawn(printer(2048, 1024, 9), { cwd: work });
    for await (const event of handle) {
      expect(event.kind).toBe('output');
      break; // drops the iterator after one event
    }
    await expect(handle.completion).resolves.toEqual({ exitCode: 9 });
  });

  it('with flow control a stalled consumer blocks the child: nothing is dropped and the queue stays within the window', async () => {
    const marker = join(work, `flow-${kind.replace(/\W/g, '')}`);
    // 16 MiB, far beyond what an executor retains per process without flow control (1 MiB).
    const handle = await env.spawn(['/bin/sh', '-c', `head -c 16777216 /dev/zero | tr '\\0' y; touch ${marker}`], {
      cwd: work,
    });
    const window = handle.flowWindowBytes;
    expect(window).not.toBeNull();
    const iterator = handle[Symbol.asyncIterator]();
    let total = 0;
    const first = await iterator.next();
    if (first.value?.kind === 'output') total += first.value.chunk.byteLength;
    // Stall: the child must block on its pipe instead of running to the end.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(existsSync(marker)).toBe(false);
    // The window, plus a read in flight and the stall's first chunk: the executor reads a streaming child's
    // raised pipe up to eight records at a time.
    const read = 8 * MAX_RECORD_PLAINTEXT_BYTES;
    expect(handle.bufferedBytes).toBeLessThanOrEqual(window! + 2 * read);
    let peak = 0;
    for (let r = await iterator.next(); !r.done; r = await iterator.next()) {
      peak = Math.max(peak, handle.bufferedBytes);
      if (r.value.kind === 'output') {
        expect(r.value.chunk.every((byte) => byte === 0x79)).toBe(true);
        total += r.value.chunk.byteLength;
      }
    }
    expect(total).toBe(16 * 1024 * 1024);
    expect(peak).toBeLessThanOrEqual(window! + 2 * read);
    expect(handle.deliveryStats.switchesToPull).toBe(0);
    await expect(handle.completion).resolves.toEqual({ exitCode: 0 });
    expect(existsSync(marker)).toBe(true);
  });

  it('without flow control a slow consumer switches to pulling and stays within its high-water mark', async () => {
    const highWaterBytes = 64 * 1024;
    // 768 KiB: within what the executor retains per process (1 MiB), so pulling loses nothing.
    const handle = await env.spawn(printer(768, 1024), { cwd: work, highWaterBytes, flowControl: false });
    const iterator = handle[Symbol.asyncIterator]();
    const first = await iterator.next();
    let total = first.value?.kind === 'output' ? first.value.chunk.byteLength : 0;
    // Stall until the pushed events overflow the mark and the handle reads instead.
    while (handle.deliveryStats.switchesToPull === 0) {
      const probe = await env.spawn(['true'], { cwd: work });
      await probe.wait();
    }
    let peak = handle.bufferedBytes;
    for (let r = await iterator.next(); !r.done; r = await iterator.next()) {
      peak = Math.max(peak, handle.bufferedBytes);
      if (r.value.kind === 'output') total += r.value.chunk.byteLength;
    }
    expect(total).toBe(768 * 1024);
    // At most the mark plus one pushed chunk, or one pulled read (1 MiB), is ever held.
    expect(peak).toBeLessThanOrEqual(highWaterBytes + 1024 * 1024);
    await expect(handle.completion).resolves.toEqual({ exitCode: 0 });
  });

  if (kind !== 'local') {
    it('without flow control a consumer that falls behind the executor retention gets output_lost, not a silent gap', async () => {
      const handle = await env.spawn(printer(8 * 1024, 1024), {
        cwd: work,
        highWaterBytes: 64 * 1024,
        flowControl: false,
      });
      const iterator = handle[Symbol.asyncIterator]();
      await iterator.next();
      // Let the process finish (8 MiB, far beyond the 1 MiB retained) before reading on.
      while (handle.deliveryStats.switchesToPull === 0) {
        const probe = await env.spawn(['true'], { cwd: work });
        await probe.wait();
      }
      await env.exec(['sleep', '0.3'], { cwd: work });
      const error = await (async () => {
        for (let r = await iterator.next(); !r.done; r = await iterator.next()) {
          // keep reading until the gap is found
        }
      })().catch((err: unknown) => err);
      expect(error).toMatchObject({ name: 'TetherError', code: 'output_lost' });
      await expect(handle.completion).rejects.toMatchObject({ code: 'output_lost' });
    });
  }

  it('after pulling has caught up, the handle goes back to pushed events', async () => {
    // Several reads' worth (the executor reads a streaming child up to eight records at a time), so that
    // pushed output piles up past the high-water mark while the probes run; under the 1 MiB retained.
    const handle = await env.spawn(['/bin/sh', '-c', 'head -c 900000 /dev/zero; read x; echo after'], {
      cwd: work,
      stdin: true,
      highWaterBytes: 64 * 1024,
      flowControl: false,
    });
    const iterator = handle[Symbol.asyncIterator]();
    let total = 0;
    const first = await iterator.next();
    if (first.value?.kind === 'output') total += first.value.chunk.byteLength;
    while (handle.deliveryStats.switchesToPull === 0) {
      const probe = await env.spawn(['true'], { cwd: work });
      await probe.wait();
    }
    while (total < 900_000) {
      const r = await iterator.next();
      if (r.value?.kind === 'output') total += r.value.chunk.byteLength;
    }
    // The process now waits on stdin: reads find nothing new, and pushing resumes.
    while (handle.deliveryMode === 'pull') await new Promise((resolve) => setTimeout(resolve, 20));
    const readsWhenBack = handle.deliveryStats.reads;
    await handle.write('go\n');
    const rest: string[] = [];
    for (let r = await iterator.next(); !r.done; r = await iterator.next()) {
      if (r.value.kind === 'output') rest.push(r.value.chunk.toString());
    }
    expect(rest.join('')).toBe('after\n');
    expect(handle.deliveryStats.reads).toBe(readsWhenBack);
    await expect(handle.completion).resolves.toEqual({ exitCode: 0 });
  });

  it('a failed start rejects with the reason and leaves nothing behind', async () => {
    const error = await env.spawn(['/definitely/not/a/program'], { cwd: work }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(TetherError);
    expect((error as Error).message).toMatch(/not\/a\/program|No such file|ENOENT/);
  });

  it('refuses an empty argv and a relative cwd', async () => {
    await expect(env.spawn([])).rejects.toMatchObject({ code: 'invalid_argument' });
    if (kind !== 'local')
      await expect(env.spawn(['true'], { cwd: 'relative' })).rejects.toMatchObject({ code: 'invalid_argument' });
  });
});

describe('Environment over the rendezvous: recovery', () => {
  const stack = executorOnRendezvous('env-recover');
  const opened: Environment[] = [];
  afterEach(async () => {
    for (const env of opened.splice(0)) await env.close();
  });

  it('resumes the session after the relay socket drops and loses no output', async () => {
    const statuses: string[] = [];
    const env = await Environment.connectRendezvous({
      registryUrl: stack.rig.registryUrl,
      apiKey: stack.rig.apiKey,
      environmentId: 'env-recover',
      onStatus: (status) => statuses.push(status),
    });
    opened.push(env);
    const sessionId = env.client!.sessionId;
    const handle = await env.spawn(['/bin/sh', '-c', 'for i in $(seq 1 40); do echo line-$i; sleep 0.02; done'], {
      cwd: work,
    });
    const lines: string[] = [];
    let dropped = false;
    for await (const event of handle) {
      if (event.kind !== 'output') continue;
      lines.push(event.chunk.toString());
      if (!dropped && lines.join('').includes('line-5\n')) {
        dropped = true;
        stack.rig.dropHarnessSockets('env-recover');
      }
    }
    expect(dropped).toBe(true);
    expect(lines.join('')).toBe(Array.from({ length: 40 }, (_, i) => `line-${i + 1}\n`).join(''));
    await expect(handle.completion).resolves.toEqual({ exitCode: 0 });
    // One drop, resumed; under CI load the resumed transport was once seen to drop again and resume again
    // (the same session, nothing lost), so what is required is that every drop was resumed and none lost it.
    expect(statuses.length).toBeGreaterThanOrEqual(2);
    expect(statuses).toEqual(statuses.map((_, i) => (i % 2 === 0 ? 'disconnected' : 'reconnected')));
    expect(env.client!.sessionId).toBe(sessionId);
  });

  it('reports a refused harness key as unauthorized', async () => {
    await expect(
      Environment.connectRendezvous({
        registryUrl: stack.rig.registryUrl,
        apiKey: 'wrong',
        environmentId: 'env-recover',
      }),
    ).rejects.toMatchObject({ name: 'TetherError', code: 'unauthorized' });
  });

  it('reports an unknown environment as not found', async () => {
    await expect(
      Environment.connectRendezvous({
        registryUrl: stack.rig.registryUrl,
        apiKey: stack.rig.apiKey,
        environmentId: 'env-nobody',
      }),
    ).rejects.toMatchObject({ code: 'not_found' });
  });
});

describe('Environment.connectStdio', () => {
  it('owns its executor: close ends it', async () => {
    const env = await Environment.connectStdio([process.execPath, tetherMainPath(), '--listen', 'stdio']);
    const result = await env.exec(['echo', 'over stdio'], { cwd: work });
    expect(result.stdout.toString()).toBe('over stdio\n');
    const child = (env.client as unknown as { ownedChild: { pid: number; exitCode: number | null } }).ownedChild;
    expect(child.exitCode).toBeNull();
    await env.close();
    expect(child.exitCode).toBe(0);
  });

  it('a process handle fails (instead of waiting forever) when its executor dies', async () => {
    const env = await Environment.connectStdio([process.execPath, tetherMainPath(), '--listen', 'stdio']);
    try {
      const handle = await env.spawn(['sleep', '30'], { cwd: work });
      const child = (env.client as unknown as { ownedChild: { kill(signal: string): void } }).ownedChild;
      child.kill('SIGKILL');
      await expect(handle.completion).rejects.toMatchObject({ name: 'TetherError', code: 'closed' });
    } finally {
      await env.close();
    }
  });

  it('a command that cannot start is a clear error', async () => {
    await expect(Environment.connectStdio(['/definitely/not/an/executor'])).rejects.toMatchObject({
      code: 'connect_failed',
    });
  });
});
