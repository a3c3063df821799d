import { defaultProvider } from '#platform';
import { type CryptoProvider, type Kem, type KemEphemeral, type KeyPair, X25519_KEY_LENGTH } from './crypto.js';
import { NoiseError } from './errors.js';
import { HybridIKHandshake } from './handshake-state.js';
import type { StaticKeys } from './identity.js';
import { createMlKem768, MLKEM768_PUBLIC_KEY_LENGTH, MLKEM768_SECRET_KEY_LENGTH } from './kem/ml-kem-768.js';
import { checkPublicKey, type NoisePublicKey } from './keys.js';
import { MAX_HANDSHAKE_PAYLOAD } from './limits.js';
import { DEFAULT_SUITE, type Suite, type SuiteInfo, suiteInfo } from './suite.js';
import { Transport } from './transport.js';

/** Fixed message sizes of the hybrid IK (rendezvous.md §4.5–4.6). */
export const HYBRID_MESSAGE1_OVERHEAD = 3568;
export const HYBRID_MESSAGE2_LENGTH = 3424;

interface CommonOptions {
  /** Defaults to the remote key's suite (initiator) or the Codex suite (responder). */
  suite?: Suite;
  provider?: CryptoProvider;
  kem?: Kem;
  staticKeys: StaticKeys;
  /** Binds routing ids; build it with `buildRelayPrologue`. Both sides must use the same bytes. */
  prologue: Uint8Array;
}

export interface InitiatorOptions extends CommonOptions {
  /** The responder's pinned public key (both halves), e.g. from the rendezvous bundle. */
  remoteStatic: NoisePublicKey;
  /** Message-1 payload (the authorization), at most 4096 bytes; encrypted under es/ss. */
  payload?: Uint8Array;
}

export interface Initiator {
  readonly message1: Uint8Array;
  /** Reads message 2 and returns the transport; a non-empty message-2 payload is a handshake failure. */
  readMessage2(message: Uint8Array): Transport;
}

export type ResponderOptions = CommonOptions;

export interface PendingResponder {
  /** The initiator's authenticated static keys (to be validated, e.g. by the registry). */
  readonly remoteStatic: NoisePublicKey;
  readonly payload: Uint8Array;
  writeMessage2(): { message2: Uint8Array; transport: Transport };
}

export interface Responder {
  readMessage1(message: Uint8Array): PendingResponder;
}

function checkStaticKeys(keys: StaticKeys): void {
  if (keys?.x25519?.secretKey?.length !== X25519_KEY_LENGTH || keys.x25519.publicKey?.length !== X25519_KEY_LENGTH) {
    throw new NoiseError('invalid_state', 'static X25519 key pair has the wrong size');
  }
  // A pair that decapsulates by itself (node:crypto's keeps its key in OpenSSL) is not asked for the 2400-byte
  // secret: that form is expanded on first read, about 10 ms of a cold harness command (ml-kem-768.ts).
  const pair = keys?.mlkem768 as (KeyPair & Partial<KemEphemeral>) | undefined;
  const selfDecapsulating = typeof pair?.decapsulate === 'function';
  if (
    (!selfDecapsulating && pair?.secretKey?.length !== MLKEM768_SECRET_KEY_LENGTH) ||
    pair?.publicKey?.length !== MLKEM768_PUBLIC_KEY_LENGTH
  ) {
    throw new NoiseError('invalid_state', 'static ML-KEM-768 key pair has the wrong size');
  }
}

function once<A extends unknown[], R>(what: string, fn: (...args: A) => R): (...args: A) => R {
  let used = false;
  return (...args: A) => {
    if (used) throw new NoiseError('invalid_state', `${what} may be called only once`);
    used = true;
    return fn(...args);
  };
}

/** One side's hybrid IK handshake; only the initiator knows the remote static key up front. */
function hybridHandshake(
  options: CommonOptions,
  info: SuiteInfo,
  role: 'initiator' | 'responder',
  remoteStatic?: NoisePublicKey,
): HybridIKHandshake {
  return new HybridIKHandshake({
    provider: options.provider ?? defaultProvider(),
    kem: options.kem ?? createMlKem768(),
    cipher: info.cipher,
    protocolName: info.protocolName,
    role,
    prologue: options.prologue,
    s: options.staticKeys.x25519,
    sKem: options.staticKeys.mlkem768,
    rs: remoteStatic?.x25519,
    rsKem: remoteStatic?.mlkem768,
  });
}

/** Harness side: writes message 1 at once, then turns message 2 into a transport (sends with k1). */
export function createInitiator(options: InitiatorOptions): Initiator {
  checkPublicKey(options.remoteStatic);
  const info: SuiteInfo = suiteInfo(options.suite ?? options.remoteStatic.suite);
  if (info.suite !== options.remoteStatic.suite) {
    throw new NoiseError('bad_suite', 'the remote key was issued for a different suite');
  }
  checkStaticKeys(options.staticKeys);
  const payload = options.payload ?? new Uint8Array(0);
  if (payload.length > MAX_HANDSHAKE_PAYLOAD) {
    throw new NoiseError('payload_too_large', `handshake payload is too large (max ${MAX_HANDSHAKE_PAYLOAD} bytes)`);
  }
  const handshake = hybridHandshake(options, info, 'initiator', options.remoteStatic);
  const message1 = handshake.writeMessage1(payload);
  return {
    message1,
    readMessage2: once('readMessage2', (message: Uint8Array) => {
      if (message.length < HYBRID_MESSAGE2_LENGTH) {
        throw new NoiseError('invalid_message', `message 2 must be ${HYBRID_MESSAGE2_LENGTH} bytes`);
      }
      const responderPayload = handshake.readMessage2(message);
      if (responderPayload.length !== 0) {
        throw new NoiseError('handshake_failed', 'message 2 carried an unexpected payload');
      }
      const [c1, c2] = handshake.split();
      return new Transport(c1, c2, handshake.getHandshakeHash());
    }),
  };
}

/** Executor side: reads message 1, exposes the initiator's key and payload, then writes message 2 (sends with k2). */
export function createResponder(options: ResponderOptions): Responder {
  const info = suiteInfo(options.suite ?? DEFAULT_SUITE);
  checkStaticKeys(options.staticKeys);
  const handshake = hybridHandshake(options, info, 'responder');
  return {
    readMessage1: once('readMessage1', (message: Uint8Array): PendingResponder => {
      // Limits before any crypto work: the fixed part must be there, the payload at most 4096 bytes.
      if (message.length < HYBRID_MESSAGE1_OVERHEAD) {
        throw new NoiseError('invalid_message', 'message 1 is too short');
      }
      if (message.length > HYBRID_MESSAGE1_OVERHEAD + MAX_HANDSHAKE_PAYLOAD) {
        throw new NoiseError(
          'payload_too_large',
          `handshake payload is too large (max ${MAX_HANDSHAKE_PAYLOAD} bytes)`,
        );
      }
      const payload = handshake.readMessage1(message);
      const remoteStatic: NoisePublicKey = {
        suite: info.suite,
        x25519: handshake.remoteStaticKey()!,
        mlkem768: handshake.remoteStaticKemKey()!,
      };
      return {
        remoteStatic,
        payload,
        writeMessage2: once('writeMessage2', () => {
          const message2 = handshake.writeMessage2(new Uint8Array(0));
          const [c1, c2] = handshake.split();
          return { message2, transport: new Transport(c2, c1, handshake.getHandshakeHash()) };
        }),
      };
    }),
  };
}
