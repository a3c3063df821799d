/**
 * Replays a recording's output (`o` events) with its timing, `speed` times as fast, waits longer than
 * `maxWaitMs` shortened to it (as asciinema's idle time limit). Other events are skipped: input reached the
 * process, and what it echoed is output already.
 */
export interface PlayOptions {
  speed?: number;
  maxWaitMs?: number;
  write: (text: string) => void | Promise<void>;
  /** Waits `ms` (a test's clock, or setTimeout); rejects or returns early when `signal` aborts. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  signal?: AbortSignal;
}

export interface PlayResult {
  /** Output events written. */
  events: number;
  /** The exit the recording ends with, if any. */
  exitCode: number | null;
}

const defaultSleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

export async function playRecording(text: string, options: PlayOptions): Promise<PlayResult> {
  const speed = options.speed ?? 1;
  if (!(speed > 0) || !Number.isFinite(speed)) throw new Error(`speed must be a positive number, got ${speed}`);
  const maxWaitMs = options.maxWaitMs ?? 2_000;
  const sleep = options.sleep ?? defaultSleep;
  const lines = text.split('\n');
  const header = JSON.parse(lines[0] ?? '') as { version?: unknown };
  if (header?.version !== 2) throw new Error('not an asciicast v2 recording (its first line is no version 2 header)');
  let at = 0;
  let events = 0;
  let exitCode: number | null = null;
  for (const line of lines.slice(1)) {
    if (options.signal?.aborted) break;
    if (line === '') continue;
    const event = JSON.parse(line) as [number, string, string];
    if (!Array.isArray(event) || typeof event[0] !== 'number') throw new Error(`not an event: ${line.slice(0, 80)}`);
    if (event[1] === 'tether.exit') exitCode = Number(event[2]);
    if (event[1] !== 'o') continue;
    const waitMs = Math.min(Math.max(0, (event[0] - at) * 1000) / speed, maxWaitMs);
    at = event[0];
    if (waitMs > 0) await sleep(waitMs, options.signal);
    if (options.signal?.aborted) break;
    await options.write(String(event[2]));
    events++;
  }
  return { events, exitCode };
}
