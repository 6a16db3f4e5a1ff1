// One compiled kernel family: bf16, head dim 256, skip, causal and non-causal.
#include "../prefill_launch.cuh"

SKIPSOFTMAX_PREFILL_FAMILY(true, 256, true)
