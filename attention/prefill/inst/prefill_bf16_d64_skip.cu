// One compiled kernel family: bf16, head dim 64, skip, causal and non-causal.
#include "../prefill_launch.cuh"

SKIPSOFTMAX_PREFILL_FAMILY(true, 64, true)
