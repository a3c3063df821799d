/**
 * What the package picks by default in a browser build (`#platform` under the `browser` condition): the
 * portable provider (noble, stablelib) and no native ML-KEM, so noble's serves. A page that wants WebCrypto's
 * AES-GCM records passes `createWebCryptoProvider()` itself.
 */
import type { Kem } from '../crypto.js';

export { createPortableProvider as defaultProvider } from '../crypto/portable.js';

export function nativeMlKem(): Kem | null {
  return null;
}
