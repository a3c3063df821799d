// Every Tether bin (apps/*/bin/NAME.js) is this launcher: the bin exists before the first build, and the
// program itself is the app's dist/main.js. It names the fix on a Node below Tether's floor instead of
// failing somewhere inside (a native addon, a newer API), so it is plain JavaScript that any Node parses.
// scripts/pack.mjs bundles it into a packed app's bin.

/** The lowest Node release Tether runs on (package.json `engines`; scripts/runtime.mjs's FLOOR_VERSION). */
const FLOOR = [22, 14];

/**
 * Runs the app `name` from `main` (the URL of its dist/main.js) after checking the Node it runs on: below the
 * floor, one line on stderr and exit 1.
 * @param {string} name
 * @param {URL} main
 */
export async function launch(name, main) {
  const [major, minor] = process.versions.node.split('.').map(Number);
  if (major < FLOOR[0] || (major === FLOOR[0] && minor < FLOOR[1])) {
    console.error(
      `${name}: Node ${process.versions.node} is below Tether's floor: install Node ${FLOOR.join('.')} or newer (in a checkout, \`node scripts/node-runtimes.mjs run 24 -- node apps/${name}/bin/${name}.js …\` runs it on a pinned Node 24 from the npm registry)`,
    );
    process.exit(1);
  }
  await import(main.href);
}
