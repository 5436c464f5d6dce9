/**
 * Seeded mutation fuzzing of the safetensors parser, the zip reader and the
 * unpickler (via loadTorchFile): thousands of cases per reader in a worker under a
 * per-case watchdog. DTRAIN_FUZZ_SEED and DTRAIN_FUZZ_CASES override seed and count.
 */
import assert from "node:assert/strict";
import type { FuzzFixtures, FuzzTarget } from "./_fuzz_cases.ts";
import type { FuzzJob, FuzzMessage } from "./_fuzz_worker.ts";
import { readFixture } from "./_fixtures.ts";

const SEED = Number(Deno.env.get("DTRAIN_FUZZ_SEED") ?? 20240611);
const CASES = Number(Deno.env.get("DTRAIN_FUZZ_CASES") ?? 3000);
/** No single case may run this long; a hang is reported with its case number. */
const CASE_LIMIT_MS = 10_000;
/**
 * Before its first case the worker loads (and type-checks) the readers: on a loaded
 * machine that alone can take tens of seconds, which says nothing about a reader.
 */
const LOAD_LIMIT_MS = 180_000;

function fixtures(): FuzzFixtures {
  return {
    safetensors: ["ckpt_full.safetensors", "gpt_mini_io.safetensors"].map(readFixture),
    zips: ["ckpt_state_dict.pt", "ckpt_full.pt"].map(readFixture),
    legacy: readFixture("ckpt_state_dict_legacy.pt"),
  };
}

type Done = Extract<FuzzMessage, { type: "done" }>;

/** Runs `target`'s cases in `worker`; rejects on a broken invariant or a case that exceeds CASE_LIMIT_MS. */
function fuzz(worker: Worker, target: FuzzTarget): Promise<Done> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return new Promise<Done>((resolve, reject) => {
    let current = -1;
    const arm = () => {
      clearTimeout(timer);
      const limit = current < 0 ? LOAD_LIMIT_MS : CASE_LIMIT_MS;
      timer = setTimeout(() => {
        reject(
          new Error(
            current < 0
              ? `the ${target} fuzz worker did not start its first case within ${limit} ms`
              : `${target} fuzz case ${current} (DTRAIN_FUZZ_SEED=${SEED}) ran longer than ${limit} ms: a hang`,
          ),
        );
      }, limit);
    };
    worker.onmessage = (event: MessageEvent<FuzzMessage>) => {
      const m = event.data;
      if (m.type === "start") {
        current = m.index;
        arm();
      } else if (m.type === "fail") {
        reject(
          new Error(
            `${target} fuzz case ${m.index} (DTRAIN_FUZZ_SEED=${SEED}) broke an invariant: ${m.message}`,
          ),
        );
      } else {
        resolve(m);
      }
    };
    worker.onerror = (event) => {
      event.preventDefault();
      reject(new Error(`${target} fuzz worker crashed in case ${current}: ${event.message}`));
    };
    arm();
    const job: FuzzJob = { target, seed: SEED, cases: CASES, fixtures: fixtures() };
    worker.postMessage(job);
  }).finally(() => clearTimeout(timer));
}

const STEPS: [FuzzTarget, string][] = [
  [
    "safetensors",
    "parseSafetensors() survives seeded fuzzing: mutated files, random and text-edited headers",
  ],
  ["zip", "readZipDirectory() and readZipEntry() survive seeded fuzzing of torch.save archives"],
  [
    "pickle",
    "unpickle() and loadTorchFile() survive seeded fuzzing: mutated pickles, legacy files, random opcode streams",
  ],
];

Deno.test(`checkpoint readers survive ${CASES} seeded fuzz cases each`, async (t) => {
  // One worker serves all readers, so its modules load (and type-check) once. A worker whose case hung
  // or failed is replaced, so the next reader still gets a fair run; the last one is always terminated.
  const spawn = () =>
    new Worker(new URL("./_fuzz_worker.ts", import.meta.url).href, { type: "module" });
  let worker = spawn();
  try {
    for (const [target, name] of STEPS) {
      await t.step(name, async () => {
        let done: Done;
        try {
          done = await fuzz(worker, target);
        } catch (e) {
          worker.terminate();
          worker = spawn();
          throw e;
        }
        console.log(
          `${target}: ${CASES} cases (${done.parsed} accepted, ${done.rejected} rejected) in ${
            done.ms.toFixed(0)
          } ms`,
        );
        assert.equal(done.parsed + done.rejected, CASES);
        // A fuzzer that only produced garbage (or only valid files) would prove little.
        assert.ok(
          done.parsed >= CASES * 0.02,
          `only ${done.parsed} of ${CASES} ${target} cases were accepted`,
        );
        assert.ok(
          done.rejected >= CASES * 0.2,
          `only ${done.rejected} of ${CASES} ${target} cases were rejected`,
        );
      });
    }
  } finally {
    worker.terminate();
  }
});
