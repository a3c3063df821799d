/** Shared test helpers: bounded waits, liveness checks, and the Rust test client's read loop. */
import { readFileSync } from 'node:fs';
import { isAlive, procPids, waitUntil } from '@tether/test-kit';
import type { ProcessTable } from '../process-table.js';
import type { ProcessEvent, ReadResult, StartRequest } from '../types.js';

/** Liveness (zombies count as gone) and bounded polling come from the shared test kit. */
export { isAlive, waitUntil as waitFor };

/** PATH for children that run bare names (the tests' env is otherwise exact). */
export const CHILD_PATH = '/usr/local/bin:/usr/bin:/bin';

export function request(processId: string, argv: string[], overrides: Partial<StartRequest> = {}): StartRequest {
  return { processId, argv, cwd: process.cwd(), env: { PATH: CHILD_PATH }, tty: false, pipeStdin: false, ...overrides };
}

export function sh(processId: string, script: string, overrides: Partial<StartRequest> = {}): StartRequest {
  return request(processId, ['/bin/sh', '-c', script], overrides);
}

/** Live processes whose environment contains `NAME=value` (Linux /proc). */
export function livePidsWithEnv(name: string, value: string): number[] {
  const needle = `${name}=${value}`;
  const pids: number[] = [];
  for (const pid of procPids()) {
    try {
      if (readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(needle) && isAlive(pid)) pids.push(pid);
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return pids;
}

export interface Collected {
  output: string;
  exitCode: number | null;
  closed: boolean;
  last: ReadResult;
}

/**
 * The read loop of the Rust tests: after each response `afterSeq = max(last chunk seq, nextSeq - 1)`,
 * until closed. Each long poll is bounded, and so is the whole loop.
 */
export async function collectUntilClosed(table: ProcessTable, processId: string, afterSeq = 0): Promise<Collected> {
  let output = '';
  let exitCode: number | null = null;
  const deadline = Date.now() + 10_000;
  for (;;) {
    const result = await table.read(processId, { afterSeq, waitMs: 2_000 });
    for (const chunk of result.chunks) {
      output += chunk.chunk.toString('utf8');
      afterSeq = chunk.seq;
    }
    if (result.exited) exitCode = result.exitCode;
    if (result.closed) return { output, exitCode, closed: true, last: result };
    afterSeq = Math.max(afterSeq, result.nextSeq - 1);
    if (Date.now() > deadline) throw new Error(`process ${processId} did not close; output so far: ${output}`);
  }
}

/** Reads until the collected output contains `marker`. */
export async function readUntil(table: ProcessTable, processId: string, marker: string): Promise<string> {
  let output = '';
  let afterSeq = 0;
  const deadline = Date.now() + 10_000;
  while (!output.includes(marker)) {
    const result = await table.read(processId, { afterSeq, waitMs: 2_000 });
    for (const chunk of result.chunks) output += chunk.chunk.toString('utf8');
    afterSeq = Math.max(afterSeq, result.nextSeq - 1, result.chunks.at(-1)?.seq ?? 0);
    if (result.closed) throw new Error(`process ${processId} closed before ${JSON.stringify(marker)}: ${output}`);
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${JSON.stringify(marker)}: ${output}`);
  }
  return output;
}

/** Whether `pid` leads its own session and process group (Linux /proc/<pid>/stat: pgid and sid). */
export function leadsOwnSession(pid: number): boolean {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const [, , pgid, sid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(pgid) === pid && Number(sid) === pid;
}

/** Event snapshots as the seed compares them. */
export function snapshot(event: ProcessEvent): unknown {
  if (event.kind === 'output') return { seq: event.seq, stream: event.stream, text: event.chunk.toString() };
  if (event.kind === 'exited') return { seq: event.seq, exitCode: event.exitCode };
  return { seq: event.seq, closed: true };
}

export function eventsUntilClosed(): { onEvent: (event: ProcessEvent) => void; closed: Promise<ProcessEvent[]> } {
  const events: ProcessEvent[] = [];
  let resolve!: (events: ProcessEvent[]) => void;
  const closed = new Promise<ProcessEvent[]>((done) => {
    resolve = done;
  });
  return {
    onEvent: (event) => {
      events.push(event);
      if (event.kind === 'closed') resolve(events);
    },
    closed,
  };
}
