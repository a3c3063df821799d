import type { CipherState } from './cipher-state.js';
import {
  type CipherName,
  type CryptoProvider,
  concatBytes,
  type Kem,
  type KemEphemeral,
  type KeyPair,
  TAG_LENGTH_BYTES,
  X25519_KEY_LENGTH,
} from './crypto.js';
import { isNoiseError, NoiseError } from './errors.js';
import { MAX_NOISE_MESSAGE_LENGTH } from './limits.js';
import { MessageReader } from './message-reader.js';
import { INSPECT } from './redact.js';
import { SymmetricState } from './symmetric-state.js';

export type Role = 'initiator' | 'responder';

/**
 * Which message comes next; `split` once both messages are done, `done` after Split() (which may run only
 * once: two CipherStates with the same key and n = 0 would reuse nonces), `failed` after any error.
 */
export type HandshakeStep = 'message1' | 'message2' | 'split' | 'done' | 'failed';

export interface HandshakeStateOptions {
  readonly provider: CryptoProvider;
  /** Required for hybrid patterns, absent for classic ones. */
  readonly kem?: Kem | undefined;
  readonly cipher: CipherName;
  readonly protocolName: string;
  readonly role: Role;
  readonly prologue: Uint8Array;
  /** Local static X25519 key pair (s). */
  readonly s: KeyPair;
  /** Local static KEM key pair (s_kem), hybrid only. */
  readonly sKem?: KeyPair | undefined;
  /** Remote static X25519 key (rs): the initiator's pre-message knowledge in IK. */
  readonly rs?: Uint8Array | undefined;
  /** Remote static KEM key (rs_kem), hybrid initiator only. */
  readonly rsKem?: Uint8Array | undefined;
}

/**
 * Noise spec §5.3 HandshakeState: the symmetric state plus the key variables (s, e, rs, re and their KEM
 * counterparts for hybrid patterns), with one method per token. Subclasses only order tokens into messages.
 */
export abstract class HandshakeState {
  readonly role: Role;
  protected readonly provider: CryptoProvider;
  protected readonly kem: Kem | undefined;
  protected readonly symmetric: SymmetricState;
  protected s: KeyPair;
  protected sKem: KeyPair | undefined;
  protected e: KeyPair | undefined;
  protected eKem: KemEphemeral | undefined;
  protected rs: Uint8Array | undefined;
  protected rsKem: Uint8Array | undefined;
  protected re: Uint8Array | undefined;
  protected reKem: Uint8Array | undefined;
  #step: HandshakeStep = 'message1';

  protected constructor(options: HandshakeStateOptions) {
    this.role = options.role;
    this.provider = options.provider;
    this.kem = options.kem;
    this.s = options.s;
    this.sKem = options.sKem;
    this.rs = options.rs;
    this.rsKem = options.rsKem;
    this.symmetric = new SymmetricState(options.provider, options.cipher, options.protocolName);
    this.symmetric.mixHash(options.prologue);
  }

  get step(): HandshakeStep {
    return this.#step;
  }

  getHandshakeHash(): Uint8Array {
    return this.symmetric.getHandshakeHash();
  }

  /** The remote static X25519 key: pinned (initiator) or learned from message 1 (responder). */
  remoteStaticKey(): Uint8Array | undefined {
    return this.rs;
  }

  remoteStaticKemKey(): Uint8Array | undefined {
    return this.rsKem;
  }

  /** Split() once the last message is done: [c1 (initiator → responder), c2 (responder → initiator)]. */
  split(): [CipherState, CipherState] {
    if (this.#step !== 'split') throw new NoiseError('invalid_state', `cannot split now (${this.#step})`);
    this.#step = 'done';
    return this.symmetric.split();
  }

  /** Runs one message step: checks order and role, and turns any failure into a terminal `failed` state. */
  protected runStep<T>(expected: 'message1' | 'message2', writer: Role, isWrite: boolean, body: () => T): T {
    const writing = isWrite ? writer === this.role : writer !== this.role;
    if (this.#step !== expected || !writing) {
      throw new NoiseError('invalid_state', `cannot ${isWrite ? 'write' : 'read'} ${expected} now (${this.#step})`);
    }
    try {
      const result = body();
      this.#step = expected === 'message1' ? 'message2' : 'split';
      return result;
    } catch (error) {
      this.#step = 'failed';
      if (isNoiseError(error) && error.code !== 'decrypt_failed') throw error;
      throw new NoiseError('handshake_failed', `${expected} failed`, { cause: error });
    }
  }

  protected checkIncomingLength(message: Uint8Array): void {
    if (message.length > MAX_NOISE_MESSAGE_LENGTH) {
      throw new NoiseError('invalid_message', `handshake message exceeds ${MAX_NOISE_MESSAGE_LENGTH} bytes`);
    }
  }

  protected finishOutgoing(parts: Uint8Array[]): Uint8Array {
    const message = concatBytes(parts);
    if (message.length > MAX_NOISE_MESSAGE_LENGTH) {
      throw new NoiseError('payload_too_large', `handshake message exceeds ${MAX_NOISE_MESSAGE_LENGTH} bytes`);
    }
    return message;
  }

  protected requireKem(): Kem {
    if (this.kem === undefined) throw new NoiseError('invalid_state', 'pattern needs a KEM');
    return this.kem;
  }

  /** Encrypted fields carry a tag once a key exists. */
  protected sealedLength(length: number): number {
    return length + (this.symmetric.hasKey() ? TAG_LENGTH_BYTES : 0);
  }

  // ---- pre-messages -------------------------------------------------------------------------------

  /** `<- s` pre-message: MixHash(responder's static DH key), then MixHash(its static KEM key) if hybrid. */
  protected mixResponderStatic(): void {
    const dhKey = this.role === 'initiator' ? this.rs : this.s.publicKey;
    if (dhKey === undefined) throw new NoiseError('invalid_state', 'initiator needs the responder static key');
    this.symmetric.mixHash(dhKey);
    if (this.kem !== undefined) {
      const kemKey = this.role === 'initiator' ? this.rsKem : this.sKem?.publicKey;
      if (kemKey === undefined) throw new NoiseError('invalid_state', 'missing the responder static KEM key');
      this.symmetric.mixHash(kemKey);
    }
  }

  // ---- tokens -------------------------------------------------------------------------------------

  /** `e` (write): new ephemeral DH key (and KEM key if hybrid), each sent raw and MixHash'ed. */
  protected writeE(out: Uint8Array[]): void {
    this.e = this.provider.generateKeyPair();
    out.push(this.e.publicKey);
    this.symmetric.mixHash(this.e.publicKey);
    if (this.kem !== undefined) {
      this.eKem = this.kem.generateEphemeral();
      out.push(this.eKem.publicKey);
      this.symmetric.mixHash(this.eKem.publicKey);
    }
  }

  /** `e` (read): re (and re_kem), each MixHash'ed. */
  protected readE(reader: MessageReader): void {
    this.re = Uint8Array.from(reader.take(X25519_KEY_LENGTH, 'e'));
    this.symmetric.mixHash(this.re);
    if (this.kem !== undefined) {
      this.reKem = Uint8Array.from(reader.take(this.kem.publicKeyLength, 'e_kem'));
      this.symmetric.mixHash(this.reKem);
    }
  }

  /** `s` (write): EncryptAndHash(s.pub), then EncryptAndHash(s_kem.pub) if hybrid. */
  protected writeS(out: Uint8Array[]): void {
    out.push(this.symmetric.encryptAndHash(this.s.publicKey));
    if (this.kem !== undefined) {
      if (this.sKem === undefined) throw new NoiseError('invalid_state', 'missing the static KEM key pair');
      out.push(this.symmetric.encryptAndHash(this.sKem.publicKey));
    }
  }

  /** `s` (read): rs = DecryptAndHash(…), then rs_kem if hybrid. */
  protected readS(reader: MessageReader): void {
    this.rs = this.symmetric.decryptAndHash(reader.take(this.sealedLength(X25519_KEY_LENGTH), 's'));
    if (this.kem !== undefined) {
      this.rsKem = this.symmetric.decryptAndHash(reader.take(this.sealedLength(this.kem.publicKeyLength), 's_kem'));
    }
  }

  /** `ee`: MixKey(DH(e, re)). */
  protected ee(): void {
    this.symmetric.mixKey(this.dh(this.e, this.re, 'ee'));
  }

  /** `es`: initiator MixKey(DH(e, rs)); responder MixKey(DH(s, re)). */
  protected es(): void {
    if (this.role === 'initiator') this.symmetric.mixKey(this.dh(this.e, this.rs, 'es'));
    else this.symmetric.mixKey(this.dh(this.s, this.re, 'es'));
  }

  /** `se`: initiator MixKey(DH(s, re)); responder MixKey(DH(e, rs)). */
  protected se(): void {
    if (this.role === 'initiator') this.symmetric.mixKey(this.dh(this.s, this.re, 'se'));
    else this.symmetric.mixKey(this.dh(this.e, this.rs, 'se'));
  }

  /** `ss`: MixKey(DH(s, rs)). */
  protected ss(): void {
    this.symmetric.mixKey(this.dh(this.s, this.rs, 'ss'));
  }

  /** `skem` (write): Encaps(rs_kem); EncryptAndHash(ct) (raw while no key); MixKeyAndHash(ss). */
  protected writeSkem(out: Uint8Array[]): void {
    const kem = this.requireKem();
    if (this.rsKem === undefined) throw new NoiseError('invalid_state', 'skem needs the remote static KEM key');
    const { ciphertext, sharedSecret } = kem.encapsulate(this.rsKem);
    out.push(this.symmetric.encryptAndHash(ciphertext));
    this.symmetric.mixKeyAndHash(sharedSecret);
  }

  /** `skem` (read): ct = DecryptAndHash(…); MixKeyAndHash(Decaps(ct, s_kem)). */
  protected readSkem(reader: MessageReader): void {
    const kem = this.requireKem();
    if (this.sKem === undefined) throw new NoiseError('invalid_state', 'skem needs the static KEM key pair');
    const ciphertext = this.symmetric.decryptAndHash(reader.take(this.sealedLength(kem.ciphertextLength), 'skem'));
    // A pair from generateKeyPair decapsulates itself (its secret may live in OpenSSL); one read from an
    // identity file is bytes only.
    const pair = this.sKem as KeyPair & Partial<KemEphemeral>;
    const shared =
      typeof pair.decapsulate === 'function'
        ? pair.decapsulate(ciphertext)
        : kem.decapsulate(ciphertext, pair.secretKey);
    this.symmetric.mixKeyAndHash(shared);
  }

  /** `ekem` (write): Encaps(re_kem); ct sent raw; MixHash(ct); MixKey(ss). */
  protected writeEkem(out: Uint8Array[]): void {
    const kem = this.requireKem();
    if (this.reKem === undefined) throw new NoiseError('invalid_state', 'ekem needs the remote ephemeral KEM key');
    const { ciphertext, sharedSecret } = kem.encapsulate(this.reKem);
    out.push(ciphertext);
    this.symmetric.mixHash(ciphertext);
    this.symmetric.mixKey(sharedSecret);
  }

  /** `ekem` (read): ct raw; MixHash(ct); MixKey(Decaps(ct, e_kem)). */
  protected readEkem(reader: MessageReader): void {
    const kem = this.requireKem();
    if (this.eKem === undefined) throw new NoiseError('invalid_state', 'ekem needs the ephemeral KEM key pair');
    const ciphertext = reader.take(kem.ciphertextLength, 'ekem');
    this.symmetric.mixHash(ciphertext);
    this.symmetric.mixKey(this.eKem.decapsulate(ciphertext));
  }

  protected writePayload(out: Uint8Array[], payload: Uint8Array): void {
    out.push(this.symmetric.encryptAndHash(payload));
  }

  protected readPayload(reader: MessageReader): Uint8Array {
    return this.symmetric.decryptAndHash(reader.rest());
  }

  private dh(local: KeyPair | undefined, remote: Uint8Array | undefined, token: string): Uint8Array {
    if (local === undefined || remote === undefined) throw new NoiseError('invalid_state', `${token}: missing key`);
    return this.provider.dh(local.secretKey, remote);
  }

  [INSPECT](): string {
    return `${this.constructor.name} { role: '${this.role}', step: '${this.#step}', keys: [redacted] }`;
  }

  toJSON(): object {
    return { role: this.role, step: this.#step, keys: '[redacted]' };
  }
}

export type ClassicIKOptions = Omit<HandshakeStateOptions, 'kem' | 'sKem' | 'rsKem' | 'protocolName' | 'cipher'>;

/**
 * One message of a pattern as Noise writes it: its tokens in order (the Noise spec's notation; `skem` and
 * `ekem` are the KEM's static and ephemeral parts of the hybrid pattern), then the payload.
 */
type Token = 'e' | 's' | 'ee' | 'es' | 'se' | 'ss' | 'skem' | 'ekem';

/** An IK pattern: its two messages' tokens, run by one writer and one reader for every pattern. */
abstract class PatternHandshake extends HandshakeState {
  protected abstract readonly message1: readonly Token[];
  protected abstract readonly message2: readonly Token[];

  writeMessage1(payload: Uint8Array): Uint8Array {
    return this.runStep('message1', 'initiator', true, () => this.writeTokens(this.message1, payload));
  }

  readMessage1(message: Uint8Array): Uint8Array {
    return this.runStep('message1', 'initiator', false, () => this.readTokens(this.message1, message));
  }

  writeMessage2(payload: Uint8Array): Uint8Array {
    return this.runStep('message2', 'responder', true, () => this.writeTokens(this.message2, payload));
  }

  readMessage2(message: Uint8Array): Uint8Array {
    return this.runStep('message2', 'responder', false, () => this.readTokens(this.message2, message));
  }

  private writeTokens(tokens: readonly Token[], payload: Uint8Array): Uint8Array {
    const out: Uint8Array[] = [];
    for (const token of tokens) {
      if (token === 'e') this.writeE(out);
      else if (token === 's') this.writeS(out);
      else if (token === 'skem') this.writeSkem(out);
      else if (token === 'ekem') this.writeEkem(out);
      else this.mixDh(token);
    }
    this.writePayload(out, payload);
    return this.finishOutgoing(out);
  }

  private readTokens(tokens: readonly Token[], message: Uint8Array): Uint8Array {
    this.checkIncomingLength(message);
    const reader = new MessageReader(message);
    for (const token of tokens) {
      if (token === 'e') this.readE(reader);
      else if (token === 's') this.readS(reader);
      else if (token === 'skem') this.readSkem(reader);
      else if (token === 'ekem') this.readEkem(reader);
      else this.mixDh(token);
    }
    return this.readPayload(reader);
  }

  private mixDh(token: 'ee' | 'es' | 'se' | 'ss'): void {
    if (token === 'ee') this.ee();
    else if (token === 'es') this.es();
    else if (token === 'se') this.se();
    else this.ss();
  }
}

/**
 * Noise_IK_25519_ChaChaPoly_SHA256 (Noise spec §7.5):
 *   <- s
 *   ...
 *   -> e, es, s, ss
 *   <- e, ee, se
 */
export class ClassicIKHandshake extends PatternHandshake {
  protected readonly message1: readonly Token[] = ['e', 'es', 's', 'ss'];
  protected readonly message2: readonly Token[] = ['e', 'ee', 'se'];

  constructor(options: ClassicIKOptions & { protocolName: string; cipher: CipherName }) {
    super(options);
    this.mixResponderStatic();
  }
}

export type HybridIKOptions = Omit<HandshakeStateOptions, 'kem'> & { kem: Kem };

/**
 * Hybrid IK as Codex runs it (Clatter 2.2.0 `HybridHandshake<X25519, MlKem768, MlKem768, _, Sha256>`,
 * rendezvous.md §4.5–4.6):
 *   <- s                                (s = X25519 key, then ML-KEM key)
 *   ...
 *   -> skem, e, es, s, ss               3568 + P bytes
 *   <- ekem, skem, e, ee, se            3424 bytes (empty payload)
 * Clatter ≤ 2.1.0-rc.1 ordered message 2 as `e, ee, se, ekem, skem`: same length, different bytes.
 */
export class HybridIKHandshake extends PatternHandshake {
  protected readonly message1: readonly Token[] = ['skem', 'e', 'es', 's', 'ss'];
  protected readonly message2: readonly Token[] = ['ekem', 'skem', 'e', 'ee', 'se'];

  constructor(options: HybridIKOptions) {
    super(options);
    this.mixResponderStatic();
  }
}
