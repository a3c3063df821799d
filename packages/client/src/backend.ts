/** What a process handle needs from wherever its process runs: a local table or a remote executor. */
import type { OutputStreamName, SignalName, WriteStatus } from '@tether/exec-protocol';
import type { NetworkDecision, NetworkPolicy } from './network.js';

export type { SignalName, WriteStatus };
export type OutputStream = OutputStreamName;

/** One event of a process, numbered by the executor's per-process seq (output, exit and close share it). */
export type ProcessEvent =
  | {
      kind: 'output';
      processId: string;
      seq: number;
      stream: OutputStream;
      chunk: Buffer;
      /**
       * Present when `chunk` sits in a pooled buffer (raw output over an encrypted connection): the event's
       * consumer may call it once it no longer reads `chunk` (e.g. in the write callback of the stdout it
       * copied the chunk to), and the memory serves a later message instead of becoming garbage. Never call
       * it while anything may still read `chunk`; not calling it is always safe.
       */
      release?: () => void;
    }
  | { kind: 'exited'; processId: string; seq: number; exitCode: number }
  | { kind: 'closed'; processId: string; seq: number };

export interface StartOptions {
  processId: string;
  argv: string[];
  /** Native absolute path. */
  cwd: string;
  /** Exact environment when `inherit` is false; else added over the executor's own. */
  env: Record<string, string>;
  inheritEnv: boolean;
  tty: boolean;
  pipeStdin: boolean;
  arg0?: string | null;
  size?: { rows: number; cols: number } | null;
  /** Ask for flow control with this window (only where the backend offers it: `flowWindowBytes`). */
  flowWindowBytes?: number | null;
  /** The wire `sandbox` (sandbox.ts's sandboxProfile), or none. */
  sandbox?: Record<string, unknown> | null;
  /** Confine the network to named hosts (network.ts; the executor must offer `networkProxyLaunch`). */
  network?: NetworkPolicy | null;
}

/** What a started process was granted. */
export interface StartedProcess {
  /** The flow window granted, or null: the process runs with Codex's retention semantics. */
  flowWindowBytes: number | null;
}

export interface ReadChunk {
  seq: number;
  stream: OutputStream;
  chunk: Buffer;
}

export interface ReadAnswer {
  chunks: ReadChunk[];
  nextSeq: number;
  exited: boolean;
  exitCode: number | null;
  closed: boolean;
  /** Set when retention no longer covers what was asked for. */
  failure: string | null;
}

export interface ProcessBackend {
  /**
   * The flow window this backend asks for each process it starts (credit-based flow control: the child
   * blocks instead of output being dropped), or null where the executor does not offer it.
   */
  readonly flowWindowBytes: number | null;
  start(options: StartOptions): Promise<StartedProcess>;
  /** Flow control: every event of `processId` up to `seq` has been consumed (cumulative; repeats are harmless). */
  ack(processId: string, seq: number): void;
  read(processId: string, afterSeq: number, options?: { maxBytes?: number; waitMs?: number }): Promise<ReadAnswer>;
  write(processId: string, chunk: Buffer, writeId: string): Promise<WriteStatus>;
  closeStdin(processId: string): Promise<WriteStatus>;
  signal(processId: string, signal: SignalName): Promise<void>;
  terminate(processId: string): Promise<void>;
  resize(processId: string, rows: number, cols: number): Promise<void>;
  /** Pushed events (not necessarily complete: handles fill gaps with `read`). Returns an unsubscribe. */
  subscribe(listener: (event: ProcessEvent) => void): () => void;
  /** Called after the backend reconnected: pushed events may have been missed. */
  onReconnect(listener: () => void): () => void;
  /** Called once when the backend is gone for good (closed, or its connection lost and not resumed). */
  onClosed(listener: (error: Error) => void): () => void;
  /** The decisions of `processId`'s managed network proxy, where the backend has one. Returns an unsubscribe. */
  onNetworkDecision?(processId: string, listener: (decision: NetworkDecision) => void): () => void;
}
