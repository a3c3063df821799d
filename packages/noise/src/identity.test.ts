import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { PROVIDERS, seededRandom, toHex } from './__tests__/helpers.js';
import { generateIdentity, identityFromFileJson, identityToFileJson } from './identity.js';
import { IDENTITY_FILE_MODE, loadIdentity, saveIdentity } from './identity-file.js';
import { createMlKem768 } from './kem/ml-kem-768.js';
import { SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY, type Suite } from './suite.js';

const dir = await mkdtemp(join(tmpdir(), 'tether-noise-identity-'));
afterAll(() => rm(dir, { recursive: true, force: true }));
const code = (code: string) => expect.objectContaining({ name: 'NoiseError', code });
const make = (label: string, suite: Suite = SUITE_HYBRID_AESGCM) =>
  generateIdentity({
    suite,
    provider: PROVIDERS.portable!(seededRandom(`${label}/x25519`)),
    kem: createMlKem768({ randomBytes: seededRandom(`${label}/kem`) }),
  });

describe('NoiseIdentity', () => {
  it('generates independent X25519 and ML-KEM-768 key pairs with the exact sizes', () => {
    const identity = make('sizes');
    expect(identity.suite).toBe(SUITE_HYBRID_AESGCM);
    expect([identity.x25519.publicKey.length, identity.x25519.secretKey.length]).toEqual([32, 32]);
    expect([identity.mlkem768.publicKey.length, identity.mlkem768.secretKey.length]).toEqual([1184, 2400]);
    expect(toHex(make('other').x25519.publicKey)).not.toBe(toHex(identity.x25519.publicKey));
    const fresh = [generateIdentity(), generateIdentity()];
    expect(toHex(fresh[0]!.x25519.secretKey)).not.toBe(toHex(fresh[1]!.x25519.secretKey));
  });

  it('saves with mode 0600 and loads the same keys back', async () => {
    const identity = make('file', SUITE_HYBRID_CHACHAPOLY);
    const path = join(dir, 'identity.json');
    await saveIdentity(path, identity);
    expect((await stat(path)).mode & 0o777).toBe(IDENTITY_FILE_MODE);
    const loaded = await loadIdentity(path);
    expect(loaded.suite).toBe(SUITE_HYBRID_CHACHAPOLY);
    expect(toHex(loaded.x25519.secretKey)).toBe(toHex(identity.x25519.secretKey));
    expect(toHex(loaded.mlkem768.secretKey)).toBe(toHex(identity.mlkem768.secretKey));
    expect(toHex(loaded.mlkem768.publicKey)).toBe(toHex(identity.mlkem768.publicKey));
    expect(Object.keys(JSON.parse(await readFile(path, 'utf8')))).toEqual([
      'suite',
      'x25519_public_key',
      'x25519_private_key',
      'mlkem768_public_key',
      'mlkem768_private_key',
    ]);
    // Overwriting an existing file keeps the mode.
    await saveIdentity(path, make('file-2'));
    expect((await stat(path)).mode & 0o777).toBe(IDENTITY_FILE_MODE);
    expect((await loadIdentity(path)).suite).toBe(SUITE_HYBRID_AESGCM);
  });

  it('refuses a file readable by group or others', async () => {
    const path = join(dir, 'open.json');
    await writeFile(path, JSON.stringify(identityToFileJson(make('open'))), { mode: 0o644 });
    await chmod(path, 0o644);
    await expect(loadIdentity(path)).rejects.toThrow(code('invalid_identity'));
  });

  it('rejects mismatched private keys, unknown fields and malformed values', () => {
    const a = identityToFileJson(make('a'));
    const b = identityToFileJson(make('b'));
    expect(identityFromFileJson(a).suite).toBe(SUITE_HYBRID_AESGCM);
    expect(() => identityFromFileJson({ ...a, x25519_private_key: b.x25519_private_key })).toThrow(
      code('invalid_identity'),
    );
    expect(() => identityFromFileJson({ ...a, mlkem768_private_key: b.mlkem768_private_key })).toThrow(
      code('invalid_identity'),
    );
    expect(() => identityFromFileJson({ ...a, comment: 'x' })).toThrow(code('invalid_identity'));
    expect(() => identityFromFileJson({ ...a, x25519_private_key: 'AAAA' })).toThrow(code('invalid_identity'));
    expect(() => identityFromFileJson({ ...a, suite: 'other' })).toThrow(code('bad_suite'));
    expect(() => identityFromFileJson('text')).toThrow(code('invalid_identity'));
  });
});
