// libFuzzer target: the .npy reader on arbitrary bytes. Every input is read back as an array or
// refused with an exception; none may crash, read out of bounds or allocate past the file's size.
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "fuzz_file.h"
#include "npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const skipsoftmax::fuzz::ScratchFile file("npy");
  file.write(data, size);
  try {
    const skipsoftmax::NpyArray a = skipsoftmax::read_npy(file.path());
    if (static_cast<std::int64_t>(a.data.size()) > static_cast<std::int64_t>(size)) {
      throw std::logic_error("an array larger than its file");  // a reader bug: abort
    }
  } catch (const std::logic_error&) {
    throw;
  } catch (const std::exception&) {
  }
  return 0;
}
