/**
 * The launcher names the earliest real failure, never its consequence: when
 * one rank's Trainer fails, the other rank's collective breaks ("rank N
 * closed its process group") and it may exit first, yet the summary must
 * name the failing rank and its error every time. Run for a loss that throws
 * on one rank (20 times, alternating the rank), a full disk during rank 0's
 * checkpoint save, and a corrupt checkpoint that only rank 0 resumes from.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun } from "../launch/launch_helpers.ts";
import { firstFailure, type StoredNotice } from "../../launch/first_failure.ts";
import type { FailureNotice } from "../../distributed/control/rank_state.ts";

const SCRIPT = join(REPO, "tests/faults/scripts/trainer_fail.ts");
const TRIALS = 20;
/** Launchers run two at a time: the trials stay quick without loading a small machine too much. */
const PARALLEL = 2;

interface Trial {
  failing: number;
  code: number;
  stderr: string;
}

/** The summary lines of the launcher (what the user reads first). */
function summary(stderr: string): string {
  return stderr.split("\n").filter((l) => l.startsWith("[dtrain] ")).join("\n");
}

/** Checks that the summary names `rank` and `error`, and no consequence as the headline. */
function assertBlames(t: Trial, rank: number, error: RegExp, context: string): void {
  const s = summary(t.stderr);
  assert.equal(t.code, 1, `${context}: exit code\n${t.stderr}`);
  assert.match(
    s,
    new RegExp(`^\\[dtrain\\] rank ${rank} \\(node 0, pid \\d+\\) failed first: exit code 1$`, "m"),
    `${context}: the wrong rank is blamed\n${s}`,
  );
  const errorLine = s.split("\n").find((l) => l.startsWith("[dtrain] error: "));
  assert.ok(errorLine, `${context}: no error line\n${s}`);
  assert.match(errorLine, error, `${context}: the wrong error is shown\n${s}`);
  assert.doesNotMatch(errorLine, /closed its process group|aborted the process group|exited/);
}

async function runTrials(
  count: number,
  setup: (i: number) => { args: string[]; env?: Record<string, string>; prefix?: string[] },
): Promise<Trial[]> {
  const t = new TestRun();
  try {
    const out: Trial[] = [];
    for (let i = 0; i < count; i += PARALLEL) {
      const batch = Array.from({ length: Math.min(PARALLEL, count - i) }, async (_, j) => {
        const s = setup(i + j);
        const r = await t.finish(
          t.launch(["--nproc", "2", SCRIPT, ...s.args], { env: s.env, prefix: s.prefix }),
          60_000,
        );
        return { failing: Number(s.args[0]), code: r.code, stderr: r.stderr };
      });
      out.push(...await Promise.all(batch));
    }
    return out;
  } finally {
    await t.cleanup();
  }
}

Deno.test(`a loss that throws on one rank is blamed on that rank, ${TRIALS} times alternating the rank`, async () => {
  const trials = await runTrials(TRIALS, (i) => ({ args: [String(i % 2), "throw"] }));
  trials.forEach((trial, i) =>
    assertBlames(
      trial,
      trial.failing,
      new RegExp(`^\\[dtrain\\] error: Error: rank ${trial.failing} failed on purpose at step 3$`),
      `trial ${i} (rank ${trial.failing} fails)`,
    )
  );
});

function canMountTmpfs(): boolean {
  try {
    return new Deno.Command("unshare", {
      args: ["-m", "sh", "-c", "mount -t tmpfs -o size=64k x /mnt"],
      stderr: "null",
    }).outputSync().success;
  } catch {
    return false;
  }
}

Deno.test({
  name: `a full disk during rank 0's checkpoint save is blamed on rank 0, ${TRIALS} times`,
  ignore: Deno.build.os !== "linux" || !canMountTmpfs(),
  async fn() {
    const disk = Deno.makeTempDirSync({ prefix: "dtrain-full-disk-" });
    try {
      const trials = await runTrials(TRIALS, () => ({
        args: ["0", "save"],
        env: { CKPT_DIR: join(disk, "ckpt"), WIDE: "1" },
        // A private 64 KiB tmpfs for this launcher and its ranks only.
        prefix: [
          "unshare",
          "-m",
          "sh",
          "-c",
          'mount -t tmpfs -o size=64k full "$0" && exec "$@"',
          disk,
        ],
      }));
      trials.forEach((trial, i) =>
        assertBlames(
          trial,
          0,
          /^\[dtrain\] error: Error: Cannot save checkpoint step-00000002 in .*: writing \w+\.safetensors failed: No space left on device \(os error 28\)/,
          `trial ${i}`,
        )
      );
    } finally {
      Deno.removeSync(disk, { recursive: true });
    }
  },
});

Deno.test(`a corrupt checkpoint that only rank 0 resumes from is blamed on rank 0, ${TRIALS} times`, async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-corrupt-ckpt-" });
  try {
    const t = new TestRun();
    try {
      const r = await t.finish(
        t.launch(["--nproc", "2", SCRIPT, "0", "none"], { env: { CKPT_DIR: join(dir, "good") } }),
        60_000,
      );
      assert.equal(r.code, 0, r.stderr);
    } finally {
      await t.cleanup();
    }
    const goodStep = join(dir, "good", "step-00000008");
    const bad = join(dir, "bad", "step-00000008");
    Deno.mkdirSync(bad, { recursive: true });
    for (const f of Deno.readDirSync(goodStep)) {
      Deno.copyFileSync(join(goodStep, f.name), join(bad, f.name));
    }
    const model = Deno.readFileSync(join(bad, "model.safetensors"));
    Deno.writeFileSync(join(bad, "model.safetensors"), model.subarray(0, model.length - 8));
    const trials = await runTrials(TRIALS, () => ({
      args: ["0", "resume"],
      env: { RESUME_0: bad, RESUME_1: goodStep },
    }));
    trials.forEach((trial, i) =>
      assertBlames(
        trial,
        0,
        /^\[dtrain\] error: Error: Cannot load checkpoint .*bad\/step-00000008: model\.safetensors is \d+ bytes but manifest\.json records \d+/,
        `trial ${i}`,
      )
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

function notice(rank: number, kind: FailureNotice["kind"], at = 0): FailureNotice {
  return { rank, host: "h", pid: 100 + rank, kind, at, message: `m${rank}`, stack: "" };
}

Deno.test("firstFailure() prefers the earliest own error or timeout, then a silent death, then a consequence", () => {
  const n = (rank: number, kind: FailureNotice["kind"], ageMs: number): StoredNotice => ({
    notice: notice(rank, kind),
    ageMs,
  });
  // The peer's notice arrived first, yet the error is the cause.
  assert.deepEqual(firstFailure([n(0, "peer", 50), n(1, "error", 40)], [{ rank: 0, order: 0 }]), {
    rank: 1,
    kind: "error",
    notice: notice(1, "error"),
  });
  // Two own errors: the one the store received first.
  assert.equal(firstFailure([n(2, "error", 10), n(3, "timeout", 30)], [])!.rank, 3);
  // Only a consequence, but a rank died without a word: that death is the cause.
  assert.deepEqual(
    firstFailure([n(0, "peer", 50)], [{ rank: 0, order: 0 }, { rank: 1, order: 1 }]),
    { rank: 1, kind: "died" },
  );
  // Nothing but a consequence: that is all anyone knows.
  assert.equal(firstFailure([n(0, "peer", 50)], [{ rank: 0, order: 0 }])!.kind, "peer");
  assert.equal(firstFailure([], []), null);
});
