/**
 * Many `Environment.connectRendezvous` in one process, all busy at once, through the real registry, relay
 * and executor (remote mode) bins. Every harness socket of this process shares the SDK's inbound slab
 * pool, and the executor decodes every stream off one multiplexed socket: a receive path that keeps
 * anything of one frame past the slab's reuse (a stream id, a payload) gives one stream's frame to another,
 * which drops it as foreign, and the stream waits forever. Each stream therefore carries many frames of
 * the same size (full 60 KiB records), so that slabs are reused between streams all the time.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { Environment, type ProcessHandle } from '@tether/client';
import { describe, expect, it } from 'vitest';
import { useExecutorStack } from './stack-suite.ts';

const ENVIRONMENT = 'env-many-e2e';
const STREAM_BYTES = 4 * 1024 * 1024;
const FILE_BYTES = 2 * 1024 * 1024;
/**
 * Record size of the pattern: each record names its environment (4 digits) and its own offset (11 hex
 * digits), so a byte from another environment's process, or from elsewhere in the stream, shows where.
 */
const RECORD = 16;

/** The pattern of environment `tag` at `[0, size)`: record k is the tag, `k * 16` in hex, and a newline. */
function pattern(tag: string, size: number): Buffer {
  const out = Buffer.allocUnsafe(size);
  for (let at = 0; at < size; at += RECORD) out.write(`${tag}${at.toString(16).padStart(11, '0')}\n`, at, 'latin1');
  return out;
}

/** The same pattern, written by a child of the executor (backpressure honoured, so no output is lost there). */
function generator(tag: string): string {
  return `
const total = ${STREAM_BYTES};
let at = 0;
function pump() {
  while (at < total) {
    let text = '';
    const end = Math.min(total, at + 65536);
    for (; at < end; at += ${RECORD}) text += '${tag}' + at.toString(16).padStart(11, '0') + '\\n';
    if (!process.stdout.write(text)) return process.stdout.once('drain', pump);
  }
}
pump();
`;
}

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/** Rejects naming what is stuck (and how far it got), so that a hang reads as which environment waited on what. */
function within<T>(ms: number, what: string, promise: Promise<T>, progress: () => string = () => ''): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms${progress()}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

interface StreamOutcome {
  exitCode: number;
  bytes: number;
  sha256: string;
  /** Offset of the first byte that differs from the pattern, or null. */
  firstMismatch: number | null;
}

/** How far a stream got, for the message of a time-out. */
interface StreamProgress {
  bytes: number;
  handle: ProcessHandle | null;
  exited: boolean;
}

function describeProgress(progress: StreamProgress): string {
  const handle = progress.handle;
  if (!handle) return ' (not started)';
  const { switchesToPull, reads } = handle.deliveryStats;
  return ` (${progress.bytes} of ${STREAM_BYTES} bytes received, exited: ${progress.exited}, delivery ${handle.deliveryMode}, ${switchesToPull} switches to pull, ${reads} reads, ${handle.bufferedBytes} bytes buffered)`;
}

/** Runs the generator and checks every chunk against the pattern at its offset as it arrives. */
async function streamPattern(
  env: Environment,
  cwd: string,
  tag: string,
  expected: Buffer,
  progress: StreamProgress,
): Promise<StreamOutcome> {
  const handle = await env.spawn([process.execPath, '-e', generator(tag)], { cwd });
  progress.handle = handle;
  const hash = createHash('sha256');
  let firstMismatch: number | null = null;
  let stderr = '';
  for await (const event of handle) {
    if (event.kind === 'exited') progress.exited = true;
    if (event.kind !== 'output') continue;
    if (event.stream !== 'stdout') {
      stderr += event.chunk.toString();
      continue;
    }
    hash.update(event.chunk);
    if (firstMismatch === null) {
      const want = expected.subarray(progress.bytes, progress.bytes + event.chunk.byteLength);
      if (!want.equals(event.chunk)) {
        let i = 0;
        while (i < want.byteLength && want[i] === event.chunk[i]) i++;
        firstMismatch = progress.bytes + i;
      }
    }
    progress.bytes += event.chunk.byteLength;
  }
  const { exitCode } = await handle.completion;
  if (stderr) throw new Error(`generator wrote to stderr: ${stderr}`);
  return { exitCode, bytes: progress.bytes, sha256: hash.digest('hex'), firstMismatch };
}

describe('many environments in one process, through registry, relay and executor bins', () => {
  const suite = useExecutorStack(ENVIRONMENT, { dirPrefix: 'tether-many-e2e-' });

  async function connectAll(count: number): Promise<Environment[]> {
    const envs = await Promise.allSettled(
      Array.from({ length: count }, () =>
        Environment.connectRendezvous({
          registryUrl: suite.stack.registryUrl,
          apiKey: suite.stack.keys.harness,
          environmentId: ENVIRONMENT,
          clientName: 'tether-many-e2e',
        }),
      ),
    );
    const connected = envs.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const failed = envs.find((r) => r.status === 'rejected');
    if (failed) {
      await Promise.allSettled(connected.map((env) => env.close()));
      throw failed.reason;
    }
    return connected;
  }

  for (const count of [3, 20]) {
    it(`${count} environments each stream ${STREAM_BYTES >> 20} MiB of output and write and read back ${FILE_BYTES >> 20} MiB, all at once`, {
      timeout: 180_000,
    }, async () => {
      const envs = await within(30_000, `connecting ${count} environments`, connectAll(count));
      try {
        const runs = envs.map(async (env, i) => {
          const tag = String(i).padStart(4, '0');
          const expected = pattern(tag, STREAM_BYTES);
          const progress: StreamProgress = { bytes: 0, handle: null, exited: false };
          const path = join(suite.dir, `n${count}-env${i}.bin`);
          // Distinct contents per environment: a block delivered to the wrong stream cannot pass.
          const data = Buffer.alloc(FILE_BYTES);
          for (let at = 0; at < FILE_BYTES; at += 4) data.writeUInt32BE((i << 24) ^ at, at);
          const [stream, readBack] = await Promise.all([
            within(
              120_000,
              `environment ${i} of ${count}: streaming`,
              streamPattern(env, suite.dir, tag, expected, progress),
              () => describeProgress(progress),
            ),
            within(
              120_000,
              `environment ${i} of ${count}: writeFile + readFile`,
              (async () => {
                await env.fs.writeFile(path, data);
                return env.fs.readFile(path);
              })(),
            ),
          ]);
          return {
            stream,
            expectedSha: sha256(expected),
            fileOk: readBack.equals(data),
            fileBytes: readBack.byteLength,
          };
        });
        const results = await Promise.allSettled(runs);
        const failures = results.flatMap((r) => (r.status === 'rejected' ? [(r.reason as Error).message] : []));
        expect(failures).toEqual([]);
        for (const result of results) {
          if (result.status !== 'fulfilled') continue;
          expect(result.value).toEqual({
            stream: { exitCode: 0, bytes: STREAM_BYTES, sha256: result.value.expectedSha, firstMismatch: null },
            expectedSha: result.value.expectedSha,
            fileOk: true,
            fileBytes: FILE_BYTES,
          });
        }
      } finally {
        await Promise.allSettled(envs.map((env) => env.close()));
      }
    });
  }
});
