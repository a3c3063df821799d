import type { EnvironmentFs } from '@tether/client';
import { TetherError } from '@tether/client';

/**
 * A file operation that failed, named by the path it concerns as the user writes it (`ENV:/path` on an
 * environment, the plain path here) and the OS's reason: `dev-1:/nonexistent/dir/x: No such file or
 * directory`, as cp and scp name them. A local failure (exit status 1), whichever side it happened on.
 */
export class PathError extends Error {
  override readonly name = 'PathError';
}

/** `fs/open: No such file or directory (os error 2)` (an executor's) → `No such file or directory`. */
const RPC_FS_TEXT = /^fs\/[A-Za-z]+: ([\s\S]*?)(?: \(os error \d+\))?$/;
/** Node's `ENOENT: no such file or directory, open '/x'` → `no such file or directory`. */
const NODE_FS_TEXT = /^E[A-Z0-9]+: ([^,]*)/;

function errnoText(err: NodeJS.ErrnoException): string {
  const text = NODE_FS_TEXT.exec(err.message)?.[1] ?? err.code ?? err.message;
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function isErrno(err: unknown): err is NodeJS.ErrnoException {
  return err instanceof Error && typeof (err as NodeJS.ErrnoException).code === 'string' && 'syscall' in err;
}

/**
 * The reason of a file operation's failure, or null when `err` is not one (a lost connection, a refused
 * answer: those are reported as they are).
 */
function fsReason(err: unknown): { text: string; cause: unknown } | null {
  if (err instanceof PathError) return null;
  if (isErrno(err)) return { text: errnoText(err), cause: err };
  if (!(err instanceof TetherError)) return null;
  if (err.code === 'rpc') {
    const match = RPC_FS_TEXT.exec(err.message);
    return match ? { text: match[1] as string, cause: err } : null;
  }
  // This machine's files (LocalFs): the OS error is the cause.
  if (isErrno(err.cause)) return { text: errnoText(err.cause), cause: err.cause };
  return null;
}

/** `err` as a PathError naming `where`, when it is a file operation's failure; else `err` unchanged. */
export function pathError(err: unknown, where: string): unknown {
  const reason = fsReason(err);
  return reason ? new PathError(`${where}: ${reason.text}`, { cause: reason.cause }) : err;
}

/**
 * `fs` whose failures name their path (`prefix` + path: `ENV:` for an environment, empty here). Promise
 * methods reject with a PathError; a stream's error is renamed in place (its listeners see the named text).
 */
export function namingFs(fs: EnvironmentFs, prefix: string): EnvironmentFs {
  const where = (path: unknown) => `${prefix}${String(path)}`;
  return new Proxy(fs, {
    get(target, key) {
      const value: unknown = Reflect.get(target, key, target);
      if (typeof value !== 'function') return value;
      const method = value as (...args: unknown[]) => unknown;
      if (key === 'createReadStream' || key === 'createWriteStream') {
        return (path: string, ...rest: unknown[]) => {
          const stream = method.call(target, path, ...rest) as NodeJS.EventEmitter;
          stream.prependListener('error', (err: unknown) => {
            const named = pathError(err, where(path));
            if (named !== err && err instanceof Error) err.message = (named as Error).message;
          });
          return stream;
        };
      }
      if (key === 'readFiles') {
        return async (paths: string[], ...rest: unknown[]) => {
          const reads = (await method.call(target, paths, ...rest)) as Awaited<ReturnType<EnvironmentFs['readFiles']>>;
          return reads.map((read, i) =>
            read.kind === 'error' ? { ...read, error: pathError(read.error, where(paths[i])) } : read,
          );
        };
      }
      if (key === 'writeFiles') {
        return async (files: Array<{ path: string }>, ...rest: unknown[]) => {
          const written = (await method.call(target, files, ...rest)) as Awaited<
            ReturnType<EnvironmentFs['writeFiles']>
          >;
          return written.map((result, i) =>
            'error' in result ? { error: pathError(result.error, where(files[i]?.path)) } : result,
          );
        };
      }
      return (...args: unknown[]) => {
        const result = method.apply(target, args);
        if (!(result instanceof Promise) || typeof args[0] !== 'string') return result;
        return result.catch((err: unknown) => {
          throw pathError(err, where(args[0]));
        });
      };
    },
  });
}
