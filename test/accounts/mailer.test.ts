/**
 * console.smtp as the config loads it: a strict object (a misspelt setting fails the start, naming
 * it), a sender on one line (a line break would write mail headers of its own), the SMTP password only
 * from the environment, and a start that fails, naming the variable, when it is not set.
 */
import { ConfigError, parseConfig } from '../../src/config';
import { createMailer } from '../../src/accounts/mailer';

const withSmtp = (smtp: Record<string, unknown>) => () => parseConfig({ providers: { mock: { workers: ['http://127.0.0.1:9'] } }, console: { smtp } });
const SMTP = { host: 'smtp.example.com', port: 587, from: 'chatgate <invites@example.com>' };

test('a valid block loads, secure defaults to false (STARTTLS when offered)', () => {
  expect(withSmtp(SMTP)().console.smtp).toEqual({ ...SMTP, secure: false });
});

test.each([
  ['a misspelt setting', { ...SMTP, hots: 'x' }, 'console.smtp'],
  ['no port', { host: 'smtp.example.com', from: 'a@example.com' }, 'console.smtp.port'],
  ['a sender with a line break (header injection)', { ...SMTP, from: 'a@example.com\r\nBcc: spy@example.com' }, 'console.smtp.from'],
  ['a user without passwordEnv', { ...SMTP, user: 'chatgate' }, 'console.smtp.passwordEnv'],
  ['a password in the file', { ...SMTP, user: 'chatgate', password: 'hunter2hunter2' }, 'console.smtp'],
])('%s fails the load, naming the setting', (_name, smtp, named) => {
  expect(withSmtp(smtp)).toThrow(ConfigError);
  expect(withSmtp(smtp)).toThrow(named);
});

test('passwordEnv naming an unset variable fails the start, naming it (and no password is ever in the message)', () => {
  const settings = withSmtp({ ...SMTP, user: 'chatgate', passwordEnv: 'CHATGATE_TEST_SMTP_PASSWORD' })().console.smtp!;
  expect(() => createMailer(settings, {})).toThrow('console.smtp.passwordEnv: environment variable CHATGATE_TEST_SMTP_PASSWORD is not set');
  const mailer = createMailer(settings, { CHATGATE_TEST_SMTP_PASSWORD: 'the smtp secret' });
  mailer.close();
});
