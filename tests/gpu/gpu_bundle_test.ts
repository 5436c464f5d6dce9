/**
 * The device bundle (`deno task gpu-bundle`): at most 50 MiB with the single
 * file, the checks, the fixtures and run.sh; and `sh run.sh` run from the
 * built folder as on the GPU machine — no network (unshare -n where
 * permitted), an empty HOME, no Deno, node or npm on PATH — here without a
 * GPU: it says what it found, marks the GPU steps SKIP with the reason and
 * exits 0; then with the switch that puts every step on the emulated GPU (one
 * device, as on the lent machine, which the two ranks share), so each step's
 * code runs — ops sweep, every parity group (SyncBatchNorm's two ranks
 * included), the benchmark, NCCL with one and two ranks, a training job
 * resumed from its checkpoint — and passes. A path that exists only in the
 * checkout fails the run: the checkout is not where it runs.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO } from "../launch/launch_helpers.ts";
import { buildBlocker, NO_NETWORK, runIn, Sandbox } from "../single_file/_sandbox.ts";
import { HAVE_EMU } from "./_emu.ts";
import { MAX_BUNDLE_BYTES, treeBytes } from "../../scripts/gpu_bundle.ts";

const BLOCKER = buildBlocker(REPO);
if (BLOCKER) console.log(`device bundle tests skipped: ${BLOCKER}`);

/** What run.sh calls besides the single file's header tools (sh, tail, gzip, tar, …). */
const RUN_TOOLS = [
  "date",
  "timeout",
  "cat",
  "sed",
  "grep",
  "cut",
  "tee",
  "awk",
  "uname",
  "env",
  "dirname",
  "head",
  "sleep",
];

function findTool(name: string): string {
  for (const dir of ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]) {
    try {
      if (Deno.statSync(join(dir, name)).isFile) return join(dir, name);
    } catch { /* next */ }
  }
  throw new Error(`${name} not found in /usr/bin or /bin`);
}

const scratch = Deno.makeTempDirSync({ prefix: "dtrain-gpu-bundle-test-" });
globalThis.addEventListener("unload", () => Deno.removeSync(scratch, { recursive: true }));
let built: Promise<string> | null = null;

/** Builds the bundle once for this file (without the CUDA library where nvcc is missing). */
function bundle(): Promise<string> {
  built ??= (async () => {
    const out = join(scratch, "gpu-check");
    const r = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "scripts/gpu_bundle.ts", "--out", out, "--allow-no-cuda"],
      cwd: REPO,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(r.stdout) + new TextDecoder().decode(r.stderr);
    assert.equal(r.code, 0, `the bundle build failed:\n${text}`);
    return out;
  })();
  return built;
}

/**
 * A sandbox whose PATH holds the header's tools and run.sh's, nothing else (no deno), and what
 * unpacks the xz fixtures: `xz` for tar -J, or, as on a GPU machine without xz, only `python3`
 * (its own lzma).
 */
function sandbox(unpacker: "xz" | "python3"): Sandbox {
  const box = new Sandbox();
  for (const t of [...RUN_TOOLS, unpacker]) Deno.symlinkSync(findTool(t), join(box.tools, t));
  return box;
}

/** The rows run.sh printed (the first table: one line per step, as each ended). */
function rows(stdout: string): Map<string, { result: string; why: string }> {
  const out = new Map<string, { result: string; why: string }>();
  for (const line of stdout.split("\n")) {
    const m = /^(\d\w? [^ ].*?) +(PASS|FAIL|SKIP) +\d+s {2}(.*)$/.exec(line);
    if (m && !out.has(m[1]!)) out.set(m[1]!, { result: m[2]!, why: m[3]! });
  }
  return out;
}

Deno.test({
  name:
    "gpu-bundle writes dist/gpu-check: the single file, checks, steps, fixtures and run.sh, at most 50 MiB",
  ignore: BLOCKER !== null,
  async fn() {
    const dir = await bundle();
    const bytes = treeBytes(dir);
    assert.ok(bytes <= MAX_BUNDLE_BYTES, `${(bytes / 2 ** 20).toFixed(1)} MiB`);
    for (
      const f of [
        "dtrain",
        "run.sh",
        "bench_gpt_torch.py",
        "bench_attention_torch.py",
        "js/bench_attention.js",
        "js/gpu_env.js",
        "js/ops_vs_cpu.js",
        "js/parity.js",
        "js/bench_gpt.js",
        "js/resume_check.js",
        "js/nccl_watchdog_worker.js",
        "js/checkpoint_commit_worker.js",
        "js/syncbn_rank.js",
        "scripts/nccl_ranks.ts",
        "scripts/train_job.ts",
        "fixtures.tar.xz",
        "steps/10-facts.sh",
        "steps/20-ops.sh",
        "steps/30-parity.sh",
        "steps/40-bench-gpt.sh",
        "steps/50-nccl.sh",
      ]
    ) {
      assert.ok(Deno.statSync(join(dir, f)).isFile, `${f} is missing`);
    }
    // the rank script keeps "dtrain" an import: the single file's library, not a copy of its own
    const rank = Deno.readTextFileSync(join(dir, "js", "syncbn_rank.js"));
    assert.match(rank, /from "dtrain"/);
    assert.doesNotMatch(rank, /installRankStore|class Tensor\b/);
    // run.sh --help says what the folder holds and why
    const help = await new Deno.Command("sh", {
      args: ["run.sh", "--help"],
      cwd: dir,
      stdout: "piped",
    })
      .output();
    const text = new TextDecoder().decode(help.stdout);
    assert.equal(help.code, 0);
    for (
      const what of [
        "dtrain ",
        "steps/",
        "js/",
        "scripts/",
        "fixtures.tar.xz",
        "bench_gpt_torch.py",
      ]
    ) {
      assert.ok(text.includes(what), `run.sh --help does not mention ${what}:\n${text}`);
    }
    assert.match(text, /NCCL_IB_DISABLE|InfiniBand/);
    // the launched checks travel as TypeScript and may import nothing but the library
    for (const s of ["nccl_ranks.ts", "train_job.ts"]) {
      const text = Deno.readTextFileSync(join(dir, "scripts", s));
      const imports = [...text.matchAll(/from "([^"]+)"/g)].map((m) => m[1]);
      assert.deepEqual([...new Set(imports)], ["dtrain"], `${s} imports ${imports}`);
    }
  },
});

Deno.test({
  name:
    "run.sh without a GPU, offline, empty HOME, no Deno: facts, every GPU step SKIP with the reason, exit 0",
  ignore: BLOCKER !== null,
  async fn() {
    const dir = await bundle();
    const box = sandbox("python3");
    try {
      const r = await runIn(dir, ["sh", "run.sh"], box.env(join(box.dir, "cache")), {
        isolate: true,
        timeoutMs: 300_000,
      });
      assert.equal(r.code, 0, `run.sh failed:\n${r.stdout}\n${r.stderr}`);
      const table = rows(r.stdout);
      assert.equal(table.get("1 facts")?.result, "PASS", r.stdout);
      assert.match(table.get("1 facts")!.why, /^no usable GPU: /);
      for (
        const s of [
          "2 ops vs CPU",
          "3 parity fixtures",
          "4 GPT-2 124M benchmark",
          "5 attention benchmark",
          "6 NCCL and a training job",
        ]
      ) {
        assert.equal(table.get(s)?.result, "SKIP", `${s}: ${r.stdout}`);
        assert.match(table.get(s)!.why, /no usable GPU: .*not found/);
      }
      const log = Deno.readTextFileSync(join(dir, "gpu-check.log"));
      assert.match(log, /total \d+s; 0 step\(s\) failed/);
      assert.match(log, /CUDA is not usable: /);
      assert.deepEqual([...Deno.readDirSync(box.home)], [], "run.sh wrote into HOME");
      console.log(
        `run.sh without a GPU: ${r.elapsedMs} ms, ${
          NO_NETWORK.ok ? "no network" : `network: ${NO_NETWORK.why}`
        }`,
      );
    } finally {
      box.remove();
    }
  },
});

Deno.test({
  name:
    "run.sh with every step on the emulated GPU (its hidden switch): each step's code runs and passes",
  ignore: BLOCKER !== null || !HAVE_EMU,
  async fn() {
    const dir = await bundle();
    const box = sandbox("xz");
    try {
      const env = { ...box.env(join(box.dir, "cache")), DTRAIN_GPU_CHECK_DEVICE: "cuda-emu" };
      const r = await runIn(dir, ["sh", "run.sh", "emu.log"], env, {
        isolate: true,
        timeoutMs: 480_000,
      });
      assert.equal(r.code, 0, `run.sh failed:\n${r.stdout}\n${r.stderr}`);
      const table = rows(r.stdout);
      const passed = [
        "1 facts",
        "2 ops vs CPU",
        "3 parity fixtures",
        "4a GPT-2 124M bf16, dtrain",
        "5a attention fwd+bwd, dtrain",
        "6a NCCL, 1 rank",
        "6b NCCL, 2 ranks",
        "6c SyncBN parity, 2 ranks",
        "6d train, checkpoint, resume",
      ];
      for (const s of passed) assert.equal(table.get(s)?.result, "PASS", `${s}: ${r.stdout}`);
      assert.match(table.get("1 facts")!.why, /emulated GPU/);
      assert.match(
        table.get("2 ops vs CPU")!.why,
        /^\d+ checks, 0 failed, (\d+)\/\1 symbols verified\b/,
      );
      // every parity group ran from the bundle's own fixtures
      const parity = table.get("3 parity fixtures")!.why;
      const [, ok, all] = /^(\d+) of (\d+) cases within tolerance/.exec(parity) ?? [];
      assert.ok(ok && ok === all && Number(all) >= 400, parity);
      assert.match(table.get("6c SyncBN parity, 2 ranks")!.why, /^(\d+) of \1 cases within/);
      assert.match(table.get("6b NCCL, 2 ranks")!.why, /^2 rank\(s\), every collective right/);
      assert.match(
        table.get("6d train, checkpoint, resume")!.why,
        /^resumed at step 5 and repeated 2 step/,
      );
      // the benchmark counts its device launches, per step and per layer
      assert.match(
        table.get("4a GPT-2 124M bf16, dtrain")!.why,
        /, \d+ launches\/step \(\d+(\.\d+)? per layer\)/,
      );
      assert.equal(table.get("4b same model, PyTorch eager")?.result, "SKIP");
      assert.match(
        table.get("5a attention fwd+bwd, dtrain")!.why,
        /^dtrain attention fwd\+bwd [\d.]+ ms/,
      );
      assert.equal(table.get("5b same, torch SDPA")?.result, "SKIP");
      const log = Deno.readTextFileSync(join(dir, "emu.log"));
      // each parity group's rows are in the log
      for (
        const c of ["toy_mlp_e", "gpt_mini", "ckpt_", "conv2d_0", "cnn", "syncbn_1", "sampler"]
      ) {
        assert.ok(log.includes(c), `no ${c} rows in the log`);
      }
      // two ranks shared the one emulated GPU
      assert.match(log, /GPU sharing is on/);
      console.log(`run.sh on the emulated GPU: ${r.elapsedMs} ms`);
      // the rows came out as the steps ended, before the closing table
      assert.ok(r.stdout.indexOf("1 facts") < r.stdout.lastIndexOf("\nstep "), r.stdout);
      assert.match(log, /ranks compute on cuda-emu/);
    } finally {
      box.remove();
    }
  },
});
