/** One sample line of a Prometheus text exposition. */
export interface PrometheusSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** One metric family: its `# TYPE`, `# HELP` and samples (histogram `_bucket`/`_sum`/`_count` included). */
export interface PrometheusFamily {
  type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';
  help: string | null;
  samples: PrometheusSample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
/** Go's ParseFloat, which Prometheus uses: decimal or exponent floats, Inf/NaN in any case, signed. */
const VALUE =
  /^[-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|[0-9]+\.|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN])$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
const SUFFIXES: Record<string, readonly string[]> = {
  histogram: ['_bucket', '_sum', '_count'],
  summary: ['_sum', '_count'],
};

/**
 * Parses the Prometheus text exposition format 0.0.4 strictly and throws on the first violation: a line that
 * is not `# HELP`, `# TYPE`, another comment, blank or a sample; names and label names outside the grammar;
 * unquoted or badly escaped label values; a value that is not a float; a family's TYPE after its samples or
 * twice; a family split in two groups; a series twice; a histogram whose `+Inf` bucket is missing, differs from
 * its `_count` or whose buckets decrease; no final newline.
 */
export function parsePrometheusText(text: string): Map<string, PrometheusFamily> {
  if (!text.endsWith('\n')) throw new Error('the exposition does not end with a newline');
  const families = new Map<string, PrometheusFamily>();
  const seen = new Set<string>();
  const closed = new Set<string>();
  let current: string | null = null;
  const lines = text.slice(0, -1).split('\n');
  lines.forEach((line, i) => {
    const where = `line ${i + 1} (${JSON.stringify(line.slice(0, 120))})`;
    if (line.trim() === '') return;
    if (line.startsWith('#')) {
      const m = /^#[ \t]+(HELP|TYPE)[ \t]+(\S+)(?:[ \t]+(.*))?$/.exec(line);
      if (!m) return; // another comment
      const [, keyword, name, rest = ''] = m as unknown as [string, string, string, string | undefined];
      if (!NAME.test(name)) throw new Error(`${where}: bad metric name`);
      const family = families.get(name);
      if (keyword === 'TYPE') {
        if (!TYPES.has(rest)) throw new Error(`${where}: unknown type`);
        if (family && (family.samples.length > 0 || family.type !== 'untyped' || seen.has(`type:${name}`))) {
          throw new Error(`${where}: TYPE after samples or twice`);
        }
        seen.add(`type:${name}`);
        families.set(name, { type: rest as PrometheusFamily['type'], help: family?.help ?? null, samples: [] });
      } else {
        if (/\\[^\\n]/.test(rest.replace(/\\\\/g, ''))) throw new Error(`${where}: bad escape in HELP`);
        if (family?.help != null) throw new Error(`${where}: HELP twice`);
        families.set(name, { type: family?.type ?? 'untyped', help: rest, samples: family?.samples ?? [] });
      }
      return;
    }
    const sample = parseSample(line, where);
    const familyName = familyOf(sample.name, families);
    if (familyName !== current) {
      if (familyName !== null && closed.has(familyName))
        throw new Error(`${where}: ${familyName} is split in two groups`);
      if (current !== null) closed.add(current);
      current = familyName;
    }
    const key = `${sample.name}${JSON.stringify(Object.entries(sample.labels).sort())}`;
    if (seen.has(key)) throw new Error(`${where}: the series appears twice`);
    seen.add(key);
    const name = familyName ?? sample.name;
    const family = families.get(name) ?? { type: 'untyped' as const, help: null, samples: [] };
    family.samples.push(sample);
    families.set(name, family);
  });
  for (const [name, family] of families) if (family.type === 'histogram') checkHistogram(name, family);
  return families;
}

/** The value of the sample named `name` whose labels are exactly `labels`, or undefined. */
export function prometheusSample(
  families: Map<string, PrometheusFamily>,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const wanted = Object.entries(labels);
  for (const family of families.values()) {
    for (const sample of family.samples) {
      if (
        sample.name === name &&
        Object.keys(sample.labels).length === wanted.length &&
        wanted.every(([k, v]) => sample.labels[k] === v)
      ) {
        return sample.value;
      }
    }
  }
  return undefined;
}

function familyOf(sampleName: string, families: Map<string, PrometheusFamily>): string | null {
  if (families.has(sampleName)) return sampleName;
  for (const [name, family] of families) {
    for (const suffix of SUFFIXES[family.type] ?? []) if (sampleName === `${name}${suffix}`) return name;
  }
  return null;
}

function parseSample(line: string, where: string): PrometheusSample {
  const m = /^([^\s{]+)(\{.*\})?[ \t]+(\S+)(?:[ \t]+(-?[0-9]+))?[ \t]*$/.exec(line);
  if (!m) throw new Error(`${where}: not a sample line`);
  const [, name, labelText, valueText] = m as unknown as [string, string, string | undefined, string];
  if (!NAME.test(name)) throw new Error(`${where}: bad metric name`);
  if (!VALUE.test(valueText)) throw new Error(`${where}: bad value`);
  const labels: Record<string, string> = {};
  if (labelText !== undefined) {
    let rest = labelText.slice(1, -1);
    while (rest.length > 0) {
      const lm = /^[ \t]*([^=\s]+)[ \t]*=[ \t]*"((?:[^"\\\n]|\\[\\"n])*)"[ \t]*(,[ \t]*)?/.exec(rest);
      if (!lm) throw new Error(`${where}: bad label syntax`);
      const [whole, labelName, raw, comma] = lm as unknown as [string, string, string, string | undefined];
      if (!LABEL_NAME.test(labelName)) throw new Error(`${where}: bad label name ${labelName}`);
      if (labelName in labels) throw new Error(`${where}: label ${labelName} twice`);
      labels[labelName] = raw.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
      rest = rest.slice(whole.length);
      if (rest.length > 0 && comma === undefined) throw new Error(`${where}: labels not separated by commas`);
    }
  }
  return { name, labels, value: parseValue(valueText) };
}

function parseValue(text: string): number {
  const lower = text.toLowerCase();
  if (lower.endsWith('nan')) return Number.NaN;
  if (lower.includes('inf')) return text.startsWith('-') ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
  return Number(text);
}

function checkHistogram(name: string, family: PrometheusFamily): void {
  const bySeries = new Map<string, { buckets: Array<[number, number]>; count?: number }>();
  for (const sample of family.samples) {
    const { le, ...rest } = sample.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const series = bySeries.get(key) ?? { buckets: [] };
    bySeries.set(key, series);
    if (sample.name === `${name}_bucket`) {
      if (le === undefined) throw new Error(`${name}: a bucket without le`);
      series.buckets.push([parseValue(le), sample.value]);
    } else if (sample.name === `${name}_count`) {
      series.count = sample.value;
    }
  }
  for (const [key, series] of bySeries) {
    const sorted = [...series.buckets].sort((a, b) => a[0] - b[0]);
    const inf = sorted.at(-1);
    if (!inf || inf[0] !== Number.POSITIVE_INFINITY) throw new Error(`${name}${key}: no +Inf bucket`);
    if (inf[1] !== series.count) throw new Error(`${name}${key}: +Inf bucket ${inf[1]} is not _count ${series.count}`);
    sorted.forEach(([, count], i) => {
      if (i > 0 && count < (sorted[i - 1] as [number, number])[1]) throw new Error(`${name}${key}: buckets decrease`);
    });
  }
}
