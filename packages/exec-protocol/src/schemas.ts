/**
 * Params, results and notifications of the exec-server protocol as runtime schemas; the TypeScript
 * types are derived from them (`Static<>`), never written twice. Unknown members are allowed, as serde
 * ignores them. Field names are camelCase, byte payloads are padded standard base64.
 */
import { type Static, Type } from '@sinclair/typebox';
import { Literals, Nullable, U64 } from './schema-parts.js';

// §2.1 initialize ------------------------------------------------------------------------------
export const InitializeParams = Type.Object({
  clientName: Type.String(),
  resumeSessionId: Type.Optional(Nullable(Type.String())),
});
export type InitializeParams = Static<typeof InitializeParams>;

export const ShellInfo = Type.Object({ name: Type.String(), path: Type.String() });

/** Extensions this executor serves beyond Codex; Codex clients ignore the object. */
export const Capabilities = Type.Record(Type.String(), Type.Boolean());

export const EnvironmentInfo = Type.Object({
  shell: ShellInfo,
  cwd: Type.Optional(Type.String()),
  executorVersion: Type.Optional(Type.String()),
  userHomeDir: Type.Optional(Type.String()),
  platformOs: Type.Optional(Type.String()),
  tempDir: Type.Optional(Type.String()),
  /** Codex 0.171.0: `sha256:` + 64 hex digits, constant for one build of the executor. */
  providerId: Type.Optional(Type.String()),
  /** Codex 0.171.0: directories (file URIs) the client prepends to PATH for commands it runs there. */
  prependPathDirs: Type.Optional(Type.Array(Type.String())),
  /** Codex 0.171.0: `[$TMPDIR]` when the executor has TMPDIR set, else empty. */
  temporaryDirectories: Type.Optional(Type.Array(Type.String())),
  capabilities: Type.Optional(Capabilities),
});
export type EnvironmentInfo = Static<typeof EnvironmentInfo>;

export const InitializeResult = Type.Object({
  sessionId: Type.String(),
  environmentInfo: Type.Optional(EnvironmentInfo),
});
export type InitializeResult = Static<typeof InitializeResult>;

// §3.1 process/start ----------------------------------------------------------------------------
export const EnvPolicy = Type.Object({
  inherit: Literals('all', 'core', 'none'),
  ignoreDefaultExcludes: Type.Boolean(),
  exclude: Type.Array(Type.String()),
  set: Type.Record(Type.String(), Type.String()),
  includeOnly: Type.Array(Type.String()),
});
export type EnvPolicy = Static<typeof EnvPolicy>;

export const PtySize = Type.Object({
  rows: Type.Integer({ minimum: 1, maximum: 1000 }),
  cols: Type.Integer({ minimum: 1, maximum: 1000 }),
});
export type PtySize = Static<typeof PtySize>;

/** Capability `shellSnapshotV2`: the scope whose login-shell snapshot a `[shell.path, "-lc", …]` start restores. */
export const ShellSnapshot = Type.Object({
  scopeId: Type.String(),
  shell: Type.Object({ name: Type.String(), path: Type.String() }),
});
export type ShellSnapshot = Static<typeof ShellSnapshot>;

/** Codex's `RemoteNetworkProxyConfig` (capability `networkProxyLaunch`): the managed proxy a start runs behind. */
export const NetworkProxyConfig = Type.Object({
  enabled: Type.Boolean(),
  enableSocks5: Type.Boolean(),
  enableSocks5Udp: Type.Boolean(),
  allowUpstreamProxy: Type.Boolean(),
  dangerouslyAllowAllUnixSockets: Type.Boolean(),
  mode: Literals('full', 'limited'),
  /** Domain pattern (exact, `*.d` subdomains, `**.d` apex and subdomains) to its permission. */
  domains: Nullable(Type.Record(Type.String(), Literals('none', 'allow', 'deny'))),
  unixSockets: Nullable(Type.Record(Type.String(), Literals('allow', 'deny'))),
  allowLocalBinding: Type.Boolean(),
  /**
   * Capability `networkProxyReviewDomains`: patterns (as `domains`') whose hosts are put to the client by
   * `network/policyRequest` even when the allow list names them; only with `policyDecisionTimeoutMs` set.
   */
  reviewDomains: Type.Optional(Type.Array(Type.String())),
  /** Codex's transparent TCP (capability `networkProxyTransparentTcp`, which Tether does not advertise). */
  transparentTcp: Type.Optional(Type.Boolean()),
  /**
   * Capability `credentialMasking`: a `bash -c` command sees dummies for the credentials the executor knows, and the
   * proxy swaps the real values back in TLS it intercepts to their bound destinations.
   */
  credentialMasking: Type.Optional(Type.Boolean()),
  /**
   * Capability `credentialMaskingCustomProviders`: name -> Codex's `CredentialProviderConfig` (`env`, `patterns`,
   * `url_prefixes`, `url_prefix_from_env`, `auth`, `header`, `prefix`), checked by the executor with serde's words.
   */
  credentialProviders: Type.Optional(Type.Unknown()),
});
export type NetworkProxyConfig = Static<typeof NetworkProxyConfig>;

/** Codex's `RemoteNetworkProxyLaunchConfig`: the proxy plus what its decisions are attributed to. */
export const NetworkProxyLaunch = Type.Object({
  proxy: NetworkProxyConfig,
  auditMetadata: Type.Optional(Type.Unknown()),
  environmentId: Type.Optional(Nullable(Type.String())),
  executionId: Type.Optional(Nullable(Type.String())),
  /**
   * Capability `networkProxyReviewDomains`: set (nonzero), the client has opted in to `network/policyRequest`
   * (a request from the server) for each host the policy would not allow, and answers within this many ms
   * (plus Codex's 5 s grace). Unset: no request is ever sent.
   */
  policyDecisionTimeoutMs: Type.Optional(Nullable(U64)),
});
export type NetworkProxyLaunch = Static<typeof NetworkProxyLaunch>;

/** `network/policyDecision`: one decision of a process's managed proxy, to the connection that started it. */
export const NetworkPolicyDecisionNotification = Type.Object({
  processId: Type.String(),
  timestamp: Type.String(),
  scope: Literals('domain', 'non_domain'),
  decision: Literals('allow', 'deny'),
  source: Literals('baseline_policy', 'mode_guard', 'decider'),
  reason: Type.String(),
  protocol: Literals('http', 'https_connect', 'socks5_tcp'),
  host: Type.String(),
  port: Type.Integer(),
  /** Absent for `socks5_tcp` (Codex sends none). */
  method: Type.Optional(Type.String()),
  client: Type.String(),
  policyOverride: Type.Boolean(),
});
export type NetworkPolicyDecisionNotification = Static<typeof NetworkPolicyDecisionNotification>;

/** `network/policyRequest` (server → client, capability `networkProxyReviewDomains`): may this host be reached? */
export const NetworkPolicyRequestParams = Type.Object({
  processId: Type.String(),
  // `socks5_tcp`: a SOCKS5 CONNECT put to the client (ours; what Codex sends for one was not probed).
  request: Type.Object({
    protocol: Literals('http', 'https_connect', 'socks5_tcp'),
    host: Type.String(),
    port: Type.Integer(),
  }),
});
export type NetworkPolicyRequestParams = Static<typeof NetworkPolicyRequestParams>;

/** The client's answer to `network/policyRequest`: `{decision: {type: "allow"} | {type: "deny", reason?}}`. */
export const NetworkPolicyRequestResult = Type.Object({
  decision: Type.Union([
    Type.Object({ type: Type.Literal('allow') }),
    Type.Object({ type: Type.Literal('deny'), reason: Type.Optional(Nullable(Type.String())) }),
  ]),
});
export type NetworkPolicyRequestResult = Static<typeof NetworkPolicyRequestResult>;

export const ProcessStartParams = Type.Object({
  processId: Type.String(),
  argv: Type.Array(Type.String()),
  cwd: Type.String(),
  env: Type.Record(Type.String(), Type.String()),
  tty: Type.Boolean(),
  pipeStdin: Type.Optional(Type.Boolean()),
  arg0: Type.Optional(Nullable(Type.String())),
  envPolicy: Type.Optional(Nullable(EnvPolicy)),
  sandbox: Type.Optional(Type.Unknown()),
  enforceManagedNetwork: Type.Optional(Type.Boolean()),
  managedNetwork: Type.Optional(Type.Unknown()),
  networkProxy: Type.Optional(Nullable(NetworkProxyLaunch)),
  shellSnapshot: Type.Optional(Nullable(ShellSnapshot)),
  metadata: Type.Optional(Type.Unknown()),
  /** Tether extension: PTY size at start. */
  size: Type.Optional(Nullable(PtySize)),
  /** Tether extension (capability `flowControl`): credit-based flow control of this process's output. */
  flowControl: Type.Optional(Nullable(Type.Object({ windowBytes: U64 }))),
  /**
   * Tether extension (capability `binaryOutput`, only where the transport carries binary attachments):
   * this process's `process/output` notifications carry the raw bytes as an attachment instead of `chunk`.
   */
  binaryOutput: Type.Optional(Nullable(Type.Boolean())),
  /** Tether extension (capability `processDetach`, see detached.ts): the process belongs to the executor. */
  detached: Type.Optional(Nullable(Type.Boolean())),
});
export type ProcessStartParams = Static<typeof ProcessStartParams>;

export const ProcessStartResult = Type.Object({
  processId: Type.String(),
  sandboxType: Type.Optional(Type.String()),
  /** The window granted (the request's, clamped), when the start asked for flow control. */
  flowControl: Type.Optional(Type.Object({ windowBytes: U64 })),
  /** Set when the start asked for a detached process (capability `processDetach`). */
  detached: Type.Optional(Type.Boolean()),
});
export type ProcessStartResult = Static<typeof ProcessStartResult>;

// §3.2 process/read -----------------------------------------------------------------------------
export const OutputStreamName = Literals('stdout', 'stderr', 'pty');
export type OutputStreamName = Static<typeof OutputStreamName>;

export const ProcessReadParams = Type.Object({
  processId: Type.String(),
  afterSeq: Type.Optional(Nullable(U64)),
  maxBytes: Type.Optional(Nullable(U64)),
  waitMs: Type.Optional(Nullable(U64)),
});
export type ProcessReadParams = Static<typeof ProcessReadParams>;

export const ProcessOutputChunk = Type.Object({ seq: U64, stream: OutputStreamName, chunk: Type.String() });
export type ProcessOutputChunk = Static<typeof ProcessOutputChunk>;

export const ProcessReadResult = Type.Object({
  chunks: Type.Array(ProcessOutputChunk),
  nextSeq: U64,
  exited: Type.Boolean(),
  exitCode: Nullable(Type.Integer()),
  closed: Type.Boolean(),
  failure: Nullable(Type.String()),
  sandboxDenied: Type.Optional(Type.Boolean()),
});
export type ProcessReadResult = Static<typeof ProcessReadResult>;

// §3.3 process/write ----------------------------------------------------------------------------
export const ProcessWriteParams = Type.Object({
  processId: Type.String(),
  chunk: Type.String(),
  /** Idempotency key; required, as the Codex binary requires it. */
  writeId: Type.String(),
});
export type ProcessWriteParams = Static<typeof ProcessWriteParams>;

/** `process/write` whose bytes are its binary attachment (Tether, capability `binaryInput`): no `chunk`. */
export const ProcessWriteBinaryParams = Type.Object({ processId: Type.String(), writeId: Type.String() });
export type ProcessWriteBinaryParams = Static<typeof ProcessWriteBinaryParams>;

export const WriteStatus = Literals('accepted', 'unknownProcess', 'stdinClosed', 'starting');
export type WriteStatus = Static<typeof WriteStatus>;
export const ProcessWriteResult = Type.Object({ status: WriteStatus });
export type ProcessWriteResult = Static<typeof ProcessWriteResult>;

// §3.4–3.5 signal and terminate (signal values beyond `interrupt` are Tether extensions) ---------
export const SignalName = Literals('interrupt', 'terminate', 'kill', 'hangup', 'quit', 'user1', 'user2');
export type SignalName = Static<typeof SignalName>;

export const ProcessSignalParams = Type.Object({ processId: Type.String(), signal: SignalName });
export type ProcessSignalParams = Static<typeof ProcessSignalParams>;

export const ProcessIdParams = Type.Object({ processId: Type.String() });
export type ProcessIdParams = Static<typeof ProcessIdParams>;

/** `process/ack` (client → server notification, capability `flowControl`): every event up to `seq` is consumed. */
export const ProcessAckParams = Type.Object({ processId: Type.String(), seq: U64 });
export type ProcessAckParams = Static<typeof ProcessAckParams>;

export const ProcessTerminateResult = Type.Object({ running: Type.Boolean() });
export type ProcessTerminateResult = Static<typeof ProcessTerminateResult>;

// Tether extensions -------------------------------------------------------------------------------
export const ProcessResizeParams = Type.Object({
  processId: Type.String(),
  rows: PtySize.properties.rows,
  cols: PtySize.properties.cols,
});
export type ProcessResizeParams = Static<typeof ProcessResizeParams>;

export const ProcessCloseStdinResult = Type.Object({ status: WriteStatus });

export const ProcessListEntry = Type.Object({
  processId: Type.String(),
  state: Literals('starting', 'running', 'exited', 'closed'),
  pid: Nullable(Type.Integer()),
  argv: Type.Array(Type.String()),
  tty: Type.Boolean(),
  exitCode: Nullable(Type.Integer()),
  nextSeq: U64,
  startedAtMs: Type.Integer(),
  /** Capability `processDetach`: the process belongs to the executor, not to this session. */
  detached: Type.Optional(Type.Boolean()),
  /** Capability `processShare`, in `process/attach`'s answer: what this session may do (`view`: read only). */
  access: Type.Optional(Literals('view', 'control')),
  /** Capability `processShare`, to whoever may share it: its live shares (detached.ts). */
  shares: Type.Optional(
    Type.Array(
      Type.Object({
        shareId: Type.String(),
        access: Literals('view', 'control'),
        expiresAtMs: Type.Integer(),
        /** Sessions following the process by this share now. */
        attached: Type.Integer({ minimum: 0 }),
      }),
    ),
  ),
});
export type ProcessListEntry = Static<typeof ProcessListEntry>;
export const ProcessListResult = Type.Object({ processes: Type.Array(ProcessListEntry) });
export type ProcessListResult = Static<typeof ProcessListResult>;

// §3.7 notifications ------------------------------------------------------------------------------
export const ProcessOutputNotification = Type.Object({
  processId: Type.String(),
  seq: U64,
  stream: OutputStreamName,
  chunk: Type.String(),
});
export type ProcessOutputNotification = Static<typeof ProcessOutputNotification>;

export const ProcessExitedNotification = Type.Object({
  processId: Type.String(),
  seq: U64,
  exitCode: Type.Integer(),
  sandboxDenied: Type.Optional(Nullable(Type.Boolean())),
});
export type ProcessExitedNotification = Static<typeof ProcessExitedNotification>;

export const ProcessClosedNotification = Type.Object({ processId: Type.String(), seq: U64 });
export type ProcessClosedNotification = Static<typeof ProcessClosedNotification>;

export const EnvironmentStatusResult = Type.Object({ status: Type.String() });

/** `environmentConfig/read` (Codex 0.171.0; CODEX-FINDINGS.md §18): which TOML key paths to read. */
export const EnvironmentConfigReadParams = Type.Object({
  cwd: Type.String(),
  configPaths: Type.Array(Type.Array(Type.String())),
  requirementsPaths: Type.Array(Type.Array(Type.String())),
});
export type EnvironmentConfigReadParams = Static<typeof EnvironmentConfigReadParams>;
export const EnvironmentConfigLayer = Type.Object({
  /** `system (/etc/codex/config.toml)`, `user (…)`, `project (…)`; a requirements file's path. */
  source: Type.String(),
  baseDir: Type.String(),
  /** The layer cut down to the requested key paths. */
  toml: Type.String(),
});
export type EnvironmentConfigLayer = Static<typeof EnvironmentConfigLayer>;
export const EnvironmentConfigLayerStack = Type.Object({
  layers: Type.Array(EnvironmentConfigLayer),
  /** Where a cloud layer would go: after the system layers. */
  cloudInsertionIndex: U64,
});
export type EnvironmentConfigLayerStack = Static<typeof EnvironmentConfigLayerStack>;
export const EnvironmentConfigReadResult = Type.Object({
  userHomeDir: Nullable(Type.String()),
  codexHomeDir: Type.String(),
  hostname: Nullable(Type.String()),
  config: EnvironmentConfigLayerStack,
  requirements: EnvironmentConfigLayerStack,
});
export type EnvironmentConfigReadResult = Static<typeof EnvironmentConfigReadResult>;
