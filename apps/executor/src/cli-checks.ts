import { isLoopbackHost } from '@tether/exec-protocol';
import type { ExecutorOptions } from './cli-flags.js';
import type { ExecutorConfig } from './config.js';

/** What the flags mean together, beyond what commander checks one flag at a time. */

/** The first usage problem of the flags' combination (said with "see executor --help"), or null. */
export function flagProblem(options: ExecutorOptions): string | null {
  return checkModes(options) ?? checkRemoteOnlyFlags(options);
}

/** Checks flag combinations that commander cannot express; returns an error message or null. */
function checkModes(options: ExecutorOptions): string | null {
  if (options.registry === undefined) {
    if (options.environmentId !== undefined) return '--environment-id needs --registry';
    if (options.noiseCipher !== undefined) return '--noise-cipher needs --registry';
    if (options.exitOnStdinClose) return '--exit-on-stdin-close needs --registry';
    return null;
  }
  if (options.environmentId === undefined) return '--registry needs --environment-id';
  if (options.listen?.kind === 'stdio') return '--registry cannot be combined with --listen stdio';
  const registry = new URL(options.registry);
  if (registry.protocol === 'http:' && !isLoopbackHost(registry.hostname) && !options.allowInsecureRegistry) {
    return `--registry ${registry.origin}: plain http to a host that is not loopback would send the API key and every harness authorization in the clear; use https://, or pass --allow-insecure-registry on a network you trust`;
  }
  return null;
}

/** Flags that only mean something with --registry. */
function checkRemoteOnlyFlags(options: ExecutorOptions): string | null {
  if (options.registry !== undefined) return null;
  for (const [set, flag] of [
    [options.apiKeyFile !== undefined, '--api-key-file'],
    [options.apiKeyFd !== undefined, '--api-key-fd'],
    [options.allowApiKeyEnv, '--allow-api-key-env'],
    [options.allowInsecureRegistry, '--allow-insecure-registry'],
  ] as const) {
    if (set) return `${flag} needs --registry`;
  }
  return null;
}

/**
 * `--no-forward` and `--forward-allow` over the config file's `[forward]`. A flag is the more specific word:
 * `--forward-allow` beats the file's `enabled = false` as it beats its `allow`. Answers a usage problem or null.
 */
export function applyForwardFlags(
  config: Pick<ExecutorConfig, 'forwardEnabled' | 'forwardAllow'>,
  options: Pick<ExecutorOptions, 'forward' | 'forwardAllow'>,
): string | null {
  if (options.forward === false && options.forwardAllow !== undefined) {
    return '--forward-allow cannot be combined with --no-forward';
  }
  if (options.forward === false) config.forwardEnabled = false;
  if (options.forwardAllow !== undefined) {
    config.forwardEnabled = true;
    config.forwardAllow = options.forwardAllow;
  }
  return null;
}

/** The warning for a WebSocket listener reachable from other hosts, or null for a loopback one. */
export function exposedListenerWarning(host: string): string | null {
  if (isLoopbackHost(host)) return null;
  return `the WebSocket listener on ${host} is unauthenticated: anyone who can reach it can run commands as this user; bind 127.0.0.1 (and tunnel) or use --registry`;
}
