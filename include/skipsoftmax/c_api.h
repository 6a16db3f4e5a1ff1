/* C API of the skipsoftmax GPU kernels, for engines in other languages and for ctypes.
 * Pointers are device pointers; the stream is a cudaStream_t (NULL: the default stream).
 *
 * Start from skipsoftmax_prefill_args_init / skipsoftmax_decode_args_init, which set the C++
 * defaults and the struct's size. A zeroed struct is not those defaults: its struct_size 0 is
 * refused, its force_kernel 0 forces the dense kernel, its kv_order 0 is forward (the tables are
 * calibrated sink then reverse, 2) and its causal 0 is non-causal.
 * Scale tables: at most 64 rows, bins strictly increasing and below 2^31, S finite and > 0.
 *
 * Every call that fails returns a negative skipsoftmax_status and writes a message into error
 * (truncated to error_len, always terminated). No error state is kept between calls, and any
 * thread may call (the multiprocessor count and the kernels' occupancy are read once, from the
 * device current at the first call). */
#ifndef SKIPSOFTMAX_C_API_H_
#define SKIPSOFTMAX_C_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum skipsoftmax_dtype { SKIPSOFTMAX_FP16 = 0, SKIPSOFTMAX_BF16 = 1 };
enum skipsoftmax_kernel { SKIPSOFTMAX_AUTO = -1, SKIPSOFTMAX_DENSE = 0, SKIPSOFTMAX_SKIP = 1 };
enum skipsoftmax_status {
  SKIPSOFTMAX_ERROR_ARGUMENT = -1, /* the arguments: fix them and call again */
  SKIPSOFTMAX_ERROR_CUDA = -2,     /* a CUDA error; the library links its own CUDA runtime, so
                                      errors pending in the caller's are not seen, but a sticky
                                      one (the context is lost) from any work is */
  SKIPSOFTMAX_ERROR_INTERNAL = -3
};

/* This library's version, "MAJOR.MINOR.PATCH". Its argument structs change only with MINOR (before
 * 1.0) and carry their size, so that a caller built against another c_api.h is refused by name. */
const char* skipsoftmax_version(void);

typedef struct skipsoftmax_prefill_args {
  uint32_t struct_size;        /* sizeof(skipsoftmax_prefill_args), set by the init function */
  int dtype;                   /* enum skipsoftmax_dtype */
  int head_dim;                /* 64, 128, 256 */
  const void* q;               /* [total_q, num_heads_q, head_dim] */
  const void* k;               /* [total_k, num_heads_kv, head_dim] */
  const void* v;               /* [total_k, num_heads_kv, head_dim] */
  void* out;                   /* [total_q, num_heads_q, head_dim] */
  const int32_t* cu_seqlens_q; /* [batch + 1] */
  const int32_t* cu_seqlens_k; /* [batch + 1] */
  int batch;
  int64_t total_q;
  int64_t total_k;
  int max_seqlen_q;
  int max_seqlen_k; /* the longest KV length (history included), exactly: the dispatch runs the
                       dense kernel when it lies below the table's first skippable length, and
                       a batch of one also wherever the lambda of its length is 0 */
  int num_heads_q;
  int num_heads_kv;
  int causal;
  double softmax_scale; /* finite; <= 0: 1 / sqrt(head_dim) */
  int kv_order;         /* 0 forward, 1 reverse, 2 sink then reverse */
  /* Threshold: table_rows in [1, 64] selects the table (bins strictly increasing, S > 0); 0
   * selects flat_lambda in [0, 1) (0 is dense). */
  int table_rows;
  const int64_t* table_bins;
  const double* table_scales;
  double flat_lambda;
  unsigned long long* stats; /* [batch][2] visited, skipped, accumulated; NULL: none */
  int force_kernel;          /* enum skipsoftmax_kernel */
  int window;                /* sliding window in keys (causal, dense threshold); 0: none */
  /* Paged KV (k_pages non-NULL): k and v are unused; the layout of skipsoftmax/paged_kv.h.
   * Without k_pages every paged field stays 0 / NULL. */
  const void* k_pages;       /* [num_pages, page_size, num_heads_kv, head_dim] */
  const void* v_pages;
  int64_t num_pages;
  int page_size;
  const int32_t* page_table; /* [batch, max_pages_per_seq] */
  int max_pages_per_seq;
  /* [batch] float32, one lambda per sequence, read by the kernel (change it between CUDA-graph
   * replays); set, it replaces the threshold (table_rows 0, flat_lambda 0) and the skip kernel
   * runs; a value outside (0, 1), NaN included, makes its sequence dense. NULL: none. */
  const float* lambdas;
  /* [total_q, num_heads_q] float32: each row's natural log-sum-exp, ln sum exp(scale q.k) over
   * the keys computed (skipped tiles excluded), -inf for a row without keys. NULL: none. */
  float* lse;
} skipsoftmax_prefill_args;

typedef struct skipsoftmax_decode_args {
  uint32_t struct_size;      /* sizeof(skipsoftmax_decode_args), set by the init function */
  int dtype;                 /* enum skipsoftmax_dtype */
  int head_dim;              /* 64, 128, 256 */
  const void* q;             /* [batch, q_len, num_heads_q, head_dim] */
  void* out;                 /* [batch, q_len, num_heads_q, head_dim] */
  const void* k_pages;       /* [num_pages, page_size, num_heads_kv, head_dim] */
  const void* v_pages;
  int64_t num_pages;
  int page_size;             /* power of two in [16, 128] */
  const int32_t* page_table; /* [batch, max_pages_per_seq]; entries past a sequence's pages
                                may be read, never followed */
  int max_pages_per_seq;
  const int32_t* seq_lens;   /* [batch] */
  int batch;
  int max_seq_len; /* the longest seq_lens entry, exactly: it drives splits and dispatch */
  int num_heads_q;
  int num_heads_kv;
  double softmax_scale; /* finite; <= 0: 1 / sqrt(head_dim) */
  int table_rows;       /* as in skipsoftmax_prefill_args (in [0, 64]) */
  const int64_t* table_bins;
  const double* table_scales;
  double flat_lambda;
  int num_splits;       /* 0: automatic */
  void* workspace;      /* 16-byte aligned; NULL where skipsoftmax_decode_workspace_size is 0 */
  int64_t workspace_bytes; /* its size: at least skipsoftmax_decode_workspace_size's */
  unsigned long long* stats;
  int force_kernel;
  int window;           /* sliding window in keys (dense threshold); 0: none */
  int q_len;            /* new tokens per sequence (speculative verification); 0: one */
  const float* lambdas; /* [batch], as in skipsoftmax_prefill_args */
  float* lse;           /* [batch, q_len, num_heads_q], as in skipsoftmax_prefill_args */
} skipsoftmax_decode_args;

/* Fill *args with the C++ defaults (skipsoftmax/prefill.h, skipsoftmax/decode.h): bf16, head dim
 * 128, causal, kv_order 2, force_kernel SKIPSOFTMAX_AUTO, the default softmax scale, flat lambda 0
 * (dense), no window, one new token per sequence, automatic splits; every pointer NULL and every
 * size 0 but struct_size. */
void skipsoftmax_prefill_args_init(skipsoftmax_prefill_args* args);
void skipsoftmax_decode_args_init(skipsoftmax_decode_args* args);

/* Runs prefill attention. Returns the kernel launched (SKIPSOFTMAX_DENSE or SKIPSOFTMAX_SKIP), or
 * a negative skipsoftmax_status with a message in error. */
int skipsoftmax_prefill(const skipsoftmax_prefill_args* args, void* stream, char* error,
                        int error_len);

/* The argument check of skipsoftmax_prefill without a launch or a GPU (every pointer the call
 * needs non-NULL; q, k, v or the pages, and out 16-byte aligned): returns the kernel it would
 * launch, or SKIPSOFTMAX_ERROR_ARGUMENT with a message in error. The launch itself may still fail
 * on a CUDA error. */
int skipsoftmax_prefill_can_implement(const skipsoftmax_prefill_args* args, char* error,
                                      int error_len);

/* Runs paged decode attention (and the split combine); returns like skipsoftmax_prefill. */
int skipsoftmax_decode(const skipsoftmax_decode_args* args, void* stream, char* error,
                       int error_len);

/* Bytes of workspace skipsoftmax_decode needs for these arguments, and the splits it will use
 * (through *num_splits when non-NULL); SKIPSOFTMAX_ERROR_ARGUMENT with a message in error when the
 * arguments are bad. The whole argument check runs, device pointers included (non-NULL, 16-byte
 * aligned; workspace and workspace_bytes excepted). The size depends on every argument and is not
 * monotonic in any (a larger batch may split less; skip launches split finer), so size it with
 * the arguments of the launch, or fix num_splits, with which it grows with batch and q_len alone;
 * skipsoftmax_decode refuses a smaller workspace_bytes. The combine kernel reads the workspace
 * after skipsoftmax_decode returns, until the stream reaches it. */
int64_t skipsoftmax_decode_workspace_size(const skipsoftmax_decode_args* args, int* num_splits,
                                          char* error, int error_len);

/* The float64 CPU reference on the same arguments with host pointers (q, k, v or the pages,
 * cu_seqlens, page_table, seq_lens, out, stats): the kernels' vote tiles, visit order, dispatch
 * and split count, so the GPU's skip decisions; out in dtype, rounded through float; stats added
 * to by a skip launch only. The checks of the launch plus those of the index tensors it reads
 * (offsets, lengths, page ids). No GPU needed. Returns like skipsoftmax_prefill /
 * skipsoftmax_decode (the workspace fields of decode are unused). */
int skipsoftmax_prefill_reference(const skipsoftmax_prefill_args* args, char* error, int error_len);
int skipsoftmax_decode_reference(const skipsoftmax_decode_args* args, char* error, int error_len);

/* Diffusion transformers (skipsoftmax/diffusion.h): one pipeline component's skip configuration,
 * from its directory's config.json (ModelOpt's sparse_attention_config, absent: none) and the
 * user's request, JSON {"threshold": L | "target_sparsity": S, "disabled_until_timestep": D}.
 * secondary != 0 (Wan 2.2's transformer_2): a config that cannot serve the request leaves the
 * component dense, with the reason among its messages, instead of failing. Returns 0 and the
 * configuration in *config, or a negative skipsoftmax_status with a message in error. One
 * configuration is not thread-safe (its timestep gate remembers its warning). */
typedef struct skipsoftmax_diffusion_config skipsoftmax_diffusion_config;
int skipsoftmax_diffusion_config_load(const char* component_dir, const char* request_json,
                                      int secondary, skipsoftmax_diffusion_config** config,
                                      char* error, int error_len);
/* lambda for one attention call of module_name (its full name, e.g. "transformer.blocks.0.attn1")
 * over max_kv_len keys at the pipeline's normalized timestep in [0, 1] (NaN: none published);
 * 0 means exact dense (an ignored module, a gated step, the guard). */
double skipsoftmax_diffusion_lambda(skipsoftmax_diffusion_config* config, const char* module_name,
                                    int64_t max_kv_len, double timestep);
/* The configuration's notes (block keys not read) and warnings so far, one per line, into text
 * (truncated to text_len, terminated); returns the length of the whole text. */
int skipsoftmax_diffusion_config_messages(const skipsoftmax_diffusion_config* config, char* text,
                                          int text_len);
void skipsoftmax_diffusion_config_free(skipsoftmax_diffusion_config* config);

#ifdef __cplusplus
}
#endif

#endif /* SKIPSOFTMAX_C_API_H_ */
