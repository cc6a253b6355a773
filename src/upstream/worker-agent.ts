/**
 * A worker's keep-alive agent. Node's agent keeps the options of a connection's first request for as
 * long as the connection lives (it pools the connection and opens its replacement by them): the
 * request's headers, and a key for each TLS option http-proxy copies, most of them undefined. With one
 * connection per open stream that was 1.6 KiB a stream, in a dictionary. `createConnection`, the
 * agent's documented hook, gets that very object, so the fields no connection needs are dropped there.
 */
import http from 'node:http';
import https from 'node:https';

export function workerAgent(protocol: string, options: https.AgentOptions): http.Agent {
  const agent = protocol === 'https:' ? new https.Agent(options) : new http.Agent(options);
  const createConnection = agent.createConnection;
  agent.createConnection = function connectWithoutRequestFields(connection, callback) {
    dropRequestFields(connection as Record<string, unknown>);
    return createConnection.call(this, connection, callback);
  };
  return agent;
}

/** An undefined option and a missing one mean the same to net, tls and the agent's pooling key. */
function dropRequestFields(options: Record<string, unknown>): void {
  delete options.headers;
  for (const name in options) if (options[name] === undefined) delete options[name];
}
