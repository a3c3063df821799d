/** The API keys a test stack makes, one of each role its tests use. */
export const STACK_KEY_ROLES = ['admin', 'executor', 'harness'] as const;
export type StackKeyRole = (typeof STACK_KEY_ROLES)[number];

/**
 * `registry keys create` arguments for a test stack's key of `role` in `database`. A key acts on no environment
 * unless given some, and these tests use many environment ids: the executor and harness keys get `'*'`. An admin
 * key gets environments only when they are given (to `/connect`: an admin sees every key's detached processes).
 */
export function keyCreateArgs(database: string, role: StackKeyRole, environments?: string): string[] {
  const scope = role === 'admin' && environments === undefined ? [] : ['--environments', environments ?? '*'];
  return ['keys', 'create', '--database', database, '--role', role, ...scope];
}
