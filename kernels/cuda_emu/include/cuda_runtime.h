/* cuda_runtime.h (emulated) — what `#include <cuda_runtime.h>` means when
 * kernels/cuda is compiled for the emulated device: kernels/cuda_emu/cuda_emu.h. */
#pragma once
#include "../cuda_emu.h"
