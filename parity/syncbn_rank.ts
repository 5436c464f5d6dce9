/**
 * One rank of the SyncBatchNorm parity check (started twice by
 * parity/syncbn.ts through the launcher): rank r normalises its batch of each
 * step of fixtures/syncbn.json with a SyncBatchNorm over the process group,
 * back-propagates its dy, and prints one JSON line {"syncbnRows": [...]} of
 * the comparisons with PyTorch (tolerances: parity/syncbn.ts).
 *
 *   dtrain --nproc 2 parity/syncbn_rank.ts <fixture folder>
 */
// The library comes from "dtrain" only (the launcher's import map), never from its files: in the
// device bundle this script is bundled on its own and runs under the single file's rank bootstrap,
// which installs the rank's store in the library that "dtrain" names; a second copy of the library
// inside this script would start without it. What else it imports holds no library state.
import { backward, fromStTensor, initProcessGroup, noGrad, scope, SyncBatchNorm } from "dtrain";
import { parseSafetensors, type StTensor } from "../io/safetensors.ts";
import { type ParityRow, relL2Error, row } from "./report.ts";

/** A fixture folder's JSON and safetensors files (what this rank reads of parity/fixtures.ts). */
class RankFixtures {
  constructor(readonly dir: string) {}
  // deno-lint-ignore no-explicit-any
  json(name: string): any {
    return JSON.parse(Deno.readTextFileSync(`${this.dir}/${name}`));
  }
  tensors(name: string): Map<string, StTensor> {
    return parseSafetensors(Deno.readFileSync(`${this.dir}/${name}`), name).tensors;
  }
}

function toFloat32(t: StTensor, what: string): Float32Array {
  if (t.dtype !== "F32") throw new Error(`${what}: expected F32, got ${t.dtype}`);
  return new Float32Array(t.data.slice().buffer);
}

/** A file tensor as a state-dict source (nn/load.ts's stateTensor, without the library). */
function stateSources(m: Map<string, StTensor>) {
  return new Map(
    [...m].map((
      [k, t],
    ) => [k, { shape: t.shape, dtype: t.dtype.toLowerCase(), bytes: () => t.data }]),
  );
}

/** Relative L2 tolerances, reasoned in parity/syncbn.ts. */
export const SYNCBN_TOL = { out: 1e-6, grad: 1e-5, state: 1e-6 } as const;

function rankRows(fx: RankFixtures, rank: number, world: number): ParityRow[] {
  const meta = fx.json("syncbn.json");
  if (meta.world_size !== world) {
    return [
      row(
        "syncbn",
        "world size",
        "abs",
        Math.abs(meta.world_size - world),
        0,
        `fixture is for ${meta.world_size} ranks`,
      ),
    ];
  }
  const st = fx.tensors("syncbn.safetensors");
  const get = (k: string): StTensor => {
    const t = st.get(k);
    if (!t) throw new Error(`syncbn.safetensors has no tensor "${k}"`);
    return t;
  };
  const rows: ParityRow[] = [];
  using pg = initProcessGroup();
  for (const c of meta.cases) {
    const bn = new SyncBatchNorm(meta.channels, {
      momentum: c.momentum,
      eps: c.eps,
      processGroup: pg,
    });
    const prefixed = (p: string) =>
      new Map([...st].filter(([k]) => k.startsWith(p)).map(([k, v]) => [k.slice(p.length), v]));
    bn.loadStateDict(stateSources(prefixed(c.init)));
    c.steps.forEach((s: Record<string, string[] | string>, i: number) => {
      const name = `${c.name} step ${i} rank ${rank}`;
      const l2 = (q: string, got: Float32Array, key: string, tol: number) =>
        rows.push(row(name, q, "rel L2", relL2Error(got, toFloat32(get(key), key)), tol));
      scope(() => {
        bn.train();
        const x = fromStTensor(get((s.x as string[])[rank]!));
        x.requiresGrad = true;
        const out = bn.forward(x);
        l2(
          "train output",
          out.toArray() as Float32Array,
          (s.out as string[])[rank]!,
          SYNCBN_TOL.out,
        );
        backward(out, { gradient: fromStTensor(get((s.dy as string[])[rank]!)) });
        l2(
          "grad x",
          x.grad!.toArray() as Float32Array,
          (s.grad_x as string[])[rank]!,
          SYNCBN_TOL.grad,
        );
        for (const p of ["weight", "bias"] as const) {
          const t = bn[p]!;
          l2(
            `grad ${p} (this rank's)`,
            t.grad!.toArray() as Float32Array,
            (s[`grad_${p}`] as string[])[rank]!,
            SYNCBN_TOL.grad,
          );
          t.grad!.dispose();
          t.grad = null;
        }
        x.grad!.dispose();
      });
      for (const [k, t] of bn.stateDict()) {
        const key = `${s.state as string}${k}`;
        if (t.dtype === "i64") {
          const got = Number((t.toArray() as BigInt64Array)[0]);
          const want = Number(new BigInt64Array(get(key).data.slice().buffer)[0]);
          rows.push(row(name, `state ${k}`, "abs", Math.abs(got - want), 0));
        } else {
          l2(`state ${k}`, t.toArray() as Float32Array, key, SYNCBN_TOL.state);
        }
      }
      scope(() =>
        noGrad(() => {
          bn.eval();
          const y = bn.forward(fromStTensor(get((s.x as string[])[rank]!)));
          l2(
            "eval output",
            y.toArray() as Float32Array,
            (s.eval_out as string[])[rank]!,
            SYNCBN_TOL.out,
          );
        })
      );
    });
    bn.dispose();
  }
  return rows;
}

if (import.meta.main) {
  const dir = Deno.args[0];
  if (!dir) throw new Error("usage: dtrain --nproc 2 parity/syncbn_rank.ts <fixture folder>");
  const rank = Number(Deno.env.get("RANK") ?? "0"),
    world = Number(Deno.env.get("WORLD_SIZE") ?? "1");
  console.log(JSON.stringify({ syncbnRows: rankRows(new RankFixtures(dir), rank, world) }));
}
