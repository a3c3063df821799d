/**
 * Unknown fields. The Kubernetes OpenAPI schemas that kubernetes-models validates against allow extra
 * properties (the API server drops unknown fields, or refuses them with --validate=strict), so a misspelt
 * `readinesProbe` would validate and the probe would silently be missing. The field names live in the
 * package's type declarations: each model's interface lists its properties and their types (other
 * interfaces, arrays of them, maps or scalars). This reads those declarations and walks an object through
 * them, reporting every property the API does not define.
 */
import { readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

type Fields = Map<string, string>;

let index: { interfaces: Map<string, Fields>; models: Map<string, Fields> } | undefined;

function declarationFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (statSync(path).isDirectory())
      return entry === 'node_modules' || entry === '_schemas' ? [] : declarationFiles(path);
    return entry.endsWith('.d.ts') ? [path] : [];
  });
}

/**
 * Interfaces by their exported alias (IIoK8sApiCoreV1Container: the names types refer to each other by)
 * → property → declared type; and each top-level model by `apiVersion/Kind` (apps/v1/Deployment).
 */
function buildIndex(): NonNullable<typeof index> {
  const root = dirname(realpathSync(fileURLToPath(import.meta.resolve('kubernetes-models'))));
  const apimachinery = join(root, '..', '@kubernetes-models', 'apimachinery');
  const interfaces = new Map<string, Fields>();
  const models = new Map<string, Fields>();
  for (const file of [...declarationFiles(root), ...declarationFiles(apimachinery)]) {
    const text = readFileSync(file, 'utf8');
    const local = new Map<string, Fields>();
    for (const match of text.matchAll(/^export interface (\w+)(?: extends TypeMeta)? \{\n([\s\S]*?)^\}/gm)) {
      const fields: Fields = new Map();
      // Properties sit at four spaces; a map type (`{ [key: string]: … }`) spans lines deeper in.
      for (const property of (match[2] as string).matchAll(/^ {4}"([^"]+)"\??: (.*?);?$/gm)) {
        fields.set(property[1] as string, property[2] as string);
      }
      local.set(match[1] as string, fields);
    }
    for (const alias of text.matchAll(/^export type \{ (\w+) as (\w+)/gm)) {
      const fields = local.get(alias[1] as string);
      if (fields) interfaces.set(alias[2] as string, fields);
    }
    const model = /^export interface (\w+) extends TypeMeta \{/m.exec(text);
    if (model && file.startsWith(root)) {
      models.set(file.slice(root.length + 1, -'.d.ts'.length), local.get(model[1] as string) as Fields);
    }
  }
  return { interfaces, models };
}

function fieldsOf(name: string): Fields | undefined {
  index ??= buildIndex();
  return index.interfaces.get(name);
}

/** The interface a declared type names (`IIoK8s…`, `Array<IIoK8s…>`), if any. */
function referenced(type: string): { name: string; array: boolean } | undefined {
  const array = /^Array<(\w+)>$/.exec(type);
  if (array) return fieldsOf(array[1] as string) ? { name: array[1] as string, array: true } : undefined;
  return /^\w+$/.test(type) && fieldsOf(type) ? { name: type, array: false } : undefined;
}

function walk(value: unknown, fields: Fields | undefined, path: string, unknown: string[]): void {
  if (!fields || value === null || typeof value !== 'object' || Array.isArray(value)) return;
  for (const [key, child] of Object.entries(value)) {
    const declared = fields.get(key);
    if (declared === undefined) {
      unknown.push(`${path}.${key}`);
      continue;
    }
    const next = referenced(declared);
    if (!next) continue;
    const nested = fieldsOf(next.name);
    if (!next.array) walk(child, nested, `${path}.${key}`, unknown);
    else if (Array.isArray(child)) {
      for (const [i, item] of child.entries()) walk(item, nested, `${path}.${key}[${i}]`, unknown);
    }
  }
}

/**
 * Every property of a `{apiVersion, kind, …}` object that its kind does not define, as paths
 * (`Deployment.spec.template.spec.containers[0].readinesProbe`). Throws for a kind it has no model of.
 */
export function unknownFields(object: { kind: string; apiVersion: string }): string[] {
  index ??= buildIndex();
  const fields = index.models.get(`${object.apiVersion}/${object.kind}`);
  if (!fields) throw new Error(`no type declarations for ${object.apiVersion} ${object.kind}`);
  const unknown: string[] = [];
  walk(object, fields, object.kind, unknown);
  return unknown;
}
