export type {
  OutputStream,
  ProcessBackend,
  ProcessEvent,
  ReadAnswer,
  SignalName,
  StartOptions,
  WriteStatus,
} from './backend.js';
export { Environment, type SpawnOptions } from './environment.js';
export { TetherError, type TetherErrorCode } from './errors.js';
export { type Dialer, ExecServerClient, type ExecServerClientOptions, type InitializeInfo } from './exec-client.js';
export {
  DEFAULT_BLOCK_SIZE,
  DEFAULT_READ_DEPTH,
  type DirectoryEntry,
  type EnvironmentFs,
  type FileMetadata,
  giveBackBlock,
  type HandleDigest,
  LocalFs,
  RemoteFs,
  type StreamOptions,
  toFileUri,
} from './fs.js';
export { LocalBackend } from './local-backend.js';
export { DEFAULT_HIGH_WATER_BYTES, ProcessHandle, type ProcessResult } from './process.js';
export { checkEnvironmentId, fetchBundle, type RegistryOptions, type RendezvousBundle } from './registry.js';
