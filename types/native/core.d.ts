// Addon-wide exports (cpp/addon/addon.cc).
export interface NativeBuildInfo {
  cudaBuilt: boolean;
  cudaAvailable: boolean;
  threads: number;
}

export interface NativeCore {
  /** Registers the function the addon calls to build typed errors. */
  setErrorFactory(factory: (code: string, message: string, field?: string) => Error): void;
  buildInfo(): NativeBuildInfo;
}
