import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { CipherState } from '../cipher-state.js';
import { isNoiseError } from '../errors.js';
import { Transport } from '../transport.js';
import { createNodeProvider } from './node.js';
import { createWebCryptoProvider } from './webcrypto.js';

const node = createNodeProvider();

/** A transport whose receive side opens with `provider`, and a sealer for the same key. */
function channel(cipher: 'AESGCM' | 'ChaChaPoly') {
  const key = randomBytes(32);
  const sealer = new CipherState(node, cipher, key);
  const receiver = new Transport(
    new CipherState(node, cipher, randomBytes(32)),
    new CipherState(createWebCryptoProvider(), cipher, key),
    new Uint8Array(32),
  );
  return { sealer, receiver };
}

describe('createWebCryptoProvider', () => {
  it('opens AES-GCM records with WebCrypto: the same plaintexts as the node provider, nonces taken in call order', async () => {
    const { sealer, receiver } = channel('AESGCM');
    expect(receiver.opensAsync).toBe(true);
    const plaintexts = [0, 1, 17, 60 * 1024, 65_519].map((size) => randomBytes(size));
    const sealed = plaintexts.map((p) => sealer.encrypt(p));
    // All handed over before any settles: each took its nonce when called.
    const opening = sealed.map((c) => receiver.decryptAsync(c));
    expect(receiver.recvNonce).toBe(BigInt(sealed.length));
    const opened = await Promise.all(opening);
    expect(opened.map((p) => Buffer.from(p).toString('hex'))).toEqual(plaintexts.map((p) => p.toString('hex')));
  });

  it('takes what it needs from a record when called: the buffer may be reused at once (before and after the key is ready)', async () => {
    const { sealer, receiver } = channel('AESGCM');
    const plaintexts = [randomBytes(100), randomBytes(60 * 1024)];
    const opening: Promise<Uint8Array>[] = [];
    for (const plaintext of plaintexts) {
      const record = sealer.encrypt(plaintext);
      opening.push(receiver.decryptAsync(record));
      record.fill(0); // the link's buffer, reused for the next message
      await Promise.resolve();
    }
    await opening[0];
    const later = randomBytes(5000);
    const record = sealer.encrypt(later);
    opening.push(receiver.decryptAsync(record));
    record.fill(0);
    const opened = await Promise.all(opening);
    expect(opened.map((p) => Buffer.from(p).toString('hex'))).toEqual(
      [...plaintexts, later].map((p) => p.toString('hex')),
    );
  });

  it('seals AES-GCM records with WebCrypto: the same bytes as the node provider, nonces taken in call order', async () => {
    const key = randomBytes(32);
    const reference = new CipherState(node, 'AESGCM', key);
    const sender = new Transport(
      new CipherState(createWebCryptoProvider(), 'AESGCM', key),
      new CipherState(node, 'AESGCM', randomBytes(32)),
      new Uint8Array(32),
    );
    expect(sender.sealsAsync).toBe(true);
    const plaintexts = [0, 1, 17, 60 * 1024, 65_519].map((size) => randomBytes(size));
    const sealing = plaintexts.map((p) => {
      const reused = Buffer.from(p);
      const sealed = sender.encryptAsync(reused);
      reused.fill(0); // taken when called
      return sealed;
    });
    expect(sender.sendNonce).toBe(BigInt(plaintexts.length));
    const sealed = await Promise.all(sealing);
    expect(sealed.map((c) => Buffer.from(c).toString('hex'))).toEqual(
      plaintexts.map((p) => Buffer.from(reference.encrypt(p)).toString('hex')),
    );
    await expect(sender.encryptAsync(new Uint8Array(65_520))).rejects.toThrow(/exceeds/);
  });

  it('rejects a tampered record, or one opened out of order, as decrypt_failed', async () => {
    const { sealer, receiver } = channel('AESGCM');
    const records = ['first', 'second', 'third', 'fourth'].map((text) => sealer.encrypt(Buffer.from(text)));
    const tampered = Uint8Array.from(records[0]!);
    tampered[0]! ^= 1;
    const error = await receiver.decryptAsync(tampered).catch((err: unknown) => err);
    expect(isNoiseError(error) && error.code).toBe('decrypt_failed');
    // The failed record used up its nonce (the caller ends the channel on a rejection): the next one in
    // order still opens under its own nonce, and records handed over out of order do not.
    expect(Buffer.from(await receiver.decryptAsync(records[1]!)).toString()).toBe('second');
    await expect(receiver.decryptAsync(records[3]!)).rejects.toThrow(/decryption failed/);
    await expect(receiver.decryptAsync(records[2]!)).rejects.toThrow(/decryption failed/);
    await expect(receiver.decryptAsync(new Uint8Array(5))).rejects.toThrow(/decryption failed/);
  });

  it('leaves ChaChaPoly (not in WebCrypto) to the base provider, synchronously', async () => {
    const { sealer, receiver } = channel('ChaChaPoly');
    expect(receiver.opensAsync).toBe(false);
    const plaintext = randomBytes(1000);
    expect(Buffer.from(await receiver.decryptAsync(sealer.encrypt(plaintext))).equals(plaintext)).toBe(true);
    expect(Buffer.from(receiver.decrypt(sealer.encrypt(plaintext))).equals(plaintext)).toBe(true);
  });

  it('delegates everything else to its base provider', () => {
    const provider = createWebCryptoProvider({ base: node });
    expect(provider.name).toBe(`${node.name}+webcrypto`);
    const pair = provider.generateKeyPair();
    expect(provider.publicKeyFromSecret(pair.secretKey)).toEqual(pair.publicKey);
    expect(provider.hash([Buffer.from('abc')])).toEqual(node.hash([Buffer.from('abc')]));
    expect(provider.keyedAead).toBeTypeOf('function');
  });

  it('says so when there is no WebCrypto', () => {
    const subtle = Object.getOwnPropertyDescriptor(globalThis, 'crypto');
    Object.defineProperty(globalThis, 'crypto', { value: undefined, configurable: true });
    try {
      expect(() => createWebCryptoProvider()).toThrow(/crypto\.subtle/);
    } finally {
      Object.defineProperty(globalThis, 'crypto', subtle!);
    }
  });
});
