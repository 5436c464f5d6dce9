/**
 * Stage 1 of `dtrain check`, the data split: from every rank's first two
 * DistributedSampler passes that training used, checks that the ranks agree
 * on the dataset and the world, that each epoch's shares cover the dataset
 * with no overlap or omission beyond torch's padding (or dropLast's trim),
 * and that the order changes between epochs. A pass no backward followed
 * (a setup pass over the sampler, a peek at a batch) is not an epoch; the
 * sampler with the most training passes is checked in full, any other (an
 * evaluation's) for its coverage.
 */
import type { ProbeEvent } from "./probe.ts";
import type { RankEvents } from "./events.ts";
import { fail, pass, type Row, skip } from "./verdict.ts";

type SamplerPass = Extract<ProbeEvent, { kind: "sampler" }>;

/** Indices quoted in a message. */
const EXAMPLES = 5;

/** The passes each sampler served that training used, per rank, and the passes left out per rank. */
interface TrainingPasses {
  bySampler: Map<number, Map<number, SamplerPass[]>>;
  skipped: Map<number, number>;
}

/**
 * Keeps, per rank and sampler, the passes a backward followed before that
 * sampler's next pass (the last pass always counts). A rank that recorded
 * no backward at all keeps every pass.
 */
function trainingPasses(byRank: RankEvents): TrainingPasses {
  const bySampler = new Map<number, Map<number, SamplerPass[]>>();
  const skipped = new Map<number, number>();
  const keep = (p: SamplerPass, rank: number) => {
    const id = p.sampler ?? 0;
    const ranks = bySampler.get(id) ?? new Map<number, SamplerPass[]>();
    bySampler.set(id, ranks);
    ranks.set(rank, [...(ranks.get(rank) ?? []), p]);
  };
  for (const [rank, events] of byRank) {
    const trains = events.some((e) => e.kind === "loss");
    const pending = new Map<number, SamplerPass>();
    for (const e of events) {
      if (e.kind === "sampler") {
        const id = e.sampler ?? 0;
        if (!trains) keep(e, rank);
        else {
          if (pending.has(id)) skipped.set(rank, (skipped.get(rank) ?? 0) + 1);
          pending.set(id, e);
        }
      } else if (e.kind === "loss") {
        for (const p of pending.values()) keep(p, rank);
        pending.clear();
      }
    }
    for (const p of pending.values()) keep(p, rank);
  }
  return { bySampler, skipped };
}

/** "3, 17, 42, …": the smallest few. */
function examples(values: Iterable<number>): string {
  const list = [...values].sort((a, b) => a - b);
  const shown = list.slice(0, EXAMPLES).join(", ");
  return list.length > EXAMPLES ? `${shown}, …` : shown;
}

function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

/**
 * Checks the sampler stage's recording of a run with `nproc` ranks; one row
 * for the ranks' agreement, one per epoch for coverage, one for the order
 * (of the sampler training used most), and a coverage row per other sampler.
 */
export function checkSampler(byRank: RankEvents, nproc: number): Row[] {
  const { bySampler, skipped } = trainingPasses(byRank);
  const count = (id: number) => bySampler.get(id)?.get(0)?.length ?? 0;
  const ids = [...bySampler.keys()].sort((a, b) => count(b) - count(a) || a - b);
  const main = bySampler.get(ids[0] ?? 0) ?? new Map<number, SamplerPass[]>();
  if (ids.length === 0) {
    // No DistributedSampler at all: what the ranks did instead decides between a bug and a design.
    const loaded = [...byRank.values()].some((events) => events.some((e) => e.kind === "batch"));
    if (!loaded) {
      const why = "the script draws its data without a DataLoader or DistributedSampler (random " +
        "windows, as nanoGPT does?), so how it splits the data among ranks cannot be checked";
      return [skip("sampler", "ranks agree", "no DataLoader batch or sampler pass recorded", why)];
    }
  }
  const agree = agreementRow(main, nproc);
  const extra = [...skipped].filter(([, n]) => n > 0);
  if (extra.length > 0) {
    agree.measured += `; not epochs: ${
      extra.map(([r, n]) => `${n} pass${n === 1 ? "" : "es"} on rank ${r}`).join(", ")
    } that no backward followed (setup, peeks)`;
  }
  const rows = [agree, coverageRow(main, nproc, 0), coverageRow(main, nproc, 1), orderRow(main)];
  for (const id of ids.slice(1)) {
    const passes = bySampler.get(id)!;
    const n = [...passes.values()][0]?.[0]?.datasetLength ?? 0;
    const row = coverageRow(passes, nproc, 0);
    row.check = `sampler ${id + 1} (${n} samples) coverage`;
    rows.push(row);
  }
  return rows;
}

function agreementRow(passes: Map<number, SamplerPass[]>, nproc: number): Row {
  const check = "ranks agree";
  const silent = range(nproc).filter((r) => (passes.get(r) ?? []).length === 0);
  if (silent.length === nproc) {
    return fail(
      "sampler",
      check,
      "DataLoader batches but no sampler pass recorded",
      "the ranks' DataLoaders draw no DistributedSampler: without one every rank trains on the " +
        "whole dataset (wrap the data in new DistributedSampler(n, { numReplicas: pg.size, " +
        "rank: pg.rank }) and give it to the DataLoader)",
    );
  }
  const problems: string[] = [];
  if (silent.length > 0) {
    problems.push(
      `rank ${silent.join(", ")} recorded no DistributedSampler pass ` +
        "(every rank must draw its data through one)",
    );
  }
  const first = [...passes].flatMap(([rank, ps]) => (ps[0] ? [{ rank, p: ps[0] }] : []));
  const lengths = new Set(first.map(({ p }) => p.datasetLength));
  if (lengths.size > 1) {
    const each = first.map(({ rank, p }) => `rank ${rank}: ${p.datasetLength}`).join(", ");
    problems.push(
      `the dataset length differs between ranks (${each}): build the same full dataset on ` +
        "every rank and let DistributedSampler split it; a rank-dependent dataset loses or " +
        "repeats samples and gives ranks different numbers of steps",
    );
  }
  for (const { rank, p } of first) {
    if (p.numReplicas !== nproc) {
      problems.push(
        `rank ${rank}'s sampler has numReplicas ${p.numReplicas}, expected ${nproc} ` +
          "(the world size): pass numReplicas: pg.size",
      );
    }
    if (p.rank !== rank) {
      problems.push(`rank ${rank}'s sampler has rank ${p.rank}: pass rank: pg.rank`);
    }
  }
  const ranks = `${first.length}/${nproc} ranks`;
  const measured = lengths.size === 1
    ? `${ranks}: dataset length ${[...lengths][0]}, numReplicas ${first[0]!.p.numReplicas}`
    : `${ranks}: dataset lengths ${first.map(({ p }) => p.datasetLength).join(" vs ")}`;
  return problems.length
    ? fail("sampler", check, measured, problems.join("; "))
    : pass("sampler", check, measured);
}

function coverageRow(passes: Map<number, SamplerPass[]>, nproc: number, k: number): Row {
  const check = `epoch ${k} coverage`;
  const shares = [...passes].flatMap(([, ps]) => (ps[k] ? [ps[k]!] : []));
  if (shares.length === 0) {
    if (k === 0) return fail("sampler", check, "no sampler pass recorded", "see 'ranks agree'");
    const why = "the script ends after one epoch, so there is no second epoch to check";
    return skip("sampler", check, "1 sampler pass recorded", why);
  }
  const n = Math.max(...shares.map((p) => p.datasetLength));
  const counts = new Map<number, number>();
  let total = 0;
  for (const p of shares) {
    for (const i of p.indices) {
      counts.set(i, (counts.get(i) ?? 0) + 1);
      total++;
    }
  }
  const outside = [...counts.keys()].filter((i) => !(Number.isInteger(i) && i >= 0 && i < n));
  const missing = range(n).filter((i) => !counts.has(i));
  const repeats = total - counts.size;
  const problems: string[] = [];
  if (shares.length < nproc) {
    problems.push(`only ${shares.length} of ${nproc} ranks recorded this epoch`);
  }
  if (outside.length) {
    problems.push(`${outside.length} indices lie outside [0, ${n}) (e.g. ${examples(outside)})`);
  }
  const unseen = `${missing.length} indices are on no rank (e.g. ${examples(missing)})`;
  let measured: string;
  if (total >= n) {
    // torch pads by repeating the start of the epoch's order until every rank has ceil(n / N).
    const pad = total - n;
    const beyond = Math.max(0, repeats - pad);
    measured = `${n - missing.length}/${n} indices, ${beyond} overlaps beyond ${pad} pad`;
    if (missing.length) problems.push(`${unseen}: those samples are never trained on`);
    if (pad > nproc - 1) {
      problems.push(`${pad} padding indices, more than numReplicas - 1 = ${nproc - 1}`);
    }
    if (repeats > pad || (pad > 0 && !padsFromStart(shares.map((p) => p.indices), n, pad))) {
      const twice = [...counts].filter(([, c]) => c > 1).map(([i]) => i);
      problems.push(
        `${twice.length} indices are on more than one rank beyond torch's padding ` +
          `(e.g. ${examples(twice)}): the ranks' shares overlap, so those samples count ` +
          "several times per epoch",
      );
    }
  } else {
    // dropLast trims the order to a multiple of N: at most N - 1 indices left out, none repeated.
    const trimmed = n - total;
    measured = `${total}/${n} indices (${trimmed} trimmed by dropLast), ${repeats} overlaps`;
    if (trimmed > nproc - 1) {
      problems.push(`${unseen}, more than dropLast's numReplicas - 1 = ${nproc - 1}`);
    }
    if (repeats > 0) {
      problems.push(`${repeats} indices are on more than one rank: the shares overlap`);
    }
  }
  return problems.length
    ? fail("sampler", check, measured, problems.join("; "))
    : pass("sampler", check, measured);
}

/** True when the padded tail repeats the start of the interleaved global order (torch: indices += indices[:pad]). */
function padsFromStart(shares: number[][], n: number, pad: number): boolean {
  const per = shares[0]!.length;
  if (shares.some((s) => s.length !== per)) return false;
  const order: number[] = [];
  for (let j = 0; j < per; j++) for (const s of shares) order.push(s[j]!);
  for (let i = 0; i < pad; i++) if (order[n + i] !== order[i % n]) return false;
  return true;
}

function orderRow(passes: Map<number, SamplerPass[]>): Row {
  const check = "order changes between epochs";
  const pairs = [...passes].flatMap(([, ps]) => (ps[0] && ps[1] ? [{ a: ps[0], b: ps[1] }] : []));
  if (pairs.length === 0) {
    const why =
      "the script ends after one epoch; run it with 2 or more epochs to check the reshuffle";
    return skip("sampler", check, "1 sampler pass recorded", why);
  }
  const same = pairs.filter(({ a, b }) => sameOrder(a.indices, b.indices));
  const { a, b } = pairs[0]!;
  const changed = pairs.length - same.length;
  const measured =
    `order differs on ${changed}/${pairs.length} ranks (epochs ${a.epoch} -> ${b.epoch})`;
  if (same.length === 0) return pass("sampler", check, measured);
  if (same.length === pairs.length && pairs.every((p) => isUnshuffled(p.a))) {
    return skip(
      "sampler",
      check,
      measured,
      "shuffle is off: every epoch uses the order 0, 1, 2, … by design",
    );
  }
  if (same.length < pairs.length) {
    const stuck = same.map((s) => s.a.rank).join(", ");
    const cause =
      `the order repeated on rank ${stuck} only: every rank must call setEpoch(epoch) each epoch`;
    return fail("sampler", check, measured, cause);
  }
  const reported = pairs.every((p) => p.a.epoch === p.b.epoch)
    ? ` (both passes report epoch ${a.epoch})`
    : "";
  const cause =
    `order did not change between epochs${reported}: is setEpoch(epoch) called each epoch?`;
  return fail("sampler", check, measured, cause);
}

function sameOrder(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/** An unshuffled share: rank r of N gets r, r + N, r + 2N, … (wrapping around for padding). */
function isUnshuffled(p: SamplerPass): boolean {
  return p.indices.every((v, j) => v === (p.rank + j * p.numReplicas) % p.datasetLength);
}
