/**
 * The build both of our N-API addons share (@tether/native-crypto, @tether/native-pipe): node-gyp against
 * the running Node's headers — `npm_config_nodedir`, else the headers installed beside node (include/node,
 * as Debian's nodejs and the official tarballs have them), else node-gyp downloads them. Without a compiler
 * or headers the build is skipped with a warning and the package falls back (each says to what);
 * `<envVar>=require` makes a failed build fail the script instead (CI).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/**
 * @param {object} addon
 * @param {string} addon.packageDir directory holding native/ (a package, or the tests' copy of one)
 * @param {string} addon.resolveFrom `import.meta.url` of the package's script (node-gyp is its devDependency)
 * @param {string} addon.envVar e.g. TETHER_NATIVE_PIPE
 * @param {string} addon.failure what a failed build means, e.g. "@tether/native-pipe: the pipe addon was not built"
 * @param {string} addon.fallback what is used instead, e.g. "child stdio will be socketpairs"
 */
export function buildNativeAddon({ packageDir, resolveFrom, envVar, failure, fallback }) {
  const nodeGyp = createRequire(resolveFrom).resolve('node-gyp/bin/node-gyp.js');
  const prefix = dirname(dirname(process.execPath));
  const nodedir =
    process.env.npm_config_nodedir ?? (existsSync(join(prefix, 'include', 'node', 'node_api.h')) ? prefix : undefined);
  const args = [nodeGyp, 'rebuild', '--directory', 'native', '--loglevel', 'warn'];
  if (nodedir) args.push(`--nodedir=${nodedir}`);
  const result = spawnSync(process.execPath, args, { cwd: packageDir, stdio: 'inherit' });
  if (result.status === 0) return;
  const message = `${failure} (node-gyp exited ${result.status ?? result.signal}); ${fallback}`;
  if (process.env[envVar] === 'require') {
    console.error(message);
    process.exit(1);
  }
  console.warn(`warning: ${message}`);
}
