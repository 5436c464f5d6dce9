// The benchmarks' peers run without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (which make OpenBLAS and
// PyTorch's CPU products pick slower kernels), while dtrain and the tests keep the environment.
import assert from "node:assert/strict";
import { peerCommandEnv, peerEnvLine, torchBlas, torchPeerLine } from "../../scripts/peer_env.ts";

const HANDICAPS = { OPENBLAS_CORETYPE: "Haswell", OPENBLAS_L2_SIZE: "1048576" };

/** Runs `fn` with the handicaps set in this process, restoring what was there. */
async function withHandicaps<T>(fn: () => Promise<T>): Promise<T> {
  const before = Object.fromEntries(
    Object.keys(HANDICAPS).map((k) => [k, Deno.env.get(k)] as const),
  );
  for (const [k, v] of Object.entries(HANDICAPS)) Deno.env.set(k, v);
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) Deno.env.delete(k);
      else Deno.env.set(k, v);
    }
  }
}

function torchPython(): string | null {
  try {
    const ok = new Deno.Command("/usr/bin/python3", {
      args: ["-c", "import torch"],
      stdout: "null",
      stderr: "null",
    }).outputSync().success;
    return ok ? "/usr/bin/python3" : null;
  } catch {
    return null;
  }
}

Deno.test("a peer's command has neither handicap, and keeps the rest of the environment", async () => {
  await withHandicaps(async () => {
    Deno.env.set("DTRAIN_PEER_ENV_TEST_KEEP", "kept");
    try {
      const out = await new Deno.Command("sh", {
        args: [
          "-c",
          'echo "${OPENBLAS_CORETYPE-unset} ${OPENBLAS_L2_SIZE-unset} $DTRAIN_PEER_ENV_TEST_KEEP $EXTRA"',
        ],
        ...peerCommandEnv({ EXTRA: "extra" }),
        stdout: "piped",
      }).output();
      assert.deepEqual(new TextDecoder().decode(out.stdout).trim(), "unset unset kept extra");
      // this process still has them: only the peer's command loses them
      assert.deepEqual(Deno.env.get("OPENBLAS_CORETYPE"), "Haswell");
      assert.match(peerEnvLine(), /OPENBLAS_CORETYPE=Haswell, OPENBLAS_L2_SIZE=1048576 unset/);
    } finally {
      Deno.env.delete("DTRAIN_PEER_ENV_TEST_KEEP");
    }
  });
});

const python = torchPython();
Deno.test({
  name: "PyTorch as a peer runs the OpenBLAS core it would choose itself, not the forced one",
  ignore: python === null,
  fn: async () => {
    // what PyTorch's BLAS chooses on this machine with no variable at all
    const free = await torchBlas(python!);
    // and what it runs when the handicaps reach it: proves that they matter, so the next
    // assertion could fail
    const forced = await new Deno.Command(python!, {
      args: [
        "-c",
        "import torch, ctypes\n" +
        "torch.randn(64, 64) @ torch.randn(64, 64)\n" +
        "lib = [l.split()[-1] for l in open('/proc/self/maps') if 'openblas' in l or 'libblas.so' in l]\n" +
        "f = ctypes.CDLL(lib[0]).openblas_get_corename if lib else None\n" +
        "print(f and (setattr(f, 'restype', ctypes.c_char_p) or f().decode()))",
      ],
      env: HANDICAPS,
      stdout: "piped",
    }).output();
    const forcedCore = new TextDecoder().decode(forced.stdout).trim();
    assert(free !== null);
    if (free.core === null) {
      console.log(`PyTorch's BLAS is not OpenBLAS here (${free.library}): nothing to compare`);
      return;
    }
    assert.deepEqual(forcedCore.toLowerCase(), "haswell");
    const asPeer = await withHandicaps(() => torchBlas(python!));
    assert.deepEqual(asPeer?.core, free.core);
    assert(asPeer!.relErr < 1e-4);
    const line = await withHandicaps(() => torchPeerLine(python!));
    assert.match(line, new RegExp(`core ${free.core}`));
  },
});

Deno.test("every benchmark that runs a PyTorch or OpenBLAS peer takes the peer's environment from peer_env.ts", () => {
  const dir = new URL("../../scripts/", import.meta.url);
  const offenders: string[] = [];
  for (const e of Deno.readDirSync(dir)) {
    if (!/^bench_.*\.ts$/.test(e.name)) continue;
    const text = Deno.readTextFileSync(new URL(e.name, dir));
    const runsPeer = /python|torchrun|openblas/i.test(text);
    const usesIt = /peerCommandEnv\(|dropHandicapsInProcess\(/.test(text);
    if (runsPeer && !usesIt) offenders.push(e.name);
  }
  assert.deepEqual(offenders, [], "these benchmarks run a peer with the inherited environment");
});
