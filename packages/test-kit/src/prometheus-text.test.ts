import { describe, expect, it } from 'vitest';
import { parsePrometheusText, prometheusSample } from './prometheus-text.js';

const GOOD = `# HELP up_total Things.
# TYPE up_total counter
up_total{kind="a",path="x\\\\y\\"z\\n"} 3
up_total{kind="b"} 1e3
# UNIT a comment
# TYPE lag gauge
lag NaN
lag{q="p99"} +Inf
# TYPE d histogram
d_count{m="a"} 2
d_sum{m="a"} 0.5
d_bucket{m="a",le="0.1"} 1
d_bucket{m="a",le="+Inf"} 2
`;

describe('parsePrometheusText', () => {
  it('reads families, escaped labels, special values and histograms', () => {
    const families = parsePrometheusText(GOOD);
    expect(families.get('up_total')?.type).toBe('counter');
    expect(prometheusSample(families, 'up_total', { kind: 'a', path: 'x\\y"z\n' })).toBe(3);
    expect(prometheusSample(families, 'up_total', { kind: 'b' })).toBe(1000);
    expect(prometheusSample(families, 'lag')).toBeNaN();
    expect(prometheusSample(families, 'lag', { q: 'p99' })).toBe(Number.POSITIVE_INFINITY);
    expect(families.get('d')?.samples).toHaveLength(4);
    expect(prometheusSample(families, 'up_total', { kind: 'c' })).toBeUndefined();
  });

  it.each([
    ['no final newline', 'a 1'],
    ['a bad metric name', '# TYPE 1a gauge\n1a 1\n'],
    ['a bad label name', 'a{1x="v"} 1\n'],
    ['an unquoted label value', 'a{x=v} 1\n'],
    ['a bad escape', 'a{x="\\q"} 1\n'],
    ['a missing comma', 'a{x="1" y="2"} 1\n'],
    ['a bad value', 'a 1,5\n'],
    ['an unknown type', '# TYPE a meter\na 1\n'],
    ['TYPE after samples', 'a 1\n# TYPE a gauge\n'],
    ['a series twice', 'a{x="1"} 1\na{x="1"} 2\n'],
    ['a split family', '# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x="1"} 2\n'],
    ['a histogram without +Inf', '# TYPE d histogram\nd_bucket{le="1"} 1\nd_count 1\n'],
    ['a +Inf bucket that is not the count', '# TYPE d histogram\nd_bucket{le="+Inf"} 1\nd_count 2\n'],
    ['decreasing buckets', '# TYPE d histogram\nd_bucket{le="1"} 2\nd_bucket{le="+Inf"} 1\nd_count 1\n'],
  ])('refuses %s', (_what, text) => {
    expect(() => parsePrometheusText(text)).toThrow();
  });
});
