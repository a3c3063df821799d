/**
 * docs/flags.md's "Flags and variables" table is the one the four CLIs' programs generate now: a flag added,
 * renamed or dropped without regenerating it (scripts/flags-table.ts --write) fails here.
 */
import { describe, expect, it } from 'vitest';
import { docTable, renderFlagsTable } from '../../scripts/flags-table.ts';

describe('docs/flags.md "Flags and variables"', () => {
  it('lists every flag of every CLI with its variable, as the programs have them', () => {
    const table = renderFlagsTable();
    for (const app of ['registry', 'relay', 'executor', 'harness'])
      expect(table).toContain(`| ${app} | \`-V, --version\``);
    expect(table).toContain('| relay | `--trust-proxy <cidr>` | `TETHER_RELAY_TRUST_PROXY` |');
    expect(docTable(), 'regenerate: node --conditions=tether-source --import tsx scripts/flags-table.ts --write').toBe(
      table,
    );
  });
});
