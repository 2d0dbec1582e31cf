#include "topology/dtype.h"

namespace clustersim {

int dtype_bits(DType d) {
  switch (d) {
    case DType::FP32:
      return 32;
    case DType::BF16:
      return 16;
    case DType::FP16:
      return 16;
    case DType::FP8:
      return 8;
    case DType::INT8:
      return 8;
    case DType::INT4:
      return 4;
  }
  return 16;
}

std::string_view to_string(DType d) {
  switch (d) {
    case DType::FP32:
      return "fp32";
    case DType::BF16:
      return "bf16";
    case DType::FP16:
      return "fp16";
    case DType::FP8:
      return "fp8";
    case DType::INT8:
      return "int8";
    case DType::INT4:
      return "int4";
  }
  return "?";
}

bool parse_dtype(std::string_view s, DType& out) {
  for (DType d : {DType::FP32, DType::BF16, DType::FP16, DType::FP8, DType::INT8, DType::INT4}) {
    if (s == to_string(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

}  // namespace clustersim
