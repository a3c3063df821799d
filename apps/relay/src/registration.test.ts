import { describe, expect, it } from 'vitest';
import { Endpoint, expectServing, metric, refusal, signedUrl, startRelay } from './__tests__/support.js';
import { CLOSE } from './limits.js';

describe('registration epochs', () => {
  it('refuses an environment socket with an older epoch (HTTP 409 stale_registration); the current one stays', async () => {
    const { url, relay } = await startRelay();
    const current = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-5', epoch: 5 }));
    await expectServing(url, current, 'env-1', 'reg-5');
    const stale = await refusal(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-4', epoch: 4 }));
    expect(stale).toEqual({ status: 409, body: 'stale_registration\n' });
    expect(current.ws.readyState).toBe(current.ws.OPEN);
    await expectServing(url, current, 'env-1', 'reg-5');
    expect(metric(relay, 'relay_upgrades_refused_total{reason="stale_registration"}')).toBe(1);
  });

  it('closes a socket replaced by its own registration with 4011 (reconnect) and only a newer one with 4001 (final)', async () => {
    const { url } = await startRelay();
    const first = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-5', epoch: 5 }));
    // The same URL again (the executor reconnecting, or someone replaying its URL) must not look final.
    const replay = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-5', epoch: 5 }));
    expect((await first.closed).code).toBe(CLOSE.REPLACED_SAME_REGISTRATION);
    const newer = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-6', epoch: 6 }));
    expect((await replay.closed).code).toBe(CLOSE.REPLACED);
    await expectServing(url, newer, 'env-1', 'reg-6');
  });

  it('remembers the newest epoch after its socket leaves, so a stale executor cannot take a reconnecting one’s place', async () => {
    const { url } = await startRelay();
    const current = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-5', epoch: 5 }));
    current.ws.close(1000);
    await current.closed;
    expect((await refusal(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-4', epoch: 4 }))).status).toBe(
      409,
    );
    // The current executor reconnects with its own URL; a newer registration then displaces it, as before.
    const back = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-5', epoch: 5 }));
    await expectServing(url, back, 'env-1', 'reg-5');
    const newer = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-6', epoch: 6 }));
    expect((await back.closed).code).toBe(CLOSE.REPLACED);
    await expectServing(url, newer, 'env-1', 'reg-6');
    expect((await refusal(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-5', epoch: 5 }))).status).toBe(
      409,
    );
  });

  it('epochs are per environment, and a full table never forgets a connected environment’s epoch', async () => {
    const { url, relay } = await startRelay({ maxRememberedRegistrations: 1 });
    const current = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-5', epoch: 5 }));
    // env-2 at epoch 1 is not stale for env-1's sake; remembering it forgets env-1's entry (capacity 1).
    await Endpoint.open(signedUrl(url, 'environment', 'env-2', { registrationId: 'reg-a', epoch: 1 }));
    expect(metric(relay, 'relay_forgotten_total{table="epochs"}')).toBe(1);
    expect((await refusal(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-4', epoch: 4 }))).status).toBe(
      409,
    );
    await expectServing(url, current, 'env-1', 'reg-5');
  });

  it('forgets an epoch once every URL older than it has expired (the URL lifetime)', async () => {
    let clock = Date.now();
    const { url } = await startRelay({ urlLifetimeMs: 60_000 }, { now: () => clock });
    const current = await Endpoint.open(signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-5', epoch: 5 }));
    current.ws.close(1000);
    await current.closed;
    const staleUrl = signedUrl(url, 'environment', 'env-1', { registrationId: 'reg-4', epoch: 4 });
    clock += 59_999;
    expect((await refusal(staleUrl)).status).toBe(409);
    clock += 1;
    await Endpoint.open(staleUrl);
  });
});
