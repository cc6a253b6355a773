/**
 * The route stage: the key's allowed models first (so a restricted key learns nothing about other
 * providers), then the provider and the body its worker will get. Which worker of the pool takes
 * it is decided per attempt by the proxy stage, since a failed connection is retried on another.
 */
import type { RequestHandler } from 'express';
import { modelAllowed } from '../common/model-globs';
import { contextOf, required } from '../context';
import { errors } from '../errors';
import type { ProviderTable } from '../upstream/providers';
import { rewriteModel, setTopLevelMember } from './json-members';

export function route(providers: ProviderTable): RequestHandler {
  return function routeRequest(_req, res, next) {
    const context = contextOf(res);
    const chat = required(context.chat, 'chat request');
    if (!modelAllowed(required(context.key, 'key').models, chat.model)) throw errors.modelNotAllowed(chat.model);
    const provider = providers.get(chat.provider);
    if (!provider) throw errors.modelNotFound(chat.model);

    // Token accounting needs the usage chunk of a stream: ask for it, and hide it from a client that did not.
    const addUsageChunk = chat.stream && chat.streamOptions?.include_usage !== true;
    let body = rewriteModel(required(context.body, 'body'), chat.modelName);
    if (addUsageChunk) body = setTopLevelMember(body, 'stream_options', JSON.stringify({ ...chat.streamOptions, include_usage: true }));

    context.provider = provider.name;
    context.target = { provider: provider.name, body: Buffer.from(body), dropUsageChunk: addUsageChunk };
    context.body = undefined; // the worker's bytes take the text's place: a request holds its prompt once
    next();
  };
}
