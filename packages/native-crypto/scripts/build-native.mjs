#!/usr/bin/env node
/**
 * Compiles native/tether_crypto.node (the shared recipe: scripts/build-native-addon.mjs). Without a compiler
 * or headers the build is skipped with a warning: `loadNativeCrypto()` then returns null and callers use
 * node:crypto, which is correct but allocates a zero-filled buffer per record. TETHER_NATIVE_CRYPTO=require
 * makes a failed build fail the script (CI). An argument names another package directory holding a native/
 * to build (the tests build a copy).
 */
import { buildNativeAddon } from '../../../scripts/build-native-addon.mjs';

buildNativeAddon({
  packageDir: process.argv[2] ?? new URL('..', import.meta.url).pathname,
  resolveFrom: import.meta.url,
  envVar: 'TETHER_NATIVE_CRYPTO',
  failure: '@tether/native-crypto: the native AEAD was not built',
  fallback: 'node:crypto will be used',
});
