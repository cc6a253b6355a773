/**
 * Pure: which worker takes the next request. Fewest outstanding requests per unit of weight; among
 * workers equally loaded, smooth weighted round robin (nginx's), which for equal weights is plain
 * round robin. The only state it keeps is each candidate's `currentWeight`.
 */
export interface Candidate {
  readonly outstanding: number;
  readonly weight: number;
  currentWeight: number;
}

export function pickLeastLoaded<T extends Candidate>(candidates: readonly T[]): T | undefined {
  let lowest = Infinity;
  let tied: T[] = [];
  for (const candidate of candidates) {
    const load = candidate.outstanding / candidate.weight;
    if (load < lowest) {
      lowest = load;
      tied = [candidate];
    } else if (load === lowest) {
      tied.push(candidate);
    }
  }
  let chosen: T | undefined;
  let totalWeight = 0;
  for (const candidate of tied) {
    candidate.currentWeight += candidate.weight;
    totalWeight += candidate.weight;
    if (!chosen || candidate.currentWeight > chosen.currentWeight) chosen = candidate;
  }
  if (chosen) chosen.currentWeight -= totalWeight;
  return chosen;
}
