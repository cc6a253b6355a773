/**
 * GET /v1/models and GET /v1/models/{model}: the models the calling key may use, as
 * `<provider>/<model_name>` in the OpenAI list shape, then the aliases it may use (by the alias's
 * name or one of its targets, as the route stage decides). A provider's models are the ones its
 * config names, else the ones its workers last reported on their own /v1/models (refreshed by health checks).
 */
import type { RequestHandler } from 'express';
import { modelAllowed } from '../common/model-globs';
import { contextOf, required, type CallerKey } from '../context';
import { errors } from '../errors';
import type { AliasTable } from '../upstream/aliases';
import type { Provider, ProviderTable } from '../upstream/providers';

interface ModelEntry {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
}

export function modelsOf(provider: Provider): string[] {
  if (provider.configuredModels) return [...provider.configuredModels];
  return [...new Set(provider.pool.workers.flatMap((state) => state.models))].sort();
}

/** Whether modelsOf(provider) holds this model, without building the list (the request path asks). */
export function listsModel(provider: Provider, modelName: string): boolean {
  if (provider.configuredModels) return provider.configuredModels.includes(modelName);
  return provider.pool.workers.some((state) => state.models.includes(modelName));
}

export function modelLister(providers: ProviderTable, aliases: AliasTable = new Map(), startedAt = Math.floor(Date.now() / 1000)) {
  const visible = (globs: readonly string[]): ModelEntry[] => [
    ...[...providers.values()].flatMap((provider) =>
      modelsOf(provider)
        .map((name) => `${provider.name}/${name}`)
        .filter((id) => modelAllowed(globs, id))
        .map((id) => ({ id, object: 'model' as const, created: startedAt, owned_by: provider.name })),
    ),
    ...[...aliases.values()]
      .filter((alias) => modelAllowed(globs, alias.name) || [...alias.targets, ...alias.fallback].some((target) => modelAllowed(globs, target.model)))
      .map((alias) => ({ id: alias.name, object: 'model' as const, created: startedAt, owned_by: 'chatgate' })),
  ];

  /** A client token's models narrow its key's: what both allow. */
  const visibleTo = (key: CallerKey): ModelEntry[] => {
    const models = visible(key.models);
    if (!key.clientToken?.models) return models;
    const narrowed = new Set(visible(key.clientToken.models).map((model) => model.id));
    return models.filter((model) => narrowed.has(model.id));
  };

  const list: RequestHandler = (_req, res) => {
    res.json({ object: 'list', data: visibleTo(required(contextOf(res).key, 'key')) });
  };

  const retrieve: RequestHandler = (req, res) => {
    const id = ([] as string[]).concat(req.params.model ?? []).join('/');
    const found = visibleTo(required(contextOf(res).key, 'key')).find((model) => model.id === id);
    if (!found) throw errors.modelNotFound(id);
    res.json(found);
  };

  return { list, retrieve };
}
