/** The error catalogue: the code is the contract (`{"error":{"code","message"}}`), the message is for humans. */
export const ERRORS = {
  unauthorized: { status: 401, message: 'missing or invalid bearer token' },
  forbidden_role: { status: 403, message: 'this API key may not call this route' },
  forbidden_environment: { status: 403, message: 'this API key may not act on this environment' },
  invalid_request: { status: 400, message: 'request does not match the schema' },
  invalid_environment_id: { status: 400, message: 'environment ids are 1-128 ASCII letters, digits, - or _' },
  invalid_json: { status: 400, message: 'body is not valid JSON' },
  invalid_public_key: { status: 400, message: 'public key is not a valid NoiseChannelPublicKey' },
  unsupported_security_profile: { status: 400, message: 'unsupported security_profile' },
  unsupported_media_type: { status: 415, message: 'body must be application/json' },
  body_too_large: { status: 413, message: 'request body too large' },
  not_found: { status: 404, message: 'no such route' },
  method_not_allowed: { status: 405, message: 'method not allowed' },
  environment_not_registered: { status: 404, message: 'no executor is registered for this environment' },
  environment_offline: { status: 409, message: "the environment's executor is not connected to its relay" },
  registration_revoked: {
    status: 410,
    message:
      "the environment's executor registration was revoked; the executor must register again with a valid API key",
  },
  environment_owned: {
    status: 403,
    message:
      'this environment is bound to another executor API key; an admin can transfer it (`registry environments transfer`)',
  },
  invalid_grant: { status: 401, message: 'the browser grant is unknown, already used, expired or revoked' },
  forbidden_relay_node: { status: 403, message: "a relay key may heartbeat only for its own node's URL" },
  key_not_found: { status: 404, message: 'no active API key with this id' },
  invalid_owner_key: { status: 400, message: 'api_key_id is not an active executor API key' },
  registration_not_found: { status: 404, message: 'no such current registration' },
  unknown_relay_node: { status: 400, message: 'not a configured relay node URL' },
  no_relay_available: { status: 503, message: 'no relay node is available' },
  rate_limited: { status: 429, message: 'too many requests; retry after the seconds in Retry-After' },
  store_unavailable: { status: 503, message: 'the registry store is unreachable' },
  internal: { status: 500, message: 'internal error' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERRORS;

export class RegistryError extends Error {
  readonly code: ErrorCode;
  readonly statusCode: number;
  constructor(code: ErrorCode, message: string = ERRORS[code].message) {
    super(message);
    this.name = 'RegistryError';
    this.code = code;
    this.statusCode = ERRORS[code].status;
  }
}

export const errorBody = (code: ErrorCode, message: string = ERRORS[code].message) => ({ error: { code, message } });
