/**
 * Schema decoding at the edge. A schema may carry `serde: 'Name'` to name its Rust type in messages
 * (`expected struct WalkOptions`, `expected usize`). The fast path is a TypeBox check (`check` below); on failure we describe the
 * first problem the way serde does (Codex answers `-32602` with serde's text, e.g. "missing field `cwd`"),
 * so our errors read the same as the reference implementation's.
 */
import { Kind, type Static, type TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { Value } from '@sinclair/typebox/value';

type Check = { Check(value: unknown): boolean };

/**
 * TypeBox compiles a check with `new Function`, which a web page's Content-Security-Policy forbids (the
 * browser terminal's has no 'unsafe-eval'): outside Node the schema is checked by TypeBox's interpreter.
 */
const canCompile = typeof process !== 'undefined' && typeof process.versions?.node === 'string';

/**
 * A schema is checked by TypeBox's interpreter (`Value.Check`, the same answers) until it has been used
 * INTERPRETED_CHECKS times or its checks took INTERPRETED_MS in all, and compiled then. Compiling costs 2-16 ms
 * per schema (code generation and `new Function`) against 4-12 µs per interpreted check of a small message
 * (measured on Node 24): a command that decodes each answer a few times (`harness exec -- true`: initialize,
 * process/start, three notifications) paid about 10 ms of its start for checks it used once, while a stream
 * of thousands of messages is compiled after its first few, and a large answer (a long listing) soon is.
 */
export const INTERPRETED_CHECKS = 64;
const INTERPRETED_MS = 2;

interface Checker {
  compiled: Check | null;
  uses: number;
  interpretedMs: number;
}

const checkers = new WeakMap<TSchema, Checker>();

/** Milliseconds, for the interpreter's budget: process.hrtime, as the global `performance` loads perf_hooks (2-3 ms). */
const now = () => Number(process.hrtime.bigint()) / 1e6;

function check(schema: TSchema, value: unknown): boolean {
  if (!canCompile) return Value.Check(schema, value);
  let checker = checkers.get(schema);
  if (!checker) {
    checker = { compiled: null, uses: 0, interpretedMs: 0 };
    checkers.set(schema, checker);
  }
  if (checker.compiled) return checker.compiled.Check(value);
  if (checker.uses >= INTERPRETED_CHECKS || checker.interpretedMs >= INTERPRETED_MS) {
    checker.compiled = TypeCompiler.Compile(schema);
    return checker.compiled.Check(value);
  }
  checker.uses++;
  const started = now();
  const ok = Value.Check(schema, value);
  checker.interpretedMs += now() - started;
  return ok;
}

/** Whether `schema`'s check is compiled by now (tests). */
export function isCompiled(schema: TSchema): boolean {
  return checkers.get(schema)?.compiled != null;
}

export class DecodeError extends Error {
  override readonly name = 'DecodeError';
}

/** Returns `value` typed by `schema`, or throws DecodeError with a serde-style message. */
export function decode<T extends TSchema>(schema: T, value: unknown): Static<T> {
  if (check(schema, value)) return value as Static<T>;
  throw new DecodeError(describeMismatch(schema, value) ?? 'invalid params');
}

/** True when `value` matches `schema` (interpreted, then compiled once used often). */
export function matches<T extends TSchema>(schema: T, value: unknown): value is Static<T> {
  return check(schema, value);
}

function unexpected(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'boolean') return `boolean \`${value}\``;
  // serde_json deserializing from a Value says just "number".
  if (typeof value === 'number') return 'number';
  if (typeof value === 'string') return `string ${JSON.stringify(value)}`;
  if (Array.isArray(value)) return 'sequence';
  return 'map';
}

function expecting(schema: TSchema): string {
  switch (schema[Kind]) {
    case 'String':
      return 'a string';
    case 'Boolean':
      return 'a boolean';
    case 'Integer':
      return (schema.serde as string | undefined) ?? (schema.minimum === 0 ? 'u64' : 'i32');
    case 'Array':
      return 'a sequence';
    case 'Object':
      return schema.serde ? `struct ${schema.serde}` : 'a struct';
    case 'Record':
      return 'a map';
    case 'Union': {
      const literals = (schema.anyOf as TSchema[]).filter((s) => s[Kind] === 'Literal');
      if (literals.length === (schema.anyOf as TSchema[]).length) {
        // serde: "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, `c`".
        const names = literals.map((s) => `\`${s.const}\``);
        if (names.length <= 2) return names.join(' or ');
        return `one of ${names.join(', ')}`;
      }
      const other = (schema.anyOf as TSchema[]).find((s) => s[Kind] !== 'Null');
      return other ? expecting(other) : 'a value';
    }
    default:
      return 'a value';
  }
}

/** The first reason `value` does not match `schema`, or null when it matches. */
function describeMismatch(schema: TSchema, value: unknown): string | null {
  const kind = schema[Kind];
  switch (kind) {
    case 'Unknown':
    case 'Any':
      return null;
    case 'Null':
      return value === null ? null : `invalid type: ${unexpected(value)}, expected null`;
    case 'String':
      return typeof value === 'string' ? null : `invalid type: ${unexpected(value)}, expected a string`;
    case 'Boolean':
      return typeof value === 'boolean' ? null : `invalid type: ${unexpected(value)}, expected a boolean`;
    case 'Integer': {
      if (typeof value !== 'number') return `invalid type: ${unexpected(value)}, expected ${expecting(schema)}`;
      if (!Number.isInteger(value) || (schema.minimum !== undefined && value < schema.minimum)) {
        return 'invalid number';
      }
      if (schema.maximum !== undefined && value > schema.maximum) {
        return `invalid value: integer \`${value}\`, expected at most ${schema.maximum}`;
      }
      return null;
    }
    case 'Literal':
      return value === schema.const ? null : `unknown variant ${unexpected(value)}, expected \`${schema.const}\``;
    case 'Union': {
      const options = schema.anyOf as TSchema[];
      if (options.some((option) => matches(option, value))) return null;
      if (value === null || value === undefined) return `invalid type: null, expected ${expecting(schema)}`;
      const literals = options.filter((s) => s[Kind] === 'Literal');
      if (typeof value === 'string' && literals.length > 0) {
        return `unknown variant \`${value}\`, expected ${expecting(schema)}`;
      }
      const nonNull = options.filter((s) => s[Kind] !== 'Null');
      if (nonNull.length === 1 && nonNull[0]) return describeMismatch(nonNull[0], value);
      return `data did not match any variant (expected ${expecting(schema)})`;
    }
    case 'Array': {
      if (!Array.isArray(value)) return `invalid type: ${unexpected(value)}, expected a sequence`;
      for (const item of value) {
        const problem = describeMismatch(schema.items as TSchema, item);
        if (problem) return problem;
      }
      return null;
    }
    case 'Record': {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) {
        return `invalid type: ${unexpected(value)}, expected a map`;
      }
      const valueSchema = Object.values(schema.patternProperties as Record<string, TSchema>)[0];
      for (const item of Object.values(value)) {
        const problem = valueSchema ? describeMismatch(valueSchema, item) : null;
        if (problem) return problem;
      }
      return null;
    }
    case 'Object': {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) {
        return `invalid type: ${unexpected(value)}, expected ${expecting(schema)}`;
      }
      const properties = schema.properties as Record<string, TSchema>;
      const record = value as Record<string, unknown>;
      // serde reports type errors as it meets fields in input order, then the first missing field.
      for (const key of Object.keys(record)) {
        const propertySchema = properties[key];
        if (!propertySchema) continue;
        const problem = describeMismatch(propertySchema, record[key]);
        if (problem) return problem;
      }
      const required = new Set<string>((schema.required as string[] | undefined) ?? []);
      for (const key of Object.keys(properties)) {
        if (required.has(key) && !(key in record)) return `missing field \`${key}\``;
      }
      return null;
    }
    default:
      return matches(schema, value) ? null : 'invalid value';
  }
}
