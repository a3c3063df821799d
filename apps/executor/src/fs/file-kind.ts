/** What kind of file a path is, and the error Codex gives when it is not a regular file: shared by every fs module. */
import { stat } from 'node:fs/promises';
import { RpcError } from '@tether/exec-protocol';

/** True when `path` names a FIFO (following symlinks); false when absent or anything else. */
export async function isFifo(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null))?.isFIFO() ?? false;
}

/** `path \`/x\` is not a file`: what Codex says when a read targets a directory or a special file. */
export function notAFile(path: string): RpcError {
  return RpcError.invalidRequest(`path \`${path}\` is not a file`);
}
