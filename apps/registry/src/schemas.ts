import { type Static, Type } from '@sinclair/typebox';
import { ENVIRONMENT_ID_PATTERN } from './tokens.js';

/** NoiseChannelPublicKey (rendezvous.md §2.3): exactly three fields; the codec checks the rest. */
export const PublicKeySchema = Type.Object(
  {
    suite: Type.String({ maxLength: 128 }),
    x25519_public_key: Type.String({ maxLength: 64 }),
    mlkem768_public_key: Type.String({ maxLength: 2048 }),
  },
  { additionalProperties: false },
);

export const EnvironmentParams = Type.Object({ id: Type.String({ pattern: ENVIRONMENT_ID_PATTERN }) });
export type EnvironmentParams = Static<typeof EnvironmentParams>;

export const ErrorResponse = Type.Object({
  error: Type.Object({ code: Type.String(), message: Type.String() }),
});

export const RegisterBody = Type.Object({
  security_profile: Type.String({ maxLength: 64 }),
  executor_public_key: PublicKeySchema,
  /**
   * Tether's addition (Codex sends none): the relay URL an executor failing over could not reach. The registry sends
   * it to another live node when it has one. It only steers this executor's own registration.
   */
  unreachable_relay_url: Type.Optional(Type.String({ maxLength: 2048 })),
});
export type RegisterBody = Static<typeof RegisterBody>;

/** What both /register and /connect answer: the environment, its relay URL and the current registration. */
const REGISTRATION_ROUTE = {
  environment_id: Type.String(),
  url: Type.String(),
  security_profile: Type.String(),
  executor_registration_id: Type.String(),
};

export const RegisterResponse = Type.Object(REGISTRATION_ROUTE);

export const ConnectBody = Type.Object({ harness_public_key: PublicKeySchema });
export type ConnectBody = Static<typeof ConnectBody>;

export const ConnectResponse = Type.Object({
  ...REGISTRATION_ROUTE,
  executor_public_key: PublicKeySchema,
  harness_key_authorization: Type.String(),
});

export const ValidateBody = Type.Object({
  executor_registration_id: Type.String({ maxLength: 256 }),
  harness_public_key: Type.Unknown(),
  harness_key_authorization: Type.String({ maxLength: 512 }),
});
export type ValidateBody = Static<typeof ValidateBody>;

export const ValidateResponse = Type.Object({ valid: Type.Boolean() });

export const StatusResponse = Type.Object({ status: Type.String() });

/** Error responses every authenticated route may give. */
export const authErrors = { 400: ErrorResponse, 401: ErrorResponse, 403: ErrorResponse, 413: ErrorResponse };
