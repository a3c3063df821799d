/** Method and notification names of the exec-server protocol (spec/exec-protocol.md §3). */
export const Method = {
  initialize: 'initialize',
  initialized: 'initialized',
  processStart: 'process/start',
  processRead: 'process/read',
  processWrite: 'process/write',
  processSignal: 'process/signal',
  processTerminate: 'process/terminate',
  environmentInfo: 'environment/info',
  environmentStatus: 'environment/status',
  fsReadFile: 'fs/readFile',
  fsWriteFile: 'fs/writeFile',
  fsCreateDirectory: 'fs/createDirectory',
  fsGetMetadata: 'fs/getMetadata',
  fsCanonicalize: 'fs/canonicalize',
  fsReadDirectory: 'fs/readDirectory',
  fsRemove: 'fs/remove',
  fsCopy: 'fs/copy',
  fsOpen: 'fs/open',
  fsReadBlock: 'fs/readBlock',
  fsWriteBlock: 'fs/writeBlock',
  fsClose: 'fs/close',
  fsWalk: 'fs/walk',
  /** Codex's (capability `fsWatchMissing`): one watch per connection for paths to appear (fs.ts). */
  fsWatchMissing: 'fs/watchMissing',
  httpRequest: 'http/request',
  // Tether extensions, advertised in environmentInfo.capabilities.
  processResize: 'process/resize',
  processCloseStdin: 'process/closeStdin',
  processList: 'process/list',
  /** Capability `processDetach` (detached.ts): follow a detached process's notifications. */
  processAttach: 'process/attach',
  /** Capability `processShare` (detached.ts): share a detached process with another principal, or stop. */
  processShare: 'process/share',
  processUnshare: 'process/unshare',
  /** Capability `tcpForward` (tcp.ts): open a forwarded TCP connection. */
  tcpConnect: 'tcp/connect',
  /** Codex's (capability `environmentConfigRead`): the Codex config layers that apply on this machine. */
  environmentConfigRead: 'environmentConfig/read',
  /** Codex's (capability `capabilityDiscoveryV2`): the skills installed on this machine (capabilities.ts). */
  capabilitiesDiscoverV2: 'capabilities/discoverV2',
  /** Codex's: the skill and plugin files under the roots a client names, unparsed (capabilities.ts). */
  capabilityRootsDiscoverV1: 'capabilityRoots/discoverV1',
} as const;
export type MethodName = (typeof Method)[keyof typeof Method];

/** Requests the server sends to the client (only to a client that opted in to each). */
export const ServerRequest = {
  /** Codex's (capability `networkProxyReviewDomains`): may a managed-network process reach this host? */
  networkPolicyRequest: 'network/policyRequest',
} as const;

export const Notification = {
  processOutput: 'process/output',
  processExited: 'process/exited',
  processClosed: 'process/closed',
  httpRequestBodyDelta: 'http/request/bodyDelta',
  /** Codex's: the current `fs/watchMissing` watch fired (once). */
  fsMissingChanged: 'fs/missingChanged',
  /** Codex's (capability `networkProxyLaunch`): a decision of a process's managed network proxy. */
  networkPolicyDecision: 'network/policyDecision',
  /** Tether (capability `processShare`): a share this session followed a process by was revoked or expired. */
  processAccessRevoked: 'process/accessRevoked',
  /** Tether (capability `processShare`): who follows a process this session follows, when that changes. */
  processParticipants: 'process/participants',
  /** Client → server (Tether, capability `flowControl`): output consumed up to a seq; see flow-control.ts. */
  processAck: 'process/ack',
  /** Capability `tcpForward` (tcp.ts): bytes, credit, half-close and reset of a forwarded connection. */
  tcpData: 'tcp/data',
  tcpAck: 'tcp/ack',
  tcpReceived: 'tcp/received',
  tcpShutdown: 'tcp/shutdown',
  tcpClose: 'tcp/close',
  tcpClosed: 'tcp/closed',
} as const;

/**
 * The family named in gating errors ("client must call initialize before using <family> methods").
 * Returns null for methods that are not gated (initialize itself).
 */
export function methodFamily(method: string): string | null {
  if (method === Method.initialize) return null;
  if (method.startsWith('process/')) return 'exec';
  if (method.startsWith('fs/')) return 'filesystem';
  if (method.startsWith('http/')) return 'http';
  if (method.startsWith('tcp/')) return 'tcp forward';
  if (method === Method.environmentInfo) return 'environment info';
  if (method === Method.environmentStatus) return 'environment status';
  if (method.startsWith('environmentConfig/')) return 'environment config';
  if (method.startsWith('capabilities/') || method.startsWith('capabilityRoots/')) return 'capability discovery';
  return 'exec';
}

/** Requests served by the control lane when --concurrent-requests ≥ 2 (spec §7.5). */
export const CONTROL_LANE_METHODS: ReadonlySet<string> = new Set([
  Method.environmentInfo,
  Method.environmentStatus,
  Method.processSignal,
  Method.processTerminate,
  Method.processResize,
  Method.processList,
  Method.fsClose,
]);
