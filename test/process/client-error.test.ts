import { refusalForClientError } from '../../src/process/listeners';

test.each([
  ['HPE_INVALID_HEADER_TOKEN', 400, 'malformed_request'],
  ['HPE_UNEXPECTED_CONTENT_LENGTH', 400, 'malformed_request'],
  ['HPE_INVALID_CHUNK_SIZE', 400, 'malformed_request'],
  ['HPE_HEADER_OVERFLOW', 431, 'request_headers_too_large'],
  ['ERR_HTTP_REQUEST_TIMEOUT', 408, 'request_timeout'],
])("the parser's verdict %s is answered %i", (code, status, errorCode) => {
  const refusal = refusalForClientError(code);
  expect(refusal?.error.status).toBe(status);
  expect(refusal?.error.code).toBe(errorCode);
});

// Seen under overload: a handshake the gateway was too busy to finish within its limit was answered
// "400 malformed_request" once it completed, though the client had sent nothing wrong.
test.each(['ERR_TLS_HANDSHAKE_TIMEOUT', 'ECONNRESET', 'EPIPE', undefined])('%s is not the client sending bad HTTP: no answer, the connection is closed', (code) => {
  expect(refusalForClientError(code)).toBeUndefined();
});
