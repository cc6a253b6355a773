/**
 * The OpenID Connect settings checked at load: an http:// issuer is refused (openid-client speaks only
 * HTTPS to a provider, so every sign-in would fail later with "cannot be reached"), with a message
 * that names the setting and says how to trust a private CA; console.allowedHosts holds host names.
 */
import { parseConfig } from '../../src/config';

const minimal = { providers: { a: { workers: ['http://x:1'] } } };
const oidc = (issuer: string) => ({ ...minimal, console: { oidc: { issuer, clientId: 'chatgate', clientSecretEnv: 'OIDC_SECRET' } } });

test('an http:// issuer is refused at load, naming console.oidc.issuer, HTTPS, and NODE_EXTRA_CA_CERTS for a private CA', () => {
  for (const issuer of ['http://sso.example.com/realms/main', 'HTTP://sso.example.com', 'http://127.0.0.1:8080']) {
    let message = '';
    try {
      parseConfig(oidc(issuer));
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/console\.oidc\.issuer: must be an https:\/\/ URL/);
    expect(message).toMatch(/HTTPS/);
    expect(message).toMatch(/NODE_EXTRA_CA_CERTS=\/path\/ca\.pem/);
  }
  expect(() => parseConfig(oidc('ftp://sso.example.com'))).toThrow(/console\.oidc\.issuer/);
  expect(parseConfig(oidc('https://sso.example.com/realms/main')).console.oidc?.issuer).toBe('https://sso.example.com/realms/main');
});

test('console.allowedHosts: host names or addresses, kept in lower case without a final dot; a port, scheme or path is refused', () => {
  expect(parseConfig(minimal).console.allowedHosts).toEqual([]);
  expect(parseConfig({ ...minimal, console: { allowedHosts: ['Console.Example.COM.', '10.0.0.5', '::1', 'gw-1'] } }).console.allowedHosts).toEqual([
    'console.example.com',
    '10.0.0.5',
    '::1',
    'gw-1',
  ]);
  for (const bad of ['console.example.com:8443', 'https://console.example.com', 'console.example.com/x', 'a b', '', '*.example.com', 'user@host', '-leading.example']) {
    expect(() => parseConfig({ ...minimal, console: { allowedHosts: [bad] } })).toThrow(/console\.allowedHosts\[0\]: must be a host name or an IP address/);
  }
});
