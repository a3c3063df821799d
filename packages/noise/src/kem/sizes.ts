/**
 * FIPS 203 ML-KEM-768 sizes (rendezvous.md §4.2), apart from the implementation: checking a key's length
 * (keys.ts) loads no ML-KEM code.
 */
export const MLKEM768_PUBLIC_KEY_LENGTH = 1184;
export const MLKEM768_SECRET_KEY_LENGTH = 2400;
export const MLKEM768_CIPHERTEXT_LENGTH = 1088;
export const MLKEM768_SHARED_SECRET_LENGTH = 32;
