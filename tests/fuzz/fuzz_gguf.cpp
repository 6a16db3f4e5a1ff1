// libFuzzer target: the GGUF reader, the model configuration and the tokenizers built from its
// metadata, on arbitrary bytes. Declared lengths past the file, overflowing sizes and overlapping
// tensors must be refused before anything is allocated for them (run with -malloc_limit_mb).
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "fuzz_file.h"
#include "gguf.h"
#include "model_config.h"
#include "tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace skipsoftmax;
  static const fuzz::ScratchFile file("gguf");
  file.write(data, size);
  try {
    const gguf::File f = gguf::File::open(file.path());
    for (const gguf::TensorInfo& t : f.tensors()) {
      if (t.offset + t.bytes > size) throw std::logic_error("a tensor past the end of its file");
      if (t.bytes <= (std::uint64_t{1} << 16)) f.read_floats(t);
    }
    const ModelConfig config = read_model_config(f);
    const auto tokenizer = load_tokenizer(f);
    tokenizer->decode(tokenizer->encode("The quick brown fox, 12 jumps!"));
    (void)config;
  } catch (const std::logic_error&) {
    throw;
  } catch (const std::exception&) {
  }
  return 0;
}
