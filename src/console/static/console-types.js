// @ts-check
/*
 * The console API's answers as the page reads them: types only (JSDoc, checked by
 * `tsc -p tsconfig.console.json`), nothing that runs. The modules name them as
 * import('./console-types.js').Key and so on; the browser never loads this file.
 */

/** @typedef {'owner' | 'member'} Role */

/**
 * What the signed-in person may do in the current account (accounts/roles.ts decides; the page only reflects it).
 * @typedef {object} Permissions
 * @property {boolean} createKeys
 * @property {'all' | 'own' | 'none'} manageKeys
 * @property {boolean} manageMembers
 * @property {boolean} setPolicy
 * @property {boolean} readAudit
 */

/**
 * @typedef {object} SessionAccount
 * @property {string} id
 * @property {string} name
 * @property {Role | null} role
 * @property {{ maxLifetimeDays: number } | null} keyPolicy
 * @property {string | null} alertWebhook its host only
 * @property {Permissions} permissions
 */

/**
 * GET /console/api/session (and signing in, switching accounts).
 * @typedef {object} Session
 * @property {string} email
 * @property {boolean} admin
 * @property {string} [via]
 * @property {string} [expiresAt]
 * @property {SessionAccount | null} account
 * @property {{ id: string, name: string, role: Role | null }[]} accounts
 */

/**
 * @typedef {object} RateLimit
 * @property {number | null} [requestsPerMinute]
 * @property {number | null} [tokensPerMinute]
 * @property {number | null} [maxConcurrent]
 */
/**
 * @typedef {object} KeyQuota
 * @property {number | null} [tokensPerDay]
 * @property {number | null} [tokensPerMonth]
 */
/**
 * @typedef {object} KeyBudget
 * @property {number | null} [perDay]
 * @property {number | null} [perMonth]
 */

/**
 * A key as listed (never its secret; `key` only in the answer that made or rotated it).
 * @typedef {object} Key
 * @property {string} id
 * @property {string} name
 * @property {string} prefix
 * @property {string} createdAt
 * @property {string} createdBy
 * @property {string | null} [lastUsedAt]
 * @property {string | null} [expiresAt]
 * @property {string | null} [revokedAt]
 * @property {string | null} [previousKeyExpiresAt]
 * @property {string[] | null} [models]
 * @property {string[] | null} [endpoints]
 * @property {string[] | null} [allowedIps]
 * @property {RateLimit | null} [rateLimit]
 * @property {KeyQuota | null} [quota]
 * @property {KeyBudget | null} [budget]
 * @property {string} [key]
 */

/**
 * What creating or editing a key sends: the fields of the one key form (console-key-form.js).
 * @typedef {object} KeyBody
 * @property {string} [name]
 * @property {string[]} [models]
 * @property {string[]} [endpoints]
 * @property {string[]} [allowedIps]
 * @property {string | null} [expiresAt]
 * @property {Record<string, number | null>} [rateLimit]
 * @property {Record<string, number | null>} [quota]
 * @property {Record<string, number | null>} [budget]
 */

/**
 * A member of the account (GET /console/api/members).
 * @typedef {object} Member
 * @property {string} email
 * @property {Role} role
 * @property {string} addedAt
 * @property {string} [addedBy]
 */

/**
 * One key's use on one UTC day (GET /console/api/usage).
 * @typedef {object} UsageRow
 * @property {string} date
 * @property {string} keyId
 * @property {number} requests
 * @property {number} promptTokens
 * @property {number} completionTokens
 * @property {number} [refused]
 * @property {number} [cost]
 */

/**
 * Spend against a budget, this UTC day and month.
 * @typedef {object} BudgetSpend
 * @property {number | null} perDay
 * @property {number | null} perMonth
 * @property {number} spentToday
 * @property {number} spentThisMonth
 */

/**
 * A day of the usage tab: the keys' rows of that date summed.
 * @typedef {object} UsageDay
 * @property {string} date
 * @property {number} requests
 * @property {number} promptTokens
 * @property {number} completionTokens
 */

/**
 * A model's or end user's share of a month (GET /console/api/usage/breakdown).
 * @typedef {object} Share
 * @property {string} [model]
 * @property {string} [endUser]
 * @property {number} requests
 * @property {number} refused
 * @property {number} promptTokens
 * @property {number} completionTokens
 * @property {number} cost
 */

/**
 * A quota or budget threshold reached (GET /console/api/alerts).
 * @typedef {object} Alert
 * @property {string} kind
 * @property {string | null} [keyId]
 * @property {'day' | 'month'} period
 * @property {string} periodStart
 * @property {number} threshold
 * @property {number} spent
 * @property {number} limit
 */

/** @typedef {{ keyId: string, at: string, url?: string }} Leak */

/**
 * @typedef {object} AuditEvent
 * @property {string} at
 * @property {string | null} [actor]
 * @property {string} action
 * @property {string | null} [target]
 * @property {string | null} [client]
 * @property {Record<string, unknown> | null} [details]
 */

/** @template T @typedef {{ object: 'list', data: T[] }} List */

export {};
