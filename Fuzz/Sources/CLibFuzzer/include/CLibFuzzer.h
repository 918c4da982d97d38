// libFuzzer's entry point for programs with a main() of their own
// (compiler-rt's FuzzerInterface.h). SwiftPM links every executable with
// main aliased to the module's entry point, so each harness has an @main
// that hands its arguments and test function to libFuzzer here.
#ifndef TETHER_CLIBFUZZER_H
#define TETHER_CLIBFUZZER_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*UserCb)(const uint8_t *Data, size_t Size));

#endif
