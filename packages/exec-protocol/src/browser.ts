/**
 * The protocol without Node (the `browser` condition of the package's `exports`): everything but the
 * `file:` URI conversions of host paths, which need node:url. `index.ts` adds them.
 */
export { base64Problem, decodeBase64, decodeBase64Codex, encodeBase64, isStrictBase64 } from './base64.js';
export * from './capabilities.js';
export { DecodeError, decode, matches } from './decode.js';
export {
  DEFAULT_MAX_DETACHED_PROCESSES,
  DEFAULT_SHARE_TTL_SEC,
  DETACHED_PROCESS_ID_PATTERN,
  detachedProcessIdProblem,
  MAX_PARTICIPANTS,
  MAX_SHARE_TTL_SEC,
  Participant,
  PROCESS_DETACH_CAPABILITY,
  PROCESS_SHARE_CAPABILITY,
  ProcessAccessRevokedNotification,
  ProcessAttachParams,
  ProcessAttachResult,
  ProcessParticipantsNotification,
  ProcessShareParams,
  ProcessShareResult,
  ProcessUnshareParams,
  ProcessUnshareResult,
  ShareAccess,
} from './detached.js';
export { ErrorCode, type ErrorCodeName, RpcError } from './error-codes.js';
export {
  clampFlowWindow,
  DEFAULT_FLOW_WINDOW_BYTES,
  MAX_FLOW_WINDOW_BYTES,
  MIN_FLOW_WINDOW_BYTES,
  ReceiveCredit,
  SendCredit,
} from './flow-control.js';
export * from './fs.js';
export * from './http.js';
export {
  decodeResult,
  EmptyResult,
  FsCloseResult,
  FsReadBlockAnswer,
  isNotification,
  isRequestMethod,
  METHOD_TABLE,
  type MethodParams,
  type MethodResult,
  NOTIFICATION_TABLE,
  type NotificationParams,
  type ReceivedNotification,
  type RequestMethod,
} from './method-table.js';
export { CONTROL_LANE_METHODS, Method, type MethodName, methodFamily, Notification, ServerRequest } from './methods.js';
export {
  ENVIRONMENT_ID_PATTERN,
  environmentIdProblem,
  isEnvironmentId,
  isLoopbackHost,
  isWebSocketUrl,
  parseRegistryError,
} from './rendezvous.js';
export * from './sandbox.js';
export * from './schemas.js';
export * from './tcp.js';
export { type Allocate, encodeBase64Response, encodeOutputNotification, encodeWriteBlockRequest } from './wire.js';
