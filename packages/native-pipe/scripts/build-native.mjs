#!/usr/bin/env node
/**
 * Compiles native/tether_pipe.node (the shared recipe: scripts/build-native-addon.mjs). Without a compiler
 * or headers the build is skipped with a warning: `loadNativePipe()` then returns null and pipe children get
 * libuv's socketpairs for stdio, on which `/dev/stdout` and `/dev/stderr` cannot be opened.
 * TETHER_NATIVE_PIPE=require makes a failed build fail the script (CI). An argument names another package
 * directory holding a native/ to build (the tests build a copy).
 */
import { buildNativeAddon } from '../../../scripts/build-native-addon.mjs';

buildNativeAddon({
  packageDir: process.argv[2] ?? new URL('..', import.meta.url).pathname,
  resolveFrom: import.meta.url,
  envVar: 'TETHER_NATIVE_PIPE',
  failure: '@tether/native-pipe: the pipe addon was not built',
  fallback: 'child stdio will be socketpairs',
});
