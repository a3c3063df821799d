import type { Plugin } from 'esbuild';

export function isNodeOnly(specifier: string): boolean;
export function nodeOnlyGuard(root?: string): Plugin;
