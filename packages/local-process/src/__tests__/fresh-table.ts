import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach } from 'vitest';
import { ProcessTable } from '../process-table.js';
import type { ProcessTableOptions } from '../types.js';
import { collectUntilClosed } from './helpers.js';

/**
 * A test file's process table, made fresh by `fresh()` and shut down after each test, with temporary
 * directories removed then too. Call once at the top of a file: it registers the file's afterEach.
 */
export function useFreshTable() {
  let processes: ProcessTable | undefined;
  const tempDirs: string[] = [];
  afterEach(async () => {
    await processes?.shutdown();
    processes = undefined;
    for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  return {
    fresh(options?: ProcessTableOptions): ProcessTable {
      processes = new ProcessTable(options);
      return processes;
    },
    /** The current table (the last `fresh()`). */
    table(): ProcessTable {
      if (processes === undefined) throw new Error('call fresh() first');
      return processes;
    },
    async run(req: Parameters<ProcessTable['start']>[0]) {
      if (processes === undefined) throw new Error('call fresh() first');
      await processes.start(req);
      return collectUntilClosed(processes, req.processId);
    },
    tempDir(): string {
      const dir = mkdtempSync(path.join(tmpdir(), 'local-process-spawn-'));
      tempDirs.push(dir);
      return dir;
    },
  };
}

/**
 * A test file's process tables: `table(options)` makes one, and every one made is shut down after each test,
 * with the temporary directories `tempDir()` made. Call once at the top of a file.
 */
export function useTables() {
  let tables: ProcessTable[] = [];
  const tempDirs: string[] = [];
  afterEach(async () => {
    await Promise.all(tables.map((created) => created.shutdown()));
    tables = [];
    for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  return {
    table(options: ProcessTableOptions = {}): ProcessTable {
      const created = new ProcessTable(options);
      tables.push(created);
      return created;
    },
    tempDir(): string {
      const dir = mkdtempSync(path.join(tmpdir(), 'local-process-'));
      tempDirs.push(dir);
      return dir;
    },
  };
}
