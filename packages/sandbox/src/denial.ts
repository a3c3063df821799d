/**
 * Whether a sandboxed process's failure looks like the sandbox's doing (`sandboxDenied` on its exit), by
 * Codex's rule (CODEX-FINDINGS.md §21): never for exit 0; then true when its retained output says so in the
 * words a denied call prints; then false for 2, 126 and 127 (usage, cannot run, not found); then true for
 * 159, a kill by SIGSYS (a seccomp kill); else false.
 */
const DENIAL_WORDS = [
  'operation not permitted',
  'permission denied',
  'read-only file system',
  'seccomp',
  'sandbox',
  'landlock',
  'failed to write file',
];

export function likelySandboxDenied(exitCode: number, output: Iterable<Buffer>): boolean {
  if (exitCode === 0) return false;
  // The words may straddle chunks: each chunk is read with the tail of the one before.
  const longest = Math.max(...DENIAL_WORDS.map((word) => word.length));
  let tail = '';
  for (const chunk of output) {
    const text = (tail + chunk.toString('latin1')).toLowerCase();
    if (DENIAL_WORDS.some((word) => text.includes(word))) return true;
    tail = text.slice(-(longest - 1));
  }
  if (exitCode === 2 || exitCode === 126 || exitCode === 127) return false;
  return exitCode === 128 + 31;
}
