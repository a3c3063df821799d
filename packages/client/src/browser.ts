/**
 * The browser entry of @tether/client (`@tether/client/browser`): the client without Node. Its module graph
 * imports no Node built-in, `ws`, native addon or @tether/local-process (packages/web's build and
 * tests/repo/browser-entry.test.ts check it): a remote environment through the rendezvous on a platform the
 * caller gives (`RendezvousPlatform`: its relay socket and crypto), processes, detached processes and files
 * by call (`RemoteFs` without streams). `index.ts`, the Node entry, is this plus Node's parts.
 *

 * A chunk read from a remote file's stream may be handed back once its reader is done with it (written out,
 * hashed): a block that came over a relay stream in one message was assembled in a pooled buffer, which then
 * serves a later one. Any other buffer is left to the collector.
 */

export { DEFAULT_HIGH_WATER_BYTES } from '@tether/bytes';
/** An executor's public key (`NoiseChannelPublicKey`), for `executorPublicKey`: parsed from its JSON. */
// From the modules themselves, not the package's index: a command that never dials (served by a connection
// master) then loads no handshake code.
export { generateIdentity, type NoiseIdentity } from '@tether/noise/identity';
export { type NoisePublicKey, type NoisePublicKeyJson, parsePublicKeyJson, publicKeyToJson } from '@tether/noise/keys';
export type {
  OutputStream,
  ProcessBackend,
  ProcessEvent,
  ReadAnswer,
  SignalName,
  StartOptions,
  WriteStatus,
} from './backend.js';
export type { ConnectProgress, Dialer, ExecServerClientOptions } from './client-options.js';
export {
  AttachedProcess,
  type AttachOptions,
  type CommandOptions,
  type Participant,
  type ProcessInfo,
  requireDetach,
  type ShareOptions,
  type SpawnDetachedOptions,
} from './detached.js';
export type { DialPhase, RelayLink, RelayLinkOpener, RendezvousPlatform } from './dial.js';
export { decodeAnswer } from './edge.js';
export { Environment, type SpawnOptions } from './environment.js';
export {
  CONNECTION_ERROR_CODES,
  ExecutorKeyChangedError,
  isConnectionError,
  TetherError,
  type TetherErrorCode,
} from './errors.js';
export { ExecServerClient, type InitializeInfo } from './exec-client.js';
export {
  DEFAULT_BLOCK_SIZE,
  DEFAULT_READ_DEPTH,
  type DirectoryEntry,
  type EnvironmentFs,
  entryNameProblem,
  type FileMetadata,
  type FileReadStream,
  type HandleDigest,
  type PortableFs,
  type StreamOptions,
  toFileUri,
} from './fs.js';
export {
  checkNetworkHosts,
  type NetworkAnswer,
  type NetworkDecision,
  type NetworkPolicy,
  type NetworkQuestion,
} from './network.js';
export { ProcessHandle } from './process.js';
export type { ProcessResult } from './process-events.js';
export {
  checkEnvironmentId,
  checkRegistryUrl,
  fetchBundle,
  type RegistryOptions,
  type RendezvousBundle,
} from './registry.js';
export { type FsCaller, handleDigestOf, RemoteFs, writeBlockEncoder } from './remote-fs.js';
export {
  type ChannelSource,
  type OpenedChannel,
  type RendezvousDialer,
  type RendezvousOptions,
  rendezvousDialer,
} from './rendezvous-dialer.js';
