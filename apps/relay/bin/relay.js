#!/usr/bin/env node
// Thin launcher so the bin exists before the first build; the program itself is dist/main.js. It names the
// fix on a Node below Tether's floor instead of failing somewhere inside (a native addon, a newer API).
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 14)) {
  console.error(
    `relay: Node ${process.versions.node} is below Tether's floor: install Node 22.14 or newer (in a checkout, \`node scripts/node-runtimes.mjs run 24 -- node apps/relay/bin/relay.js …\` runs it on a pinned Node 24 from the npm registry)`,
  );
  process.exit(1);
}
await import('../dist/main.js');
