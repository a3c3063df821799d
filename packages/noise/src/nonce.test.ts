import { describe, expect, it } from 'vitest';
import { toHex } from './__tests__/helpers.js';
import { CipherState } from './cipher-state.js';
import { createNodeProvider } from './crypto/node.js';
import { MAX_NONCE, Nonce } from './nonce.js';

describe('Nonce', () => {
  it('lays AES-GCM out as 4 zero bytes and a big-endian u64 counter', () => {
    expect(toHex(new Nonce('AESGCM', 0x0102030405060708n).bytes())).toBe('000000000102030405060708');
    expect(toHex(new Nonce('AESGCM', 1n).bytes())).toBe('000000000000000000000001');
  });

  it('lays ChaChaPoly out as 4 zero bytes and a little-endian u64 counter', () => {
    expect(toHex(new Nonce('ChaChaPoly', 0x0102030405060708n).bytes())).toBe('000000000807060504030201');
    expect(toHex(new Nonce('ChaChaPoly', 1n).bytes())).toBe('000000000100000000000000');
  });

  it('increments and refuses values outside u64', () => {
    const nonce = new Nonce('AESGCM');
    nonce.increment();
    nonce.increment();
    expect(nonce.value).toBe(2n);
    expect(() => nonce.set(MAX_NONCE + 1n)).toThrow(RangeError);
    expect(() => nonce.set(-1n)).toThrow(RangeError);
  });
});

describe('CipherState', () => {
  const provider = createNodeProvider();
  const key = new Uint8Array(32).fill(7);

  it('passes plaintext through while it has no key', () => {
    const cs = new CipherState(provider, 'AESGCM');
    expect(cs.hasKey()).toBe(false);
    expect(toHex(cs.encryptWithAd(new Uint8Array(0), Uint8Array.of(1, 2, 3)))).toBe('010203');
    expect(cs.nonce).toBe(0n);
  });

  it.each(['AESGCM', 'ChaChaPoly'] as const)('uses 2^64-2 as the last nonce, then fails closed (%s)', (cipher) => {
    const sender = new CipherState(provider, cipher, key);
    const receiver = new CipherState(provider, cipher, key);
    sender.setNonce(MAX_NONCE - 1n);
    receiver.setNonce(MAX_NONCE - 1n);
    const last = sender.encrypt(Uint8Array.of(9));
    expect(Array.from(receiver.decrypt(last))).toEqual([9]);
    expect(() => sender.encrypt(Uint8Array.of(9))).toThrow(expect.objectContaining({ code: 'nonce_exhausted' }));
    expect(() => receiver.decrypt(last)).toThrow(expect.objectContaining({ code: 'nonce_exhausted' }));
  });

  it('does not advance n when authentication fails', () => {
    const sender = new CipherState(provider, 'ChaChaPoly', key);
    const receiver = new CipherState(provider, 'ChaChaPoly', key);
    const record = sender.encrypt(Uint8Array.of(1, 2, 3));
    const tampered = Uint8Array.from(record);
    tampered[0]! ^= 1;
    expect(() => receiver.decrypt(tampered)).toThrow(expect.objectContaining({ code: 'decrypt_failed' }));
    expect(receiver.nonce).toBe(0n);
    expect(Array.from(receiver.decrypt(record))).toEqual([1, 2, 3]);
    expect(receiver.nonce).toBe(1n);
  });

  it('binds the associated data', () => {
    const sender = new CipherState(provider, 'AESGCM', key);
    const receiver = new CipherState(provider, 'AESGCM', key);
    const record = sender.encryptWithAd(Uint8Array.of(1), Uint8Array.of(5));
    expect(() => receiver.decryptWithAd(Uint8Array.of(2), record)).toThrow(
      expect.objectContaining({ code: 'decrypt_failed' }),
    );
  });
});
