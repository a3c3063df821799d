/** The registry's persistent state, one interface for every engine (SQLite, PostgreSQL). Times are epoch ms. */
export type Role = 'executor' | 'harness' | 'admin';
export const ROLES: readonly Role[] = ['executor', 'harness', 'admin'];

export interface ApiKeyRecord {
  id: string;
  role: Role;
  /** Environment-id glob (`*` any run, `?` one char) the key may act on. */
  environments: string;
  label: string;
  createdAt: number;
  revokedAt: number | null;
}

export interface NewApiKey extends Omit<ApiKeyRecord, 'revokedAt'> {
  /** SHA-256 hex of the token; the token itself is never stored. */
  tokenHash: string;
}

export interface RegistrationRecord {
  environmentId: string;
  registrationId: string;
  securityProfile: string;
  /** The executor's NoiseChannelPublicKey JSON in canonical form. */
  executorPublicKey: string;
  /** The executor API key that registered (and so may validate for) this registration. */
  apiKeyId: string;
  createdAt: number;
}

export interface EnvironmentRecord {
  environmentId: string;
  createdAt: number;
  /** The current registration, if one exists and was not revoked. */
  registration: RegistrationRecord | null;
}

export interface NewAuthorization {
  /** SHA-256 hex of the authorization token. */
  tokenHash: string;
  environmentId: string;
  registrationId: string;
  /** Canonical harness NoiseChannelPublicKey JSON. */
  harnessPublicKey: string;
  expiresAt: number;
}

export interface AuthorizationClaim extends Omit<NewAuthorization, 'expiresAt'> {
  now: number;
  /**
   * When set, the claim also needs `registrationId` to be the environment's current registration, made with this
   * API key; checked in the same statement as the consumption.
   */
  apiKeyId?: string;
}

export interface RelayNodeRecord {
  url: string;
  lastSeen: number;
}

/** The last heartbeat in which a relay node reported an environment's executor socket connected. */
export interface RelayLinkRecord {
  environmentId: string;
  relayUrl: string;
  lastSeen: number;
}

export interface RegistryStore {
  readonly engine: 'sqlite' | 'postgres';
  /** Throws when the backing database is unreachable. */
  ping(): Promise<void>;
  close(): Promise<void>;

  createApiKey(key: NewApiKey): Promise<void>;
  /** An unrevoked key by its token hash. */
  findApiKey(tokenHash: string): Promise<ApiKeyRecord | undefined>;
  listApiKeys(): Promise<ApiKeyRecord[]>;
  /** True when a previously active key was revoked now. */
  revokeApiKey(id: string, at: number): Promise<boolean>;

  /** Creates the environment if needed and makes `registration` its one current registration. */
  putRegistration(registration: RegistrationRecord): Promise<void>;
  currentRegistration(environmentId: string): Promise<RegistrationRecord | undefined>;
  /** Drops the current registration when its id matches; true when one was dropped. */
  revokeRegistration(environmentId: string, registrationId: string): Promise<boolean>;
  listEnvironments(): Promise<EnvironmentRecord[]>;

  createAuthorization(authorization: NewAuthorization): Promise<void>;
  /**
   * In one step: finds the environment's current registration and, if there is one, creates an authorization for
   * it. Returns that registration, or undefined (and creates nothing).
   */
  createAuthorizationForCurrent(
    authorization: Omit<NewAuthorization, 'registrationId'>,
  ): Promise<RegistrationRecord | undefined>;
  /**
   * Atomically marks an authorization used when every field matches, it is unused and unexpired at `now`.
   * At most one caller ever gets `true` for a token, whatever the concurrency.
   */
  consumeAuthorization(claim: AuthorizationClaim): Promise<boolean>;
  /** Deletes authorizations that expired before `before`; returns how many. */
  pruneAuthorizations(before: number): Promise<number>;

  /** Records a relay heartbeat at `at`, with the environments whose executor socket is connected to it. */
  heartbeatRelayNode(url: string, at: number, environmentIds?: readonly string[]): Promise<void>;
  relayLink(environmentId: string): Promise<RelayLinkRecord | undefined>;
  /** Relay nodes seen at or after `since`, by url. */
  liveRelayNodes(since: number): Promise<RelayNodeRecord[]>;
}
