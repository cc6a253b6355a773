/**
 * The development certificate for the embedded defaults: self-signed for localhost, 127.0.0.1 and ::1,
 * generated on first start into <dataDir>/tls/ and reused after. Production configs name their own.
 */
import { X509Certificate } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';

export interface Certificate {
  cert: string;
  key: string;
  /** SHA-256 fingerprint, colon-separated hex, as browsers and `openssl x509 -fingerprint -sha256` show it. */
  fingerprint: string;
  certFile: string;
  keyFile: string;
  created: boolean;
}

export async function loadOrCreateDevCertificate(directory: string): Promise<Certificate> {
  const certFile = path.join(directory, 'cert.pem');
  const keyFile = path.join(directory, 'key.pem');
  const existing = await readPair(certFile, keyFile);
  if (existing) return { ...existing, fingerprint: fingerprintOf(existing.cert), certFile, keyFile, created: false };

  const notBeforeDate = new Date();
  const notAfterDate = new Date(notBeforeDate.getTime() + 365 * 24 * 3600 * 1000);
  const { default: selfsigned } = await import('selfsigned'); // only on a first start: it brings 200 modules of ASN.1
  const pems = await selfsigned.generate([{ name: 'commonName', value: 'localhost' }], {
    keyType: 'ec',
    algorithm: 'sha256',
    notBeforeDate,
    notAfterDate,
    extensions: [
      { name: 'basicConstraints', cA: false, critical: true },
      { name: 'keyUsage', digitalSignature: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }, { type: 7, ip: '127.0.0.1' }, { type: 7, ip: '::1' }] },
    ],
  });
  await fs.mkdir(directory, { recursive: true, mode: 0o700 });
  await fs.writeFile(keyFile, pems.private, { mode: 0o600 });
  await fs.writeFile(certFile, pems.cert, { mode: 0o644 });
  return { cert: pems.cert, key: pems.private, fingerprint: fingerprintOf(pems.cert), certFile, keyFile, created: true };
}

export function fingerprintOf(certPem: string): string {
  return new X509Certificate(certPem).fingerprint256;
}

async function readPair(certFile: string, keyFile: string): Promise<{ cert: string; key: string } | undefined> {
  try {
    return { cert: await fs.readFile(certFile, 'utf8'), key: await fs.readFile(keyFile, 'utf8') };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}
