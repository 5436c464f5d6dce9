/**
 * `dtrain doctor` for CPU runs across machines: the multi-node section names
 * the backend, Gloo's version and the interface Gloo binds (the one that
 * reaches --master-addr, or GLOO_SOCKET_IFNAME's), and the verdict rules: the
 * Gloo library must load, its interface must exist, and a loopback address
 * across machines is warned about; a one-machine run needs none of it.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { DoctorFacts } from "../../../launch/doctor/facts.ts";
import { parseDevice } from "../../../launch/doctor/gloo.ts";
import { judge } from "../../../launch/doctor/verdict.ts";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const hasGloo = (() => {
  try {
    return Deno.statSync(join(REPO, "build/libdtrain_gloo.so")).isFile;
  } catch {
    return false;
  }
})();

async function doctor(args: string[], env: Record<string, string> = {}) {
  const r = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--config",
      join(REPO, "deno.json"),
      join(REPO, "cli.ts"),
      "doctor",
      ...args,
    ],
    env: { NO_COLOR: "1", GLOO_SOCKET_IFNAME: "", DTRAIN_CPU_BACKEND: "", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  return {
    code: r.code,
    out: new TextDecoder().decode(r.stdout) + new TextDecoder().decode(r.stderr),
  };
}

Deno.test({
  name: "dtrain doctor --nnodes 2 reports gloo, its version and the interface that reaches node 0",
  ignore: !hasGloo,
  fn: async () => {
    const r = await doctor([
      "--nproc",
      "2",
      "--device",
      "cpu",
      "--nnodes",
      "2",
      "--master-addr",
      "127.0.0.1",
    ]);
    assert.match(r.out, /^multi-node$/m);
    assert.match(r.out, /cpu backend\s+gloo across 2 machines \(allReduce through shared memory/);
    assert.match(r.out, /gloo\s+Gloo \d+\.\d+\.\d+ \(\S+libdtrain_gloo\.so\)/);
    assert.match(r.out, /interface\s+lo 127\.0\.0\.1, the interface that reaches 127\.0\.0\.1/);
    // loopback is fine on one machine but not between machines: a warning, not a fix
    assert.match(
      r.out,
      /- warn: Gloo would bind lo 127\.0\.0\.1, which other machines cannot reach/,
    );
    assert.equal(r.code, 0, r.out);
  },
});

Deno.test({
  name:
    "dtrain doctor honours GLOO_SOCKET_IFNAME, and exits 1 naming an interface that does not exist",
  ignore: !hasGloo,
  fn: async () => {
    const ok = await doctor(["--nproc", "1", "--device", "cpu", "--nnodes", "2", "--json"], {
      GLOO_SOCKET_IFNAME: "lo",
    });
    const facts = (JSON.parse(ok.out) as { facts: DoctorFacts }).facts;
    assert.equal(facts.gloo.ifname, "lo");
    assert.equal(facts.gloo.iface, "lo");
    assert.equal(facts.gloo.addr, "127.0.0.1");
    const bad = await doctor(["--nproc", "1", "--device", "cpu", "--nnodes", "2"], {
      GLOO_SOCKET_IFNAME: "nosuch0",
    });
    assert.equal(bad.code, 1, bad.out);
    assert.match(
      bad.out,
      /- fix: Gloo cannot open a TCP device: GLOO_SOCKET_IFNAME=nosuch0: this machine has no network interface of that name/,
    );
    assert.match(bad.out, /it has: lo/);
  },
});

Deno.test("parseDevice() reads the interface, address and speed from Gloo's device text", () => {
  assert.deepEqual(parseDevice("tcp, pci=0000:3b:00.0, iface=eth0, speed=25000, addr=[10.1.2.3]"), {
    iface: "eth0",
    addr: "10.1.2.3",
    speedMbps: 25000,
  });
  assert.deepEqual(parseDevice("tcp, pci=, iface=lo, speed=-1, addr=[127.0.0.1]"), {
    iface: "lo",
    addr: "127.0.0.1",
    speedMbps: null,
  });
});

/** A machine whose facts are healthy except for what `spoil` changes. */
function factsFor(nnodes: number, spoil: (f: DoctorFacts) => void = () => {}): DoctorFacts {
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
  const f: DoctorFacts = {
    request: { nproc: 1, device: "cpu", nnodes },
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
      needBytes: 2 ** 22,
      chunkError: null,
      ddp: null,
    },
    gloo: {
      backend: nnodes > 1 ? "gloo" : "single",
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
      ncclError: null,
      settings: {},
    },
    limits: { openFiles: { soft: 65536, hard: 65536 }, lockedMemoryBytes: null },
  };
  spoil(f);
  return f;
}

const problems = (f: DoctorFacts) => judge(f).problems.map((p) => `${p.level}: ${p.text}`);

Deno.test("judge() requires Gloo and a reachable interface only for CPU runs across machines", () => {
  assert.deepEqual(problems(factsFor(2)), []);
  const missing = (f: DoctorFacts) => {
    f.gloo.library = {
      ...f.gloo.library,
      loaded: false,
      error: "libgloo.so.0: cannot open shared object file",
    };
    f.gloo.device = null;
    f.gloo.error = "the Gloo library does not load";
  };
  assert.deepEqual(problems(factsFor(1, missing)), [], "one machine does not need Gloo");
  const [fix] = problems(factsFor(2, missing));
  assert.match(
    fix!,
    /^fix: libdtrain_gloo\.so \(needed by a CPU run across 2 machines\): libgloo\.so\.0: cannot open/,
  );
  assert.match(fix!, /apt-get install libgloo0/);
  const noDevice = problems(factsFor(2, (f) => {
    f.gloo.device = null;
    f.gloo.error = "GLOO_SOCKET_IFNAME=eth9: this machine has no network interface of that name";
  }));
  assert.deepEqual(noDevice, [
    "fix: Gloo cannot open a TCP device: GLOO_SOCKET_IFNAME=eth9: this machine has no network interface of that name",
  ]);
  const loop = problems(factsFor(2, (f) => {
    Object.assign(f.gloo, { iface: "lo", addr: "127.0.0.1", loopback: true });
  }));
  assert.equal(loop.length, 1);
  assert.match(
    loop[0]!,
    /^warn: Gloo would bind lo 127\.0\.0\.1, which other machines cannot reach/,
  );
  const gpu = factsFor(2, (f) => {
    f.request.device = "cuda";
    f.gloo.device = null;
  });
  assert.ok(!problems(gpu).some((p) => p.includes("Gloo")), "GPU runs use NCCL, not Gloo");
});
