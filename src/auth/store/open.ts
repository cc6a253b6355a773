/** The key store the config names: the file store (embedded default) or PostgreSQL (shared mode). */
import path from 'node:path';
import type { Config } from '../../config';
import { FileKeyStore } from './file';
import type { PostgresEvents } from './postgres';
import type { KeyStore } from './types';

export async function openKeyStore(config: Pick<Config, 'keyStore'>, events?: PostgresEvents): Promise<KeyStore> {
  if (config.keyStore.type === 'postgres') {
    const { PostgresKeyStore } = await import('./postgres'); // pg only in shared mode
    return PostgresKeyStore.open(config.keyStore.url, events, config.keyStore.poolSize);
  }
  return new FileKeyStore(path.resolve(config.keyStore.path));
}
