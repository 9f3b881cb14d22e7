// cuda_ops_check --stream-probe (stream_probe.cu): streaming rates of register loads, cp.async
// rings and tensor copies at the occupancies our kernels run at. A diagnostic; no op uses it.
#pragma once

namespace mlxb::cuda {

void stream_probe();  // prints one line per configuration

}  // namespace mlxb::cuda
