export { buildChildEnv, type EnvPolicy } from './env.js';
export { ProcessError } from './errors.js';
export { type ChildLedger, noteChildProcess } from './orphans.js';
export { DEFAULT_OUTPUT_BUDGET_BYTES, OutputBudget } from './output-budget.js';
export { DEFAULT_RETAINED_OUTPUT_BYTES, DEFAULT_RETAINED_OUTPUT_CHUNKS } from './output-log.js';
export { PipeGrowth, type PipeGrowthOptions } from './pipe-growth.js';
export {
  DEFAULT_EXITED_RETENTION_MS,
  DEFAULT_MAX_PROCESSES,
  DEFAULT_WRITE_ID_MEMORY,
  ProcessTable,
} from './process-table.js';
export { DEFAULT_PTY_SIZE } from './pty.js';
export { createReaper, type ProcessReaper, type ReaperOptions } from './reaper.js';
export { pipeStdio } from './spawn.js';
export { DEFAULT_STDIN_QUEUE_BYTES } from './stdin-writer.js';
export type * from './types.js';
export { inheritedFdArg, placeInheritedFds } from './wrap-fds.js';
