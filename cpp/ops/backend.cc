// Device -> backend lookup.
#include "ops/backends.h"

namespace mlxb {

Backend& backend(Device device) { return device == Device::kCPU ? cpu_backend() : cuda_backend(); }
bool cuda_built() { return cuda_backend_built(); }
bool cuda_available() { return cuda_backend_available(); }

}  // namespace mlxb
