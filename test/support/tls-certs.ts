/**
 * A certificate authority and a server certificate it signed (for 127.0.0.1 and localhost), made with openssl
 * (Debian's) in a scratch directory: what a test HTTPS receiver presents and what the router is told to trust.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** PEM texts and the CA bundle's path. */
export interface TestCertificates {
  /** The CA certificate (PEM). */
  caPem: string;
  /** Path of the CA certificate file. */
  caFile: string;
  /** The server certificate (PEM), signed by the CA. */
  certPem: string;
  /** The server key (PEM). */
  keyPem: string;
  /** Path of the server certificate file. */
  certFile: string;
  /** Path of the server key file. */
  keyFile: string;
}

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: 'ignore' });
}

/** Makes a CA and a server certificate for 127.0.0.1 / localhost in `dir` (valid for a day). */
export function makeCertificates(dir: string): TestCertificates {
  const caKey = join(dir, 'ca-key.pem');
  const caFile = join(dir, 'ca.pem');
  const key = join(dir, 'server-key.pem');
  const csr = join(dir, 'server.csr');
  const cert = join(dir, 'server.pem');
  const ext = join(dir, 'server.ext');
  openssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    caKey,
    '-out',
    caFile,
    '-days',
    '1',
    '-subj',
    '/CN=test CA',
  ]);
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', csr, '-subj', '/CN=localhost']);
  writeFileSync(ext, 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  openssl([
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    caFile,
    '-CAkey',
    caKey,
    '-CAcreateserial',
    '-out',
    cert,
    '-days',
    '1',
    '-extfile',
    ext,
  ]);
  return {
    caPem: readFileSync(caFile, 'utf8'),
    caFile,
    certPem: readFileSync(cert, 'utf8'),
    keyPem: readFileSync(key, 'utf8'),
    certFile: cert,
    keyFile: key,
  };
}
