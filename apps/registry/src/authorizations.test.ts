/**
 * Issue 33 item 3, on the real app over SQLite and PostgreSQL: a harness key authorization records the key that
 * minted it (a harness key, or the key behind a browser session), and /validate refuses it once that key is revoked,
 * within the authorization's lifetime.
 */
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AppFixture, openApp } from './__tests__/app-fixture.js';
import { ENGINES } from './__tests__/engines.js';

const harnessKey = publicKeyToJson(generateIdentity().publicKey);

describe.each(ENGINES)('authorizations and the key that minted them ($name)', (engine) => {
  let registry: AppFixture;
  let tokens: AppFixture['tokens'];
  const addKey: AppFixture['addKey'] = (...args) => registry.addKey(...args);
  const call: AppFixture['call'] = (...args) => registry.call(...args);
  const connect = (bearer: string) =>
    call('POST', '/cloud/environment/dev-1/connect', bearer, { harness_public_key: harnessKey });
  const validate = (bundle: Record<string, string>) =>
    call('POST', '/cloud/environment/dev-1/validate', tokens.exec as string, {
      executor_registration_id: bundle.executor_registration_id,
      harness_public_key: harnessKey,
      harness_key_authorization: bundle.harness_key_authorization,
    });
  const revoke = (id: string) => call('DELETE', `/v1/keys/${id}`, tokens.admin as string);

  beforeEach(async () => {
    registry = await openApp(engine, ['dev-1'], {}, { logger: pino({ level: 'silent' }) });
    tokens = registry.tokens;
  });

  afterEach(() => registry.close());

  it('a harness key revoked after /connect: its authorization no longer validates; another key’s still does', async () => {
    const revokedBundle = (await connect(tokens.harness as string)).json();
    const otherBundle = (await connect(tokens.other as string)).json();
    expect((await revoke('harness')).statusCode).toBe(200);
    const refused = await validate(revokedBundle);
    expect(refused.statusCode).toBe(200);
    expect(refused.json()).toEqual({ valid: false });
    expect((await validate(otherBundle)).json()).toEqual({ valid: true });
  });

  it('the key behind a browser session, revoked after /connect: its authorization no longer validates', async () => {
    const grant = (
      await call('POST', '/cloud/browser-grants', tokens.harness as string, { environment_id: 'dev-1' })
    ).json().grant as string;
    const session = (await call('POST', '/cloud/browser-grants/exchange', null, { grant })).json().token as string;
    const bundle = (await connect(session)).json();
    expect(bundle.harness_key_authorization).toBeDefined();
    expect((await revoke('harness')).statusCode).toBe(200);
    expect((await validate(bundle)).json()).toEqual({ valid: false });
  });

  it('a yes names the key that minted the authorization and its role (a harness key, an admin key, the key behind a browser session); a no names none', async () => {
    const named = async (bearer: string) => {
      const answer = await validate((await connect(bearer)).json());
      expect(answer.json()).toEqual({ valid: true });
      return [answer.headers['x-tether-harness-key-id'], answer.headers['x-tether-harness-key-role']];
    };
    expect(await named(tokens.harness as string)).toEqual(['harness', 'harness']);
    expect(await named(tokens.other as string)).toEqual(['other', 'harness']);
    expect(await named(tokens.admin as string)).toEqual(['admin', 'admin']);
    const grant = (
      await call('POST', '/cloud/browser-grants', tokens.other as string, { environment_id: 'dev-1' })
    ).json().grant as string;
    const session = (await call('POST', '/cloud/browser-grants/exchange', null, { grant })).json().token as string;
    expect(await named(session)).toEqual(['other', 'harness']);
    // An id with characters a header cannot carry as they are travels percent-encoded.
    await addKey('a key/é', 'harness', 'dev-*');
    expect(await named(tokens['a key/é'] as string)).toEqual([encodeURIComponent('a key/é'), 'harness']);

    const bundle = (await connect(tokens.harness as string)).json();
    expect((await validate(bundle)).headers['x-tether-harness-key-id']).toBe('harness');
    const again = await validate(bundle); // consumed: no
    expect(again.json()).toEqual({ valid: false });
    expect([again.headers['x-tether-harness-key-id'], again.headers['x-tether-harness-key-role']]).toEqual([
      undefined,
      undefined,
    ]);
  });

  it('a share link’s session: /validate names it apart from its key (an id and the link’s access); a view-only key’s link is a view', async () => {
    const linkSession = async (bearer: string, shareAccess?: 'view' | 'control') => {
      const minted = await call('POST', '/cloud/browser-grants', bearer, {
        environment_id: 'dev-1',
        ...(shareAccess === undefined ? {} : { share_access: shareAccess }),
      });
      expect(minted.statusCode).toBe(201);
      const exchanged = (
        await call('POST', '/cloud/browser-grants/exchange', null, { grant: minted.json().grant })
      ).json();
      return exchanged as { token: string; share_access?: string };
    };
    const validated = async (bearer: string) => {
      const answer = await validate((await connect(bearer)).json());
      expect(answer.json()).toEqual({ valid: true });
      return {
        key: answer.headers['x-tether-harness-key-id'],
        keyAccess: answer.headers['x-tether-harness-key-access'],
        link: answer.headers['x-tether-harness-link-session'] as string | undefined,
        linkAccess: answer.headers['x-tether-harness-link-access'],
      };
    };
    const control = await linkSession(tokens.harness as string, 'control');
    expect(control.share_access).toBe('control');
    const first = await validated(control.token);
    expect(first).toMatchObject({ key: 'harness', keyAccess: undefined, linkAccess: 'control' });
    expect(first.link).toMatch(/^lnk_[0-9a-f]{24}$/);
    // Every harness of that session is the same link; another session of the same key is another.
    expect((await validated(control.token)).link).toBe(first.link);
    const view = await linkSession(tokens.harness as string, 'view');
    const viewed = await validated(view.token);
    expect(viewed).toMatchObject({ key: 'harness', linkAccess: 'view' });
    expect(viewed.link).not.toBe(first.link);
    // A sign-in session (harness login --web) is its key, as before.
    expect(await validated((await linkSession(tokens.harness as string)).token)).toEqual({
      key: 'harness',
      keyAccess: undefined,
      link: undefined,
      linkAccess: undefined,
    });
    // A view-only key may make links, but a control link of it is a view.
    await registry.addKey('viewer', 'harness', 'dev-*', 'view');
    const capped = await linkSession(tokens.viewer as string, 'control');
    expect(capped.share_access).toBe('view');
    expect(await validated(capped.token)).toMatchObject({ key: 'viewer', keyAccess: 'view', linkAccess: 'view' });
    // Anything else is not a share access.
    const bad = await call('POST', '/cloud/browser-grants', tokens.harness as string, {
      environment_id: 'dev-1',
      share_access: 'owner',
    });
    expect(bad.statusCode).toBe(400);
  });

  it('an admin key may /connect to the environments of its glob (to see every key’s detached processes); an executor key may not', async () => {
    expect((await connect(tokens.admin as string)).statusCode).toBe(200);
    expect((await connect(tokens.exec as string)).statusCode).toBe(403);
    await addKey('narrow-admin', 'admin', 'prod-*');
    expect((await connect(tokens['narrow-admin'] as string)).json().error.code).toBe('forbidden_environment');
  });
});
