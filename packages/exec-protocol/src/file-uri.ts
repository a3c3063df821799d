import { fileURLToPath, pathToFileURL } from 'node:url';

/** Converts a host-native absolute path to the canonical `file:` URI the protocol uses. */
export function pathToFileUri(path: string): string {
  return pathToFileURL(path).href;
}

/** `syntax`: not a file URI at all; `host`: a file URI this host cannot use. */
export class FileUriError extends Error {
  override readonly name = 'FileUriError';
  constructor(
    message: string,
    readonly kind: 'syntax' | 'host',
  ) {
    super(message);
  }
}

/**
 * Converts a `file:` URI to a native POSIX path, with the error texts Codex uses: a string that is not
 * a URI, another scheme, or a URI whose convention is not this host's (an authority, a drive letter).
 * A relative `file:tmp` is accepted as Codex does (it means `/tmp`).
 */
export function fileUriToPath(uri: string): string {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    throw new FileUriError('invalid URI: relative URL without a base', 'syntax');
  }
  if (url.protocol !== 'file:') {
    throw new FileUriError(`unsupported path URI scheme \`${url.protocol.slice(0, -1)}\``, 'syntax');
  }
  if ((url.host !== '' && url.host !== 'localhost') || /^\/[A-Za-z]:/.test(url.pathname)) {
    throw new FileUriError(`'${uri}' is invalid on '${process.platform}'`, 'host');
  }
  try {
    return fileURLToPath(url);
  } catch (err) {
    throw new FileUriError(`'${uri}' is invalid on '${process.platform}': ${(err as Error).message}`, 'host');
  }
}
