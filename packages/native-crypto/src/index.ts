// Not an ESM import: that makes Node build the built-in's facade (reads every export) at a harness's start.
const { createRequire } = process.getBuiltinModule('node:module');

/**
 * Crypto for the data path (native/crypto.c), from the OpenSSL Node links: in-place AEAD for transport
 * records, AES-256-GCM or ChaCha20-Poly1305, sealing into and opening into buffers the caller owns; and a
 * recording's lines escaped and hashed in one pass (castLine).
 * node:crypto's update() returns a fresh zero-filled buffer per call, which at 64 KiB records costs more
 * than the cipher itself (memset, page faults, GC pressure from external memory).
 */
export type NativeCipherName = 'AESGCM' | 'ChaChaPoly';

export interface NativeAeadKey {
  /**
   * Seals the concatenation of `parts` under `nonce` (12 bytes) and `ad` into `out`: ciphertext ‖ 16-byte
   * tag, exactly their length + 16. A part may be the very bytes of `out` it is sealed into (in place) or
   * lie outside `out`; anything else throws before a byte is written.
   */
  seal(nonce: Uint8Array, ad: Uint8Array, parts: readonly Uint8Array[], out: Uint8Array): void;
}

export interface NativeAeadOpenKey {
  /**
   * Opens `sealed` (ciphertext ‖ tag) into `out` (`sealed.length - 16` bytes; may be `sealed`'s own first
   * bytes, in place). False when authentication fails: `out` then holds garbage and must not be used.
   */
  open(nonce: Uint8Array, ad: Uint8Array, sealed: Uint8Array, out: Uint8Array): boolean;
}

/**
 * A recording's line and its chain link in one pass (@tether/recording's CastWriter): writes
 * `head ‖ json(body) ‖ tail ‖ "\n"` into `out` at `offset` and returns its length, and `link` (32 bytes) gets
 * SHA-256(previous ‖ that line without its newline). json(body) is what JSON.stringify writes inside a string's
 * quotes for the text of `body`, which must be valid UTF-8 (check with buffer.isUtf8: invalid bytes would be
 * copied, not made U+FFFD). `out` must have room for the longest such line (head + 6 × body + tail + 1 bytes
 * from `offset`; the escapes are not counted first) and not overlap the other arguments; `previous` and `link`
 * may be the same 32 bytes. Throws, having written nothing, when an argument is wrong.
 */
export type NativeCastLine = (
  previous: Uint8Array,
  head: Uint8Array,
  body: Uint8Array,
  tail: Uint8Array,
  link: Uint8Array,
  out: Uint8Array,
  offset: number,
) => number;

export interface NativeCrypto {
  sealingKey(cipher: NativeCipherName, key: Uint8Array): NativeAeadKey;
  openingKey(cipher: NativeCipherName, key: Uint8Array): NativeAeadOpenKey;
  castLine: NativeCastLine;
}

interface Binding {
  create(cipher: 0 | 1, key: Uint8Array, encrypt: boolean): object;
  seal(context: object, nonce: Uint8Array, ad: Uint8Array, parts: readonly Uint8Array[], out: Uint8Array): void;
  open(context: object, nonce: Uint8Array, ad: Uint8Array, sealed: Uint8Array, out: Uint8Array): boolean;
  castLine: NativeCastLine;
}

const CIPHERS = { AESGCM: 0, ChaChaPoly: 1 } as const;

let loaded: { native: NativeCrypto | null; error: string | null } | undefined;

/**
 * The native helpers, or null when the addon was not built (no compiler or Node headers at install) or
 * `TETHER_NATIVE_CRYPTO=off`; `nativeCryptoUnavailableReason()` then says why.
 */
export function loadNativeCrypto(): NativeCrypto | null {
  loaded ??= load();
  return loaded.native;
}

export function nativeCryptoUnavailableReason(): string | null {
  loaded ??= load();
  return loaded.error;
}

function load(): { native: NativeCrypto | null; error: string | null } {
  if (process.env.TETHER_NATIVE_CRYPTO === 'off') return { native: null, error: 'TETHER_NATIVE_CRYPTO=off' };
  let binding: Binding;
  try {
    // src/ and dist/ both sit beside native/.
    binding = createRequire(import.meta.url)('../native/build/Release/tether_crypto.node') as Binding;
  } catch (err) {
    return { native: null, error: (err as Error).message.split('\n')[0] ?? 'cannot load' };
  }
  return {
    error: null,
    native: {
      sealingKey(cipher, key) {
        const context = binding.create(CIPHERS[cipher], key, true);
        return { seal: (nonce, ad, parts, out) => binding.seal(context, nonce, ad, parts, out) };
      },
      openingKey(cipher, key) {
        const context = binding.create(CIPHERS[cipher], key, false);
        return { open: (nonce, ad, sealed, out) => binding.open(context, nonce, ad, sealed, out) };
      },
      castLine: binding.castLine,
    },
  };
}
