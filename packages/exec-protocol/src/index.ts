export { decodeBase64, encodeBase64, isStrictBase64 } from './base64.js';
export { DecodeError, decode, matches } from './decode.js';
export { ErrorCode, type ErrorCodeName, RpcError } from './error-codes.js';
export { FileUriError, fileUriToPath, pathToFileUri } from './file-uri.js';
export { CONTROL_LANE_METHODS, Method, type MethodName, methodFamily, Notification } from './methods.js';
export * from './schemas.js';
export { encodeOutputNotification } from './wire.js';
