import { createHash } from 'node:crypto';
import { createNodeProvider } from '../crypto/node.js';
import { createPortableProvider } from '../crypto/portable.js';
import type { CryptoProvider, Kem, KeyPair } from '../crypto.js';
import type { StaticKeys } from '../identity.js';
import { createInitiator, createResponder } from '../session.js';
import type { Suite } from '../suite.js';

export const hex = (text: string): Uint8Array => Uint8Array.from(Buffer.from(text, 'hex'));
export const toHex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

/** A deterministic byte stream: SHA-256(label ‖ u32 counter) blocks. Same label, same bytes, any provider. */
export function seededRandom(label: string): (length: number) => Uint8Array {
  let counter = 0;
  let pool = new Uint8Array(0);
  return (length: number) => {
    while (pool.length < length) {
      const block = createHash('sha256').update(label).update(Uint32Array.of(counter++)).digest();
      const next = new Uint8Array(pool.length + block.length);
      next.set(pool);
      next.set(block, pool.length);
      pool = next;
    }
    const out = pool.slice(0, length);
    pool = pool.slice(length);
    return out;
  };
}

export const PROVIDERS: Record<string, (randomBytes?: (length: number) => Uint8Array) => CryptoProvider> = {
  node: (randomBytes) => createNodeProvider(randomBytes ? { randomBytes } : {}),
  portable: (randomBytes) => createPortableProvider(randomBytes ? { randomBytes } : {}),
};

export const PROVIDER_NAMES = Object.keys(PROVIDERS) as ('node' | 'portable')[];

/** A provider whose next ephemeral key pairs are the given secrets, as the published vectors require. */
export function withFixedEphemerals(provider: CryptoProvider, secrets: Uint8Array[]): CryptoProvider {
  const queue = [...secrets];
  return {
    ...provider,
    generateKeyPair(): KeyPair {
      const secretKey = queue.shift();
      if (secretKey === undefined) throw new Error('no fixed ephemeral left');
      return { secretKey, publicKey: provider.publicKeyFromSecret(secretKey) };
    },
  };
}

export function keyPair(provider: CryptoProvider, secretHex: string): KeyPair {
  const secretKey = hex(secretHex);
  return { secretKey, publicKey: provider.publicKeyFromSecret(secretKey) };
}

export interface HybridRunOptions {
  suite: Suite;
  initiatorProvider: CryptoProvider;
  responderProvider: CryptoProvider;
  initiatorKem: Kem;
  responderKem: Kem;
  initiatorKeys: StaticKeys;
  responderKeys: StaticKeys;
  prologue?: Uint8Array;
  payload?: Uint8Array;
}

/** One full hybrid IK handshake through the facade, in memory. */
export function runHybrid(options: HybridRunOptions) {
  const prologue = options.prologue ?? new TextEncoder().encode('test prologue');
  const initiator = createInitiator({
    suite: options.suite,
    provider: options.initiatorProvider,
    kem: options.initiatorKem,
    staticKeys: options.initiatorKeys,
    remoteStatic: {
      suite: options.suite,
      x25519: options.responderKeys.x25519.publicKey,
      mlkem768: options.responderKeys.mlkem768.publicKey,
    },
    prologue,
    payload: options.payload ?? new Uint8Array(0),
  });
  const responder = createResponder({
    suite: options.suite,
    provider: options.responderProvider,
    kem: options.responderKem,
    staticKeys: options.responderKeys,
    prologue,
  });
  const pending = responder.readMessage1(initiator.message1);
  const { message2, transport: responderTransport } = pending.writeMessage2();
  const initiatorTransport = initiator.readMessage2(message2);
  return { message1: initiator.message1, message2, pending, initiatorTransport, responderTransport };
}

/** Randomness that replays recorded draws in order and fails loudly if the consumption pattern changes. */
export function scriptedRandom(draws: readonly string[]): {
  randomBytes: (length: number) => Uint8Array;
  left(): number;
} {
  const queue = [...draws];
  return {
    randomBytes(length: number) {
      const next = queue.shift();
      if (next === undefined) throw new Error('scripted randomness exhausted');
      const bytes = hex(next);
      if (bytes.length !== length) throw new Error(`scripted draw has ${bytes.length} bytes, ${length} requested`);
      return bytes;
    },
    left: () => queue.length,
  };
}

/** Wraps a random source and records every draw (hex), to write vectors. */
export function recordingRandom(source: (length: number) => Uint8Array) {
  const draws: string[] = [];
  return {
    draws,
    randomBytes(length: number) {
      const bytes = source(length);
      draws.push(toHex(bytes));
      return bytes;
    },
  };
}
