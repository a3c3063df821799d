import { describe, expect, it } from 'vitest';
import { keyPrincipal, UNATTRIBUTED_PRINCIPAL } from '../principal.js';
import {
  HARNESS_KEY_ACCESS_HEADER,
  HARNESS_KEY_ID_HEADER,
  HARNESS_KEY_ROLE_HEADER,
  HARNESS_LINK_ACCESS_HEADER,
  HARNESS_LINK_SESSION_HEADER,
  principalFromHeaders,
} from './registry-client.js';

const headers = (id: string | null, role: string | null) => {
  const h = new Headers();
  if (id !== null) h.set(HARNESS_KEY_ID_HEADER, id);
  if (role !== null) h.set(HARNESS_KEY_ROLE_HEADER, role);
  return h;
};

describe('principalFromHeaders: who a /validate yes says the harness acts for', () => {
  it('names the key and its role (the id percent-encoded)', () => {
    expect(principalFromHeaders(headers('key_0123abcd', 'harness'))).toEqual(keyPrincipal('key_0123abcd', 'harness'));
    expect(principalFromHeaders(headers('key_root', 'admin'))).toEqual(keyPrincipal('key_root', 'admin'));
    expect(principalFromHeaders(headers(encodeURIComponent('a key/é'), 'harness'))).toEqual(
      keyPrincipal('a key/é', 'harness'),
    );
  });

  it('marks a view-only key (access header `view`; anything else is full access)', () => {
    const view = headers('key_v', 'harness');
    view.set(HARNESS_KEY_ACCESS_HEADER, 'view');
    expect(principalFromHeaders(view)).toEqual({ kind: 'key', keyId: 'key_v', role: 'harness', viewOnly: true });
    view.set(HARNESS_KEY_ACCESS_HEADER, 'View');
    expect(principalFromHeaders(view)).toEqual(keyPrincipal('key_v', 'harness'));
  });

  it('names a share link’s session apart from its key: control only when the link says control', () => {
    const link = (id: string, access: string | null, keyAccess?: string) => {
      const h = headers('key_o', 'harness');
      h.set(HARNESS_LINK_SESSION_HEADER, id);
      if (access !== null) h.set(HARNESS_LINK_ACCESS_HEADER, access);
      if (keyAccess !== undefined) h.set(HARNESS_KEY_ACCESS_HEADER, keyAccess);
      return principalFromHeaders(h);
    };
    expect(link('lnk_abc', 'control')).toEqual(keyPrincipal('key_o', 'harness', false, 'lnk_abc'));
    expect(link('lnk_abc', 'view')).toEqual(keyPrincipal('key_o', 'harness', true, 'lnk_abc'));
    // Anything but `control` is a view; a view-only key's link is a view whatever it says.
    expect(link('lnk_abc', null)).toEqual(keyPrincipal('key_o', 'harness', true, 'lnk_abc'));
    expect(link('lnk_abc', 'Control')).toEqual(keyPrincipal('key_o', 'harness', true, 'lnk_abc'));
    expect(link('lnk_abc', 'control', 'view')).toEqual(keyPrincipal('key_o', 'harness', true, 'lnk_abc'));
    // A malformed id still makes a link session (never the key itself), one that matches no real link.
    expect(link('bad id!', 'control')).toEqual(keyPrincipal('key_o', 'harness', false, 'malformed'));
  });

  it('is unattributed without both headers, or with a role that cannot /connect, or an id that does not decode', () => {
    for (const [id, role] of [
      [null, null],
      ['key_a', null],
      [null, 'harness'],
      ['key_a', 'executor'],
      ['key_a', 'relay'],
      ['key_a', 'Admin'],
      ['', 'harness'],
      ['%E0%A4%A', 'harness'],
      ['x'.repeat(257), 'harness'],
    ] as const) {
      expect(principalFromHeaders(headers(id, role))).toBe(UNATTRIBUTED_PRINCIPAL);
    }
  });
});
