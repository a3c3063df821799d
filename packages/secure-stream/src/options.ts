/** What a secure stream is opened with: as the harness (initiate) or as the executor (accept). */
import type { BufferPool } from '@tether/bytes';
import type { CryptoProvider, Kem, NoisePublicKey, StaticKeys, Suite } from '@tether/noise';
import type { FrameLink } from './link.js';

export interface CommonOptions {
  link: FrameLink;
  streamId: string;
  environmentId: string;
  registrationId: string;
  /** This side's static keys (a NoiseIdentity). */
  staticKeys: StaticKeys;
  provider?: CryptoProvider;
  kem?: Kem;
  /** The stream's pools, from its creator, which closes them. Default: the stream's own. */
  pools?: SecureStreamPools;
}

export interface InitiateOptions extends CommonOptions {
  /** The executor key pinned from the rendezvous bundle. */
  remoteStatic: NoisePublicKey;
  /** `harness_key_authorization` from the bundle; the payload of message 1. */
  authorization: string;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface AcceptOptions extends CommonOptions {
  /** Defaults to the suite of `staticKeys` when it is a NoiseIdentity, else Codex's AES-GCM suite. */
  suite?: Suite;
  /** The payload of the harness's first Handshake frame. */
  message1: Uint8Array;
  /** The registry's `/validate` in production: may this harness key in with this authorization? */
  authorize(request: { remoteStatic: NoisePublicKey; authorization: string }): Promise<boolean>;
}

/**
 * A stream's pools. `frames`: wire buffers of outbound Data frames (a fresh ~60 KiB buffer per record was
 * external memory for V8 and brought a full collection every few dozen megabytes sent). `messages`:
 * inbound messages of at least LENT_MESSAGE_BYTES (a 1 MiB file block, say) are assembled in buffers leased
 * from it, each handed on with its message's `release`, which the executor calls once a block is written,
 * sparing V8 a megabyte of fresh external memory per block. They belong to the stream (ARCHITECTURE.md, "Who
 * owns what"): given by its creator, which closes them, or else the stream's own, closed when it ends.
 */
export interface SecureStreamPools {
  frames: BufferPool;
  messages: BufferPool;
}
