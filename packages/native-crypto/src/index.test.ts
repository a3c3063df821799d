import { spawnSync } from 'node:child_process';
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it, vi } from 'vitest';
import {
  loadNativeCrypto,
  type NativeCastLine,
  type NativeCipherName,
  nativeCryptoUnavailableReason,
} from './index.js';

const CIPHERS: NativeCipherName[] = ['AESGCM', 'ChaChaPoly'];

/** node:crypto's name for `cipher`, typed as GCM's for the overload (ChaCha20-Poly1305 has the same methods). */
const nodeName = (cipher: NativeCipherName) =>
  (cipher === 'AESGCM' ? 'aes-256-gcm' : 'chacha20-poly1305') as 'aes-256-gcm';

function nodeSeal(cipher: NativeCipherName, key: Uint8Array, nonce: Uint8Array, ad: Uint8Array, plaintext: Uint8Array) {
  const c = createCipheriv(nodeName(cipher), key, nonce, { authTagLength: 16 });
  if (ad.length) c.setAAD(ad);
  return Buffer.concat([c.update(plaintext), c.final(), c.getAuthTag()]);
}

function nodeOpen(cipher: NativeCipherName, key: Uint8Array, nonce: Uint8Array, ad: Uint8Array, sealed: Uint8Array) {
  const d = createDecipheriv(nodeName(cipher), key, nonce, { authTagLength: 16 });
  if (ad.length) d.setAAD(ad);
  d.setAuthTag(sealed.subarray(sealed.length - 16));
  return Buffer.concat([d.update(sealed.subarray(0, sealed.length - 16)), d.final()]);
}

// CI builds the addon (TETHER_NATIVE_CRYPTO=require in .ci/run): not having it is a failure, not a skip.
const native = loadNativeCrypto();

describe('native AEAD', () => {
  it('is built and loads', () => {
    expect(nativeCryptoUnavailableReason()).toBeNull();
    expect(native).not.toBeNull();
  });

  it('seals exactly as node:crypto, from any split of the plaintext, and opens what node:crypto sealed', () => {
    for (const cipher of CIPHERS) {
      const key = randomBytes(32);
      const sealer = native!.sealingKey(cipher, key);
      const opener = native!.openingKey(cipher, key);
      for (const length of [0, 1, 15, 16, 17, 4099, 65_519]) {
        const nonce = randomBytes(12);
        const ad = randomBytes(length % 2 ? 13 : 0);
        const plaintext = randomBytes(length);
        const expected = nodeSeal(cipher, key, nonce, ad, plaintext);
        for (const cuts of [[], [length >> 1], [1, 3, length >> 2].filter((c) => c <= length)]) {
          const parts: Uint8Array[] = [];
          let from = 0;
          for (const cut of [...cuts, length]) {
            parts.push(plaintext.subarray(from, Math.max(from, cut)));
            from = Math.max(from, cut);
          }
          const out = new Uint8Array(length + 16);
          sealer.seal(nonce, ad, parts, out);
          expect(Buffer.from(out).equals(expected)).toBe(true);
        }
        const opened = new Uint8Array(length);
        expect(opener.open(nonce, ad, expected, opened)).toBe(true);
        expect(Buffer.from(opened).equals(plaintext)).toBe(true);
      }
    }
  });

  it('seals and opens in place', () => {
    for (const cipher of CIPHERS) {
      const key = randomBytes(32);
      const nonce = randomBytes(12);
      const plaintext = randomBytes(5000);
      const buffer = new Uint8Array(5016);
      buffer.set(plaintext);
      native!.sealingKey(cipher, key).seal(nonce, new Uint8Array(0), [buffer.subarray(0, 5000)], buffer);
      expect(Buffer.from(nodeOpen(cipher, key, nonce, new Uint8Array(0), buffer)).equals(plaintext)).toBe(true);
      expect(native!.openingKey(cipher, key).open(nonce, new Uint8Array(0), buffer, buffer.subarray(0, 5000))).toBe(
        true,
      );
      expect(Buffer.from(buffer.subarray(0, 5000)).equals(plaintext)).toBe(true);
    }
  });

  it('reports a forged record (body, tag, ad, nonce or key changed) as false', () => {
    for (const cipher of CIPHERS) {
      const key = randomBytes(32);
      const nonce = randomBytes(12);
      const ad = randomBytes(8);
      const sealed = nodeSeal(cipher, key, nonce, ad, randomBytes(300));
      const opener = native!.openingKey(cipher, key);
      const out = new Uint8Array(300);
      for (const index of [0, 299, 300, 315]) {
        const forged = Uint8Array.from(sealed);
        forged[index]! ^= 0x40;
        expect(opener.open(nonce, ad, forged, out)).toBe(false);
      }
      expect(opener.open(nonce, randomBytes(8), sealed, out)).toBe(false);
      expect(opener.open(randomBytes(12), ad, sealed, out)).toBe(false);
      expect(native!.openingKey(cipher, randomBytes(32)).open(nonce, ad, sealed, out)).toBe(false);
      // The context is not poisoned by a failure.
      expect(opener.open(nonce, ad, sealed, out)).toBe(true);
    }
  });

  it('refuses bad arguments before writing anything', () => {
    const key = randomBytes(32);
    const sealer = native!.sealingKey('AESGCM', key);
    const opener = native!.openingKey('AESGCM', key);
    const nonce = randomBytes(12);
    const none = new Uint8Array(0);
    expect(() => native!.sealingKey('AESGCM', randomBytes(16))).toThrow(/key must be 32 bytes/);
    expect(() => sealer.seal(randomBytes(8), none, [randomBytes(4)], new Uint8Array(20))).toThrow(/nonce/);
    expect(() => sealer.seal(nonce, none, [randomBytes(4)], new Uint8Array(21))).toThrow(/length \+ 16/);
    expect(() => sealer.seal(nonce, none, [randomBytes(4)], new Uint8Array(19))).toThrow(/length \+ 16/);
    expect(() => sealer.seal(nonce, none, ['text' as unknown as Uint8Array], new Uint8Array(20))).toThrow(/parts/);
    expect(() => sealer.seal(nonce, none, Array(17).fill(randomBytes(1)), new Uint8Array(33))).toThrow(/16 parts/);
    const buffer = new Uint8Array(40);
    // A part that starts inside the output but not where its ciphertext goes would be overwritten first.
    const before = Uint8Array.from(buffer);
    expect(() => sealer.seal(nonce, none, [buffer.subarray(1, 25)], buffer.subarray(0, 40))).toThrow(/overlaps/);
    expect(Buffer.from(buffer).equals(Buffer.from(before))).toBe(true);
    expect(() => opener.open(nonce, none, randomBytes(15), new Uint8Array(0))).toThrow(/shorter than the tag/);
    expect(() => opener.open(nonce, none, randomBytes(20), new Uint8Array(5))).toThrow(/sealed length - 16/);
    const record = new Uint8Array(40);
    expect(() => opener.open(nonce, none, record, record.subarray(1, 25))).toThrow(/overlaps/);
  });

  it('is switched off by TETHER_NATIVE_CRYPTO=off', async () => {
    vi.resetModules();
    vi.stubEnv('TETHER_NATIVE_CRYPTO', 'off');
    try {
      const fresh = await import('./index.js');
      expect(fresh.loadNativeCrypto()).toBeNull();
      expect(fresh.nativeCryptoUnavailableReason()).toBe('TETHER_NATIVE_CRYPTO=off');
    } finally {
      vi.unstubAllEnvs();
    }
  });
});

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const scratch: string[] = [];
afterAll(() => {
  for (const dir of scratch.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/**
 * Compiles src/__fixtures__/foreign-external.c, another addon's externals, with cc against the headers
 * the build uses (npm_config_nodedir, else beside node). Linux resolves its napi_* symbols from node at
 * load; macOS needs them left undefined explicitly.
 */
function buildForeignAddon(): string {
  const nodedir = process.env.npm_config_nodedir ?? dirname(dirname(process.execPath));
  const dir = mkdtempSync(join(tmpdir(), 'tether-foreign-addon-'));
  scratch.push(dir);
  const out = join(dir, 'foreign.node');
  const flags = process.platform === 'darwin' ? ['-undefined', 'dynamic_lookup'] : [];
  const cc = spawnSync(
    'cc',
    [
      '-shared',
      '-fPIC',
      '-DNAPI_VERSION=8',
      `-I${join(nodedir, 'include', 'node')}`,
      ...flags,
      '-o',
      out,
      join(packageDir, 'src', '__fixtures__', 'foreign-external.c'),
    ],
    { encoding: 'utf8' },
  );
  expect(cc.stderr).toBe('');
  expect(existsSync(out)).toBe(true);
  return out;
}

/**
 * Each wrong context against the raw binding's seal and open, in a child node: without the tag check a
 * foreign pointer is taken for a cipher context, which crashes the process (or worse, does not).
 */
const WRONG_CONTEXTS = `
const { createRequire } = require('node:module');
const load = createRequire(process.cwd() + '/');
const crypto = load('./native/build/Release/tether_crypto.node');
const foreign = load(process.argv[1]);
const key = new Uint8Array(32), nonce = new Uint8Array(12), none = new Uint8Array(0);
const sealing = crypto.create(0, key, true), opening = crypto.create(0, key, false);
const wrong = {
  untaggedExternal: foreign.untagged(), otherTagExternal: foreign.tagged(), taggedObject: foreign.object(),
  plainObject: {}, number: 7, openingForSeal: opening,
};
const results = {};
for (const [name, context] of Object.entries(wrong)) {
  for (const [call, run] of [
    ['seal', () => crypto.seal(context, nonce, none, [new Uint8Array(4)], new Uint8Array(20))],
    ['open', () => crypto.open(name === 'openingForSeal' ? sealing : context, nonce, none, new Uint8Array(20), new Uint8Array(4))],
  ]) {
    try { run(); results[name + '.' + call] = 'accepted'; }
    catch (err) { results[name + '.' + call] = err.constructor.name + ': ' + err.message; }
  }
}
console.log(JSON.stringify(results));
`;

describe('native AEAD contexts', () => {
  it("refuses any other value as a context with a TypeError: objects, other addons' externals, the other direction", () => {
    const foreign = buildForeignAddon();
    const result = spawnSync(process.execPath, ['-e', WRONG_CONTEXTS, foreign], { cwd: packageDir, encoding: 'utf8' });
    expect(result.signal).toBeNull();
    expect(result.stderr).toBe('');
    const results = JSON.parse(result.stdout) as Record<string, string>;
    expect(Object.keys(results)).toHaveLength(12);
    for (const [name, outcome] of Object.entries(results)) {
      const direction = name.endsWith('.seal') ? 'sealing' : 'opening';
      expect(outcome, name).toBe(`TypeError: not a${direction === 'opening' ? 'n' : ''} ${direction} context`);
    }
  });
});

describe('castLine (a recording line, escaped and hashed in one pass)', () => {
  const head = Buffer.from('[1.5,"o","');
  const tail = Buffer.from('"]');
  /** What the addon must make: JSON.stringify of the text, and SHA-256 of the previous link and the line. */
  function expected(previous: Buffer, body: Buffer): { line: Buffer; link: Buffer } {
    const line = Buffer.from(`[1.5,"o",${JSON.stringify(body.toString('utf8'))}]\n`);
    const link = createHash('sha256')
      .update(previous)
      .update(line.subarray(0, line.length - 1))
      .digest();
    return { line, link };
  }
  const room = (body: Uint8Array) => head.length + 6 * body.length + tail.length + 1;

  it('makes the bytes JSON.stringify makes of valid UTF-8, at every length and past its 8 KiB block', () => {
    const text = 'ok "q" \\ \r\n\t\b\f\v\x00\x1b[0m\x7f é ソ \u2028 🙂 ';
    const bodies = [
      Buffer.alloc(0),
      Buffer.from(Array.from({ length: 128 }, (_, i) => i)),
      ...Array.from({ length: 40 }, (_, i) => Buffer.from(text.repeat(1 + i * 7)).subarray(0, 17 * i)),
      Buffer.from(text.repeat(1_000)),
      Buffer.from('x'.repeat(70_000)),
      Buffer.from('\x01'.repeat(20_000)),
    ].filter((body) => Buffer.from(body.toString('utf8')).equals(body));
    expect(bodies.length).toBeGreaterThan(30);
    for (const body of bodies) {
      const previous = randomBytes(32);
      const link = Buffer.alloc(32);
      // Written after what is already there, and nothing past the line touched.
      const out = Buffer.alloc(7 + room(body) + 5, 0xee);
      const length = native!.castLine(previous, head, body, tail, link, out, 7);
      const want = expected(previous, body);
      expect(length).toBe(want.line.length);
      expect(out.subarray(7, 7 + length).equals(want.line), body.toString('hex').slice(0, 80)).toBe(true);
      expect(out.subarray(0, 7).equals(Buffer.alloc(7, 0xee))).toBe(true);
      expect(link.equals(want.link)).toBe(true);
    }
  });

  it('reads the previous link before it writes the new one into the same bytes', () => {
    const previous = randomBytes(32);
    const body = Buffer.from('same bytes\n');
    const want = expected(previous, body);
    const shared = Buffer.from(previous);
    native!.castLine(shared, head, body, tail, shared, Buffer.alloc(room(body)), 0);
    expect(shared.equals(want.link)).toBe(true);
  });

  it('refuses wrong arguments before writing anything: sizes, room, offset, overlap, not bytes', () => {
    const link = Buffer.alloc(32, 7);
    const body = Buffer.from('x');
    const out = Buffer.alloc(64, 9);
    const call =
      (...args: Parameters<NativeCastLine>) =>
      () =>
        native!.castLine(...args);
    expect(call(Buffer.alloc(31), head, body, tail, link, out, 0)).toThrow('previous must be 32 bytes');
    expect(call(Buffer.alloc(32), head, body, tail, Buffer.alloc(33), out, 0)).toThrow('link must be 32 bytes');
    expect(call(Buffer.alloc(32), head, 'x' as unknown as Uint8Array, tail, link, out, 0)).toThrow(
      'must be Uint8Arrays',
    );
    expect(call(Buffer.alloc(32), head, body, tail, link, out, 65)).toThrow('offset must be within out');
    expect(call(Buffer.alloc(32), head, body, tail, link, out, -1)).toThrow('offset must be within out');
    // Room for the longest line, not this one (which would fit).
    expect(call(Buffer.alloc(32), head, body, tail, link, out, 64 - room(body) + 1)).toThrow('must have room');
    expect(call(Buffer.alloc(32), head, out.subarray(40, 41), tail, link, out, 0)).toThrow('overlaps');
    expect(call(Buffer.alloc(32), head, body, tail, out.subarray(32, 64), out, 0)).toThrow('overlaps');
    expect(link.equals(Buffer.alloc(32, 7))).toBe(true);
    expect(out.equals(Buffer.alloc(64, 9))).toBe(true);
  });
});
