import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { pathToFileURL } from 'node:url';
import type { RpcNotification, TestClient } from './client.js';

/** `file:` URI for an absolute native path (percent-encoded, no trailing slash added). */
export function fileUri(path: string): string {
  return pathToFileURL(path).href;
}

/** Standard base64 (with padding) of a string (UTF-8) or bytes. */
export function b64(data: string | Uint8Array): string {
  return Buffer.from(data).toString('base64');
}

/** Decodes standard base64 into bytes. */
export function decodeB64(data: string): Buffer {
  return Buffer.from(data, 'base64');
}

/** Decodes standard base64 into a UTF-8 string. */
export function decodeB64Text(data: string): string {
  return decodeB64(data).toString('utf8');
}

export type OutputStream = 'stdout' | 'stderr' | 'pty';

export interface ReadChunk {
  seq: number;
  stream: OutputStream;
  chunk: string;
}

export interface ReadResult {
  chunks: ReadChunk[];
  nextSeq: number;
  exited: boolean;
  exitCode: number | null;
  closed: boolean;
  failure: string | null;
  sandboxDenied?: boolean;
}

export interface ReadParams {
  processId: string;
  afterSeq?: number | null;
  maxBytes?: number | null;
  waitMs?: number | null;
}

/** `process/read`, throwing on an error response. */
export function readProcess(client: TestClient, params: ReadParams): Promise<ReadResult> {
  return client.call<ReadResult>('process/read', params);
}

export interface CollectedOutput {
  /** stdout + pty text, in seq order (what the seed calls `output`). */
  output: string;
  stdout: string;
  stderr: string;
  exitCode: number | null;
  closed: boolean;
  chunks: ReadChunk[];
}

export interface CollectOptions {
  /** Starting cursor (exclusive); default none (everything). */
  afterSeq?: number | null;
  /** Overall bound. Default 15 s. */
  timeoutMs?: number;
  /** Long-poll per read while nothing changed. Default 1000 ms. */
  waitMs?: number;
}

function appendChunk(target: CollectedOutput, chunk: ReadChunk): void {
  const text = decodeB64Text(chunk.chunk);
  if (chunk.stream === 'stderr') target.stderr += text;
  else {
    target.stdout += text;
    target.output += text;
  }
  target.chunks.push(chunk);
}

/**
 * The seed's `collect_process_output_from_reads`: read with `afterSeq`, append chunks, then
 * `afterSeq = max(last chunk seq, nextSeq - 1)`; stop at `closed`. Reads first with `waitMs:0` and
 * long-polls only when nothing was returned (the seed waits on a wake channel instead).
 */
export async function collectUntilClosed(
  client: TestClient,
  processId: string,
  options: CollectOptions = {},
): Promise<CollectedOutput> {
  const deadline = Date.now() + (options.timeoutMs ?? 15_000);
  const waitMs = options.waitMs ?? 1_000;
  const collected: CollectedOutput = { output: '', stdout: '', stderr: '', exitCode: null, closed: false, chunks: [] };
  let afterSeq: number | null = options.afterSeq ?? null;
  let wait = 0;
  for (;;) {
    if (Date.now() > deadline) {
      throw new Error(
        `process ${processId} did not reach closed in time; afterSeq=${afterSeq}; output so far ${JSON.stringify(collected.output)}`,
      );
    }
    const params: ReadParams = { processId, waitMs: wait };
    if (afterSeq !== null) params.afterSeq = afterSeq;
    const response = await readProcess(client, params);
    if (response.failure) throw new Error(`process failed before closed state: ${response.failure}`);
    for (const chunk of response.chunks) {
      appendChunk(collected, chunk);
      afterSeq = chunk.seq;
    }
    if (response.exited) collected.exitCode = response.exitCode;
    if (response.closed) {
      collected.closed = true;
      return collected;
    }
    const cursor = response.nextSeq - 1;
    afterSeq = Math.max(afterSeq ?? 0, cursor);
    wait = response.chunks.length === 0 ? waitMs : 0;
  }
}

/** Reads until the accumulated stdout/pty text satisfies `predicate` (or the process closes → throws). */
export async function readUntilOutput(
  client: TestClient,
  processId: string,
  predicate: (output: string) => boolean,
  options: CollectOptions = {},
): Promise<CollectedOutput & { afterSeq: number }> {
  const deadline = Date.now() + (options.timeoutMs ?? 15_000);
  const collected: CollectedOutput = { output: '', stdout: '', stderr: '', exitCode: null, closed: false, chunks: [] };
  let afterSeq = options.afterSeq ?? 0;
  for (;;) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for output of ${processId}; got ${JSON.stringify(collected.output)}`);
    }
    const response = await readProcess(client, { processId, afterSeq, waitMs: options.waitMs ?? 500 });
    for (const chunk of response.chunks) {
      appendChunk(collected, chunk);
      afterSeq = chunk.seq;
    }
    if (response.exited) collected.exitCode = response.exitCode;
    if (predicate(collected.output)) return { ...collected, closed: response.closed, afterSeq };
    if (response.closed) {
      throw new Error(
        `process ${processId} closed before the expected output; got ${JSON.stringify(collected.output)}`,
      );
    }
    afterSeq = Math.max(afterSeq, response.nextSeq - 1);
  }
}

export type ProcessEvent =
  | { kind: 'output'; seq: number; stream: OutputStream; text: string }
  | { kind: 'exited'; seq: number; exitCode: number }
  | { kind: 'closed'; seq: number };

type ProcessNotificationParams = {
  processId: string;
  seq: number;
  stream?: OutputStream;
  chunk?: string;
  exitCode?: number;
};

/** Converts a `process/output|exited|closed` notification into a `ProcessEvent` (else undefined). */
export function toProcessEvent(notification: RpcNotification): ProcessEvent | undefined {
  const params = notification.params as unknown as ProcessNotificationParams;
  switch (notification.method) {
    case 'process/output':
      return { kind: 'output', seq: params.seq, stream: params.stream!, text: decodeB64Text(params.chunk ?? '') };
    case 'process/exited':
      return { kind: 'exited', seq: params.seq, exitCode: params.exitCode! };
    case 'process/closed':
      return { kind: 'closed', seq: params.seq };
    default:
      return undefined;
  }
}

export interface CollectEventsOptions {
  timeoutMs?: number;
  /** Only events with seq > afterSeq. */
  afterSeq?: number;
}

/**
 * Collects the pushed `process/*` notifications of one process (already received or arriving later)
 * until `process/closed` arrived **and** every seq up to the close seq is present, then returns the
 * events ordered by seq (notifications may arrive out of order).
 */
export async function collectEvents(
  client: TestClient,
  processId: string,
  options: CollectEventsOptions = {},
): Promise<ProcessEvent[]> {
  const afterSeq = options.afterSeq ?? 0;
  const timeoutMs = options.timeoutMs ?? 15_000;
  const deadline = Date.now() + timeoutMs;
  const snapshot = (): ProcessEvent[] => {
    const events = new Map<number, ProcessEvent>();
    for (const n of client.notifications) {
      const params = n.params as { processId?: unknown; seq?: unknown };
      if (params?.processId !== processId || typeof params.seq !== 'number' || params.seq <= afterSeq) continue;
      const event = toProcessEvent(n);
      if (event) events.set(event.seq, event);
    }
    return [...events.values()].sort((a, b) => a.seq - b.seq);
  };
  const complete = (events: ProcessEvent[]): boolean => {
    const close = events.find((e) => e.kind === 'closed');
    if (!close) return false;
    return events.filter((e) => e.seq <= close.seq).length === close.seq - afterSeq;
  };
  for (;;) {
    const events = snapshot();
    if (complete(events)) return events;
    const remaining = deadline - Date.now();
    if (remaining <= 0) {
      throw new Error(`timed out collecting events of ${processId}; have ${JSON.stringify(events)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Joins the text of output events (stdout and pty) in seq order. */
export function eventsOutput(events: ProcessEvent[], streams: OutputStream[] = ['stdout', 'pty']): string {
  return events
    .filter((e): e is Extract<ProcessEvent, { kind: 'output' }> => e.kind === 'output' && streams.includes(e.stream))
    .map((e) => e.text)
    .join('');
}

/** Polls `check` every `intervalMs` until it returns true; throws after `timeoutMs`. */
export async function waitUntil(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
  intervalMs = 20,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * A free 127.0.0.1 port for a listener that binds it later and is named before then (a cluster's relay nodes,
 * which every registry is configured with): chosen below the kernel's ephemeral range, so that no outgoing
 * connection is given it as its local port in between (`freePort`'s ports come from that range: a spare relay
 * once failed to start with EADDRINUSE). Falls back to `freePort` where the range leaves no room below it.
 */
export async function plannedPort(): Promise<number> {
  let low = 32768;
  try {
    low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || low;
  } catch {
    // Not Linux: the usual default.
  }
  const floor = 10_000;
  if (low - floor < 1000) return freePort();
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = floor + Math.floor(Math.random() * (low - floor));
    if (await portFree(port)) return port;
  }
  return freePort();
}

/** Whether 127.0.0.1:`port` can be listened on now. */
export function portFree(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A port on 127.0.0.1 that was free a moment ago, for a program that must be told its port up front (one
 * that takes port 0 and prints what it bound is better). Another process may take it meanwhile.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}
