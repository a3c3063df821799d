/** An identity in a file of its own (Node only: the browser entry has no files). */
import { chmod, readFile, rename, stat, writeFile } from 'node:fs/promises';
import type { CryptoProvider } from './crypto.js';
import { identityFromFileJson, identityToFileJson, invalidIdentity, type NoiseIdentity } from './identity.js';

/** Owner read/write only: the file holds private keys. */
export const IDENTITY_FILE_MODE = 0o600;

/** Writes the identity atomically (temp file + rename), readable by the owner only. */
export async function saveIdentity(path: string, identity: NoiseIdentity): Promise<void> {
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, `${JSON.stringify(identityToFileJson(identity), null, 2)}\n`, {
    mode: IDENTITY_FILE_MODE,
    flag: 'wx',
  });
  // The umask may have narrowed the mode further, never widened it; set it exactly.
  await chmod(temp, IDENTITY_FILE_MODE);
  await rename(temp, path);
}

/** Reads an identity file; refuses one that group or others can access, as ssh does for private keys. */
export async function loadIdentity(path: string, provider?: CryptoProvider): Promise<NoiseIdentity> {
  if (((await stat(path)).mode & 0o077) !== 0) {
    throw invalidIdentity('identity file must not be accessible by group or others (chmod 600)');
  }
  const text = await readFile(path, 'utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (cause) {
    throw invalidIdentity('identity file is not valid JSON', cause);
  }
  return identityFromFileJson(value, provider);
}
