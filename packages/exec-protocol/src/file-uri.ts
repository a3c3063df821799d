import { fileURLToPath, pathToFileURL } from 'node:url';

/** Converts a host-native absolute path to the canonical `file:` URI the protocol uses. */
export function pathToFileUri(path: string): string {
  return pathToFileURL(path).href;
}

export class FileUriError extends Error {
  override readonly name = 'FileUriError';
}

/**
 * Converts a `file:` URI to a native POSIX path. Rejects other schemes, authorities (UNC style) and
 * Windows drive paths on this host, with a reason the caller embeds in its error message.
 */
export function fileUriToPath(uri: string): string {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    throw new FileUriError('not a valid URI');
  }
  if (url.protocol !== 'file:')
    throw new FileUriError(`expected a file: URI, got scheme \`${url.protocol.slice(0, -1)}\``);
  if (url.host !== '' && url.host !== 'localhost')
    throw new FileUriError('file URIs with an authority are not valid on Unix');
  if (/^\/[A-Za-z]:/.test(url.pathname)) throw new FileUriError('Windows drive paths are not valid on Unix');
  try {
    return fileURLToPath(url);
  } catch (err) {
    throw new FileUriError((err as Error).message);
  }
}
