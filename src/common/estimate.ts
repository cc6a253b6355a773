/** Pure: the prompt estimate of a request body, at one token per 4 bytes (what an answer without usage is charged, and what the quota stage reserves for the prompt). */
export function estimatePromptTokens(bodyBytes: number): number {
  return Math.ceil(bodyBytes / 4);
}
