# Sourced on the GPU machine: puts a libcublasLt on the loader path (the CUDA toolkit's, else the
# one inside the python nvidia-cublas wheel) and says which one.
if ! ls /usr/local/cuda/lib64/libcublasLt.so* >/dev/null 2>&1; then
  _lt=$(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null || true)
  [[ -n "$_lt" ]] && export LD_LIBRARY_PATH=$_lt:${LD_LIBRARY_PATH:-}
fi
echo "cublasLt: $( (ls /usr/local/cuda/lib64/libcublasLt.so* ${_lt:+$_lt/libcublasLt.so*} 2>/dev/null || echo none) | head -3 | tr '\n' ' ')"
