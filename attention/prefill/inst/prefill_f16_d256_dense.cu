// One compiled kernel family: f16, head dim 256, dense, causal and non-causal.
#include "../prefill_launch.cuh"

SKIPSOFTMAX_PREFILL_FAMILY(false, 256, false)
