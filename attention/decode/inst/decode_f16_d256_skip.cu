// One compiled decode kernel family: f16, head dim 256, skip.
#include "../decode_launch.cuh"

SKIPSOFTMAX_DECODE_FAMILY(false, 256, true)
