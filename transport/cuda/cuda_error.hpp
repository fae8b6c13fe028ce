#pragma once

#include <string>

#include <cuda_runtime_api.h>

namespace kvroom::detail {

/// "cudaErrorInsufficientDriver: CUDA driver version is insufficient ...".
inline std::string cuda_text(cudaError_t err) {
  return std::string{cudaGetErrorName(err)} + ": " + cudaGetErrorString(err);
}

} // namespace kvroom::detail
