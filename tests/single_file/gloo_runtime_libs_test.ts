/**
 * What the single file carries for Gloo (scripts/gloo_runtime_libs.ts): from
 * `ldd`'s answer, every library but glibc's own, libgcc_s and libstdc++; a
 * library the build machine lacks stops the build, naming it.
 */
import assert from "node:assert/strict";
import { parseLdd } from "../../scripts/gloo_runtime_libs.ts";

const LDD = `	linux-vdso.so.1 (0x00007ffd5a1f2000)
	libgloo.so.0 => /lib/libgloo.so.0 (0x00007f0a1c200000)
	libstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f0a1bc00000)
	libgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f0a1c1e0000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0a1ba1f000)
	libhiredis.so.0.14 => /lib/x86_64-linux-gnu/libhiredis.so.0.14 (0x00007f0a1c1d0000)
	libibverbs.so.1 => /lib/x86_64-linux-gnu/libibverbs.so.1 (0x00007f0a1c1af000)
	libm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f0a1b940000)
	/lib64/ld-linux-x86-64.so.2 (0x00007f0a1c2f4000)
	libnl-route-3.so.200 => /lib/x86_64-linux-gnu/libnl-route-3.so.200 (0x00007f0a1c120000)
	libnl-3.so.200 => /lib/x86_64-linux-gnu/libnl-3.so.200 (0x00007f0a1c0fe000)
`;

Deno.test("parseLdd() keeps libgloo and its libraries, and leaves glibc, libgcc_s and libstdc++ to the target", () => {
  assert.deepEqual(parseLdd(LDD), [
    { name: "libgloo.so.0", path: "/lib/libgloo.so.0" },
    { name: "libhiredis.so.0.14", path: "/lib/x86_64-linux-gnu/libhiredis.so.0.14" },
    { name: "libibverbs.so.1", path: "/lib/x86_64-linux-gnu/libibverbs.so.1" },
    { name: "libnl-route-3.so.200", path: "/lib/x86_64-linux-gnu/libnl-route-3.so.200" },
    { name: "libnl-3.so.200", path: "/lib/x86_64-linux-gnu/libnl-3.so.200" },
  ]);
});

Deno.test("parseLdd() refuses a library the build machine does not have, naming it", () => {
  assert.throws(
    () => parseLdd("\tlibgloo.so.0 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n"),
    /Cannot carry Gloo's libraries: libgloo\.so\.0 is not found here/,
  );
});
