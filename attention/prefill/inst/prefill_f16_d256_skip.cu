// One compiled kernel family: f16, head dim 256, skip, causal and non-causal.
#include "../prefill_launch.cuh"

SKIPSOFTMAX_PREFILL_FAMILY(false, 256, true)
