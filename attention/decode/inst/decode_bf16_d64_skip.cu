// One compiled decode kernel family: bf16, head dim 64, skip.
#include "../decode_launch.cuh"

SKIPSOFTMAX_DECODE_FAMILY(true, 64, true)
