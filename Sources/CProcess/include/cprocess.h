#pragma once

// Process-wide settings that need prctl(2), which is variadic in C and so
// cannot be called from Swift.

#ifdef __cplusplus
extern "C" {
#endif

/// Asks the kernel not to back this process's anonymous memory (and its
/// children's) with transparent huge pages from now on. Returns 0 or -errno.
int tether_decline_transparent_huge_pages(void);

#ifdef __cplusplus
}
#endif
