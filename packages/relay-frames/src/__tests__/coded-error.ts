import { expect } from 'vitest';

/** One of this package's error classes (FrameError, MessageFramingError, SequenceError). */
type CodedErrorClass<E extends Error & { code: string }> = abstract new (...args: never[]) => E;

/**
 * Expects `fn` to throw an instance of `type` whose `name` is the class's own (what callers match on where
 * `instanceof` fails) and whose `code` is `code`.
 */
export function expectCodedError<E extends Error & { code: string }>(
  fn: () => unknown,
  type: CodedErrorClass<E>,
  code: E['code'],
): void {
  let thrown: unknown;
  try {
    fn();
  } catch (error) {
    thrown = error;
  }
  expect(thrown).toBeInstanceOf(type);
  expect((thrown as E).name).toBe(type.name);
  expect((thrown as E).code).toBe(code);
}
