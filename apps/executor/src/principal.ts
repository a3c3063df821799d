/**
 * Who a session acts for, and the one rule of who may reach a detached process (docs/security.md, "Process
 * visibility"). Every check of a detached process goes through `mayAccess`; nothing else decides it.
 *
 * - `key`: a harness that came through the relay, named by the registry's `/validate` answer: the API key
 *   that minted its authorization (a harness key, an admin key, or the key behind a browser session) and
 *   that key's role.
 * - `unattributed`: a harness through the relay whose registry named no key (Codex's registry, or an
 *   authorization minted before the registry recorded its key). They are one principal among themselves, as
 *   every harness was before processes had owners; they reach no process of a named key.
 * - `local`: stdio and the `--listen` WebSocket. One principal: whoever reaches them runs commands as the
 *   executor's user, so hiding a process from them would hide nothing (`ps` on the host shows it).
 */
export type Principal =
  | {
      readonly kind: 'key';
      readonly keyId: string;
      readonly role: KeyRole;
      readonly viewOnly?: boolean;
      /**
       * A share link's browser session (`harness share` prints the link): a principal of its own, apart from the
       * key behind it, that reaches only processes shared with it by their tokens (never by ownership or role).
       */
      readonly link?: string;
    }
  | { readonly kind: 'unattributed' }
  | { readonly kind: 'local' };

/** The roles of API keys that may `/connect` (and so own processes). */
export type KeyRole = 'harness' | 'admin';

/**
 * What is asked of a process: `list` (see it in `process/list`), `attach` (follow or read its output), `control`
 * (write its stdin, close it, resize, signal or terminate it). Sharing (a later issue) will grant some of
 * these to other keys; today an owner has all three and other keys none.
 */
export type ProcessAction = 'list' | 'attach' | 'control';

export const LOCAL_PRINCIPAL: Principal = Object.freeze({ kind: 'local' });
export const UNATTRIBUTED_PRINCIPAL: Principal = Object.freeze({ kind: 'unattributed' });

/**
 * `viewOnly`: a key created `--access view` (or a view link's session), whose harness may only watch processes
 * shared with it. `link`: a share link's session id (Principal's `link`).
 */
export function keyPrincipal(keyId: string, role: KeyRole, viewOnly = false, link?: string): Principal {
  return Object.freeze({
    kind: 'key',
    keyId,
    role,
    ...(viewOnly ? { viewOnly: true } : {}),
    ...(link === undefined ? {} : { link }),
  });
}

/** Whether `who` came in by a share link: it may use shares only (connection-processor.ts gates its methods). */
export function isLinkSession(who: Principal): boolean {
  return who.kind === 'key' && who.link !== undefined;
}

/** A string naming the principal, the same for the same one (a key of per-principal state). */
export function principalKey(principal: Principal): string {
  if (principal.kind !== 'key') return principal.kind;
  const key = `key:${principal.role}:${principal.keyId}`;
  return principal.link === undefined ? key : `${key}:link:${principal.link}`;
}

/** Whether two principals are the same one (a session may be resumed only by the principal that made it). */
export function samePrincipal(a: Principal, b: Principal): boolean {
  if (a.kind !== b.kind) return false;
  return a.kind !== 'key' || (b.kind === 'key' && a.keyId === b.keyId && a.role === b.role && a.link === b.link);
}

/**
 * Whether `who` may do `action` to a detached process started by `owner`.
 *
 * - The owner may do everything.
 * - `local` (stdio, `--listen`) may do everything: it is the executor's own user.
 * - An `admin` key may do everything to every process, as a cluster admin with kubectl may list, attach to
 *   and delete any pod: an admin who sees a runaway process must be able to stop it.
 * - A share link's session reaches nothing by ownership or role (not even behind an admin key): only by shares.
 * - Nobody else may do anything, and what they may not list they must not be able to tell from an unknown id.
 */
export function mayAccess(owner: Principal, who: Principal, action: ProcessAction): boolean {
  if (who.kind === 'local') return true;
  if (isLinkSession(who)) return false;
  // A view-only key controls nothing, whatever it is shown.
  if (who.kind === 'key' && who.viewOnly === true && action === 'control') return false;
  if (who.kind === 'key' && who.role === 'admin') return true;
  return samePrincipal(owner, who);
}

/**
 * How a participant list names a principal (`process/participants`): the API key's id (`admin ID` for an admin
 * key), `share link of ID` for a link's browser session, `local` or `unattributed`. Ids only, never a secret.
 */
export function principalLabel(who: Principal): string {
  if (who.kind !== 'key') return who.kind;
  const key = who.role === 'admin' ? `admin ${who.keyId}` : who.keyId;
  return who.link === undefined ? key : `share link of ${key}`;
}
