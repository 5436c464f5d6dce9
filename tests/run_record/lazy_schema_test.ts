/**
 * lazySchema(): nothing is built until first use, it is built once, and the stand-in parses,
 * composes and reports errors exactly as the schema it stands for.
 */
import assert from "node:assert/strict";
import { z } from "zod";
import { lazySchema } from "../../run_record/lazy_schema.ts";
import { AttemptSchema, RunRecordSchema } from "../../run_record/format.ts";

Deno.test("lazySchema builds nothing until the schema is used, then builds it once", () => {
  let builds = 0;
  const Port = lazySchema(() => {
    builds++;
    return z.int().min(1).max(65535);
  });
  assert.equal(builds, 0);
  assert.equal(Port.parse(8080), 8080);
  assert.equal(Port.safeParse(0).success, false);
  assert.equal(builds, 1);
});

Deno.test("a lazy schema composes, parses and fails as the eager one", () => {
  const build = () => z.object({ name: z.string().min(1), port: z.int().positive() });
  const eager = z.object({ server: build(), tags: z.array(z.string()) });
  const lazyInner = lazySchema(build);
  const lazy = lazySchema(() => z.object({ server: lazyInner, tags: z.array(z.string()) }));
  const good = { server: { name: "a", port: 1 }, tags: ["x"] };
  assert.deepEqual(lazy.parse(good), eager.parse(good));
  for (const bad of [{ server: { name: "", port: 1 }, tags: [] }, { server: { port: -1 } }, 7]) {
    const e = eager.safeParse(bad);
    const l = lazy.safeParse(bad);
    assert.equal(l.success, false);
    assert.deepEqual(l.error!.issues, e.error!.issues);
  }
  assert.ok(lazy instanceof z.ZodType);
  assert.deepEqual(Object.keys(lazy.shape), ["server", "tags"]);
  assert.equal(lazy.optional().parse(undefined), undefined);
});

Deno.test("run_record/format.ts's lazy schemas still reach their parts (shape, nested schemas)", () => {
  const pg = { backend: "shm", worldSize: 2, device: "cpu" };
  assert.deepEqual(AttemptSchema.shape.processGroup.parse(pg), pg);
  assert.equal(RunRecordSchema.safeParse({ format: "dtrain.run/1" }).success, false);
});
