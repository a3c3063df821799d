/**
 * YAML read the way Codex's serde_yaml structs read it (CODEX-FINDINGS, capability discovery): a plain scalar
 * is taken as written (`1.50`, `true`, `0x10` stay text), `~`/`null`/empty are absent, a sequence or mapping
 * where a string is expected is an error, and a known field given twice is an error (unknown ones are not).
 */
import { type Document, isAlias, isMap, isScalar, isSeq, type Node, parseDocument, Scalar } from 'yaml';

/** The text does not fit the struct Codex reads it into (Codex's serde error, in short). */
export class YamlShapeError extends Error {
  override readonly name = 'YamlShapeError';
}

/** Rust's `char::is_whitespace` (Unicode White_Space), which `split_whitespace` and `trim` use. */
export const RUST_WHITESPACE =
  '\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const WHITESPACE_RUN = new RegExp(`[${RUST_WHITESPACE}]+`, 'gu');
const EDGE_WHITESPACE = new RegExp(`^[${RUST_WHITESPACE}]+|[${RUST_WHITESPACE}]+$`, 'gu');

/** Rust's `str::trim`. */
export function rustTrim(text: string): string {
  return text.replace(EDGE_WHITESPACE, '');
}

/** Codex's `sanitize_single_line`: whitespace runs become one space, the ends trimmed. */
export function singleLine(text: string): string {
  return rustTrim(text.replace(WHITESPACE_RUN, ' '));
}

/** Characters as Rust counts them (`chars().count()`): code points. */
export function charCount(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

const NULL_PLAIN = new Set(['', '~', 'null', 'Null', 'NULL']);

/** A parsed YAML document, or YamlShapeError for text that is not YAML (one document). */
export function parseYaml(text: string): YamlDoc {
  const doc = parseDocument(text, { uniqueKeys: false, prettyErrors: false });
  if (doc.errors.length > 0) throw new YamlShapeError(`invalid YAML: ${doc.errors[0]!.message}`);
  return new YamlDoc(doc);
}

export class YamlDoc {
  constructor(private readonly doc: Document) {}

  get root(): Node | null {
    return this.doc.contents;
  }

  /** `node`, aliases resolved (an alias to no anchor is an error, as serde_yaml finds it). */
  resolve(node: unknown): Node | null {
    if (node === null || node === undefined) return null;
    if (isAlias(node)) {
      const target = node.resolve(this.doc);
      if (target === undefined) throw new YamlShapeError(`unknown anchor ${node.source}`);
      return target as Node;
    }
    return node as Node;
  }

  isNull(raw: unknown): boolean {
    const node = this.resolve(raw);
    return node === null || (isScalar(node) && node.type === Scalar.PLAIN && NULL_PLAIN.has(String(node.source)));
  }

  /** A struct's fields: the known `fields` of a mapping (null: none), each at most once. */
  struct(raw: unknown, what: string, fields: readonly string[]): Map<string, Node | null> {
    const out = new Map<string, Node | null>();
    if (this.isNull(raw)) return out;
    const node = this.resolve(raw);
    if (!isMap(node)) throw new YamlShapeError(`invalid type: ${kind(node)}, expected ${what}`);
    for (const pair of node.items) {
      const key = this.resolve(pair.key);
      if (!isScalar(key)) continue;
      const name = key.type === Scalar.PLAIN ? String(key.source) : String(key.value);
      if (!fields.includes(name)) continue;
      if (out.has(name)) throw new YamlShapeError(`duplicate field \`${name}\``);
      out.set(name, this.resolve(pair.value));
    }
    return out;
  }

  /** `Option<String>`: null when absent; a plain scalar as written; a collection is an error. */
  string(raw: unknown): string | null {
    if (this.isNull(raw)) return null;
    const node = this.resolve(raw);
    if (!isScalar(node)) throw new YamlShapeError(`invalid type: ${kind(node)}, expected a string`);
    return node.type === Scalar.PLAIN ? String(node.source) : String(node.value);
  }

  /** `Option<bool>`: YAML 1.2's core booleans. */
  bool(raw: unknown): boolean | null {
    if (this.isNull(raw)) return null;
    const node = this.resolve(raw);
    const text = isScalar(node) && node.type === Scalar.PLAIN ? String(node.source) : null;
    if (text === 'true' || text === 'True' || text === 'TRUE') return true;
    if (text === 'false' || text === 'False' || text === 'FALSE') return false;
    throw new YamlShapeError(`invalid type: ${kind(node)}, expected a boolean`);
  }

  /** `Vec<T>` with `#[serde(default)]`: absent or null is empty. */
  list(raw: unknown): (Node | null)[] {
    if (this.isNull(raw)) return [];
    const node = this.resolve(raw);
    if (!isSeq(node)) throw new YamlShapeError(`invalid type: ${kind(node)}, expected a sequence`);
    return node.items.map((item) => this.resolve(item));
  }
}

function kind(node: Node | null): string {
  if (isMap(node)) return 'map';
  if (isSeq(node)) return 'sequence';
  return 'scalar';
}
