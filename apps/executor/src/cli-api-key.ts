import type { Deprecations } from '@tether/telemetry/cli';
import {
  API_KEY_ENV,
  API_KEY_ENV_VARS,
  API_KEY_FILE_ENV,
  ApiKeyError,
  type ApiKeySource,
  apiKeyVariablesIn,
  CODEX_API_KEY_ENV,
  chooseApiKeySource,
  DEPRECATED_API_KEY_ENV,
  readApiKey,
} from './api-key.js';
import type { ExecutorOptions } from './cli-flags.js';
import {
  canHandOver,
  type ExecutorPlatform,
  handOverApiKey,
  handoverUnavailableReason,
  KEY_ORIGIN_ENV,
} from './key-handover.js';
import type { RegistryError } from './remote/registry-client.js';
import { isKeyRefusal } from './remote/remote-link.js';

/**
 * Remote mode's API key as the CLI gets it at start (api-key.ts says where from, key-handover.ts how it leaves
 * the environment), the variables that must not reach a child, and what a refused key is said to mean.
 */

/** The flags that say where the key comes from, and whether a key left in the environment is accepted. */
export type KeyFlags = Pick<ExecutorOptions, 'apiKeyFile' | 'apiKeyFd' | 'allowApiKeyEnv'>;

/** Variables naming the key's file or descriptor, never passed to a child (beside the key's own). */
export const KEY_SOURCE_ENV = ['TETHER_EXECUTOR_API_KEY_FILE', 'TETHER_EXECUTOR_API_KEY_FD', KEY_ORIGIN_ENV];

/** Why each deprecated key variable is: the harness reads the same name as its own. */
const SHARED_WITH_HARNESS = 'the harness reads it too, as its own';

const NO_KEY_MESSAGE = `--registry needs an API key: --api-key-file PATH (mode 0600), --api-key-fd N, or ${API_KEY_ENV} (or ${CODEX_API_KEY_ENV})`;

/** The key, and where it came from (`--api-key-file`, `TETHER_EXECUTOR_API_KEY`, …) for messages. */
export type KeyOutcome = { key: string; origin: string } | { exitCode: number };

/** Where a source's key comes from, for messages: a flag or a variable's name (never the key). */
function originOf(source: ApiKeySource, env: NodeJS.ProcessEnv): string {
  if (source.kind === 'env') return source.variable;
  if (source.kind === 'file') return source.flag;
  // A descriptor the executor handed itself names the variable the key was in before.
  const handed = env[KEY_ORIGIN_ENV];
  return handed !== undefined && (API_KEY_ENV_VARS as readonly string[]).includes(handed) ? handed : '--api-key-fd';
}

/**
 * Gets remote mode's API key so that no child can read it from this process's environment: a key in an
 * environment variable is handed to a re-executed image of this process (which does not return), a
 * variable that is set beside a file or descriptor is dropped the same way. Where re-executing is
 * impossible the key in the environment is refused unless the user accepted the exposure.
 */
export function obtainApiKey(
  flags: KeyFlags,
  io: { env: NodeJS.ProcessEnv; stderr: NodeJS.WritableStream },
  platform: ExecutorPlatform,
  deprecations: Deprecations,
): KeyOutcome {
  // Nothing re-executes after a failure: the parse's deprecations come first, then the failure.
  const fail = (text: string): KeyOutcome => {
    deprecations.flush();
    io.stderr.write(text);
    return { exitCode: 2 };
  };
  let source: ReturnType<typeof chooseApiKeySource>;
  try {
    source = chooseApiKeySource(flags, io.env);
  } catch (err) {
    if (!(err instanceof ApiKeyError)) throw err;
    return fail(`executor: ${err.message}\n`);
  }
  if (source === null) {
    return fail(`executor: ${NO_KEY_MESSAGE}\n`);
  }
  // The deprecated shared names, said when used: the key's variable at once (the re-executed executor no
  // longer has it), a key file's with the parse's lines (it is read again after the re-exec).
  if (source.kind === 'env' && source.variable === DEPRECATED_API_KEY_ENV) {
    deprecations.warnNow(DEPRECATED_API_KEY_ENV, API_KEY_ENV, SHARED_WITH_HARNESS);
  }
  if (source.kind === 'file' && source.flag === API_KEY_FILE_ENV) {
    deprecations.warn(API_KEY_FILE_ENV, 'TETHER_EXECUTOR_API_KEY_FILE', SHARED_WITH_HARNESS);
  }
  const origin = originOf(source, io.env);
  const exposed = apiKeyVariablesIn(io.env);
  try {
    if (exposed.length > 0) {
      if (canHandOver(platform.exec)) {
        // Never returns: the new image starts with --api-key-fd and without the variables.
        if (source.kind === 'env') {
          handOverApiKey(readApiKey(source, io.env), platform.commandLine(), platform.exec, undefined, origin);
        }
        handOverApiKey(null, platform.commandLine(), platform.exec, source.kind === 'fd' ? source.fd : undefined);
      }
      const why = handoverUnavailableReason(platform.exec);
      if (!flags.allowApiKeyEnv) {
        const where = `/proc/${process.pid}/environ, and this executor cannot re-execute itself without it (missing: ${why})`;
        return fail(
          source.kind === 'env'
            ? `executor: the API key is in ${exposed.join(' and ')}, where every child process can read it from ${where}. Pass it with --api-key-file or --api-key-fd instead, or accept the exposure with --allow-api-key-env\n`
            : `executor: ${exposed.join(' and ')} holds an API key (not the one used: that comes from ${origin}) that every child process could read from ${where}. Unset it, or accept the exposure with --allow-api-key-env\n`,
        );
      }
      io.stderr.write(
        `executor: WARNING: ${exposed.join(' and ')} stays readable by every child process in /proc/${process.pid}/environ (--allow-api-key-env; cannot re-execute: ${why})\n`,
      );
    }
    return { key: readApiKey(source, io.env), origin };
  } catch (err) {
    if (!(err instanceof ApiKeyError)) throw err;
    return fail(`executor: ${err.message}\n`);
  }
}

/**
 * A registry error, plus what a 401/403 means for an executor: retrying will not help. A key from the
 * deprecated TETHER_API_KEY is likely a harness key (a shell set up for the harness exports it): said so.
 */
export function keyRefusalText(err: RegistryError, origin: string): string {
  const shared =
    origin === DEPRECATED_API_KEY_ENV
      ? `; it came from ${DEPRECATED_API_KEY_ENV}, which the harness reads as its own key: is it a harness key? Give the executor's key in ${API_KEY_ENV} or --api-key-file`
      : '';
  if (err.status === 401) return `${err.message} (the API key was revoked or is wrong${shared})`;
  if (isKeyRefusal(err)) return `${err.message} (the API key was revoked, or may not serve this environment${shared})`;
  return err.message;
}

/** Everything naming the key (its variables, its file's, its descriptor's, its origin's): no child gets any. */
export const KEY_ENV = [...API_KEY_ENV_VARS, API_KEY_FILE_ENV, ...KEY_SOURCE_ENV];
