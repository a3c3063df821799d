import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Paths of the files writeOriginCertificates leaves. */
export interface OriginCertificates {
  /** The CA's certificate (PEM): what a client or an executor is told to trust. */
  ca: string;
  /** The origin's private key and certificate (PEM), for `node:https`'s `key` and `cert`. */
  key: string;
  cert: string;
}

/**
 * A CA of a test's own (ECDSA P-256, two days) and a leaf certificate it issued for 127.0.0.1 (`IP:127.0.0.1`, not a
 * CA: rustls refuses a CA used as an end entity), written into `dir` by `openssl`.
 */
export function writeOriginCertificates(dir: string): OriginCertificates {
  const openssl = (args: string) => execFileSync('sh', ['-c', `openssl ${args}`], { cwd: dir, stdio: 'ignore' });
  openssl(
    'req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out origin-ca.crt -days 2 -subj /CN=origin-ca',
  );
  openssl('req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout origin.key -out origin.csr -subj /CN=origin');
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n');
  openssl(
    'x509 -req -in origin.csr -CA origin-ca.crt -CAkey ca.key -CAcreateserial -out origin.crt -days 2 -extfile ext.cnf',
  );
  return { ca: join(dir, 'origin-ca.crt'), key: join(dir, 'origin.key'), cert: join(dir, 'origin.crt') };
}
