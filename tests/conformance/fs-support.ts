// What the fs conformance files share: the not-found error both executors answer, a failing call's error, and
// a fresh directory per test.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { TestClient } from '@tether/test-kit';
import { expect } from 'vitest';

export const NOT_FOUND = { code: -32004, message: 'No such file or directory (os error 2)' };

/** The error of a call that must fail. */
export async function errorOf(client: TestClient, method: string, params: unknown) {
  const response = await client.request(method, params);
  expect(response.result, `${method} should fail`).toBeUndefined();
  return response.error;
}

/** `scratch()`: a fresh directory for one test under the harness's work directory. */
export function scratchDirs(h: { workDir: string }, label: string): () => string {
  let counter = 0;
  return () => {
    const dir = join(h.workDir, `${label.replace(/ /g, '-')}-${++counter}`);
    mkdirSync(dir, { recursive: true });
    return dir;
  };
}
