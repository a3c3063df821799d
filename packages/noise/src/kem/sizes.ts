/**
 * FIPS 203 ML-KEM-768 sizes (rendezvous.md §4.2), apart from the implementation: checking a key's length
 * (keys.ts) loads no ML-KEM code.
 */
export const MLKEM768_PUBLIC_KEY_LENGTH = 1184;
export const MLKEM768_SECRET_KEY_LENGTH = 2400;
export const MLKEM768_CIPHERTEXT_LENGTH = 1088;
export const MLKEM768_SHARED_SECRET_LENGTH = 32;

/** keygen consumes d ‖ z (FIPS 203 §7.1). */
export const KEYGEN_SEED_LENGTH = 64;

/** What every ML-KEM-768 `Kem` reports of itself. */
export const SIZES = {
  name: 'MLKEM768',
  publicKeyLength: MLKEM768_PUBLIC_KEY_LENGTH,
  secretKeyLength: MLKEM768_SECRET_KEY_LENGTH,
  ciphertextLength: MLKEM768_CIPHERTEXT_LENGTH,
  sharedSecretLength: MLKEM768_SHARED_SECRET_LENGTH,
} as const;

export function checkLength(what: string, bytes: Uint8Array, length: number): void {
  if (bytes.length !== length) throw new RangeError(`ML-KEM-768 ${what} length`);
}
