import type { BufferPool } from '@tether/bytes';
import type { Allocate, NetworkProxyLaunch } from '@tether/exec-protocol';
import type { ChildLedger } from '@tether/local-process';
import type { Sandboxer } from '@tether/sandbox';
import type { CredentialMasking } from '../credential-masking.js';
import type { FileHandleTable } from '../fs/file-handles.js';
import type { HttpRequests } from '../http/http-requests.js';
import type { PolicyDecision } from '../network-proxy.js';
import type { Recordings } from '../recordings.js';
import type { Session } from '../session-registry.js';
import type { ShellSnapshotScope } from '../shell-snapshot.js';

export interface RequestContext {
  /** The session this connection is attached to; throws the takeover error if it was resumed elsewhere. */
  session(): Session;
  /** Aborted when the connection ends or loses its session. */
  signal: AbortSignal;
  /** Open files of this connection (closed when it ends). */
  files: FileHandleTable;
  /** Streamed `http/request` bodies of this connection (aborted when it ends). */
  http: HttpRequests;
  /** Buffers of this connection for `fs/readBlock` reads and decoded `fs/writeBlock` chunks. */
  blocks: BufferPool;
  /** Whether answers may carry binary attachments (`binaryBlocks`; not over stdio). */
  carriesAttachments: boolean;
  /** Largest file `fs/readFile` returns. */
  maxReadFileBytes: number;
  /** The executor's sandbox (the same for every connection). */
  sandbox: Sandboxer;
  /** The login-shell snapshots this connection's principal may use (`process/start {shellSnapshot}`). */
  shellSnapshots: ShellSnapshotScope;
  /**
   * A process's managed proxy for the executor's logs and metrics: `started` once it runs (answers its close),
   * `decided` per decision, logged with the start's audit metadata.
   */
  networkAudit: NetworkAudit;
  /** Credential masking's CA and dummies (`proxy.credentialMasking`), the executor's. */
  credentialMasking: CredentialMasking;
  /** The executor's session recordings (`--record-dir`), or null. */
  recordings: Recordings | null;
  /** Who this connection acts for, as recordings name who sent input (`key:harness:ID`, `local`). */
  principal: string;
  /** Sends a notification to this connection (dropped once it has closed). */
  notify(method: string, params: unknown): void;
  /** The executor's orphan adopter, where a sandboxed fs helper is noted as its own child; null: none. */
  adopter: ChildLedger | null;
}

export interface NetworkAudit {
  started(): () => void;
  decided(processId: string, launch: NetworkProxyLaunch, decision: PolicyDecision): void;
}

export type Handler = (params: unknown, ctx: RequestContext) => Promise<unknown> | unknown;
export type HandlerTable = Record<string, Handler>;

/**
 * A result the handler already serialized (the whole response, given its request id and where to put the
 * bytes): the dispatcher sends these bytes as they are. Used for large base64 answers, which
 * JSON.stringify would rescan.
 */
export class EncodedResult {
  constructor(readonly encode: (id: string | number, allocate: Allocate) => Buffer) {}
}
