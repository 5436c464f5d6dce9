/**
 * The repository's PyTorch fixtures (fixtures/): every op case, the CNN step
 * and SyncBatchNorm on two ranks are within their tolerances, and the checks
 * can fail — a reference pushed just past its bound fails, naming the case.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { FixtureDir, repoFixtureDir } from "../../parity/fixtures.ts";
import { opsParityRows } from "../../parity/ops.ts";
import { withConvPaths } from "../../tensor/ops/conv.ts";
import { cnnParityRows } from "../../parity/cnn.ts";
import { syncbnParityRows } from "../../parity/syncbn.ts";
import type { ParityRow } from "../../parity/report.ts";

buildNative({ quiet: true });
const DIR = repoFixtureDir();
const failures = (rows: ParityRow[]) =>
  rows.filter((r) => !r.pass).map((r) =>
    `${r.case} ${r.quantity}: ${r.error} > ${r.tolerance} ${r.note ?? ""}`
  );

Deno.test("every op case of fixtures/ops.json matches PyTorch: outputs and gradients", () => {
  const rows = opsParityRows(new FixtureDir(DIR));
  const cases = new FixtureDir(DIR).json("ops.json").cases as { op: string }[];
  assert.ok(rows.length >= 2 * cases.length, `${rows.length} rows for ${cases.length} cases`);
  for (
    const op of [
      "conv2d",
      "max_pool2d",
      "avg_pool2d",
      "adaptive_avg_pool2d",
      "batch_norm",
      "pad",
      "cat",
      "stack",
      "sum",
      "mean",
      "max",
      "min",
      "argmax",
      "exp",
      "log",
      "sigmoid",
      "tanh",
      "div",
      "pow",
      "sqrt",
      "clamp",
      "where",
      "masked_fill",
      "gather",
      "index_select",
      "softmax",
      "log_softmax",
      "transpose",
      "permute",
    ]
  ) {
    assert.ok(cases.some((c) => c.op === op), `fixtures cover ${op}`);
  }
  assert.deepEqual(failures(rows), []);
});

Deno.test("the convolution cases also match PyTorch on the GEMM path and on the direct path", () => {
  for (const directMaxTaps of [0, 64]) {
    const rows = withConvPaths({ directMaxTaps }, () => opsParityRows(new FixtureDir(DIR)))
      .filter((r) => r.case.startsWith("conv2d"));
    assert.ok(rows.length >= 15);
    assert.deepEqual(failures(rows), [], `directMaxTaps ${directMaxTaps}`);
  }
});

Deno.test("the CNN of fixtures/cnn.json matches PyTorch through a training step and an eval forward", () => {
  const rows = cnnParityRows(new FixtureDir(DIR));
  assert.ok(rows.length > 25);
  assert.deepEqual(failures(rows), []);
});

Deno.test("SyncBatchNorm on two ranks matches PyTorch's batch norm over both ranks' batches", async () => {
  const rows = await syncbnParityRows(DIR);
  assert.deepEqual(failures(rows), []);
  for (const rank of ["rank 0", "rank 1"]) {
    assert.ok(rows.filter((r) => r.case.endsWith(rank)).length >= 20, `rows of ${rank}`);
  }
});

Deno.test("an op reference pushed past its bound fails, naming the case and the quantity", async () => {
  const dir = await Deno.makeTempDir();
  try {
    for (const f of ["ops.json", "ops.safetensors"]) {
      await Deno.copyFile(join(DIR, f), join(dir, f));
    }
    const meta = JSON.parse(await Deno.readTextFile(join(dir, "ops.json")));
    const conv = meta.cases.find((c: { op: string }) => c.op === "conv2d");
    meta.cases = [conv];
    await Deno.writeTextFile(join(dir, "ops.json"), JSON.stringify(meta));
    const st = new FixtureDir(dir).tensors("ops.safetensors");
    const ref = st.get(conv.outputs.out.key)!, scale = st.get(conv.outputs.out.tol.scale)!;
    // Move element 3 of the reference by twice its bound, in place in the file.
    const bytes = await Deno.readFile(join(dir, "ops.safetensors"));
    const header = Number(new DataView(bytes.buffer).getBigUint64(0, true));
    const offsetOf = (key: string) => {
      const h = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + header)));
      return 8 + header + h[key].data_offsets[0];
    };
    const view = new DataView(bytes.buffer);
    const at = offsetOf(conv.outputs.out.key) + 3 * 4;
    const s = new DataView(scale.data.slice().buffer).getFloat32(3 * 4, true);
    const bound = conv.outputs.out.tol.ulps * 2 ** -24 * s;
    view.setFloat32(at, view.getFloat32(at, true) + 2 * bound, true);
    await Deno.writeFile(join(dir, "ops.safetensors"), bytes);
    assert.ok(ref.data.length > 12);
    const rows = opsParityRows(new FixtureDir(dir));
    const bad = rows.filter((r) => !r.pass);
    assert.equal(bad.length, 1, JSON.stringify(rows));
    assert.equal(bad[0]!.case, conv.name);
    assert.equal(bad[0]!.quantity, "out");
    assert.ok(
      bad[0]!.error > 1.5 * conv.outputs.out.tol.ulps &&
        bad[0]!.error < 2.5 * conv.outputs.out.tol.ulps,
    );
    assert.match(bad[0]!.note ?? "", /^at 3: /);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
