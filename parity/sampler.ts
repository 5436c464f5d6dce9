/**
 * Parity checks of the data order against PyTorch's own output: every case of
 * a fixture folder's sampler.json (DistributedSampler) and randperm.json
 * (randperm and the raw generator streams), one result row per case. Sizes,
 * seeds and epochs all come from the files, so other fixture sets work too.
 */
import { join } from "node:path";
import { DistributedSampler } from "../data/distributed_sampler.ts";
import { TorchGenerator } from "../random/torch_generator.ts";
import { type ParityRow, row as reportRow } from "./report.ts";

type Json = unknown;

/**
 * Reads a fixture file. With `exactInt64`, integers beyond 2**53 become exact
 * bigints (slower: the reviver sees every value, so only files that need it ask).
 */
function readFixture(
  folder: string,
  file: string,
  exactInt64 = false,
): Record<string, Json> {
  const path = join(folder, file);
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (cause) {
    throw new Error(
      `Cannot read parity fixture ${path}: ${(cause as Error).message}`,
      { cause },
    );
  }
  // The reviver's third argument (JSON.parse source text access) keeps int64 values exact.
  const reviver = (
    _key: string,
    value: Json,
    context?: { source?: string },
  ): Json =>
    typeof value === "number" && !Number.isSafeInteger(value) &&
      context?.source &&
      /^-?[0-9]+$/.test(context.source)
      ? BigInt(context.source)
      : value;
  const parsed = exactInt64
    ? JSON.parse(text, reviver as (key: string, value: Json) => Json)
    : JSON.parse(text);
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new TypeError(
      `Parity fixture ${path}: expected a JSON object at the top level`,
    );
  }
  return parsed as Record<string, Json>;
}

/** Returns `obj[key]` as an array of records, or throws naming the file and key. */
function recordList(
  obj: Record<string, Json>,
  key: string,
  file: string,
): Record<string, Json>[] {
  const list = obj[key];
  if (
    !Array.isArray(list) ||
    list.some((c) => typeof c !== "object" || c === null)
  ) {
    throw new TypeError(
      `Parity fixture ${file}: "${key}" must be an array of objects`,
    );
  }
  return list as Record<string, Json>[];
}

function int(c: Record<string, Json>, key: string): number {
  const v = c[key];
  if (!Number.isSafeInteger(v)) {
    throw new TypeError(`field "${key}" is ${v}, expected an integer`);
  }
  return v as number;
}

function bool(c: Record<string, Json>, key: string): boolean {
  const v = c[key];
  if (typeof v !== "boolean") {
    throw new TypeError(`field "${key}" is ${v}, expected a boolean`);
  }
  return v;
}

function list(c: Record<string, Json>, key: string): Json[] {
  const v = c[key];
  if (!Array.isArray(v)) throw new TypeError(`field "${key}" is not an array`);
  return v;
}

/** Describes the first difference between two sequences, or returns null if equal. */
function firstDifference(
  actual: ArrayLike<Json>,
  expected: ArrayLike<Json>,
): string | null {
  if (actual.length !== expected.length) {
    return `length ${actual.length}, expected ${expected.length}`;
  }
  for (let i = 0; i < expected.length; i++) {
    if (actual[i] !== expected[i]) {
      return `element ${i} is ${actual[i]}, expected ${expected[i]}`;
    }
  }
  return null;
}

/** The outcome of checking one case. */
type Outcome = { ok: true; detail: string } | { ok: false; detail: string };

const pass = (detail: string): Outcome => ({ ok: true, detail });
const fail = (detail: string): Outcome => ({ ok: false, detail });

/**
 * Runs `check` for one case, turning a malformed case into a failing row. A
 * row counts mismatching cases (0 or 1, tolerance 0); a failure's reason is
 * its note.
 */
function row(name: string, quantity: string, check: () => Outcome): ParityRow {
  let outcome: Outcome;
  try {
    outcome = check();
  } catch (error) {
    outcome = fail(`malformed case: ${(error as Error).message}`);
  }
  return reportRow(
    name,
    quantity,
    "mismatches",
    outcome.ok ? 0 : 1,
    0,
    outcome.ok ? undefined : outcome.detail,
  );
}

/**
 * Checks every case of `<folder>/sampler.json`: for each rank, a
 * DistributedSampler after setEpoch(epoch) must give torch's num_samples,
 * total_size and indices exactly.
 *
 * @example
 * ```ts
 * const rows = checkSamplerFixtures("fixtures/pytorch");
 * rows.filter((r) => !r.pass); // [] when dtrain matches torch
 * ```
 */
export function checkSamplerFixtures(folder: string): ParityRow[] {
  const cases = recordList(
    readFixture(folder, "sampler.json"),
    "cases",
    "sampler.json",
  );
  return cases.map((c) =>
    row(
      `sampler n=${c.n} ws=${c.num_replicas} seed=${c.seed} epoch=${c.epoch} ` +
        `shuffle=${c.shuffle} drop_last=${c.drop_last}`,
      "indices per rank",
      () => checkSamplerCase(c),
    )
  );
}

function checkSamplerCase(c: Record<string, Json>): Outcome {
  const numReplicas = int(c, "num_replicas");
  const expected = list(c, "indices");
  if (expected.length !== numReplicas) {
    return fail(
      `fixture has ${expected.length} index lists, expected ${numReplicas} (one per rank)`,
    );
  }
  for (let rank = 0; rank < numReplicas; rank++) {
    const sampler = new DistributedSampler(int(c, "n"), {
      numReplicas,
      rank,
      shuffle: bool(c, "shuffle"),
      seed: int(c, "seed"),
      dropLast: bool(c, "drop_last"),
      onWarning: () => {},
    });
    sampler.setEpoch(int(c, "epoch"));
    if (sampler.numSamples !== int(c, "num_samples")) {
      return fail(
        `num_samples ${sampler.numSamples}, expected ${c.num_samples}`,
      );
    }
    if (sampler.totalSize !== int(c, "total_size")) {
      return fail(`total_size ${sampler.totalSize}, expected ${c.total_size}`);
    }
    const rankExpected = expected[rank];
    if (!Array.isArray(rankExpected)) {
      return fail(`indices[${rank}] is not an array`);
    }
    const problem = firstDifference(sampler.indices(), rankExpected);
    if (problem) return fail(`rank ${rank}: ${problem}`);
  }
  return pass(`${numReplicas} rank(s) x ${c.num_samples} indices match`);
}

/**
 * Checks every case of `<folder>/randperm.json`: each `randperm` entry, and
 * for each `generator` entry the four streams torch drew from a fresh
 * generator per call (raw MT19937 outputs, full-range int64 `random_`,
 * `randint(0, 2**31 - 1)` and `rand`). Lengths come from the file.
 *
 * @example
 * ```ts
 * const rows = checkRandpermFixtures("fixtures/pytorch");
 * rows.every((r) => r.pass);
 * ```
 */
export function checkRandpermFixtures(folder: string): ParityRow[] {
  const fixture = readFixture(folder, "randperm.json", true);
  const rows = recordList(fixture, "randperm", "randperm.json").map((c) =>
    row(`randperm n=${c.n} seed=${c.seed}`, "values", () => {
      const perm = new TorchGenerator(int(c, "seed")).randperm(int(c, "n"));
      const problem = firstDifference(perm, list(c, "perm"));
      return problem ? fail(problem) : pass(`${perm.length} elements match`);
    })
  );
  for (const c of recordList(fixture, "generator", "randperm.json")) {
    for (const [stream, draw] of Object.entries(GENERATOR_STREAMS)) {
      rows.push(row(`generator seed=${c.seed} ${stream}`, "values", () => {
        const expected = list(c, stream);
        const actual = draw(
          new TorchGenerator(int(c, "seed")),
          expected.length,
        );
        const problem = firstDifference(actual, expected);
        return problem ? fail(problem) : pass(`${expected.length} values match`);
      }));
    }
  }
  return rows;
}

/** How each generator stream of randperm.json is drawn from a fresh generator. */
const GENERATOR_STREAMS: Record<
  string,
  (g: TorchGenerator, count: number) => Json[]
> = {
  mt19937_u32: (g, count) => Array.from({ length: count }, () => g.nextUint32()),
  // Fixture values beyond 2**53 were parsed as bigint, smaller ones as numbers.
  full_range_int64: (g, count) =>
    Array.from({ length: count }, () => {
      const value = BigInt.asIntN(64, g.nextUint64());
      return Number.isSafeInteger(Number(value)) ? Number(value) : value;
    }),
  randint_0_2147483647: (g, count) =>
    Array.from({ length: count }, () => g.randint(0, 2 ** 31 - 1)),
  rand_float32: (g, count) => Array.from(g.randFloat32(count)),
};
