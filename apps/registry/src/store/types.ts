/** The registry's persistent state, one interface for every engine (SQLite, PostgreSQL). Times are epoch ms. */
export type Role = 'executor' | 'harness' | 'admin' | 'relay';
export const ROLES: readonly Role[] = ['executor', 'harness', 'admin', 'relay'];

export interface ApiKeyRecord {
  id: string;
  role: Role;
  /** Environment-id glob (`*` any run, `?` one char) the key may act on. */
  environments: string;
  label: string;
  createdAt: number;
  revokedAt: number | null;
  /** For a `relay` key: the one node URL it may heartbeat for; null for every other role. */
  relayUrl: string | null;
  /** `view`: a harness key whose harnesses may only watch processes shared with them; `full` otherwise. */
  access: KeyAccess;
}

export type KeyAccess = 'full' | 'view';

export interface NewApiKey extends Omit<ApiKeyRecord, 'revokedAt' | 'relayUrl' | 'access'> {
  relayUrl?: string | null;
  access?: KeyAccess;
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
  /**
   * The environment's registration counter at this registration: one more than the highest epoch the environment
   * ever had. Signed into both roles' relay URLs, so a relay can refuse an older registration's socket.
   */
  epoch: number;
  /**
   * The relay node (public URL) the executor was sent to with this registration; null for registrations made
   * before the registry recorded it (routed by hash, as then).
   */
  relayUrl: string | null;
}

/** What putRegistration is given: the store assigns the epoch. */
export type NewRegistration = Omit<RegistrationRecord, 'epoch' | 'relayUrl'> & { relayUrl?: string | null };

/** putRegistration's answer: the stored registration's epoch, or why it was refused. */
export type PutRegistrationResult =
  | { ok: true; epoch: number }
  /** Bound to another executor key; or the registering key was revoked meanwhile (checked in the same step). */
  | { ok: false; reason: 'environment_owned' | 'key_revoked' };

/** A registration that stopped being current because it was revoked (admin action or its key's revocation). */
export interface RevokedRegistrationRecord {
  environmentId: string;
  registrationId: string;
  revokedAt: number;
}

export interface EnvironmentRecord {
  environmentId: string;
  createdAt: number;
  /** The executor API key the environment is bound to (the first to register it, or an admin's transfer). */
  ownerKeyId: string | null;
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
  /** The `x-request-id` of the `/connect` that issued it (logged again when `/validate` consumes it). */
  connectRequestId?: string | null;
  /**
   * The API key that minted it at `/connect` (a harness key, or the one behind a browser session): once that key is
   * revoked the authorization no longer validates. Null only for authorizations stored before this was recorded.
   */
  mintedByKeyId?: string | null;
  /**
   * Minted by a share-link browser session (`harness share` prints the link): that session's id, and the most it
   * may do (`view` or `control`, only by share tokens). Null for every other harness.
   */
  linkSession?: LinkSession | null;
}

/** A browser session made from a share link: it reaches only shared processes, and at most with `access`. */
export interface LinkSession {
  /** Stable for the session (derived from its token's hash; names it to the executor, never the token). */
  id: string;
  access: ShareLinkAccess;
}

export type ShareLinkAccess = 'view' | 'control';

/** What a consumed authorization still tells: the `/connect` it came from, and the key that minted it. */
export interface ConsumedAuthorization {
  connectRequestId: string | null;
  /** The API key that minted it (`NewAuthorization.mintedByKeyId`); null for one stored before that was recorded. */
  mintedByKeyId: string | null;
  /** That key's role, read when the authorization is consumed; null when there is no such key. */
  mintedByRole: Role | null;
  /** That key's access (`view`: watch shared processes only); null when there is no such key. */
  mintedByAccess: KeyAccess | null;
  /** The share-link session that minted it (NewAuthorization.linkSession), or null. */
  linkSession: LinkSession | null;
}

export interface AuthorizationClaim
  extends Omit<NewAuthorization, 'expiresAt' | 'connectRequestId' | 'mintedByKeyId' | 'linkSession'> {
  now: number;
  /**
   * When set, the claim also needs `registrationId` to be the environment's current registration, made with this
   * API key; checked in the same statement as the consumption.
   */
  apiKeyId?: string;
}

/** A browser grant: one-time, short-lived, for one environment, minted with a harness API key. */
export interface NewBrowserGrant {
  /** SHA-256 hex of the grant; the grant itself is never stored. */
  tokenHash: string;
  environmentId: string;
  /** The harness key that minted it: its revocation voids the grant and every session made from it. */
  apiKeyId: string;
  expiresAt: number;
  /** A share link's grant: its session reaches only processes shared with it, at most with this access. */
  shareAccess?: ShareLinkAccess | null;
}

/** What a browser session token stands for: that key, on that one environment, until expiresAt. */
export interface BrowserSessionRecord {
  environmentId: string;
  apiKeyId: string;
  expiresAt: number;
  /** Set for a share link's session (NewBrowserGrant.shareAccess); null for a sign-in session. */
  shareAccess: ShareLinkAccess | null;
}

export interface RelayNodeRecord {
  url: string;
  lastSeen: number;
}

/** The last heartbeat in which a relay node reported an environment's executor socket connected. */
export interface RelayLinkRecord {
  environmentId: string;
  relayUrl: string;
  /** The last heartbeat of `relayUrl` that listed the environment. */
  lastSeen: number;
  /**
   * The last heartbeat of `relayUrl` at all, read in the same statement as `lastSeen`: the link is current when the
   * two are equal. (Compared with a separately read node list, a heartbeat landing between the two reads would
   * make a live link look down.)
   */
  nodeLastSeen: number;
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
  /**
   * Revokes an active key and, in the same transaction, every current registration made with it (recorded as
   * revoked at `at`). Null when there was no active key `id`; else the registrations revoked.
   */
  revokeApiKey(id: string, at: number): Promise<{ registrations: RevokedRegistrationRecord[] } | null>;

  /**
   * Creates the environment if needed (bound to the registering key) and makes `registration` its one current
   * registration, with the next epoch. Refused, changing nothing, when the environment is bound to another key.
   */
  putRegistration(registration: NewRegistration): Promise<PutRegistrationResult>;
  currentRegistration(environmentId: string): Promise<RegistrationRecord | undefined>;
  /**
   * Drops the current registration when its id matches, recording the revocation at `at` (and deleting its
   * unused harness authorizations); the record when one was dropped, else null.
   */
  revokeRegistration(
    environmentId: string,
    registrationId: string,
    at: number,
  ): Promise<RevokedRegistrationRecord | null>;
  /** Revocations at or after `since`, newest first, at most `limit`. */
  listRevokedRegistrations(since: number, limit: number): Promise<RevokedRegistrationRecord[]>;
  /** True when the environment has no current registration because its last one was revoked. */
  registrationRevoked(environmentId: string): Promise<boolean>;
  /**
   * Binds the environment (created if unknown) to executor key `apiKeyId`; its current registration stays until
   * replaced or revoked. False, changing nothing, when `apiKeyId` is not an active executor key.
   */
  setEnvironmentOwner(environmentId: string, apiKeyId: string, at: number): Promise<boolean>;
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
   * Atomically marks an authorization used when every field matches, it is unused and unexpired at `now`, and the
   * key that minted it (when recorded) is still active.
   * At most one caller ever gets `true` for a token, whatever the concurrency.
   */
  consumeAuthorization(claim: AuthorizationClaim): Promise<ConsumedAuthorization | null>;
  /** Deletes authorizations that expired before `before`; returns how many. */
  pruneAuthorizations(before: number): Promise<number>;

  createBrowserGrant(grant: NewBrowserGrant): Promise<void>;
  /**
   * In one step: deletes the grant `grantHash` if it is unexpired at `now` and its key is still active, and creates
   * a session (hash `sessionHash`, expiring at `sessionExpiresAt`) for its environment and key. At most one caller
   * ever gets a record for a grant; null otherwise (unknown, used, expired or its key revoked).
   */
  exchangeBrowserGrant(exchange: {
    grantHash: string;
    sessionHash: string;
    sessionExpiresAt: number;
    now: number;
  }): Promise<BrowserSessionRecord | null>;
  /** The session `tokenHash` if it is unexpired at `now` and the key that minted its grant is still active. */
  findBrowserSession(tokenHash: string, now: number): Promise<BrowserSessionRecord | undefined>;
  /** Deletes browser grants and sessions that expired before `before`; returns how many. */
  pruneBrowserGrants(before: number): Promise<number>;

  /**
   * Records a relay heartbeat at `at`, with the environments whose executor socket is connected to it. A reported
   * environment is linked to the node only when its current registration sent the executor there (or names no
   * node): a node still carrying a superseded executor's socket cannot take the link from the node the current one
   * was sent to.
   */
  heartbeatRelayNode(url: string, at: number, environmentIds?: readonly string[]): Promise<void>;
  relayLink(environmentId: string): Promise<RelayLinkRecord | undefined>;
  /** Relay nodes seen at or after `since`, by url. */
  liveRelayNodes(since: number): Promise<RelayNodeRecord[]>;
}
