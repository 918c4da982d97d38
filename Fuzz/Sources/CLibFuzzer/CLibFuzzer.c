// Header-only: LLVMFuzzerRunDriver comes from libclang_rt.fuzzer, which
// -sanitize=fuzzer links in. (SwiftPM wants one source file per C target.)
#include "CLibFuzzer.h"
