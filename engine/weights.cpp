#include "weights.h"

#include <string>

#include "ops.h"

namespace skipsoftmax::engine {
namespace {

std::string shape_string(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

bool has_tensor(const gguf::File& file, const std::string& name) {
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name == name) return true;
  }
  return false;
}

class Loader {
 public:
  Loader(const gguf::File& file, DType dtype, MemoryCounter* counter, cudaStream_t stream)
      : file_(file), dtype_(dtype), counter_(counter), stream_(stream) {}

  const gguf::TensorInfo& expect(const std::string& name, std::vector<std::int64_t> dims) const {
    const gguf::TensorInfo& t = file_.tensor(name);
    if (t.dims != dims) {
      throw std::runtime_error(name + ": shape " + shape_string(t.dims) + ", expected " +
                               shape_string(dims) +
                               " (GGUF order: the contiguous dimension first)");
    }
    return t;
  }

  // Dequantizes a GGUF matrix of `rows` x `cols` (dims {cols, rows}) into rows [row0, row0 + rows)
  // of a 16-bit matrix of `cols` columns.
  void matrix_into(const std::string& name, std::int64_t rows, std::int64_t cols, DeviceBuffer& dst,
                   std::int64_t row0) {
    const gguf::TensorInfo& t = expect(name, {cols, rows});
    const std::vector<std::uint8_t> raw = file_.read_bytes(t);
    ensure_bytes(staging_, raw.size(), nullptr);
    upload(raw, staging_.as(), stream_);
    dequantize(t.type, staging_.as(), dst.as<bits16>() + row0 * cols, rows * cols, stream_, dtype_);
    // raw and staging are reused by the next tensor: wait for this one.
    check_cuda(cudaStreamSynchronize(stream_), "dequantize");
  }

  DeviceBuffer matrix(const std::string& name, std::int64_t rows, std::int64_t cols) {
    DeviceBuffer m(static_cast<std::size_t>(rows * cols) * 2, counter_);
    matrix_into(name, rows, cols, m, 0);
    return m;
  }

  DeviceBuffer vector(const std::string& name, std::int64_t n) {
    const std::vector<float> values = file_.read_floats(expect(name, {n}));
    DeviceBuffer v(values.size() * sizeof(float), counter_);
    upload(values, v.as(), stream_);
    check_cuda(cudaStreamSynchronize(stream_), "upload");
    return v;
  }

 private:
  const gguf::File& file_;
  DType dtype_;
  MemoryCounter* counter_;
  cudaStream_t stream_;
  DeviceBuffer staging_;
};

}  // namespace

ModelWeights load_weights(const gguf::File& file, const ModelConfig& c, DType dtype,
                          MemoryCounter* counter, cudaStream_t stream) {
  Loader load(file, dtype, counter, stream);
  const std::int64_t hidden = c.hidden, ffn = c.ffn, d = c.head_dim;
  const std::int64_t q_rows = c.heads_q * d, kv_rows = c.heads_kv * d;
  const bool gemma = c.architecture == "gemma3";
  ModelWeights w;
  w.embed = load.matrix("token_embd.weight", c.vocab, hidden);
  if (has_tensor(file, "output.weight")) w.lm_head = load.matrix("output.weight", c.vocab, hidden);
  w.output_norm = load.vector("output_norm.weight", hidden);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& lw = w.layers.emplace_back();
    lw.qkv = DeviceBuffer(static_cast<std::size_t>((q_rows + 2 * kv_rows) * hidden) * 2, counter);
    load.matrix_into(p + "attn_q.weight", q_rows, hidden, lw.qkv, 0);
    load.matrix_into(p + "attn_k.weight", kv_rows, hidden, lw.qkv, q_rows);
    load.matrix_into(p + "attn_v.weight", kv_rows, hidden, lw.qkv, q_rows + kv_rows);
    lw.o = load.matrix(p + "attn_output.weight", hidden, q_rows);
    lw.gate_up = DeviceBuffer(static_cast<std::size_t>(2 * ffn * hidden) * 2, counter);
    load.matrix_into(p + "ffn_gate.weight", ffn, hidden, lw.gate_up, 0);
    load.matrix_into(p + "ffn_up.weight", ffn, hidden, lw.gate_up, ffn);
    lw.down = load.matrix(p + "ffn_down.weight", hidden, ffn);
    lw.attn_norm = load.vector(p + "attn_norm.weight", hidden);
    lw.ffn_norm = load.vector(p + "ffn_norm.weight", hidden);
    if (gemma) {
      lw.post_attn_norm = load.vector(p + "post_attention_norm.weight", hidden);
      lw.post_ffn_norm = load.vector(p + "post_ffw_norm.weight", hidden);
      lw.q_norm = load.vector(p + "attn_q_norm.weight", d);
      lw.k_norm = load.vector(p + "attn_k_norm.weight", d);
    }
  }
  return w;
}

}  // namespace skipsoftmax::engine
