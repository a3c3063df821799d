import { DEFAULT_FLOW_WINDOW_BYTES } from '@tether/exec-protocol';
import { createReaper, ProcessError, ProcessTable, type Reaper } from '@tether/local-process';
import type {
  ProcessBackend,
  ProcessEvent,
  ReadAnswer,
  SignalName,
  StartedProcess,
  StartOptions,
  WriteStatus,
} from './backend.js';
import { TetherError } from './errors.js';

/**
 * Processes on this machine, through the same engine the executor uses (process groups, seq log,
 * writeId dedupe, and a reaper so children die with this process).
 */
export class LocalBackend implements ProcessBackend {
  private readonly listeners = new Set<(event: ProcessEvent) => void>();
  private readonly closedListeners = new Set<(error: Error) => void>();
  private readonly reaper: Reaper;
  private readonly table: ProcessTable;
  /** Local children are flow-controlled like remote ones: a slow consumer blocks the child, nothing is dropped. */
  readonly flowWindowBytes = DEFAULT_FLOW_WINDOW_BYTES;

  constructor() {
    this.reaper = createReaper();
    this.table = new ProcessTable({
      onEvent: (event) => {
        for (const listener of this.listeners) listener(event as ProcessEvent);
      },
      reaper: this.reaper,
    });
  }

  async start(options: StartOptions): Promise<StartedProcess> {
    if (options.sandbox || options.network) {
      throw new TetherError(
        'invalid_argument',
        `${options.sandbox ? 'a sandbox' : 'a confined network'} needs an executor (Environment.connect…), not a local environment`,
      );
    }
    const env = options.inheritEnv ? { ...definedOnly(process.env), ...options.env } : options.env;
    const flowWindowBytes = options.flowWindowBytes ?? null;
    await wrap(() =>
      this.table.start({
        processId: options.processId,
        argv: options.argv,
        cwd: options.cwd,
        env,
        tty: options.tty,
        pipeStdin: options.pipeStdin,
        arg0: options.arg0 ?? null,
        size: options.size ?? null,
        flowWindowBytes,
      }),
    );
    return { flowWindowBytes };
  }

  ack(processId: string, seq: number): void {
    this.table.ack(processId, seq);
  }

  async read(
    processId: string,
    afterSeq: number,
    options: { maxBytes?: number; waitMs?: number } = {},
  ): Promise<ReadAnswer> {
    const answer = await wrap(() =>
      this.table.read(processId, { afterSeq, maxBytes: options.maxBytes ?? null, waitMs: options.waitMs ?? null }),
    );
    // Gaps (evicted output, or the exit's own seq) are judged by the handle, as for a remote executor.
    return {
      chunks: answer.chunks,
      nextSeq: answer.nextSeq,
      exited: answer.exited,
      exitCode: answer.exitCode,
      closed: answer.closed,
      failure: null,
    };
  }

  write(processId: string, chunk: Buffer, writeId: string): Promise<WriteStatus> {
    return wrap(() => this.table.write(processId, chunk, writeId));
  }

  async closeStdin(processId: string): Promise<WriteStatus> {
    return wrap(() => this.table.closeStdin(processId));
  }

  async signal(processId: string, signal: SignalName): Promise<void> {
    await wrap(() => this.table.signal(processId, signal));
  }

  async terminate(processId: string): Promise<void> {
    await wrap(() => this.table.terminate(processId));
  }

  async resize(processId: string, rows: number, cols: number): Promise<void> {
    await wrap(() => this.table.resize(processId, rows, cols));
  }

  subscribe(listener: (event: ProcessEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  onReconnect(): () => void {
    return () => undefined; // a local table never disconnects
  }

  onClosed(listener: (error: Error) => void): () => void {
    this.closedListeners.add(listener);
    return () => this.closedListeners.delete(listener);
  }

  /** Kills every process and waits for them. */
  async close(): Promise<void> {
    await this.table.shutdown();
    await this.reaper.close();
    const error = new TetherError('closed', 'the local environment was closed');
    for (const listener of [...this.closedListeners]) listener(error);
    this.closedListeners.clear();
  }
}

function definedOnly(env: NodeJS.ProcessEnv): Record<string, string> {
  const result: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) if (value !== undefined) result[name] = value;
  return result;
}

async function wrap<T>(action: () => T | Promise<T>): Promise<T> {
  try {
    return await action();
  } catch (err) {
    if (err instanceof ProcessError) {
      const code = err.code === 'unknown_process' ? 'not_found' : 'invalid_argument';
      throw new TetherError(code, err.message, { cause: err });
    }
    throw err;
  }
}
