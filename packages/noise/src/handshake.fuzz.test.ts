import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeBase64 } from './base64.js';
import { isNoiseError } from './errors.js';
import { generateIdentity, identityFromFileJson, identityToFileJson } from './identity.js';
import { parsePublicKey, parsePublicKeyJson, publicKeyToJson, serializePublicKey } from './keys.js';
import { MAX_HANDSHAKE_PAYLOAD } from './limits.js';
import { createInitiator, createResponder, HYBRID_MESSAGE1_OVERHEAD, HYBRID_MESSAGE2_LENGTH } from './session.js';
import { SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY } from './suite.js';

// Hostile handshake messages and key JSON (issue 16): whatever bytes arrive as message 1 or 2, and whatever
// JSON claims to be a key, the answer is a NoiseError with a stable code, never another exception and never
// a handshake that completes from altered bytes. Runs per property: TETHER_FUZZ_RUNS (`pnpm fuzz` raises
// it); the handshake properties do public-key work per run, so they run a tenth of that.
const numRuns = Number(process.env.TETHER_FUZZ_RUNS) || 300;
// TETHER_FUZZ_SEED replays a failure's printed seed.
if (process.env.TETHER_FUZZ_SEED) fc.configureGlobal({ seed: Number(process.env.TETHER_FUZZ_SEED) });
const cryptoRuns = Math.max(25, Math.ceil(numRuns / 10));

const harness = generateIdentity();
const executor = generateIdentity();
const prologue = new TextEncoder().encode('fuzz prologue');

function expectNoiseError(run: () => unknown): void {
  try {
    run();
  } catch (error) {
    if (!isNoiseError(error)) throw error;
    return;
  }
  throw new Error('expected a NoiseError');
}

function initiator(payload = new Uint8Array(0)) {
  return createInitiator({ remoteStatic: executor.publicKey, staticKeys: harness, prologue, payload });
}

function responder() {
  return createResponder({ staticKeys: executor, prologue });
}

/** Byte edits a hostile relay or peer could make: flips, cuts, inserts, appends. */
const edits = fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 3 }), fc.integer({ min: 1, max: 255 })), {
  minLength: 1,
  maxLength: 4,
});

function applyEdits(message: Uint8Array, list: Array<[number, number, number]>): Uint8Array {
  let bytes = Buffer.from(message);
  for (const [at, op, value] of list) {
    const i = at % bytes.length;
    if (op === 0) bytes[i] = (bytes[i] as number) ^ value;
    else if (op === 1) bytes = bytes.subarray(0, i);
    else if (op === 2) bytes = Buffer.concat([bytes.subarray(0, i), Buffer.of(value), bytes.subarray(i)]);
    else bytes = Buffer.concat([bytes, Buffer.alloc(value, value)]);
  }
  return bytes;
}

/** True when `a` and `b` hold the same bytes. */
const sameBytes = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b));

describe('fuzz: Noise handshake messages', () => {
  it('message 1 of random bytes, of any length around the limits, is refused with a NoiseError', () => {
    const lengths = fc.oneof(
      fc.integer({ min: 0, max: 64 }),
      fc.integer({ min: HYBRID_MESSAGE1_OVERHEAD - 2, max: HYBRID_MESSAGE1_OVERHEAD + 64 }),
      fc.integer({ min: HYBRID_MESSAGE1_OVERHEAD + MAX_HANDSHAKE_PAYLOAD - 2, max: 9000 }),
    );
    fc.assert(
      fc.property(lengths, fc.integer({ min: 0, max: 255 }), (length, seed) => {
        const bytes = Uint8Array.from({ length }, (_, i) => (i * 131 + seed * 7) & 0xff);
        expectNoiseError(() => responder().readMessage1(bytes));
      }),
      { numRuns: cryptoRuns },
    );
  });

  it('a mutated message 1 never authenticates: NoiseError, no pending responder', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), edits, (payload, list) => {
        const message1 = initiator(payload).message1;
        const mangled = applyEdits(message1, list);
        fc.pre(!sameBytes(mangled, message1));
        expectNoiseError(() => responder().readMessage1(mangled));
      }),
      { numRuns: cryptoRuns },
    );
  });

  it('a mutated or random message 2 never yields a transport', () => {
    fc.assert(
      fc.property(edits, fc.boolean(), (list, random) => {
        const harnessSide = initiator();
        const { message2 } = responder().readMessage1(harnessSide.message1).writeMessage2();
        const mangled = random
          ? Uint8Array.from({ length: HYBRID_MESSAGE2_LENGTH }, (_, i) => i)
          : applyEdits(message2, list);
        fc.pre(!sameBytes(mangled, message2));
        expectNoiseError(() => harnessSide.readMessage2(mangled));
      }),
      { numRuns: cryptoRuns },
    );
  });

  it('transport records that were not sealed by the peer are refused as decrypt_failed', () => {
    const harnessSide = initiator();
    const pending = responder().readMessage1(harnessSide.message1);
    const { message2, transport: executorTransport } = pending.writeMessage2();
    const harnessTransport = harnessSide.readMessage2(message2);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), edits, fc.boolean(), (plaintext, list, random) => {
        const sealed = harnessTransport.encrypt(plaintext);
        const mangled = random ? applyEdits(new Uint8Array(sealed.length), list) : applyEdits(sealed, list);
        // Edits that cancel out leave the genuine record (no fc.pre here: the sender's nonce was used).
        if (!sameBytes(mangled, sealed)) {
          try {
            executorTransport.decrypt(mangled);
            throw new Error('a mangled record decrypted');
          } catch (error) {
            expect(isNoiseError(error)).toBe(true);
          }
        }
        // The receiver stays in step: the genuine record still opens (the failed one used no nonce).
        expect(sameBytes(executorTransport.decrypt(sealed), plaintext)).toBe(true);
      }),
      { numRuns },
    );
  });
});

const validKey = publicKeyToJson(executor.publicKey);
const MLKEM_Q = 3329;

/** ByteEncode12 of 768 coefficients, then ρ: an ML-KEM-768 encapsulation key (FIPS 203 §5.1). */
function encodeMlKemKey(values: number[], rho: Uint8Array): Uint8Array {
  const out = new Uint8Array(1184);
  for (let i = 0; i < values.length; i += 2) {
    const [a, b] = [values[i] as number, values[i + 1] as number];
    const at = (i / 2) * 3;
    out[at] = a & 0xff;
    out[at + 1] = (a >> 8) | ((b & 0x0f) << 4);
    out[at + 2] = b >> 4;
  }
  out.set(rho, 1152);
  return out;
}
const chachaKey = publicKeyToJson(generateIdentity({ suite: SUITE_HYBRID_CHACHAPOLY }).publicKey);

/** Key-shaped JSON values: the right fields with wrong values, extra or missing fields, wrong types. */
const keyLike = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.record(
    {
      suite: fc.oneof(fc.constantFrom(SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY, ''), fc.jsonValue({ maxDepth: 1 })),
      x25519_public_key: fc.oneof(
        fc.constant(validKey.x25519_public_key),
        fc.uint8Array({ minLength: 31, maxLength: 33 }).map(encodeBase64),
        fc.jsonValue({ maxDepth: 1 }),
      ),
      mlkem768_public_key: fc.oneof(
        fc.constant(validKey.mlkem768_public_key),
        fc.constant(chachaKey.mlkem768_public_key),
        fc.uint8Array({ minLength: 1183, maxLength: 1185 }).map(encodeBase64),
        fc.jsonValue({ maxDepth: 1 }),
      ),
      extra: fc.jsonValue({ maxDepth: 1 }),
    },
    { requiredKeys: [] },
  ),
);

/** Text edits of the valid key JSON: a changed character anywhere (base64 symbols, quotes, braces). */
const keyText = fc
  .tuple(fc.nat(), fc.string({ unit: 'binary-ascii', maxLength: 2 }), fc.integer({ min: 0, max: 2 }))
  .map(([at, insert, cut]) => {
    const text = JSON.stringify(validKey);
    const i = at % text.length;
    return text.slice(0, i) + insert + text.slice(i + cut);
  });

describe('fuzz: key JSON (NoiseChannelPublicKey)', () => {
  it('parsePublicKey returns a checked key or throws invalid_public_key / bad_suite', () => {
    fc.assert(
      fc.property(keyLike, (value) => {
        try {
          const key = parsePublicKey(value);
          expect(key.x25519.length).toBe(32);
          expect(key.mlkem768.length).toBe(1184);
          expect(parsePublicKeyJson(serializePublicKey(key))).toEqual(key);
        } catch (error) {
          expect(isNoiseError(error, 'invalid_public_key') || isNoiseError(error, 'bad_suite')).toBe(true);
        }
      }),
      { numRuns },
    );
  });

  it('parsePublicKeyJson of edited key text is the same canonical key or a NoiseError', () => {
    fc.assert(
      fc.property(keyText, (text) => {
        try {
          const key = parsePublicKeyJson(text);
          // Whatever was accepted re-serializes to exactly the fields that were read.
          expect(publicKeyToJson(key)).toEqual(JSON.parse(text));
        } catch (error) {
          expect(isNoiseError(error, 'invalid_public_key') || isNoiseError(error, 'bad_suite')).toBe(true);
        }
      }),
      { numRuns },
    );
  });

  it('an ML-KEM key is accepted exactly when every coefficient is below q, and then starts a handshake', () => {
    // Coefficients from a seed (an array of 768 would make shrinking a failure take minutes).
    const coefficients = fc.tuple(
      fc.integer(),
      fc.option(fc.tuple(fc.integer({ min: 0, max: 767 }), fc.integer({ min: MLKEM_Q, max: 4095 })), { nil: null }),
      fc.uint8Array({ minLength: 32, maxLength: 32 }),
    );
    fc.assert(
      fc.property(coefficients, ([seed, bad, rho]) => {
        const values = Array.from({ length: 768 }, (_, i) => Math.abs((seed ^ (i * 0x9e3779b1)) % MLKEM_Q));
        if (bad) values[bad[0]] = bad[1];
        const json = { ...validKey, mlkem768_public_key: encodeBase64(encodeMlKemKey(values, rho)) };
        if (bad) {
          expect(() => parsePublicKey(json)).toThrow(expect.objectContaining({ code: 'invalid_public_key' }));
          return;
        }
        const key = parsePublicKey(json);
        const started = createInitiator({ remoteStatic: key, staticKeys: harness, prologue });
        expect(started.message1.length).toBe(HYBRID_MESSAGE1_OVERHEAD);
      }),
      { numRuns: cryptoRuns },
    );
  });

  it('keys generated by either backend always pass the checks', () => {
    fc.assert(
      fc.property(fc.constantFrom(SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY), (suite) => {
        const key = generateIdentity({ suite }).publicKey;
        expect(parsePublicKeyJson(serializePublicKey(key))).toEqual(key);
      }),
      { numRuns: cryptoRuns },
    );
  });

  it('identityFromFileJson refuses edited identity files with invalid_identity / invalid_public_key / bad_suite', () => {
    const file = identityToFileJson(harness) as unknown as Record<string, unknown>;
    const other = identityToFileJson(executor) as unknown as Record<string, unknown>;
    fc.assert(
      fc.property(
        fc.dictionary(
          fc.constantFrom(...Object.keys(file), 'extra'),
          fc.oneof(fc.jsonValue({ maxDepth: 1 }), fc.constantFrom(...Object.values(other))),
          { minKeys: 1, maxKeys: 3 },
        ),
        (changes) => {
          const edited = { ...file, ...changes };
          fc.pre(JSON.stringify(edited) !== JSON.stringify(file));
          try {
            identityFromFileJson(edited);
          } catch (error) {
            expect(
              ['invalid_identity', 'invalid_public_key', 'bad_suite'].some((code) =>
                isNoiseError(error, code as never),
              ),
            ).toBe(true);
            return;
          }
          // Accepted: only when each key pair is whole, from one identity (swapping in the other's pair).
          for (const half of ['x25519', 'mlkem768']) {
            const pair = (from: Record<string, unknown>) => [from[`${half}_public_key`], from[`${half}_private_key`]];
            const [pub, priv] = pair(edited);
            expect([pair(file), pair(other)]).toContainEqual([pub, priv]);
          }
          expect(edited.suite).toBe(file.suite);
        },
      ),
      { numRuns: cryptoRuns },
    );
  });
});

describe('regressions found by fuzzing', () => {
  it('an ML-KEM key with coefficients of q or more (all bytes 0xff) is refused as invalid_public_key', () => {
    // Found by fuzzing key JSON: such a key passed parsePublicKey, and createInitiator encapsulated to it.
    const key = { ...validKey, mlkem768_public_key: encodeBase64(new Uint8Array(1184).fill(0xff)) };
    expect(() => parsePublicKey(key)).toThrow(expect.objectContaining({ code: 'invalid_public_key' }));
    const decoded = { ...executor.publicKey, mlkem768: new Uint8Array(1184).fill(0xff) };
    expect(() => createInitiator({ remoteStatic: decoded, staticKeys: harness, prologue })).toThrow(
      expect.objectContaining({ code: 'invalid_public_key' }),
    );
    // The largest reduced coefficient (q - 1 = 0xd00) is fine.
    expect(
      parsePublicKey({
        ...validKey,
        mlkem768_public_key: encodeBase64(encodeMlKemKey(new Array(768).fill(MLKEM_Q - 1), new Uint8Array(32))),
      }).mlkem768.length,
    ).toBe(1184);
  });
});
