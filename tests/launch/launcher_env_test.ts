/**
 * The launcher's contract with a successful run: the torchrun environment
 * and DTRAIN_* variables each rank sees, threads per rank, output prefixes
 * and filtering, per-rank log files and launch.json, `import … from "dtrain"`
 * from a script outside the repository, and the ./dtrain entry script.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { onlyRunDir, REPO, SCRIPTS, TestRun } from "./launch_helpers.ts";

function envLines(stdout: string): Record<string, unknown>[] {
  return stdout.split("\n").filter((l) => /^\[r\d+\] ENV /.test(l)).map((l) =>
    JSON.parse(l.replace(/^\[r\d+\] ENV /, ""))
  );
}

Deno.test("dtrain --nproc 2 sets the torchrun environment and DTRAIN_* variables for each rank", async () => {
  const t = new TestRun();
  try {
    const l = t.launch([
      "--nproc",
      "2",
      "--log-ranks",
      "all",
      join(SCRIPTS, "print_env.ts"),
      "--lr",
      "0.1",
      "--nproc",
      "9",
    ], {
      env: { OMP_NUM_THREADS: "" },
    });
    const r = await t.finish(l);
    assert.equal(r.code, 0, r.stderr);
    const envs = envLines(r.stdout).sort((a, b) => Number(a.RANK) - Number(b.RANK));
    assert.equal(envs.length, 2, r.stdout);
    const runDir = onlyRunDir(t.dir);
    const cores = navigator.hardwareConcurrency;
    for (const [i, e] of envs.entries()) {
      assert.equal(e.RANK, String(i));
      assert.equal(e.LOCAL_RANK, String(i));
      assert.equal(e.WORLD_SIZE, "2");
      assert.equal(e.LOCAL_WORLD_SIZE, "2");
      assert.equal(e.GROUP_RANK, "0");
      assert.equal(e.MASTER_ADDR, "127.0.0.1");
      assert.match(String(e.MASTER_PORT), /^\d+$/);
      assert.notEqual(e.MASTER_PORT, "0");
      assert.equal(e.DTRAIN_RUN_DIR, runDir);
      assert.equal(e.DTRAIN_RUN_ID, runDir.split("/").pop());
      assert.equal(e.DTRAIN_NUM_THREADS, String(Math.max(1, Math.floor(cores / 2))));
      assert.equal(e.DTRAIN_NNODES, "1");
      assert.equal(e.DTRAIN_HANG_WARN, "60");
      assert.equal(e.DTRAIN_TIMEOUT, "1800");
      assert.equal(e.DTRAIN_RESTART_COUNT, "0");
      assert.equal(e.DTRAIN_LOG_RANKS, "all");
      assert.equal(e.OMP_NUM_THREADS, "", "OMP_NUM_THREADS is left as the user set it");
      assert.equal(e.tokenLength, 64);
      assert.deepEqual(
        e.args,
        ["--lr", "0.1", "--nproc", "9"],
        "script arguments pass through untouched",
      );
      assert.equal(e.main, true, "the user's script is the main module");
    }
    assert.equal(envs[0]!.MASTER_PORT, envs[1]!.MASTER_PORT);
    assert.match(String(envs[0]!.DTRAIN_RUN_ID), /^\d{8}-\d{6}-print_env-[0-9a-f]{4}$/);
    const token = Deno.readTextFileSync(join(t.pidDir, "token-0"));
    assert.equal(
      Deno.readTextFileSync(join(t.pidDir, "token-1")),
      token,
      "both ranks get the run's token",
    );
    for (
      const text of [
        r.stdout,
        r.stderr,
        ...["launcher.log", "launch.json"].map((f) => Deno.readTextFileSync(join(runDir, f))),
      ]
    ) {
      assert.ok(!text.includes(token), "the launcher never prints or records the store token");
    }
  } finally {
    await t.cleanup();
  }
});

Deno.test("dtrain prefixes every line with its rank, shows other ranks' stdout only when asked, and logs everything per rank", async () => {
  const t = new TestRun();
  try {
    const secret = "given-secret-token-1234";
    const r = await t.finish(
      t.launch([
        "--nproc",
        "2",
        "--threads",
        "3",
        "--rdzv-token",
        secret,
        join(SCRIPTS, "print_env.ts"),
      ]),
    );
    assert.equal(r.code, 0, r.stderr);
    const envs = envLines(r.stdout);
    assert.equal(envs.length, 1, "only rank 0's stdout is shown by default");
    assert.equal(envs[0]!.RANK, "0");
    assert.equal(envs[0]!.DTRAIN_NUM_THREADS, "3", "--threads overrides cores ÷ nproc");
    assert.match(r.stderr, /^\[r0\] stderr line from rank 0$/m);
    assert.match(
      r.stderr,
      /^\[r1\] stderr line from rank 1$/m,
      "other ranks' stderr is always shown",
    );
    for (const line of (r.stdout + r.stderr).split("\n").filter((l) => l !== "")) {
      assert.match(line, /^\[(r\d+|dtrain)\] /, `every line shows its origin: ${line}`);
    }
    const runDir = onlyRunDir(t.dir);
    for (const rank of [0, 1]) {
      const log = Deno.readTextFileSync(join(runDir, `rank-${rank}.log`));
      assert.match(
        log,
        new RegExp(`^ENV \\{"RANK":"${rank}"`, "m"),
        "the log holds the rank's full stdout",
      );
      assert.match(log, new RegExp(`^stderr line from rank ${rank}$`, "m"), "and its stderr");
    }
    const record = JSON.parse(Deno.readTextFileSync(join(runDir, "launch.json")));
    assert.equal(record.exitCode, 0);
    assert.equal(record.nproc, 2);
    assert.equal(record.nnodes, 1);
    assert.equal(record.attempts, 1);
    assert.deepEqual(record.command.slice(0, 7), [
      "dtrain",
      "--nproc",
      "2",
      "--threads",
      "3",
      "--rdzv-token",
      "<redacted>",
    ]);
    assert.equal(
      Deno.readTextFileSync(join(t.pidDir, "token-1")),
      secret,
      "--rdzv-token is the run's token",
    );
    for (const f of ["launch.json", "launcher.log"]) {
      assert.ok(
        !Deno.readTextFileSync(join(runDir, f)).includes(secret),
        `${f} must not hold the secret`,
      );
    }
  } finally {
    await t.cleanup();
  }
});

Deno.test('a script outside the repository imports the library as "dtrain"', async () => {
  const t = new TestRun();
  try {
    const script = join(t.dir, "outside.ts");
    Deno.writeTextFileSync(
      script,
      [
        `import * as dtrain from "dtrain";`,
        `dtrain.phase("user phase");`,
        `await dtrain.storeBarrier("both ranks here");`,
        `const { rank, worldSize } = dtrain.getWorld();`,
        `console.log("IMPORTED", typeof dtrain.Tensor, rank, worldSize);`,
      ].join("\n"),
    );
    const r = await t.finish(t.launch(["--nproc", "2", "--log-ranks", "all", "outside.ts"]));
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^\[r0\] IMPORTED function 0 2$/m);
    assert.match(r.stdout, /^\[r1\] IMPORTED function 1 2$/m);
  } finally {
    await t.cleanup();
  }
});

const cpuLibrary = join(REPO, "build/libdtrain_cpu.so");
Deno.test({
  name: "native kernels in each rank use DTRAIN_NUM_THREADS threads",
  ignore: (() => {
    try {
      return !Deno.statSync(cpuLibrary).isFile;
    } catch {
      return true;
    }
  })(),
  fn: async () => {
    const t = new TestRun();
    try {
      const script = join(t.dir, "threads.ts");
      Deno.writeTextFileSync(
        script,
        `import { cpuKernels } from "${join(REPO, "ffi/cpu.ts")}";\n` +
          `console.log("THREADS", cpuKernels().symbols.dt_get_num_threads());\n`,
      );
      const r = await t.finish(
        t.launch(["--nproc", "2", "--threads", "2", "--log-ranks", "all", "threads.ts"]),
      );
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /^\[r0\] THREADS 2$/m);
      assert.match(r.stdout, /^\[r1\] THREADS 2$/m);
    } finally {
      await t.cleanup();
    }
  },
});

Deno.test("./dtrain runs from any directory through a symlink", async () => {
  const t = new TestRun();
  try {
    const link = join(t.dir, "bin", "dtrain");
    Deno.mkdirSync(join(t.dir, "bin"));
    Deno.symlinkSync(join(REPO, "dtrain"), link);
    const run = (args: string[]) =>
      new Deno.Command(link, {
        args,
        cwd: t.dir,
        env: { DTRAIN_NO_BUILD: "1", TEST_PID_DIR: t.pidDir },
        stdout: "piped",
        stderr: "piped",
      })
        .output();
    const version = await run(["--version"]);
    assert.equal(version.code, 0);
    assert.match(
      new TextDecoder().decode(version.stdout),
      /^dtrain \d+\.\d+\.\d+ \(deno \d+\.\d+\.\d+\)$/m,
    );
    const launched = await run(["run", "--nproc", "1", join(SCRIPTS, "print_env.ts"), "x"]);
    assert.equal(launched.code, 0, new TextDecoder().decode(launched.stderr));
    assert.match(new TextDecoder().decode(launched.stdout), /^\[r0\] ENV \{"RANK":"0"/m);
    const bad = await run(["--nproc", "0", "x.ts"]);
    assert.equal(bad.code, 2);
    assert.match(new TextDecoder().decode(bad.stderr), /--nproc must be an integer >= 1, got "0"/);
  } finally {
    await t.cleanup();
  }
});

Deno.test("dtrain refuses a missing script before starting anything", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(t.launch(["--nproc", "2", "no_such_script.ts"]));
    assert.equal(r.code, 2);
    assert.match(
      r.stderr,
      /Cannot launch no_such_script\.ts: no such file \(looked at .*no_such_script\.ts\)/,
    );
  } finally {
    await t.cleanup();
  }
});
