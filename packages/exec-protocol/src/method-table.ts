/**
 * The protocol's contract in one table: each request method's params schema, result schema and the capability
 * (in `environmentInfo.capabilities`) that an executor advertises when it serves the method. Clients call
 * through it (`MethodParams<M>` types what they send, `decodeResult` checks what comes back against the same
 * schemas the executor is written to), so a method is added in one place and every side sees it.
 */
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import {
  CapabilitiesDiscoverV2Params,
  CapabilitiesDiscoverV2Result,
  CapabilityRootsDiscoverV1Params,
  CapabilityRootsDiscoverV1Result,
} from './capabilities.js';
import { decode, matches } from './decode.js';
import {
  ProcessAttachParams,
  ProcessAttachResult,
  ProcessShareParams,
  ProcessShareResult,
  ProcessUnshareParams,
  ProcessUnshareResult,
} from './detached.js';
import {
  FsCanonicalizeResult,
  FsCloseParams,
  FsCopyParams,
  FsCreateDirectoryParams,
  FsExtensionMethod,
  FsGetMetadataParams,
  FsGetMetadataResult,
  FsMissingChangedNotification,
  FsOpenParams,
  FsOpenResult,
  FsPathParams,
  FsReadBlockParams,
  FsReadDirectoryParams,
  FsReadDirectoryResult,
  FsReadFileParams,
  FsReadFileResult,
  FsReadFilesParams,
  FsReadFilesResult,
  FsRemoveParams,
  FsSetMetadataParams,
  FsWalkParams,
  FsWalkResult,
  FsWatchMissingParams,
  FsWatchMissingResult,
  FsWriteBlockBinaryParams,
  FsWriteBlockParams,
  FsWriteFileParams,
  FsWriteFilesParams,
  FsWriteFilesResult,
} from './fs.js';
import { HttpBodyDeltaNotification, HttpRequestParams, HttpRequestResult } from './http.js';
import { Method, Notification } from './methods.js';
import {
  EnvironmentConfigReadParams,
  EnvironmentConfigReadResult,
  EnvironmentInfo,
  EnvironmentStatusResult,
  InitializeParams,
  InitializeResult,
  NetworkPolicyDecisionNotification,
  ProcessClosedNotification,
  ProcessCloseStdinResult,
  ProcessExitedNotification,
  ProcessIdParams,
  ProcessListResult,
  ProcessOutputNotification,
  ProcessReadParams,
  ProcessReadResult,
  ProcessResizeParams,
  ProcessSignalParams,
  ProcessStartParams,
  ProcessStartResult,
  ProcessTerminateResult,
  ProcessWriteBinaryParams,
  ProcessWriteParams,
  ProcessWriteResult,
} from './schemas.js';
import {
  TcpAckParams,
  TcpClosedParams,
  TcpConnectParams,
  TcpConnectResult,
  TcpDataParams,
  TcpStreamParams,
} from './tcp.js';

/** An answer with nothing in it (`{}`); members an executor adds are ignored, as serde ignores them. */
export const EmptyResult = Type.Object({});

/**
 * `fs/readBlock`'s answer as a client reads it: Codex's `{chunk, eof}`, or with `binary: true` (capability
 * `binaryBlocks`) `{eof}` and the bytes in the message's binary attachment.
 */
export const FsReadBlockAnswer = Type.Object({ chunk: Type.Optional(Type.String()), eof: Type.Boolean() });

/** `fs/close`'s answer: `{}`, or with `digest: true` (capability `fileHandleDigest`) the bytes' SHA-256 and count. */
export const FsCloseResult = Type.Object({
  sha256: Type.Optional(Type.String({ pattern: '^[0-9a-f]{64}$' })),
  bytes: Type.Optional(Type.Integer({ minimum: 0 })),
});

interface MethodSpec {
  params: TSchema;
  result: TSchema;
  /** The `environmentInfo.capabilities` flag of an executor that serves it; absent: every executor (Codex's). */
  capability?: string;
}

export const METHOD_TABLE = {
  [Method.initialize]: { params: InitializeParams, result: InitializeResult },
  [Method.processStart]: { params: ProcessStartParams, result: ProcessStartResult },
  [Method.processRead]: { params: ProcessReadParams, result: ProcessReadResult },
  // Codex's `{processId, chunk, writeId}`, or the bytes as a binary attachment (`binaryInput`).
  [Method.processWrite]: {
    params: Type.Union([ProcessWriteParams, ProcessWriteBinaryParams]),
    result: ProcessWriteResult,
  },
  [Method.processSignal]: { params: ProcessSignalParams, result: EmptyResult },
  [Method.processTerminate]: { params: ProcessIdParams, result: ProcessTerminateResult },
  [Method.processResize]: { params: ProcessResizeParams, result: EmptyResult, capability: 'processResize' },
  [Method.processCloseStdin]: {
    params: ProcessIdParams,
    result: ProcessCloseStdinResult,
    capability: 'processCloseStdin',
  },
  [Method.processList]: { params: EmptyResult, result: ProcessListResult, capability: 'processList' },
  [Method.processAttach]: { params: ProcessAttachParams, result: ProcessAttachResult, capability: 'processDetach' },
  [Method.processShare]: { params: ProcessShareParams, result: ProcessShareResult, capability: 'processShare' },
  [Method.processUnshare]: { params: ProcessUnshareParams, result: ProcessUnshareResult, capability: 'processShare' },
  [Method.environmentInfo]: { params: EmptyResult, result: EnvironmentInfo },
  [Method.environmentStatus]: { params: EmptyResult, result: EnvironmentStatusResult },
  [Method.environmentConfigRead]: {
    params: EnvironmentConfigReadParams,
    result: EnvironmentConfigReadResult,
    capability: 'environmentConfigRead',
  },
  [Method.capabilitiesDiscoverV2]: {
    params: CapabilitiesDiscoverV2Params,
    result: CapabilitiesDiscoverV2Result,
    capability: 'capabilityDiscoveryV2',
  },
  // Served by every Codex exec-server, advertised by none.
  [Method.capabilityRootsDiscoverV1]: {
    params: CapabilityRootsDiscoverV1Params,
    result: CapabilityRootsDiscoverV1Result,
  },
  [Method.fsReadFile]: { params: FsReadFileParams, result: FsReadFileResult },
  [Method.fsWriteFile]: { params: FsWriteFileParams, result: EmptyResult },
  [Method.fsCreateDirectory]: { params: FsCreateDirectoryParams, result: EmptyResult },
  [Method.fsGetMetadata]: { params: FsGetMetadataParams, result: FsGetMetadataResult },
  [Method.fsCanonicalize]: { params: FsPathParams, result: FsCanonicalizeResult },
  [Method.fsReadDirectory]: { params: FsReadDirectoryParams, result: FsReadDirectoryResult },
  [Method.fsRemove]: { params: FsRemoveParams, result: EmptyResult },
  [Method.fsCopy]: { params: FsCopyParams, result: EmptyResult },
  [Method.fsOpen]: { params: FsOpenParams, result: FsOpenResult },
  [Method.fsReadBlock]: { params: FsReadBlockParams, result: FsReadBlockAnswer },
  // Codex's base64 `chunk`, or the bytes as a binary attachment (`binaryBlocks`).
  [Method.fsWriteBlock]: { params: Type.Union([FsWriteBlockParams, FsWriteBlockBinaryParams]), result: EmptyResult },
  [Method.fsClose]: { params: FsCloseParams, result: FsCloseResult },
  [Method.fsWalk]: { params: FsWalkParams, result: FsWalkResult },
  [Method.fsWatchMissing]: { params: FsWatchMissingParams, result: FsWatchMissingResult, capability: 'fsWatchMissing' },
  [FsExtensionMethod.readFiles]: { params: FsReadFilesParams, result: FsReadFilesResult, capability: 'fileBatch' },
  [FsExtensionMethod.writeFiles]: { params: FsWriteFilesParams, result: FsWriteFilesResult, capability: 'fileBatch' },
  [FsExtensionMethod.setMetadata]: { params: FsSetMetadataParams, result: EmptyResult, capability: 'fileMetadata' },
  [Method.httpRequest]: { params: HttpRequestParams, result: HttpRequestResult },
  [Method.tcpConnect]: { params: TcpConnectParams, result: TcpConnectResult, capability: 'tcpForward' },
} as const satisfies Record<string, MethodSpec>;

/** Every request method (`initialized` is a notification, not here). */
export type RequestMethod = keyof typeof METHOD_TABLE;
/** What a client sends as `params` of `M`. */
export type MethodParams<M extends RequestMethod> = Static<(typeof METHOD_TABLE)[M]['params']>;
/** What `M` answers, once `decodeResult` has checked it. */
export type MethodResult<M extends RequestMethod> = Static<(typeof METHOD_TABLE)[M]['result']>;

/** True for a method in the table (a request this protocol defines). */
export function isRequestMethod(method: string): method is RequestMethod {
  return Object.hasOwn(METHOD_TABLE, method);
}

/**
 * `answer` typed as `M`'s result, or a DecodeError saying what is wrong with it (an executor is untrusted input:
 * a client decodes every answer at the edge, before any of it is used).
 */
export function decodeResult<M extends RequestMethod>(method: M, answer: unknown): MethodResult<M> {
  return decode(METHOD_TABLE[method].result, answer) as MethodResult<M>;
}

/**
 * The executor's notifications as a client receives them, binary variants included: `process/output` carries
 * Codex's base64 `chunk`, or (`binaryOutput`) no `chunk` and the bytes as the message's attachment.
 */
export const NOTIFICATION_TABLE = {
  [Notification.processOutput]: Type.Object({
    ...ProcessOutputNotification.properties,
    chunk: Type.Optional(Type.String()),
  }),
  [Notification.processExited]: ProcessExitedNotification,
  [Notification.processClosed]: ProcessClosedNotification,
  [Notification.httpRequestBodyDelta]: HttpBodyDeltaNotification,
  [Notification.fsMissingChanged]: FsMissingChangedNotification,
  [Notification.networkPolicyDecision]: NetworkPolicyDecisionNotification,
  [Notification.tcpData]: TcpDataParams,
  [Notification.tcpAck]: TcpAckParams,
  [Notification.tcpShutdown]: TcpStreamParams,
  [Notification.tcpClosed]: TcpClosedParams,
} as const satisfies Record<string, TSchema>;

export type ReceivedNotification = keyof typeof NOTIFICATION_TABLE;
export type NotificationParams<N extends ReceivedNotification> = Static<(typeof NOTIFICATION_TABLE)[N]>;

/** True when `params` is a well-formed `method` notification (a malformed one is dropped by its receiver). */
export function isNotification<N extends ReceivedNotification>(
  method: N,
  params: unknown,
): params is NotificationParams<N> {
  return matches(NOTIFICATION_TABLE[method], params);
}
