import { generateKeyPairSync } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type RelayGrant, type SigningKey, signRelayUrl, verifyRelayRequest } from './signing.js';

// Signed relay URLs against hostile upgrade requests (issue 16): verifyRelayRequest never throws, refuses
// with a status and a reason, and no edit of a signed URL verifies to a grant other than the one signed.
// Runs per property: TETHER_FUZZ_RUNS (`pnpm fuzz` raises it); a failure prints the seed to replay it.
const numRuns = Number(process.env.TETHER_FUZZ_RUNS) || 300;
// TETHER_FUZZ_SEED replays a failure's printed seed.
if (process.env.TETHER_FUZZ_SEED) fc.configureGlobal({ seed: Number(process.env.TETHER_FUZZ_SEED) });

const pair = generateKeyPairSync('ed25519');
const key: SigningKey = { privateKey: pair.privateKey, publicKey: pair.publicKey };
const NOW = 1_700_000_000;
const REASONS = ['malformed_url', 'missing_signature', 'bad_signature', 'expired', 'forbidden_role'];

// Half of them with a nonce (a harness bundle's), half without (an environment's, or an older registry's).
const grant: fc.Arbitrary<RelayGrant> = fc.record(
  {
    role: fc.constantFrom('environment' as const, 'harness' as const),
    environmentId: fc.stringMatching(/^[A-Za-z0-9_-]{1,20}$/),
    registrationId: fc.stringMatching(/^[\x21-\x7e]{1,24}$/),
    epoch: fc.nat(),
    expiresAt: fc.integer({ min: NOW + 1, max: NOW + 86_400 }),
    nonce: fc.stringMatching(/^[A-Za-z0-9_-]{22}$/),
  },
  { requiredKeys: ['role', 'environmentId', 'registrationId', 'epoch', 'expiresAt'] },
);

/** The path and query a relay sees for a signed URL. */
function pathAndQuery(url: string): string {
  const parsed = new URL(url);
  return `${parsed.pathname}${parsed.search}`;
}

function expectRefusal(result: ReturnType<typeof verifyRelayRequest>): void {
  if (result.ok) return;
  expect([401, 403]).toContain(result.status);
  expect(REASONS).toContain(result.reason);
}

/** Edits of a request line: a changed, inserted or removed character; a duplicated, dropped or re-encoded parameter. */
const edit: fc.Arbitrary<Edit> = fc.oneof(
  fc.tuple(
    fc.constant('char' as const),
    fc.nat(),
    fc.string({ unit: 'binary-ascii', maxLength: 2 }),
    fc.nat({ max: 2 }),
  ),
  fc.tuple(fc.constant('param' as const), fc.nat(), fc.constantFrom('drop', 'dup', 'encode', 'swap', 'empty')),
);

type Edit = ['char', number, string, number] | ['param', number, string];

function applyEdit(text: string, e: Edit): string {
  if (e[0] === 'char') {
    const [, at, insert, cut] = e;
    const i = at % (text.length + 1);
    return text.slice(0, i) + insert + text.slice(i + cut);
  }
  const [, at, what] = e;
  const [path, query = ''] = text.split('?');
  const params = query.split('&');
  const i = at % params.length;
  const param = params[i] as string;
  if (what === 'drop') params.splice(i, 1);
  else if (what === 'dup') params.push(param.replace(/=.*/, `=${param.length}`));
  else if (what === 'encode') params[i] = param.replace(/=(.)/, (_m, c: string) => `=%${c.charCodeAt(0).toString(16)}`);
  else if (what === 'swap') params.reverse();
  else params[i] = param.replace(/=.*/, '=');
  return `${path}?${params.join('&')}`;
}

describe('fuzz: signed relay URLs', () => {
  it('verifyRelayRequest never throws on arbitrary paths and queries, and refuses with a status and reason', () => {
    const junk = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 80 }),
      fc.webPath(),
      fc
        .tuple(fc.webPath(), fc.webQueryParameters())
        .map(
          ([path, query]) => `${path}/ws/environment/e?${query}&role=harness&registration=r&epoch=1&expires=9&sig=x`,
        ),
      fc
        .tuple(fc.string({ maxLength: 10 }), fc.string({ maxLength: 10 }), fc.string({ maxLength: 90 }))
        .map(
          ([epoch, expires, sig]) =>
            `/ws/environment/e?role=environment&registration=r&epoch=${epoch}&expires=${expires}&sig=${sig}`,
        ),
    );
    fc.assert(
      fc.property(junk, (request) => {
        const result = verifyRelayRequest(request, key.publicKey, NOW);
        expect(result.ok).toBe(false);
        expectRefusal(result);
      }),
      { numRuns },
    );
  });

  it('an edited signed URL either is refused or verifies to exactly the grant that was signed', () => {
    fc.assert(
      fc.property(grant, fc.array(edit, { minLength: 1, maxLength: 3 }), (signed, edits) => {
        const original = pathAndQuery(signRelayUrl('ws://relay.test/base', signed, key));
        expect(verifyRelayRequest(original, key.publicKey, NOW)).toEqual({ ok: true, grant: signed });
        let request = original;
        for (const e of edits) request = applyEdit(request, e);
        const result = verifyRelayRequest(request, key.publicKey, NOW);
        if (result.ok) expect(result.grant).toEqual(signed);
        else expectRefusal(result);
      }),
      { numRuns },
    );
  });

  it('a signed URL for one grant never verifies with another grant’s fields swapped in', () => {
    fc.assert(
      fc.property(grant, grant, fc.constantFrom('role', 'registration', 'epoch', 'expires', 'nonce'), (a, b, field) => {
        const url = new URL(signRelayUrl('ws://relay.test', a, key));
        const other = new URL(signRelayUrl('ws://relay.test', b, key));
        const value = other.searchParams.get(field);
        if (value === null) url.searchParams.delete(field);
        else url.searchParams.set(field, value);
        const result = verifyRelayRequest(`${url.pathname}${url.search}`, key.publicKey, NOW);
        if (result.ok) expect(result.grant).toEqual(a);
        else expectRefusal(result);
      }),
      { numRuns },
    );
  });

  it('a genuine signature is refused as expired at and after its expiry', () => {
    fc.assert(
      fc.property(grant, fc.nat({ max: 10_000 }), (signed, late) => {
        const request = pathAndQuery(signRelayUrl('ws://relay.test', signed, key));
        expect(verifyRelayRequest(request, key.publicKey, signed.expiresAt + late)).toEqual({
          ok: false,
          status: 401,
          reason: 'expired',
        });
      }),
      { numRuns },
    );
  });
});
