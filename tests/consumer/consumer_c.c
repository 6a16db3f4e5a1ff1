/* The C API through the installed package, compiled as C: the argument structs' defaults,
 * workspace sizing and the error text for a bad argument (none needs a GPU). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "skipsoftmax/c_api.h"

int main(void) {
  skipsoftmax_decode_args args;
  char error[256] = "";
  int splits = 0;
  int failures = 0;
  skipsoftmax_prefill_args prefill;

  /* Garbage first, so that a field the init functions leave alone shows. */
  memset(&prefill, 0x5a, sizeof prefill);
  skipsoftmax_prefill_args_init(&prefill);
  if (prefill.struct_size != sizeof prefill || prefill.dtype != SKIPSOFTMAX_BF16 ||
      prefill.head_dim != 128 || prefill.causal != 1 || prefill.kv_order != 2 ||
      prefill.force_kernel != SKIPSOFTMAX_AUTO || prefill.q != NULL || prefill.table_rows != 0 ||
      prefill.flat_lambda != 0.0 || prefill.softmax_scale != 0.0 || prefill.stats != NULL ||
      prefill.k_pages != NULL || prefill.window != 0 || prefill.lambdas != NULL ||
      prefill.lse != NULL) {
    fprintf(stderr, "FAILED: skipsoftmax_prefill_args_init sets the C++ defaults\n");
    ++failures;
  }
  /* One 32k sequence, 32/8 heads: the kernel the dispatch picks, and a bad head dim by name. */
  prefill.q = (const void*)0x10000;
  prefill.k = (const void*)0x20000;
  prefill.v = (const void*)0x30000;
  prefill.out = (void*)0x40000;
  prefill.cu_seqlens_q = (const int32_t*)0x50000;
  prefill.cu_seqlens_k = (const int32_t*)0x60000;
  prefill.batch = 1;
  prefill.total_q = prefill.total_k = 32768;
  prefill.max_seqlen_q = prefill.max_seqlen_k = 32768;
  prefill.num_heads_q = 32;
  prefill.num_heads_kv = 8;
  if (skipsoftmax_prefill_can_implement(&prefill, error, sizeof error) != SKIPSOFTMAX_DENSE) {
    fprintf(stderr, "FAILED: lambda 0 is the dense kernel (%s)\n", error);
    ++failures;
  }
  {
    const int64_t bins[] = {2048, 4096};
    const double scales[] = {40.0, 60.0};
    prefill.table_rows = 2;
    prefill.table_bins = bins;
    prefill.table_scales = scales;
    if (skipsoftmax_prefill_can_implement(&prefill, error, sizeof error) != SKIPSOFTMAX_SKIP) {
      fprintf(stderr, "FAILED: 32k past a table's first bin is the skip kernel (%s)\n", error);
      ++failures;
    }
    prefill.max_seqlen_q = prefill.max_seqlen_k = prefill.total_q = prefill.total_k = 1024;
    if (skipsoftmax_prefill_can_implement(&prefill, error, sizeof error) != SKIPSOFTMAX_DENSE) {
      fprintf(stderr, "FAILED: 1k below the first bin is the dense kernel (%s)\n", error);
      ++failures;
    }
    /* A batch of two whose longest KV length lies below the first bin: dense as well. */
    prefill.batch = 2;
    prefill.total_q = prefill.total_k = 1536;
    prefill.max_seqlen_q = prefill.max_seqlen_k = 1024;
    if (skipsoftmax_prefill_can_implement(&prefill, error, sizeof error) != SKIPSOFTMAX_DENSE) {
      fprintf(stderr, "FAILED: a batch below the first bin is the dense kernel (%s)\n", error);
      ++failures;
    }
    prefill.max_seqlen_k = 4096; /* its longest KV length (history included) past it: skip */
    prefill.total_k = 4608;
    if (skipsoftmax_prefill_can_implement(&prefill, error, sizeof error) != SKIPSOFTMAX_SKIP) {
      fprintf(stderr, "FAILED: a batch past the first bin is the skip kernel (%s)\n", error);
      ++failures;
    }
    prefill.table_rows = 0;
  }
  prefill.head_dim = 96; /* checked before any device work: no GPU needed */
  if (skipsoftmax_prefill_can_implement(&prefill, error, sizeof error) != -1 ||
      strstr(error, "head_dim 96") == NULL) {
    fprintf(stderr, "FAILED: prefill refuses head_dim 96 by name (got \"%s\")\n", error);
    ++failures;
  }
  error[0] = '\0';
  if (skipsoftmax_prefill(&prefill, NULL, error, sizeof error) != -1 ||
      strstr(error, "head_dim 96") == NULL) {
    fprintf(stderr, "FAILED: the launch refuses head_dim 96 first (got \"%s\")\n", error);
    ++failures;
  }
  memset(&args, 0x5a, sizeof args);
  skipsoftmax_decode_args_init(&args);
  if (args.struct_size != sizeof args || args.workspace_bytes != 0 ||
      args.dtype != SKIPSOFTMAX_BF16 || args.head_dim != 128 || args.q_len != 1 ||
      args.num_splits != 0 || args.force_kernel != SKIPSOFTMAX_AUTO || args.workspace != NULL ||
      args.table_rows != 0 || args.flat_lambda != 0.0 || args.softmax_scale != 0.0 ||
      args.stats != NULL || args.window != 0 || args.lambdas != NULL || args.lse != NULL) {
    fprintf(stderr, "FAILED: skipsoftmax_decode_args_init sets the C++ defaults\n");
    ++failures;
  }
  args.q = (const void*)0x10000;
  args.out = (void*)0x20000;
  args.k_pages = (const void*)0x40000;
  args.v_pages = (const void*)0x50000;
  args.num_pages = 512;
  args.page_size = 64;
  args.page_table = (const int32_t*)0x60000;
  args.max_pages_per_seq = 512;
  args.seq_lens = (const int32_t*)0x30000;
  args.batch = 1;
  args.max_seq_len = 32768;
  args.num_heads_q = 32;
  args.num_heads_kv = 8;

  if (skipsoftmax_decode_workspace_size(&args, &splits, error, sizeof error) <= 0 || splits < 2) {
    fprintf(stderr, "FAILED: a split 32k decode needs a workspace (%s)\n", error);
    ++failures;
  }
  args.head_dim = 96;
  if (skipsoftmax_decode_workspace_size(&args, NULL, error, sizeof error) != -1 ||
      strstr(error, "head_dim 96") == NULL) {
    fprintf(stderr, "FAILED: head_dim 96 is refused by name (got \"%s\")\n", error);
    ++failures;
  }
  args.head_dim = 128;
  args.table_rows = 2; /* rows promised, arrays missing */
  if (skipsoftmax_decode_workspace_size(&args, NULL, error, sizeof error) != -1 ||
      strstr(error, "NULL") == NULL) {
    fprintf(stderr, "FAILED: a table without its arrays is refused (got \"%s\")\n", error);
    ++failures;
  }
  args.table_rows = 0;
  args.force_kernel = 7;
  if (skipsoftmax_decode_workspace_size(&args, NULL, error, sizeof error) != -1 ||
      strstr(error, "force_kernel") == NULL) {
    fprintf(stderr, "FAILED: an unknown force_kernel is refused (got \"%s\")\n", error);
    ++failures;
  }
  args.force_kernel = SKIPSOFTMAX_AUTO;
  args.softmax_scale = NAN;
  if (skipsoftmax_decode_workspace_size(&args, NULL, error, sizeof error) != -1 ||
      strstr(error, "softmax_scale") == NULL) {
    fprintf(stderr, "FAILED: a NaN softmax_scale is refused (got \"%s\")\n", error);
    ++failures;
  }
  args.softmax_scale = 0.0;
  args.q_len = 1 << 30; /* q_len x group would wrap in 32 bits */
  if (skipsoftmax_decode_workspace_size(&args, NULL, error, sizeof error) != -1 ||
      strstr(error, "q_len") == NULL) {
    fprintf(stderr, "FAILED: a q_len beyond the group's 16 rows is refused (got \"%s\")\n", error);
    ++failures;
  }
  args.q_len = 0;
  args.batch = 65535; /* 65535 x 32769 page-table entries: 2^31 and more */
  args.max_pages_per_seq = 32769;
  if (skipsoftmax_decode_workspace_size(&args, NULL, error, sizeof error) != -1 ||
      strstr(error, "page-table entries") == NULL) {
    fprintf(stderr, "FAILED: a page table of 2^31 entries is refused (got \"%s\")\n", error);
    ++failures;
  }
  args.batch = 1;
  args.max_pages_per_seq = 512;
  {
    /* The launch checks the workspace it is given against the split count's need (no GPU
     * needed: the check comes before any device work). */
    const int64_t need = skipsoftmax_decode_workspace_size(&args, NULL, error, sizeof error);
    args.workspace = (void*)0x70000;
    args.workspace_bytes = need - 16;
    if (need <= 0 ||
        skipsoftmax_decode(&args, NULL, error, sizeof error) != SKIPSOFTMAX_ERROR_ARGUMENT ||
        strstr(error, "bytes of workspace") == NULL) {
      fprintf(stderr, "FAILED: a workspace too small is refused (got \"%s\")\n", error);
      ++failures;
    }
    args.workspace = NULL;
    args.workspace_bytes = 0;
  }
  {
    const int64_t bins[65] = {0};
    const double scales[65] = {0};
    args.table_rows = 65;
    args.table_bins = bins;
    args.table_scales = scales;
    if (skipsoftmax_decode_workspace_size(&args, NULL, error, sizeof error) != -1 ||
        strstr(error, "table_rows must lie in [0, 64]") == NULL) {
      fprintf(stderr, "FAILED: 65 table rows are refused before they are read (got \"%s\")\n",
              error);
      ++failures;
    }
    args.table_rows = -1;
    if (skipsoftmax_decode_workspace_size(&args, NULL, error, sizeof error) != -1 ||
        strstr(error, "table_rows") == NULL) {
      fprintf(stderr, "FAILED: a negative table_rows is refused (got \"%s\")\n", error);
      ++failures;
    }
    args.table_rows = 0;
  }
  args.workspace_bytes = -1;
  if (skipsoftmax_decode(&args, NULL, error, sizeof error) != SKIPSOFTMAX_ERROR_ARGUMENT ||
      strstr(error, "workspace_bytes must be >= 0") == NULL) {
    fprintf(stderr, "FAILED: a negative workspace_bytes is refused (got \"%s\")\n", error);
    ++failures;
  }
  args.workspace_bytes = 0;
  /* A struct of another size (a caller built against another c_api.h) is refused by name. */
  prefill.struct_size = 0;
  if (skipsoftmax_prefill_can_implement(&prefill, error, sizeof error) !=
          SKIPSOFTMAX_ERROR_ARGUMENT ||
      strstr(error, "skipsoftmax_prefill_args.struct_size is 0") == NULL) {
    fprintf(stderr, "FAILED: a zeroed prefill struct is refused (got \"%s\")\n", error);
    ++failures;
  }
  args.struct_size = (uint32_t)sizeof args - 8;
  if (skipsoftmax_decode(&args, NULL, error, sizeof error) != SKIPSOFTMAX_ERROR_ARGUMENT ||
      strstr(error, "struct_size") == NULL) {
    fprintf(stderr, "FAILED: a struct of another size is refused (got \"%s\")\n", error);
    ++failures;
  }
  args.struct_size = sizeof args;
  if (strcmp(skipsoftmax_version(), SKIPSOFTMAX_EXPECTED_VERSION) != 0) {
    fprintf(stderr, "FAILED: skipsoftmax_version() is %s, the package %s\n", skipsoftmax_version(),
            SKIPSOFTMAX_EXPECTED_VERSION);
    ++failures;
  }
  printf("consumer_c: %s (%d splits at 1 x 32k)\n", failures ? "FAILED" : "ok", splits);
  return failures ? 1 : 0;
}
