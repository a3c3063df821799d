import { describe, expect, it } from 'vitest';
import {
  keyPrincipal,
  LOCAL_PRINCIPAL,
  mayAccess,
  type Principal,
  type ProcessAction,
  samePrincipal,
  UNATTRIBUTED_PRINCIPAL,
} from './principal.js';

const alice = keyPrincipal('key_alice', 'harness');
const bob = keyPrincipal('key_bob', 'harness');
const admin = keyPrincipal('key_admin', 'admin');
const ACTIONS: ProcessAction[] = ['list', 'attach', 'control'];

describe('mayAccess: who may list, attach to and control a detached process', () => {
  it.each<[string, Principal, Principal, boolean]>([
    ['its owner key', alice, alice, true],
    ['the same key id (another session of it)', alice, keyPrincipal('key_alice', 'harness'), true],
    ['another harness key', alice, bob, false],
    ['an admin key', alice, admin, true],
    ['an admin key, for a process of another admin key', keyPrincipal('key_other_admin', 'admin'), admin, true],
    ['a harness key, for a process of an admin key', admin, bob, false],
    ['the local principal (stdio, --listen), for a key’s process', alice, LOCAL_PRINCIPAL, true],
    ['a key, for a process started locally', LOCAL_PRINCIPAL, alice, false],
    ['an unattributed harness, for a key’s process', alice, UNATTRIBUTED_PRINCIPAL, false],
    ['a key, for an unattributed harness’s process', UNATTRIBUTED_PRINCIPAL, alice, false],
    [
      'an unattributed harness, for another unattributed one’s (a Codex registry names no key)',
      UNATTRIBUTED_PRINCIPAL,
      UNATTRIBUTED_PRINCIPAL,
      true,
    ],
    ['an unattributed harness, for a process started locally', LOCAL_PRINCIPAL, UNATTRIBUTED_PRINCIPAL, false],
    ['the local principal, for its own', LOCAL_PRINCIPAL, LOCAL_PRINCIPAL, true],
  ])('%s: %s', (_what, owner, who, allowed) => {
    for (const action of ACTIONS) expect([action, mayAccess(owner, who, action)]).toEqual([action, allowed]);
  });

  it('a key id equal to another role’s is another principal', () => {
    expect(samePrincipal(keyPrincipal('k', 'harness'), keyPrincipal('k', 'admin'))).toBe(false);
    expect(mayAccess(keyPrincipal('k', 'admin'), keyPrincipal('k', 'harness'), 'list')).toBe(false);
    expect(samePrincipal(LOCAL_PRINCIPAL, UNATTRIBUTED_PRINCIPAL)).toBe(false);
  });
});
