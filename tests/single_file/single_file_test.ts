/**
 * The single file end to end: build it once, copy it alone into an empty
 * folder and, with a PATH of only the header's tools, an empty HOME and no
 * network, run a 2-rank training script that imports "dtrain", `dtrain
 * doctor`, two nodes over Gloo with the system's libgloo hidden, simultaneous
 * first starts, broken cache folders, and the
 * `deno compile` program's unpacking of the same payload. Reports the size
 * and the cold and warm start-up to the first training step.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildBlocker, cacheEntries, MOUNTS_OK, NO_NETWORK, runIn, Sandbox } from "./_sandbox.ts";
import { glooRuntimeLibraries } from "../../scripts/gloo_runtime_libs.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url));
const BLOCKER = buildBlocker(REPO);
if (BLOCKER) console.log(`single-file tests skipped: cannot build the file here: ${BLOCKER}`);
if (!NO_NETWORK.ok) console.log(`single-file runs keep the network: ${NO_NETWORK.why}`);
if (!MOUNTS_OK) {
  console.log("cache-folder failure test skipped: tmpfs mounts (unshare -m) not permitted");
}

/** A toy model trained for a few steps with DDP over the CPU process group. */
const USER_SCRIPT = `
import {
  AdamW, crossEntropy, DistributedDataParallel, fromArray, initProcessGroup, Linear,
  manualSeed, ReLU, scope, Sequential,
} from "dtrain";

const steps: number = Number(Deno.args[0] ?? 3);
const pg = initProcessGroup();
manualSeed(0);
const model = new Sequential(new Linear(8, 16), new ReLU(), new Linear(16, 2));
const ddp = new DistributedDataParallel(model, pg);
const opt = new AdamW(ddp.parameters(), { lr: 1e-2 });
const x = fromArray(new Float32Array(32).map((_, i) => Math.sin(i + pg.rank)), [4, 8]);
const y = fromArray(new Int32Array([0, 1, 1, 0]), [4]);
for (let step = 0; step < steps; step++) {
  const loss = scope(() => {
    opt.zeroGrad();
    const l = crossEntropy(ddp.forward(x), y);
    ddp.backward(l);
    opt.step();
    return l.item();
  });
  if (step === 0 && pg.rank === 0) console.log("FIRST_STEP_AT " + Date.now());
  console.log("rank " + pg.rank + " of " + pg.size + " step " + step + " loss " + loss.toFixed(4));
}
pg.close();
`;

interface Built {
  /** the single file */
  path: string;
  bytes: number;
  /** the kept build folder: compiled/ holds the deno compile program and its payload */
  stage: string;
}

const scratch = Deno.makeTempDirSync({ prefix: "dtrain-single-build-" });
globalThis.addEventListener("unload", () => Deno.removeSync(scratch, { recursive: true }));
let built: Promise<Built> | null = null;

/** Builds the file once for this test file (the CUDA library is left out: nvcc builds take minutes). */
function build(): Promise<Built> {
  built ??= (async () => {
    const path = join(scratch, "dtrain");
    const stage = join(scratch, "stage");
    const r = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "scripts/build_single.ts",
        "--sfx",
        "--quiet",
        "--out",
        path,
        "--stage",
        stage,
      ],
      cwd: REPO,
      env: { DTRAIN_CUDA: "0" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(r.stdout) + new TextDecoder().decode(r.stderr);
    assert.equal(r.code, 0, `the build failed:\n${text}`);
    assert.match(text, /built .*: self-extracting file, [\d.]+ MB, sha256 [0-9a-f]{64}/);
    return { path, bytes: Deno.statSync(path).size, stage };
  })();
  return built;
}

/** A fresh sandbox whose work folder holds the single file alone (and, once written, run.ts). */
async function sandboxWithFile(): Promise<Sandbox> {
  const { path } = await build();
  const box = new Sandbox();
  Deno.copyFileSync(path, join(box.work, "dtrain"));
  Deno.chmodSync(join(box.work, "dtrain"), 0o755);
  return box;
}

function firstStepMs(r: { stdout: string; startedAt: number }): number {
  const m = /FIRST_STEP_AT (\d+)/.exec(r.stdout);
  assert.ok(m, `no first training step in the output:\n${r.stdout}`);
  return Number(m[1]) - r.startedAt;
}

const timings: string[] = [];

/** A test that is skipped (with the reason printed above) where the file cannot be built. */
function test(name: string, fn: () => Promise<void>, opts: { ignore?: boolean } = {}): void {
  Deno.test({ name, ignore: BLOCKER !== null || (opts.ignore ?? false), fn });
}

test("build_single.ts --sfx writes one executable file with the runtime, the bundle and the libraries", async () => {
  const { path, bytes } = await build();
  const head = new TextDecoder().decode(Deno.readFileSync(path).subarray(0, 9));
  assert.equal(head, "#!/bin/sh");
  assert.ok((Deno.statSync(path).mode! & 0o111) !== 0, "the file is not executable");
  // deno alone is ~96 MB; gzip takes it to ~40 MB.
  assert.ok(bytes > 20e6 && bytes < 80e6, `unexpected size ${bytes}`);
  timings.push(`size ${(bytes / 1e6).toFixed(1)} MB`);
});

test(
  "the single file alone trains 2 ranks of a TypeScript script importing dtrain, with no deno/node/npm, an empty HOME and no network",
  async () => {
    const box = await sandboxWithFile();
    try {
      assert.deepEqual(cacheEntries(box.work), ["dtrain"]);
      Deno.writeTextFileSync(join(box.work, "run.ts"), USER_SCRIPT);
      const cache = join(box.dir, "cache");
      const run = () =>
        runIn(box.work, ["./dtrain", "--nproc", "2", "run.ts", "3"], box.env(cache), {
          isolate: true,
        });
      const cold = await run();
      assert.equal(cold.code, 0, `cold run failed:\n${cold.stdout}\n${cold.stderr}`);
      assert.match(cold.stdout, /rank 0 of 2 step 2 loss \d/);
      assert.match(cold.stderr, /finished: every rank exited 0/);
      const unpacked = cacheEntries(cache);
      assert.equal(unpacked.length, 1, `expected one extraction folder, found ${unpacked}`);
      assert.deepEqual(cacheEntries(box.home), [], "something was written to HOME");
      const warm = await run();
      assert.equal(warm.code, 0, `warm run failed:\n${warm.stdout}\n${warm.stderr}`);
      assert.equal(
        warm.stdout.match(/step 2 loss (\S+)/)?.[1],
        cold.stdout.match(/step 2 loss (\S+)/)?.[1],
      );
      const network = NO_NETWORK.ok ? "no network (unshare -n)" : `WITH network: ${NO_NETWORK.why}`;
      timings.push(
        `cold start to first step ${firstStepMs(cold)} ms (extraction included), warm ${
          firstStepMs(warm)
        } ms; whole 2-rank run cold ${cold.elapsedMs} ms, warm ${warm.elapsedMs} ms; ${network}`,
      );
    } finally {
      box.remove();
    }
  },
);

test("`dtrain doctor` from the single file reports every section and exits 0", async () => {
  const box = await sandboxWithFile();
  try {
    const r = await runIn(
      box.work,
      ["./dtrain", "doctor", "--nproc", "2"],
      box.env(join(box.dir, "c")),
      {
        isolate: true,
      },
    );
    assert.equal(r.code, 0, `doctor failed:\n${r.stdout}\n${r.stderr}`);
    for (
      const section of [
        "dtrain",
        "native libraries",
        "cpu",
        "memory",
        "shared memory",
        "gpu",
        "limits",
      ]
    ) {
      assert.match(r.stdout, new RegExp(`^${section}$`, "m"), `section "${section}" missing`);
    }
    assert.match(r.stdout, /single file .*\/work\/dtrain, unpacked in /);
    assert.match(r.stdout, /libdtrain_cpu\.so\s+CPU kernels \(every run\): loads/);
    assert.match(r.stdout, /verdict: ready for a CPU run of 2 rank/);
  } finally {
    box.remove();
  }
});

test("eight simultaneous first starts against a fresh cache all succeed and leave one verified folder", async () => {
  const box = await sandboxWithFile();
  try {
    const cache = join(box.dir, "cache");
    const t0 = Date.now();
    const runs = await Promise.all(
      Array.from({ length: 8 }, () => runIn(box.work, ["./dtrain", "--version"], box.env(cache))),
    );
    for (const r of runs) assert.equal(r.code, 0, `a start failed:\n${r.stderr}`);
    for (const r of runs) assert.match(r.stdout, /^dtrain \d+\.\d+\.\d+ \(deno /);
    const entries = cacheEntries(cache);
    assert.equal(entries.length, 1, `leftovers in the cache: ${entries}`);
    const inside = cacheEntries(join(cache, entries[0]!));
    assert.ok(inside.includes(".verified"));
    assert.ok(!inside.some((n) => n.startsWith(".unpack-")), `a loser's copy was left: ${inside}`);
    timings.push(`8 simultaneous first starts: ${Date.now() - t0} ms`);
  } finally {
    box.remove();
  }
});

test(
  "a read-only, full or noexec cache folder is a clear error naming the folder and DTRAIN_CACHE",
  async () => {
    const box = await sandboxWithFile();
    try {
      const ro = join(box.dir, "ro");
      const full = join(box.dir, "full");
      Deno.mkdirSync(ro);
      Deno.mkdirSync(full);
      const readOnly = await runIn(box.work, ["./dtrain", "--version"], box.env(ro), {
        tmpfs: { [ro]: "ro,size=1m" },
      });
      assert.equal(readOnly.code, 1);
      assert.match(
        readOnly.stderr,
        new RegExp(`cannot write to the cache folder ${ro}: Read-only`),
      );
      assert.match(readOnly.stderr, /Set DTRAIN_CACHE to a writable folder with \d+ MB free/);
      const tooSmall = await runIn(box.work, ["./dtrain", "--version"], box.env(full), {
        tmpfs: { [full]: "size=8m" },
      });
      assert.equal(tooSmall.code, 1);
      assert.match(tooSmall.stderr, new RegExp(`the cache folder ${full} is full`));
      assert.match(tooSmall.stderr, /Set DTRAIN_CACHE/);
      const noExec = join(box.dir, "noexec");
      Deno.mkdirSync(noExec);
      const r = await runIn(box.work, ["./dtrain", "--version"], box.env(noExec), {
        tmpfs: { [noExec]: "noexec,size=256m" },
      });
      assert.equal(r.code, 1);
      assert.match(r.stderr, new RegExp(`cannot run programs unpacked in ${noExec}: .*noexec`));
      assert.match(r.stderr, /Set DTRAIN_CACHE to a folder that allows running programs/);
    } finally {
      box.remove();
    }
  },
  { ignore: !MOUNTS_OK },
);

/** The system's copies of what libdtrain_gloo.so needs (libgloo0 and its libraries), to hide. */
function systemGlooLibraries(): string[] {
  try {
    Deno.statSync(join(REPO, "build/libdtrain_gloo.so"));
  } catch {
    return [];
  }
  return glooRuntimeLibraries(join(REPO, "build/libdtrain_gloo.so"))
    .map((l) => Deno.realPathSync(l.path));
}
const GLOO_HIDDEN = systemGlooLibraries();

test(
  "the single file carries Gloo: with libgloo0 and its libraries hidden, two launchers of it train 2 nodes over Gloo",
  async () => {
    const box = await sandboxWithFile();
    try {
      Deno.writeTextFileSync(join(box.work, "run.ts"), USER_SCRIPT);
      Deno.writeTextFileSync(join(box.work, "token"), "0123456789abcdef0123456789abcdef");
      Deno.chmodSync(join(box.work, "token"), 0o600);
      const node = (n: number) =>
        `./dtrain --nnodes 2 --node-rank ${n} --nproc 1 --master-port 29587 --rdzv-token-file token run.ts 3`;
      const cache = join(box.dir, "cache");
      const r = await runIn(
        box.work,
        ["sh", "-c", `${node(1)} > node1.out 2>&1 & ${node(0)}; s=$?; wait $! || s=$?; exit $s`],
        box.env(cache),
        { isolate: true, hide: GLOO_HIDDEN, timeoutMs: 180_000 },
      );
      const node1 = Deno.readTextFileSync(join(box.work, "node1.out"));
      assert.equal(
        r.code,
        0,
        `the 2-node run failed:\n${r.stdout}\n${r.stderr}\nnode 1:\n${node1}`,
      );
      assert.match(r.stdout, /rank 0 of 2 step 2 loss \d/);
      assert.match(node1, /finished: every rank exited 0/);
      const unpacked = join(cache, cacheEntries(cache)[0]!);
      for (const name of ["libdtrain_gloo.so", "libgloo.so.0", "licenses"]) {
        assert.ok(
          cacheEntries(join(unpacked, "lib")).includes(name),
          `lib/${name} was not carried`,
        );
      }
      const run = JSON.parse(
        Deno.readTextFileSync(
          join(box.work, "runs", cacheEntries(join(box.work, "runs"))[0]!, "run.json"),
        ),
      );
      assert.equal(run.world.backend, "gloo");
    } finally {
      box.remove();
    }
  },
  { ignore: !MOUNTS_OK || GLOO_HIDDEN.length === 0 },
);

test("a file altered in the extraction folder is refused, naming it and the folder to delete", async () => {
  const box = await sandboxWithFile();
  try {
    const cache = join(box.dir, "cache");
    assert.equal((await runIn(box.work, ["./dtrain", "--version"], box.env(cache))).code, 0);
    const root = join(cache, cacheEntries(cache)[0]!);
    const lib = join(root, "lib", "libdtrain_cpu.so");
    const bytes = Deno.readFileSync(lib);
    bytes[bytes.length - 1] ^= 0xff; // same size, one byte changed
    Deno.writeFileSync(lib, bytes);
    const r = await runIn(box.work, ["./dtrain", "--version"], box.env(cache));
    assert.equal(r.code, 1);
    assert.match(r.stderr, /lib\/libdtrain_cpu\.so has sha256 [0-9a-f]{64}, the manifest says/);
    assert.ok(r.stderr.includes(`Delete ${root}`), r.stderr);
  } finally {
    box.remove();
  }
});

test("the rank bootstrap checks the extraction first: a library altered after start-up is refused", async () => {
  const box = await sandboxWithFile();
  try {
    const cache = join(box.dir, "cache");
    assert.equal((await runIn(box.work, ["./dtrain", "--version"], box.env(cache))).code, 0);
    const root = join(cache, cacheEntries(cache)[0]!);
    // What the launcher preloads into every rank, started alone: it passes the check, then
    // launch/rank_main.ts refuses to run without a launcher (exit code 2).
    const rankMain = [
      join(root, "bin", "deno"),
      "run",
      "-A",
      "--config",
      join(root, "deno.json"),
      join(root, "js", "rank_main.js"),
    ];
    const env = { ...box.env(cache), DENO_DIR: join(root, "deno_dir") };
    const intact = await runIn(box.work, rankMain, env);
    assert.equal(intact.code, 2, intact.stderr);
    assert.match(intact.stderr, /rank bootstrap of the dtrain launcher/);
    const lib = join(root, "lib", "libdtrain_shm.so");
    const bytes = Deno.readFileSync(lib);
    bytes[bytes.length - 1] ^= 0xff;
    Deno.writeFileSync(lib, bytes);
    const altered = await runIn(box.work, rankMain, env);
    assert.equal(altered.code, 1, altered.stderr);
    assert.match(
      altered.stderr,
      /lib\/libdtrain_shm\.so has sha256 [0-9a-f]{64}, the manifest says/,
    );
    assert.doesNotMatch(altered.stderr, /rank bootstrap/);
  } finally {
    box.remove();
  }
});

test("the deno compile program unpacks the same payload without tar or gzip and runs dtrain", async () => {
  const { stage } = await build();
  const box = new Sandbox();
  try {
    Deno.removeSync(box.tools, { recursive: true });
    Deno.mkdirSync(box.tools); // nothing at all on PATH
    Deno.writeTextFileSync(join(box.work, "run.ts"), USER_SCRIPT);
    const cache = join(box.dir, "cache");
    // No denort here, so plain deno runs the exact program deno compile would embed.
    const main = join(stage, "compiled", "main.js");
    const argv = [Deno.execPath(), "run", "-A", "--no-config", main, "--nproc", "2", "run.ts", "2"];
    const r = await runIn(box.work, argv, box.env(cache), { isolate: true });
    assert.equal(r.code, 0, `failed:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /rank 0 of 2 step 1 loss/);
    const info = JSON.parse(Deno.readTextFileSync(join(stage, "compiled", "payload.json")));
    assert.deepEqual(cacheEntries(cache), [info.id]);
  } finally {
    box.remove();
  }
});

test("single-file measurements", () => {
  console.log(`single file: ${timings.join("; ")}`);
  return Promise.resolve();
});

test('the single file tokenizes with no network: `dtrain prepare --tokenizer gpt2` and gpt2Tokenizer from "dtrain"', async () => {
  const box = await sandboxWithFile();
  try {
    Deno.writeTextFileSync(join(box.work, "in.txt"), "hello world ".repeat(50));
    Deno.writeTextFileSync(
      join(box.work, "tok.ts"),
      `import { GPT2_EOT, gpt2Tokenizer } from "dtrain";\n` +
        `const t = await gpt2Tokenizer();\n` +
        `console.log(JSON.stringify([t.encode("hello world"), GPT2_EOT, t.decode([31373, 995])]));\n`,
    );
    const env = box.env(join(box.dir, "cache"));
    const prep = await runIn(box.work, ["./dtrain", "prepare", "in.txt", "out"], env, {
      isolate: true,
    });
    assert.equal(prep.code, 0, `prepare failed:\n${prep.stdout}\n${prep.stderr}`);
    const train = new Uint16Array(Deno.readFileSync(join(box.work, "out/train.bin")).buffer);
    assert.deepEqual([...train.subarray(0, 4)], [31373, 995, 23748, 995]); // "hello", " world", " hello", " world"
    const r = await runIn(box.work, ["./dtrain", "exec", "tok.ts"], env, { isolate: true });
    assert.equal(r.code, 0, `tok.ts failed:\n${r.stdout}\n${r.stderr}`);
    assert.equal(r.stdout.trim().split("\n").at(-1), '[[31373,995],50256,"hello world"]');
  } finally {
    box.remove();
  }
});
