// One compiled decode kernel family: bf16, head dim 256, skip.
#include "../decode_launch.cuh"

SKIPSOFTMAX_DECODE_FAMILY(true, 256, true)
