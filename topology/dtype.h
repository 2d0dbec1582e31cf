// Number formats: what a tensor core multiplies and what a tensor holds a value in. The
// GPU presets rate their peaks per format, the model description names its weights'
// format, and the Plan's ops carry the format of their operands.
#pragma once

#include <cstdint>
#include <string_view>

namespace clustersim {

enum class DType : uint8_t { FP32, BF16, FP16, FP8, INT8, INT4 };
int dtype_bits(DType d);
std::string_view to_string(DType d);
bool parse_dtype(std::string_view s, DType& out);

}  // namespace clustersim
