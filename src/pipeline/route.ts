/**
 * The route stage: what the key may call first (so a restricted key learns nothing about other
 * endpoints or providers), then where the request goes and the body its worker gets. `model` names a
 * configured provider's model (`<provider>/<model_name>`) or an alias; an alias picks one of its
 * targets by weight and keeps its fallback list for the proxy. Which worker of a pool takes the
 * request is decided per attempt by the proxy stage, since a failed connection is retried on another.
 */
import type { RequestHandler } from 'express';
import { ENDPOINT_PATHS, USAGE_CHUNK_ENDPOINTS, type Endpoint } from '../common/endpoints';
import { modelAllowed } from '../common/model-globs';
import { contextOf, required, type CallerKey, type ModelRequest, type UpstreamTarget } from '../context';
import { errors } from '../errors';
import { pickByWeight, type Alias, type AliasTable, type AliasTarget } from '../upstream/aliases';
import type { ProviderTable } from '../upstream/providers';
import { rewriteModel, setTopLevelMember } from './json-members';

const MODEL_SHAPE = "'model' must be '<provider>/<model_name>', for example 'mock/echo', or the name of a configured model alias.";

/** Where a request may go, in the order to try: the chosen target, then the fallbacks. */
/** The key's allow-list, and a client token's standing in for it, both allow the model. */
const keyAllows = (key: CallerKey, model: string) => modelAllowed(key.models, model) && (!key.clientToken?.models || modelAllowed(key.clientToken.models, model));

/** A client token's bound on a request's whole output, per answer (n, best_of and prompts each answer); 400 when it leaves none. */
function perAnswer(maxTokens: number, outputs: number): number {
  const each = Math.floor(maxTokens / Math.max(1, outputs));
  if (each < 1) throw errors.invalidBody(null, `This client token bounds a request's output to ${maxTokens} tokens in all: ${outputs} answers (n, best_of, prompts) leave none for each.`);
  return each;
}

interface Destination {
  readonly provider: string;
  readonly modelName: string;
}

/**
 * `priced`, when unpriced models are refused (prices.unpricedModels: refuse): whether a
 * `<provider>/<model_name>` has a price; destinations without one are not used.
 */
export function route(providers: ProviderTable, aliases: AliasTable, random: () => number = Math.random, priced?: (model: string) => boolean): RequestHandler {
  const serves = (provider: string, endpoint: Endpoint) => providers.get(provider)?.endpoints.has(endpoint) === true;

  /** The alias's targets this key may use and this endpoint is served by: the pick first, then the fallbacks. */
  function aliasDestinations(alias: Alias, key: CallerKey, endpoint: Endpoint): Destination[] {
    // The key's allow-list holds the alias by name, or the target it points at.
    const byName = keyAllows(key, alias.name);
    const allowed = (target: AliasTarget) => byName || keyAllows(key, target.model);
    const targets = alias.targets.filter(allowed);
    const fallback = alias.fallback.filter(allowed);
    if (targets.length === 0 && fallback.length === 0) throw errors.modelNotAllowed(alias.name);
    // Unpriced targets are left out before the pick (prices.unpricedModels: refuse).
    const usable = (target: AliasTarget) => serves(target.provider, endpoint) && (!priced || priced(target.model));
    const servedTargets = targets.filter(usable);
    const servedFallback = fallback.filter(usable);
    if (priced && servedTargets.length === 0 && servedFallback.length === 0 && [...targets, ...fallback].some((t) => serves(t.provider, endpoint))) {
      throw errors.modelNotPriced(alias.name);
    }
    const first = servedTargets.length > 0 ? pickByWeight(servedTargets, random()) : servedFallback[0];
    if (!first) throw errors.modelNotServedHere(alias.name, ENDPOINT_PATHS[endpoint]);
    return [first, ...servedFallback.filter((target) => target !== first && target.model !== first.model)];
  }

  function directDestination(request: ModelRequest, key: CallerKey): Destination {
    // A name without a provider that is no alias is a malformed model, as before aliases existed.
    if (request.provider === undefined) throw errors.invalidBody('model', MODEL_SHAPE);
    if (!keyAllows(key, request.model)) throw errors.modelNotAllowed(request.model);
    const provider = providers.get(request.provider);
    if (!provider || request.modelName === undefined) throw errors.modelNotFound(request.model);
    if (!provider.endpoints.has(request.endpoint)) throw errors.modelNotServedHere(request.model, ENDPOINT_PATHS[request.endpoint]);
    return { provider: provider.name, modelName: request.modelName };
  }

  return function routeRequest(_req, res, next) {
    const context = contextOf(res);
    const request = required(context.modelRequest, 'model request');
    const key = required(context.key, 'key');
    const { endpoint } = request;
    if (key.endpoints.length > 0 && !key.endpoints.includes(endpoint)) throw errors.endpointNotAllowed(ENDPOINT_PATHS[endpoint]);

    const alias = aliases.get(request.model);
    const destinations = alias ? aliasDestinations(alias, key, endpoint) : [directDestination(request, key)];
    // A client names the model, so a name the price table misses would be served free: not served.
    if (priced && !alias && !priced(`${destinations[0]!.provider}/${destinations[0]!.modelName}`)) throw errors.modelNotPriced(request.model);

    // Token accounting needs the usage chunk of a stream: ask for it, and hide it from a client that did not.
    const dropUsageChunk = request.stream && USAGE_CHUNK_ENDPOINTS.has(endpoint) && request.streamOptions?.include_usage !== true;
    let text = required(context.body, 'body');
    if (dropUsageChunk) text = setTopLevelMember(text, 'stream_options', JSON.stringify({ ...request.streamOptions, include_usage: true }));
    // Under a quota, the output bound the reservation holds: for a request that set none, in the
    // endpoint's own field; for one capped to what is left (quota.capMaxTokens), in each field it set,
    // each lowered to the bound and never raised (chat's two fields may differ: a worker reads either).
    // A client token's maxTokens bounds the output the same way, shared by the answers asked for.
    const tokenBound = key.clientToken?.maxTokens === undefined || endpoint === 'embeddings' ? undefined : perAnswer(key.clientToken.maxTokens, request.outputs);
    const outputBound = tokenBound === undefined ? context.reservedOutputBound : Math.min(tokenBound, context.reservedOutputBound ?? Infinity);
    if (outputBound !== undefined) {
      const bound = outputBound;
      const set = Object.entries(request.outputBounds ?? {});
      if (set.length === 0) text = setTopLevelMember(text, endpoint === 'responses' ? 'max_output_tokens' : 'max_tokens', String(bound));
      for (const [field, value] of set) if (value > bound) text = setTopLevelMember(text, field, String(bound));
    }

    const targetAt = (index: number, body: string): UpstreamTarget => {
      const destination = destinations[index]!;
      const target: UpstreamTarget = {
        endpoint,
        provider: destination.provider,
        modelName: destination.modelName,
        alias: alias?.name,
        body: Buffer.from(rewriteModel(body, destination.modelName)),
        dropUsageChunk,
        // Made only when needed, from the bytes this target holds until a worker answers.
        fallback: index + 1 < destinations.length ? () => targetAt(index + 1, target.body.toString('utf8')) : undefined,
        mayAnswer: destinations.slice(index).map((next) => `${next.provider}/${next.modelName}`),
      };
      return target;
    };
    context.target = targetAt(0, text);
    context.provider = context.target.provider;
    context.body = undefined; // the worker's bytes take the text's place: a request holds its prompt once
    next();
  };
}
