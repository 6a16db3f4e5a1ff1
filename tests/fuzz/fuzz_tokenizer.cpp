// libFuzzer target: byte-level BPE encoding of arbitrary bytes (invalid UTF-8 included) with a
// vocabulary whose merges compete, and its decoding; long runs of one character must stay fast.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "fuzz_file.h"
#include "gguf.h"
#include "tokenizer.h"

namespace {

const skipsoftmax::BpeTokenizer& tokenizer() {
  static const skipsoftmax::BpeTokenizer tok = [] {
    const skipsoftmax::fuzz::ScratchFile file("tokenizer");
    file.write_bpe_vocabulary();
    return skipsoftmax::BpeTokenizer::from_gguf(skipsoftmax::gguf::File::open(file.path()));
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    tokenizer().decode(tokenizer().encode(text));
  } catch (const std::exception&) {
  }
  return 0;
}
