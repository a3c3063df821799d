export {
  artifactsDir,
  chromiumPath,
  hasChromium,
  type PageProblem,
  startBrowser,
  type TestBrowser,
  type TestPage,
} from './browser.js';
export {
  CHAOS_SEED_ENV,
  type ChaosLegStats,
  type ChaosPolicy,
  type ChaosProxy,
  type ChaosProxyOptions,
  type ChaosStats,
  type ConnectionPlan,
  chaosSeed,
  deriveSeed,
  type FaultPlan,
  mulberry32,
  planConnection,
  startChaosProxy,
} from './chaos-proxy.js';
export {
  type CapturedIo,
  type CliProgram,
  captureIo,
  type LineChild,
  runCli,
  type Scratch,
  scratch,
  withoutTetherEnv,
} from './cli-runs.js';
export {
  type ConnectRemoteOptions,
  type ConnectWsOptions,
  connect,
  connectRemote,
  connectStdio,
  connectWs,
  type InitializeResult,
  initialize,
  type RegistryEndpoint,
  type RequestOptions,
  RpcCallError,
  type RpcError,
  type RpcId,
  type RpcMessage,
  type RpcNotification,
  type RpcResponse,
  type TestClient,
} from './client.js';
export {
  b64,
  type CollectEventsOptions,
  type CollectedOutput,
  type CollectOptions,
  collectEvents,
  collectUntilClosed,
  decodeB64,
  decodeB64Text,
  eventsOutput,
  fileUri,
  freePort,
  type OutputStream,
  type ProcessEvent,
  plannedPort,
  portFree,
  type ReadChunk,
  type ReadParams,
  type ReadResult,
  readProcess,
  readUntilOutput,
  toProcessEvent,
  waitUntil,
} from './helpers.js';
export { type HostileAnswer, type HostileTree, hostileFsAnswers } from './hostile-fs.js';
export { type HttpProxy, NO_AMBIENT_PROXY, type ProxiedRequest, startHttpProxy } from './http-proxy.js';
export {
  type MockResponses,
  type MockResponsesRequest,
  type MockScriptStep,
  type MockTurn,
  startMockResponses,
} from './mock-responses.js';
export { type OriginCertificates, writeOriginCertificates } from './origin-certs.js';
export {
  type CollectedRequest,
  describeMetricPoints,
  hasMetricPoint,
  type MetricPoint,
  metricPoints,
  type OtlpCollector,
  startOtlpCollector,
} from './otlp.js';
export {
  PATTERN_RECORD_BYTES,
  type PatternCheck,
  type PatternOptions,
  PatternVerifier,
  patternBytes,
  patternCommand,
  patternDivergence,
  patternRecord,
  patternSha256,
} from './pattern.js';
export {
  activePeers,
  apiKeyEnv,
  codexBinaryPath,
  codexSandboxPath,
  makePeerHome,
  PEER_MARKER_ENV,
  type PeerExit,
  type PeerHandle,
  type PeerKind,
  type PeerTransport,
  peerCommand,
  peerMarker,
  peerMarkerEnv,
  RUN_ID_ENV,
  type RunPeerOptions,
  type RunPeerResult,
  registryArgs,
  repoRoot,
  runPeer,
  type StartPeerOptions,
  startPeer,
  type Transport,
  tetherMainPath,
  WORKER_MARKER_ENV,
  workerMarkerEntry,
} from './peer.js';
export { type PlainPage, startPlainChromium } from './plain-browser.js';
export {
  cpuSeconds,
  descendantPids,
  fdCounts,
  openFds,
  peakRssMib,
  rssMib,
  type SocketPeer,
  socketPeers,
} from './proc-stats.js';
export {
  type FindProcessesOptions,
  findProcesses,
  isAlive,
  type ProcessInfo,
  pidExists,
  procPids,
  statFields,
} from './processes.js';
export {
  type PrometheusFamily,
  type PrometheusSample,
  parsePrometheusText,
  prometheusSample,
} from './prometheus-text.js';
export { type RelayTap, startRelayTap, type TapFrame } from './relay-tap.js';
export {
  type Bundle,
  type Registration,
  type RelayedMessage,
  startTestRendezvous,
  type TestRendezvous,
} from './rendezvous.js';
export { type RunOptions, type RunResult, runToEnd, runToEndBytes } from './run.js';
export type { Service, ServiceName } from './service.js';
export {
  type EnvironmentView,
  postgres,
  type Stack,
  type StackKeyRole,
  type StackOptions,
  type StackRelay,
  type StartExecutorOptions,
  startStack,
} from './stack.js';
export { hasTmux, startTmux, type Tmux, type TmuxOptions } from './tmux.js';
