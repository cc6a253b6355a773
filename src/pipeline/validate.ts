/**
 * Pure: a parsed request body -> the ModelRequest the gateway acts on, or a 400 GatewayError whose
 * `param` names the offending field path (`messages[2].role`). Never throws. Only what the gateway
 * needs is checked, per endpoint: `model` always; `messages` for chat completions, `prompt` for
 * completions, `input` for embeddings and responses; `stream` where an answer streams. Every other
 * field passes through to the worker untouched.
 */
import type { Endpoint } from '../common/endpoints';
import type { ModelRequest } from '../context';
import { errors, GatewayError } from '../errors';

export const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;
const ROLE_SET: ReadonlySet<string> = new Set(ROLES);

export function validateModelRequest(endpoint: Endpoint, body: unknown): ModelRequest | GatewayError {
  if (!isObject(body)) return errors.invalidBody(null, 'The request body must be a JSON object.');

  const model = splitModel(body.model);
  if (model instanceof GatewayError) return model;

  const problem = endpoint === 'chat' ? checkMessages(body.messages) : checkInput(body, endpoint === 'completions' ? 'prompt' : 'input');
  if (problem) return problem;

  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean') {
    return errors.invalidBody('stream', "'stream' must be true or false.");
  }
  const streamOptions = body.stream_options;
  if (streamOptions !== undefined && streamOptions !== null && !isObject(streamOptions)) {
    return errors.invalidBody('stream_options', "'stream_options' must be an object, such as {\"include_usage\": true}.");
  }
  const output = outputLimitOf(endpoint, body);
  if (output instanceof GatewayError) return output;
  const outputs = outputsOf(endpoint, body);
  if (outputs instanceof GatewayError) return outputs;
  const endUser = endUserOf(body);
  if (endUser instanceof GatewayError) return endUser;
  // Fields named one by one: on Node 20, a spread followed by more properties took ~2 µs per request.
  return {
    endpoint,
    model: model.model,
    provider: model.provider,
    modelName: model.modelName,
    stream: endpoint !== 'embeddings' && body.stream === true,
    streamOptions: isObject(streamOptions) ? streamOptions : undefined,
    maxOutputTokens: output.limit,
    outputBounds: output.bounds,
    outputs,
    endUser,
  };
}

/** The longest end user id taken (OpenAI's `safety_identifier` is a hash or an id: far shorter). */
export const MAX_END_USER_LENGTH = 256;

/** The end user the body names: `safety_identifier`, else `user` (both checked); '' or null: none. */
function endUserOf(body: Record<string, unknown>): string | undefined | GatewayError {
  let named: string | undefined;
  for (const field of ['safety_identifier', 'user'] as const) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'string' || value.length > MAX_END_USER_LENGTH) return errors.invalidBody(field, `'${field}' must be a string of at most ${MAX_END_USER_LENGTH} characters that names the end user.`);
    if (named === undefined && value !== '') named = value;
  }
  return named;
}

/** At most this many answers one request may ask for (`n`, `best_of`: OpenAI's own bound). */
export const MAX_CHOICES = 128;

/**
 * How many answers the request asks for, each up to its output bound: `n` (chat, completions),
 * `best_of` (completions, generated server-side), times the prompts of a completions batch (an array
 * of texts or of token arrays). What the quota stage reserves is multiplied by it.
 */
function outputsOf(endpoint: Endpoint, body: Record<string, unknown>): number | GatewayError {
  if (endpoint === 'embeddings' || endpoint === 'responses') return 1;
  let choices = 1;
  for (const field of endpoint === 'completions' ? ['n', 'best_of'] : ['n']) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_CHOICES) {
      return errors.invalidBody(field, `'${field}' must be a whole number from 1 to ${MAX_CHOICES}.`);
    }
    choices = Math.max(choices, value);
  }
  const prompt = body.prompt;
  const prompts = endpoint === 'completions' && Array.isArray(prompt) && prompt.length > 0 && typeof prompt[0] !== 'number' ? prompt.length : 1;
  return choices * prompts;
}

/** The fields that bound an answer's output, per endpoint (chat's newer name first). */
const OUTPUT_LIMITS: Record<Endpoint, readonly string[]> = {
  chat: ['max_completion_tokens', 'max_tokens'],
  completions: ['max_tokens'],
  responses: ['max_output_tokens'],
  embeddings: [],
};
/** Larger than any model's output window; a larger bound is refused rather than trusted. */
export const MAX_OUTPUT_TOKENS = 100_000_000;

/**
 * The most output the request allows, from whichever of its endpoint's fields it sets (the larger
 * when it sets two): what the quota stage reserves. Each must be a whole number from 1 to
 * MAX_OUTPUT_TOKENS: a negative, fractional or string bound would buy a smaller reservation than the
 * answer may cost. Undefined when none is set (embeddings: no output, 0).
 */
function outputLimitOf(endpoint: Endpoint, body: Record<string, unknown>): { limit: number | undefined; bounds: Record<string, number> | undefined } | GatewayError {
  if (endpoint === 'embeddings') return { limit: 0, bounds: undefined };
  let limit: number | undefined;
  let bounds: Record<string, number> | undefined;
  for (const field of OUTPUT_LIMITS[endpoint]) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_OUTPUT_TOKENS) {
      return errors.invalidBody(field, `'${field}' must be a whole number from 1 to ${MAX_OUTPUT_TOKENS}.`);
    }
    limit = Math.max(limit ?? 0, value);
    bounds ??= {};
    bounds[field] = value;
  }
  return { limit, bounds };
}

/** Chat completions (the request path's own, kept by name for its many callers and tests). */
export function validateChatRequest(body: unknown): ModelRequest | GatewayError {
  return validateModelRequest('chat', body);
}

/** Longer than any model id in use (Hugging Face repository ids are at most 96 characters). */
export const MAX_MODEL_LENGTH = 256;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what model ids must not hold
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * `model`: `<provider>/<model_name>`, split at the first slash, or a name without one (an alias, which
 * the route stage resolves or refuses).
 */
export function splitModel(model: unknown): Pick<ModelRequest, 'model' | 'provider' | 'modelName'> | GatewayError {
  const shape = "'model' must be a string shaped '<provider>/<model_name>', for example 'mock/echo', or a model alias.";
  if (model === undefined) return errors.invalidBody('model', `'model' is required. ${shape}`);
  if (typeof model !== 'string' || model === '') return errors.invalidBody('model', shape);
  // The model is echoed in errors and written to every access line: a key holder must not fill logs with it.
  if (model.length > MAX_MODEL_LENGTH) return errors.invalidBody('model', `'model' must be at most ${MAX_MODEL_LENGTH} characters.`);
  // No model name holds a control character; usage is kept by model, and PostgreSQL refuses a NUL in text.
  if (CONTROL.test(model)) return errors.invalidBody('model', "'model' must not contain control characters.");
  const slash = model.indexOf('/');
  if (slash === -1) return { model, provider: undefined, modelName: undefined };
  if (slash === 0 || slash === model.length - 1) return errors.invalidBody('model', shape);
  return { model, provider: model.slice(0, slash), modelName: model.slice(slash + 1) };
}

/** `prompt` (completions) or `input` (embeddings, responses): present, a string or an array, not empty. */
function checkInput(body: Record<string, unknown>, field: 'prompt' | 'input'): GatewayError | undefined {
  const value = body[field];
  const shape = `'${field}' must be a string or a non-empty array.`;
  if (value === undefined || value === null) return errors.invalidBody(field, `'${field}' is required. ${shape}`);
  if (typeof value === 'string') return value === '' && field === 'input' ? errors.invalidBody(field, `'${field}' must not be empty.`) : undefined;
  if (!Array.isArray(value) || value.length === 0) return errors.invalidBody(field, shape);
  return undefined;
}

function checkMessages(messages: unknown): GatewayError | undefined {
  if (messages === undefined) return errors.invalidBody('messages', "'messages' is required: a non-empty array of {role, content}.");
  if (!Array.isArray(messages)) return errors.invalidBody('messages', "'messages' must be an array of {role, content}.");
  if (messages.length === 0) return errors.invalidBody('messages', "'messages' must not be empty.");
  for (let i = 0; i < messages.length; i++) {
    const problem = checkMessage(messages[i], `messages[${i}]`);
    if (problem) return problem;
  }
  return undefined;
}

function checkMessage(message: unknown, at: string): GatewayError | undefined {
  if (!isObject(message)) return errors.invalidBody(at, `'${at}' must be an object with 'role' and 'content'.`);
  const { role } = message;
  if (typeof role !== 'string' || !ROLE_SET.has(role)) {
    return errors.invalidBody(`${at}.role`, `'${at}.role' must be one of ${ROLES.join(', ')}.`);
  }
  // An assistant turn that only calls tools carries no content (the OpenAI SDKs send null).
  const callsTools = role === 'assistant' && (message.tool_calls !== undefined || message.function_call !== undefined);
  if (callsTools && (message.content === null || message.content === undefined)) return undefined;
  return checkContent(message.content, `${at}.content`);
}

function checkContent(content: unknown, at: string): GatewayError | undefined {
  if (typeof content === 'string') return undefined;
  const shape = `'${at}' must be a string or an array of content parts.`;
  if (!Array.isArray(content)) return errors.invalidBody(at, content === undefined ? `'${at}' is required. ${shape}` : shape);
  if (content.length === 0) return errors.invalidBody(at, `'${at}' must not be an empty array.`);
  for (let i = 0; i < content.length; i++) {
    const part = content[i];
    const partAt = `${at}[${i}]`;
    if (!isObject(part) || typeof part.type !== 'string') {
      return errors.invalidBody(`${partAt}.type`, `'${partAt}' must be a content part with a string 'type'.`);
    }
    if (part.type === 'text' && typeof part.text !== 'string') {
      return errors.invalidBody(`${partAt}.text`, `'${partAt}.text' must be a string.`);
    }
  }
  return undefined;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
