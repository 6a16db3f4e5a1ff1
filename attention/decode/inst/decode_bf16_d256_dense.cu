// One compiled decode kernel family: bf16, head dim 256, dense.
#include "../decode_launch.cuh"

SKIPSOFTMAX_DECODE_FAMILY(true, 256, false)
