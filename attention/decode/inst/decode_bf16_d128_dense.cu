// One compiled decode kernel family: bf16, head dim 128, dense.
#include "../decode_launch.cuh"

SKIPSOFTMAX_DECODE_FAMILY(true, 128, false)
