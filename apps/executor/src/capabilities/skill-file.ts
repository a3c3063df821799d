/**
 * A SKILL.md's front matter and its `agents/openai.yaml`, read as Codex 0.171.0 reads them (CODEX-FINDINGS,
 * capability discovery). Pure functions of the texts: the caller reads the files, bounded.
 */
import {
  charCount,
  parseYaml,
  RUST_WHITESPACE,
  rustTrim,
  singleLine,
  type YamlDoc,
  YamlShapeError,
} from './yaml-fields.js';

/** Longest skill name, in characters. */
export const MAX_NAME_CHARS = 64;
/** Longest `<namespace>:<name>` (namespace and name characters; the colon is not counted). */
export const MAX_QUALIFIED_NAME_CHARS = 128;

export interface SkillFrontmatter {
  name: string;
  description: string;
  shortDescription: string | null;
}

/** Why a SKILL.md is not a skill. */
export class SkillFileError extends Error {
  override readonly name = 'SkillFileError';
}

/**
 * The lines between a first line `---` and the next `---` line (each trimmed to compare; at least one
 * between), joined with `\n`; null when the text has no such block.
 */
export function extractFrontmatter(text: string): string | null {
  const lines = text.split('\n');
  if (rustTrim(lines[0] ?? '') !== '---') return null;
  const inner: string[] = [];
  for (const line of lines.slice(1)) {
    if (rustTrim(line) === '---') return inner.length > 0 ? inner.join('\n') : null;
    inner.push(line.replace(/\r+$/, ''));
  }
  return null;
}

const FRONTMATTER_FIELDS = ['name', 'description', 'metadata'] as const;

function readFrontmatter(yaml: string): { name: string | null; description: string | null; short: string | null } {
  const doc = parseYaml(yaml);
  const fields = doc.struct(doc.root, 'struct SkillFrontmatter', FRONTMATTER_FIELDS);
  const metadata = doc.struct(fields.get('metadata'), 'struct SkillFrontmatterMetadata', ['short-description']);
  return {
    name: doc.string(fields.get('name')),
    description: doc.string(fields.get('description')),
    short: doc.string(metadata.get('short-description')),
  };
}

/**
 * The front matter's name, description and short description; `defaultName` (the skill directory's name)
 * when it names none. YAML that does not read is read once more with its prose values quoted, as Codex
 * repairs `description: Build for AWS: ECS`.
 */
export function parseSkillFrontmatter(text: string, defaultName: string): SkillFrontmatter {
  const yaml = extractFrontmatter(text);
  if (yaml === null) throw new SkillFileError('missing YAML frontmatter delimited by ---');
  let raw: ReturnType<typeof readFrontmatter>;
  try {
    raw = readFrontmatter(yaml);
  } catch (err) {
    if (!(err instanceof YamlShapeError)) throw err;
    const repaired = repairScalarFields(yaml);
    if (repaired === null) throw new SkillFileError(err.message);
    try {
      raw = readFrontmatter(repaired);
    } catch (second) {
      if (second instanceof YamlShapeError) throw new SkillFileError(err.message);
      throw second;
    }
  }
  const named = raw.name === null ? '' : singleLine(raw.name);
  const fallback = singleLine(defaultName);
  const name = named !== '' ? named : fallback !== '' ? fallback : 'skill';
  if (charCount(name) > MAX_NAME_CHARS) {
    throw new SkillFileError(`invalid name: exceeds maximum length of ${MAX_NAME_CHARS} characters`);
  }
  const description = raw.description === null ? '' : singleLine(raw.description);
  if (description === '') throw new SkillFileError('missing field `description`');
  const short = raw.short === null ? '' : singleLine(raw.short);
  return { name, description, shortDescription: short === '' ? null : short };
}

const LEADING_WHITESPACE = new RegExp(`^[${RUST_WHITESPACE}]*`, 'u');
const TRAILING_WHITESPACE = new RegExp(`[${RUST_WHITESPACE}]+$`, 'u');
const STARTS_WHITESPACE = new RegExp(`^[${RUST_WHITESPACE}]`, 'u');

/**
 * Codex's line-oriented repair: a top-level or nested `key: value` whose value has a `: ` in it, or starts
 * like a flow collection (`[`, `{`, `@`, `` ` ``) that does not parse, is single-quoted. Block scalars and
 * quoted values are left as they are. Null when no line changed.
 */
export function repairScalarFields(yaml: string): string | null {
  let changed = false;
  let blockIndent: number | null = null;
  const out: string[] = [];
  for (const line of yaml.split('\n')) {
    const indent = line.length - line.replace(/^ +/, '').length;
    if (blockIndent !== null) {
      if (rustTrim(line) === '' || indent > blockIndent) {
        out.push(line);
        continue;
      }
      blockIndent = null;
    }
    const colon = line.indexOf(':');
    if (colon < 0) {
      out.push(line);
      continue;
    }
    const key = line.slice(0, colon);
    const value = line.slice(colon + 1);
    if (rustTrim(key) === '' || (value !== '' && !STARTS_WHITESPACE.test(value))) {
      out.push(line);
      continue;
    }
    const lead = LEADING_WHITESPACE.exec(value)![0];
    const rest = value.slice(lead.length);
    let scalar = rest;
    let comment = '';
    for (let i = 0; i < rest.length; i++) {
      if (rest[i] === '#' && (i === 0 || STARTS_WHITESPACE.test(rest[i - 1]!))) {
        const end = rest.slice(0, i).replace(TRAILING_WHITESPACE, '').length;
        scalar = rest.slice(0, end);
        comment = rest.slice(end);
        break;
      }
    }
    scalar = scalar.replace(TRAILING_WHITESPACE, '');
    const first = scalar[0];
    if (first === undefined || first === "'" || first === '"') {
      out.push(line);
      continue;
    }
    if (first === '|' || first === '>') {
      blockIndent = indent;
      out.push(line);
      continue;
    }
    const colonSeparator = new RegExp(`:[${RUST_WHITESPACE}]`, 'u').test(scalar);
    const brokenFlow = '[{@`'.includes(first) && !parsesAlone(scalar);
    if (!colonSeparator && !brokenFlow) {
      out.push(line);
      continue;
    }
    out.push(`${key}:${lead}'${scalar.replaceAll("'", "''")}'${comment}`);
    changed = true;
  }
  return changed ? out.join('\n') : null;
}

function parsesAlone(scalar: string): boolean {
  try {
    parseYaml(scalar);
    return true;
  } catch {
    return false;
  }
}

export interface SkillToolDependency {
  type: string;
  value: string;
  description: string | null;
  transport: string | null;
  command: string | null;
  url: string | null;
  oauthCallbackPort: null;
}
export interface SkillPolicy {
  allowImplicitInvocation: boolean | null;
  products: string[];
}
export interface SkillMetadata {
  dependencies: { tools: SkillToolDependency[] } | null;
  policy: SkillPolicy | null;
}

const NO_METADATA: SkillMetadata = { dependencies: null, policy: null };
/** Codex's products, as written in openai.yaml (lowercase or UPPERCASE), by their wire name. */
const PRODUCTS = new Map(
  ['codex', 'chatgpt', 'atlas'].flatMap((p) => [[p, p] as const, [p.toUpperCase(), p] as const]),
);
const INTERFACE_FIELDS = [
  'display_name',
  'short_description',
  'icon_small',
  'icon_large',
  'brand_color',
  'default_prompt',
] as const;
const TOOL_FIELDS = ['type', 'value', 'description', 'transport', 'command', 'url'] as const;

/**
 * A skill's `agents/openai.yaml`: its tool dependencies and invocation policy. A file that does not read
 * gives neither (Codex ignores it without a warning).
 */
export function parseSkillMetadata(text: string): SkillMetadata {
  try {
    return readMetadata(parseYaml(text));
  } catch (err) {
    if (err instanceof YamlShapeError) return NO_METADATA;
    throw err;
  }
}

function readMetadata(doc: YamlDoc): SkillMetadata {
  const fields = doc.struct(doc.root, 'struct SkillMetadataFile', ['interface', 'dependencies', 'policy']);
  const iface = doc.struct(fields.get('interface'), 'struct Interface', INTERFACE_FIELDS);
  for (const field of INTERFACE_FIELDS) doc.string(iface.get(field));

  let dependencies: SkillMetadata['dependencies'] = null;
  if (!doc.isNull(fields.get('dependencies'))) {
    const deps = doc.struct(fields.get('dependencies'), 'struct Dependencies', ['tools']);
    const tools: SkillToolDependency[] = [];
    for (const item of doc.list(deps.get('tools'))) {
      const tool = doc.struct(item, 'struct DependencyTool', TOOL_FIELDS);
      const value = (field: (typeof TOOL_FIELDS)[number], max: number) => bounded(doc.string(tool.get(field)), max);
      const type = value('type', 64);
      const required = value('value', 1024);
      const entry = {
        description: value('description', 1024),
        transport: value('transport', 64),
        command: value('command', 1024),
        url: value('url', 1024),
      };
      if (type !== null && required !== null) tools.push({ type, value: required, ...entry, oauthCallbackPort: null });
    }
    if (tools.length > 0) dependencies = { tools };
  }

  let policy: SkillPolicy | null = null;
  if (!doc.isNull(fields.get('policy'))) {
    const raw = doc.struct(fields.get('policy'), 'struct Policy', ['allow_implicit_invocation', 'products']);
    const products = doc.list(raw.get('products')).map((item) => {
      const name = doc.string(item);
      const product = name === null ? undefined : PRODUCTS.get(name);
      if (product === undefined) throw new YamlShapeError(`unknown variant \`${name}\``);
      return product;
    });
    policy = { allowImplicitInvocation: doc.bool(raw.get('allow_implicit_invocation')), products };
  }
  return { dependencies, policy };
}

/** An optional string collapsed to one line: null when blank or longer than `max` characters. */
function bounded(value: string | null, max: number): string | null {
  if (value === null) return null;
  const line = singleLine(value);
  return line === '' || charCount(line) > max ? null : line;
}
