/** Schema pieces every group of protocol methods (process, fs, http, tcp) builds with. */
import { type TLiteral, type TSchema, type TUnion, Type } from '@sinclair/typebox';

/** `schema`, or null. */
export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

/** A count or offset: a non-negative integer (u64 on the Rust side). */
export const U64 = Type.Integer({ minimum: 0 });

/** One of `values`, each a string literal: `Literals('a', 'b')` is `Type.Union([Type.Literal('a'), Type.Literal('b')])`. */
export function Literals<const T extends readonly [string, string, ...string[]]>(
  ...values: T
): TUnion<{ -readonly [K in keyof T]: TLiteral<T[K]> }> {
  return Type.Union(values.map((value) => Type.Literal(value))) as never;
}
