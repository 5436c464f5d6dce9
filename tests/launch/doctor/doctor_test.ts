/**
 * `dtrain doctor`: from the checkout it prints every section and exits 0;
 * real problems (a /dev/shm too small for the ranks, a library that does not
 * load, a low open-file limit) make it exit 1 with `- fix:` advice; each
 * verdict rule on made-up facts; and the /dev/shm need it computes equals the
 * segment the shared-memory library really creates.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { DoctorFacts } from "../../../launch/doctor/facts.ts";
import { SECTIONS } from "../../../launch/doctor/render.ts";
import { ddpSharedBytes, shmSegmentBytes } from "../../../launch/doctor/shm.ts";
import { fsSpace, parseLimits, readCpu } from "../../../launch/doctor/system.ts";
import { ddpShmVerdict, judge } from "../../../launch/doctor/verdict.ts";
import { mountsAllowed } from "../launch_helpers.ts";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));

/** Runs `dtrain doctor <args>` from the checkout, optionally through `sh -c '<prefix> && exec …'`. */
async function doctor(
  args: string[],
  opts: { env?: Record<string, string>; shPrefix?: string; unshareMount?: boolean } = {},
): Promise<{ code: number; out: string }> {
  const argv = [
    Deno.execPath(),
    "run",
    "-A",
    "--config",
    join(REPO, "deno.json"),
    join(REPO, "cli.ts"),
    "doctor",
    ...args,
  ];
  const [cmd, cmdArgs] = opts.shPrefix
    ? [opts.unshareMount ? "unshare" : "sh", [
      ...(opts.unshareMount ? ["-m", "sh"] : []),
      "-c",
      `${opts.shPrefix} && exec "$@"`,
      "sh",
      ...argv,
    ]]
    : [argv[0]!, argv.slice(1)];
  const r = await new Deno.Command(cmd, {
    args: cmdArgs,
    env: { NO_COLOR: "1", ...opts.env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(r.stdout) + new TextDecoder().decode(r.stderr);
  return { code: r.code, out: text };
}

Deno.test("dtrain doctor from the checkout prints every section and exits 0 here", async () => {
  const r = await doctor(["--nproc", "2", "--device", "cpu"]);
  assert.equal(r.code, 0, r.out);
  for (const section of SECTIONS) {
    assert.match(r.out, new RegExp(`^${section}$`, "m"), `section "${section}" missing:\n${r.out}`);
  }
  assert.match(
    r.out,
    new RegExp(`version\\s+\\d+\\.\\d+\\.\\d+ \\(checkout ${REPO.replace(/\/$/, "")}\\)`),
  );
  assert.match(r.out, /runtime\s+Deno \d+\.\d+\.\d+, V8 \S+, TypeScript \S+/);
  assert.match(r.out, /libdtrain_cpu\.so\s+CPU kernels \(every run\): loads/);
  assert.match(r.out, /build [0-9a-f]{16}, code path cpu-/);
  assert.match(r.out, /open files\s+(\d+|unlimited) \(hard/);
  assert.match(r.out, /verdict: ready for a CPU run of 2 rank/);
  assert.doesNotMatch(r.out, /- fix:/);
});

Deno.test("dtrain doctor --json reports the loaded library's build hash and the /dev/shm need", async () => {
  const r = await doctor(["--nproc", "3", "--device", "cpu", "--json"]);
  assert.equal(r.code, 0, r.out);
  const report = JSON.parse(r.out) as { ready: boolean; facts: DoctorFacts };
  assert.equal(report.ready, true);
  const cpu = report.facts.libraries.find((l) => l.name === "libdtrain_cpu.so")!;
  assert.equal(cpu.loaded, true);
  assert.equal(
    cpu.buildHash,
    Deno.readTextFileSync(join(REPO, "build/libdtrain_cpu.so.hash")).trim(),
  );
  assert.equal(report.facts.shm.needBytes, shmSegmentBytes(3, report.facts.shm.chunkBytes));
  assert.equal(report.facts.versions.deno, Deno.version.deno);
});

Deno.test({
  name: "dtrain doctor exits 1 with a fix when /dev/shm is too small for the chosen ranks",
  ignore: !mountsAllowed(),
  async fn() {
    const r = await doctor(["--nproc", "4", "--device", "cpu"], {
      shPrefix: "mount -t tmpfs -o size=1m tmpfs /dev/shm",
      unshareMount: true,
    });
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /verdict: NOT ready/);
    assert.match(
      r.out,
      /- fix: \/dev\/shm holds only 1\.0 MiB; a CPU run of 4 ranks needs 8\.0 MiB there .*--shm-size/,
    );
  },
});

Deno.test("dtrain doctor exits 1 with a fix when DTRAIN_SHM_CHUNK_BYTES is not one the library accepts", async () => {
  const r = await doctor(["--nproc", "2", "--device", "cpu"], {
    env: { DTRAIN_SHM_CHUNK_BYTES: "1000" },
  });
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /- fix: DTRAIN_SHM_CHUNK_BYTES=1000 must be a multiple of 64/);
});

Deno.test("dtrain doctor exits 1 with a fix when the CPU library does not load", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-doctor-test-" });
  try {
    Deno.writeTextFileSync(join(dir, "libdtrain_cpu.so"), "not a shared object");
    const r = await doctor(["--nproc", "1"], { env: { DTRAIN_LIB_DIR: dir } });
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /libdtrain_cpu\.so\s+CPU kernels \(every run\): does not load/);
    assert.match(
      r.out,
      new RegExp(
        `- fix: libdtrain_cpu\\.so \\(needed by every run\\): Cannot load native library ${dir}/libdtrain_cpu\\.so: .*DTRAIN_LIB_DIR=${dir}: fix that folder or unset the variable`,
      ),
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("dtrain doctor exits 1 with a fix when the open-file limit is below 1024", async () => {
  const r = await doctor(["--nproc", "2", "--device", "cpu"], { shPrefix: "ulimit -n 256" });
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /- fix: open-file limit 256 is below 1024: raise it with ulimit -n \d+/);
});

Deno.test("dtrain doctor rejects bad arguments with exit code 2 and its usage", async () => {
  const r = await doctor(["--nproc", "zero"]);
  assert.equal(r.code, 2);
  assert.match(r.out, /--nproc zero: expected a whole number >= 1/);
  assert.match(r.out, /Usage: dtrain doctor/);
  const p = await doctor(["--params", "1.5"]);
  assert.equal(p.code, 2);
  assert.match(p.out, /--params 1\.5: expected a whole number >= 1/);
});

Deno.test("dtrain doctor --params N says whether /dev/shm has room for DDP's shared buckets on the ranks", async () => {
  const env = { DTRAIN_SHM_SHARED_BYTES: "", DTRAIN_SHM_SHARED_LIMIT_BYTES: "" };
  const r = await doctor(["--nproc", "2", "--device", "cpu", "--params", "1000000"], { env });
  assert.match(
    r.out,
    /ddp buckets +DDP's gradient buckets for 1000000 f32 parameters take 3\.8 MiB per rank: 2 x 3\.8 MiB = 7\.6 MiB in \/dev\/shm/,
  );
  const limited = await doctor(["--nproc", "2", "--device", "cpu", "--params", "1000000"], {
    env: { ...env, DTRAIN_SHM_SHARED_LIMIT_BYTES: "4096" },
  });
  assert.equal(limited.code, 0, limited.out);
  assert.match(
    limited.out,
    /- warn: DDP's gradient buckets .* more than DTRAIN_SHM_SHARED_LIMIT_BYTES=4096/,
  );
});

/** Facts of a healthy machine for a CPU run of `nproc` ranks; tests spoil one thing each. */
function facts(nproc = 2): DoctorFacts {
  const lib = (name: string) => ({
    name,
    purpose: "",
    path: `/b/${name}`,
    searched: ["/b"],
    recordedHash: "h",
    loaded: true,
    error: null,
    buildHash: "h",
    backend: null,
  });
  return {
    request: { nproc, device: "auto" },
    install: {
      version: "0",
      layout: "checkout",
      root: "/r",
      singleFile: null,
      damage: null,
      libDirOverride: null,
    },
    versions: { dtrain: "0", deno: "2", v8: "x", typescript: "x" },
    libraries: [lib("libdtrain_cpu.so"), lib("libdtrain_shm.so")],
    cpu: { model: "m", features: { avx2: true, fma: true, avx512f: false }, cores: 8 },
    memory: { total: 2 ** 34, available: 2 ** 33, cgroupLimit: null },
    shm: {
      space: { path: "/dev/shm", ok: true, totalBytes: 2 ** 33, freeBytes: 2 ** 33 },
      chunkBytes: 2 ** 20,
      needBytes: shmSegmentBytes(nproc, 2 ** 20),
      chunkError: null,
      ddp: null,
    },
    gloo: {
      backend: "shm",
      library: lib("libdtrain_gloo.so"),
      version: "0.5.0",
      ifname: null,
      toward: "node0",
      device: "tcp, pci=, iface=eth0, speed=10000, addr=[10.0.0.1]",
      iface: "eth0",
      addr: "10.0.0.1",
      speedMbps: 10000,
      loopback: false,
      error: null,
    },
    gpu: {
      usable: false,
      reason: "no driver",
      summary: "no driver",
      searched: [],
      libraries: { kernels: null, driver: null, cublasLt: null, nccl: null, cudart: null },
      kernels: { ...lib("libdtrain_cuda.so"), loaded: false, path: null, buildHash: null },
      driverVersion: null,
      runtimeVersion: null,
      deviceCount: 0,
      deviceName: null,
      devices: [],
      ncclVersion: null,
      ncclError: "libnccl.so.2 not found",
      settings: {},
    },
    limits: {
      openFiles: { soft: 65536, hard: 65536 },
      lockedMemoryBytes: { soft: 8 << 20, hard: 8 << 20 },
    },
  };
}

const fixes = (f: DoctorFacts) =>
  judge(f).problems.filter((p) => p.level === "fix").map((p) => p.text);
const warns = (f: DoctorFacts) =>
  judge(f).problems.filter((p) => p.level === "warn").map((p) => p.text);

Deno.test("judge() finds a healthy CPU machine ready, and a GPU missing only matters for --device cuda", () => {
  assert.deepEqual(judge(facts()), { ready: true, gpuRun: false, problems: [] });
  const cuda = facts();
  cuda.request.device = "cuda";
  assert.deepEqual(fixes(cuda), ["--device cuda needs a usable GPU: no driver"]);
});

Deno.test("judge() weighs /dev/shm against the ranks' segment: size, free space, unreadable, too many ranks", () => {
  const small = facts(8);
  small.shm.space = { path: "/dev/shm", ok: true, totalBytes: 64 << 20, freeBytes: 64 << 20 };
  assert.equal(judge(small).ready, true); // 8 ranks need 16 MiB
  small.shm.chunkBytes = 8 << 20;
  small.shm.needBytes = shmSegmentBytes(8, 8 << 20);
  assert.match(fixes(small)[0]!, /holds only 64\.0 MiB; a CPU run of 8 ranks needs 128\.0 MiB/);
  const busy = facts(2);
  busy.shm.space = { path: "/dev/shm", ok: true, totalBytes: 2 ** 30, freeBytes: 1 << 20 };
  assert.match(
    fixes(busy)[0]!,
    /has 1\.0 MiB free of 1\.0 GiB; .* crashed runs leave dtrain-\*-pg/,
  );
  const none = facts(2);
  none.shm.space = { path: "/dev/shm", ok: false, error: "No such file or directory" };
  assert.match(fixes(none)[0]!, /cannot read \/dev\/shm \(No such file or directory\)/);
  assert.match(fixes(facts(300))[0]!, /at most 256 ranks on one machine, not 300/);
  const one = facts(1);
  one.shm.space = none.shm.space;
  assert.equal(judge(one).ready, true, "a single rank needs no /dev/shm");
});

Deno.test("judge() with --params warns when DDP's shared buckets would not fit in /dev/shm, under the limit or in the fixed region", () => {
  // 10M parameters: 40 MB of gradients in 2 buckets of at most 25 MiB, each from a 64-byte boundary
  assert.equal(ddpSharedBytes(10_000_000), Math.ceil((40_000_000 + 128) / 4096) * 4096);
  const withParams = (
    mode: "on-demand" | "fixed" | "off",
    over: Partial<DoctorFacts["shm"]> = {},
  ) => {
    const f = facts(2);
    f.request.params = 10_000_000;
    f.shm = {
      ...f.shm,
      ddp: {
        params: 10_000_000,
        bytesPerRank: ddpSharedBytes(10_000_000),
        mode,
        fixedBytes: 0,
        limitBytes: null,
      },
      ...over,
    };
    return f;
  };
  assert.deepEqual(judge(withParams("on-demand")).problems, []);
  assert.match(ddpShmVerdict(withParams("on-demand"))!.text, /2 x 38\.1 MiB = 76\.3 MiB .*; fits/);
  const tight = withParams("on-demand", {
    space: { path: "/dev/shm", ok: true, totalBytes: 64 << 20, freeBytes: 64 << 20 },
  });
  assert.equal(judge(tight).ready, true, "the run still starts: DDP falls back");
  assert.match(
    warns(tight)[0]!,
    /DDP's gradient buckets for 10000000 f32 parameters take 38\.1 MiB per rank: 2 x 38\.1 MiB = 76\.3 MiB in \/dev\/shm .* but it has 64\.0 MiB free: DDP will keep ordinary buckets.*Enlarge \/dev\/shm to at least 80\.3 MiB/,
  );
  const limited = withParams("on-demand");
  limited.shm.ddp!.limitBytes = 1 << 20;
  assert.match(
    warns(limited)[0]!,
    /more than DTRAIN_SHM_SHARED_LIMIT_BYTES=1048576: .*raise it to at least 40001536/,
  );
  const fixed = withParams("fixed");
  fixed.shm.ddp!.fixedBytes = 8 << 20;
  assert.match(warns(fixed)[0]!, /more than the DTRAIN_SHM_SHARED_BYTES region of 8\.0 MiB/);
  fixed.shm.ddp!.fixedBytes = 64 << 20;
  assert.deepEqual(warns(fixed), []);
  assert.deepEqual(
    warns({ ...tight, shm: { ...tight.shm, ddp: { ...tight.shm.ddp!, mode: "off" } } }),
    [],
  );
});

Deno.test("judge() requires the shared-memory library only for several CPU ranks", () => {
  const f = facts(2);
  f.libraries[1] = { ...f.libraries[1]!, loaded: false, error: "Cannot find native library" };
  assert.match(fixes(f)[0]!, /^libdtrain_shm\.so \(needed by a CPU run of 2 ranks\): Cannot find/);
  f.request.nproc = 1;
  assert.equal(judge(f).ready, true);
  const single = facts(1);
  single.install = { ...single.install, layout: "single-file", root: "/cache/x" };
  single.libraries[0] = { ...single.libraries[0]!, loaded: false, error: "gone" };
  assert.match(fixes(single)[0]!, /Delete \/cache\/x and start the single file again/);
});

Deno.test("judge() checks NCCL, GPU count, /dev/shm and locked memory for a GPU run", () => {
  const f = facts(4);
  f.gpu = { ...f.gpu, usable: true, reason: null, deviceCount: 2, deviceName: "H200" };
  f.shm.space = { path: "/dev/shm", ok: true, totalBytes: 64 << 20, freeBytes: 64 << 20 };
  const v = judge(f);
  assert.equal(v.gpuRun, true);
  assert.equal(fixes(f)[0], "libnccl.so.2 not found");
  assert.match(
    fixes(f)[1]!,
    /4 ranks on 2 visible GPU\(s\): .* the launcher refuses --nproc 4; use --nproc 2/,
  );
  const w = warns(f).join("\n");
  assert.match(w, /holds 64\.0 MiB: NCCL moves data/);
  assert.match(w, /locked-memory limit 8\.0 MiB: NCCL over InfiniBand/);
});

Deno.test("judge() flags a low open-file limit, a CPU without AVX2 and a library replaced after its build", () => {
  const f = facts(2);
  f.limits.openFiles = { soft: 256, hard: 4096 };
  assert.match(fixes(f)[0]!, /open-file limit 256 is below 1024: raise it with ulimit -n 4096/);
  f.limits.openFiles = { soft: 1100, hard: null };
  assert.equal(judge(facts(200)).ready, true);
  const many = facts(200);
  many.limits.openFiles = { soft: 1100, hard: null };
  many.shm.needBytes = 0;
  assert.match(fixes(many)[0]!, /open-file limit 1100 is below 1664/);
  const old = facts();
  old.cpu.features.avx2 = false;
  old.libraries[0] = { ...old.libraries[0]!, buildHash: "new" };
  assert.match(warns(old).join("\n"), /no AVX2/);
  assert.match(warns(old).join("\n"), /reports build new but libdtrain_cpu\.so\.hash says h/);
  assert.equal(judge(old).ready, true);
});

Deno.test("parseLimits() reads soft and hard limits, unlimited as null", () => {
  const text =
    "Limit   Soft Limit  Hard Limit  Units\nMax open files            1024                 524288               files\n" +
    "Max locked memory         unlimited            unlimited            bytes\n";
  assert.deepEqual(parseLimits(text), {
    openFiles: { soft: 1024, hard: 524288 },
    lockedMemoryBytes: { soft: null, hard: null },
  });
});

Deno.test("fsSpace() reads the size and free space df reports, and names a missing folder", () => {
  const s = fsSpace("/tmp");
  assert.ok(s.ok);
  const df = new Deno.Command("df", { args: ["-B1", "--output=size", "/tmp"] }).outputSync();
  const size = Number(new TextDecoder().decode(df.stdout).trim().split("\n").pop());
  assert.equal(s.totalBytes, size);
  assert.ok(s.freeBytes > 0 && s.freeBytes <= s.totalBytes);
  const missing = fsSpace("/no/such/folder");
  assert.ok(!missing.ok);
  assert.match(missing.error, /No such file or directory/);
});

Deno.test("readCpu() takes the model and the AVX2/FMA/AVX-512 flags from cpuinfo", () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-doctor-cpu-" });
  try {
    const path = join(dir, "cpuinfo");
    Deno.writeTextFileSync(
      path,
      "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse2 avx avx2 fma\n\n" +
        "processor\t: 1\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse2 avx avx2 fma\n",
    );
    const cpu = readCpu(path);
    assert.equal(cpu.model, "Test CPU 9000");
    assert.deepEqual(cpu.features, { avx2: true, fma: true, avx512f: false });
    assert.equal(readCpu(join(dir, "missing")).model, "unknown");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

/**
 * Opens a real group of `world` ranks, one per worker thread of one `deno run`
 * process (deno test would type-check every worker), and returns the segment
 * size the library reports.
 */
async function realSegmentBytes(
  world: number,
  chunkBytes: number,
  sharedBytes = 0,
): Promise<number> {
  const shmUrl = new URL("../../../ffi/shm.ts", import.meta.url).href;
  const worker = `
    import { shmLibrary } from ${JSON.stringify(shmUrl)};
    self.onmessage = (e) => {
      const { name, rank, world, chunk, shared } = e.data;
      const lib = shmLibrary();
      const out = new BigUint64Array(1);
      const cName = new TextEncoder().encode(name + "\\0");
      lib.check(
        lib.symbols.dt_shm_open_shared(cName, rank, world, BigInt(chunk), BigInt(shared), 0n, 0, 20000n, out),
        "dt_shm_open_shared",
      );
      const handle = Deno.UnsafePointer.create(out[0]);
      const info = new BigInt64Array(6);
      lib.check(lib.symbols.dt_shm_info(handle, info), "dt_shm_info");
      lib.symbols.dt_shm_barrier(handle, new TextEncoder().encode("done\\0"), 20000n);
      lib.check(lib.symbols.dt_shm_close(handle), "dt_shm_close");
      self.postMessage(Number(info[3]));
    };`;
  const main = `
    const url = URL.createObjectURL(new Blob([${
    JSON.stringify(worker)
  }], { type: "application/javascript" }));
    const name = "/dtrain-doctor-test-" + Deno.pid + "-pg";
    const sizes = await Promise.all(Array.from({ length: ${world} }, (_, rank) => new Promise((resolve, reject) => {
      const w = new Worker(url, { type: "module" });
      w.onmessage = (e) => { resolve(e.data); w.terminate(); };
      w.onerror = (e) => { e.preventDefault(); reject(new Error(e.message)); };
      w.postMessage({ name, rank, world: ${world}, chunk: ${chunkBytes}, shared: ${sharedBytes} });
    })));
    console.log(JSON.stringify(sizes));`;
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-doctor-shm-" });
  try {
    const script = join(dir, "segment.js");
    Deno.writeTextFileSync(script, main);
    const r = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--config", join(REPO, "deno.json"), script],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(r.stdout);
    assert.equal(r.code, 0, text + new TextDecoder().decode(r.stderr));
    const sizes = JSON.parse(text) as number[];
    assert.equal(new Set(sizes).size, 1, `ranks disagree on the segment size: ${sizes}`);
    return sizes[0]!;
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

Deno.test("shmSegmentBytes() equals the segment libdtrain_shm.so creates, also past one control page", async () => {
  // 7 ranks' records (128 + 7 x 576 bytes) no longer fit one 4 KiB page.
  // 3 ranks' 2 x 1088-byte buffers end off a page: the shared regions start on the next one.
  for (
    const [world, chunk, shared] of [[1, 4096, 0], [2, 65536, 0], [7, 4096, 0], [
      3,
      1088,
      8192,
    ]] as const
  ) {
    assert.equal(
      await realSegmentBytes(world, chunk, shared),
      shmSegmentBytes(world, chunk, shared),
      `world ${world}`,
    );
  }
  assert.equal(shmSegmentBytes(7, 4096), 8192 + 7 * 2 * 4096);
});
