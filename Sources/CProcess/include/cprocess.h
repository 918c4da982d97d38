#pragma once

// Process-wide settings that need prctl(2), and pidfd_open(2), which are
// variadic or syscall(2)-only in C and so cannot be called from Swift.

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Asks the kernel not to back this process's anonymous memory (and its
/// children's) with transparent huge pages from now on. Returns 0 or -errno.
int tether_decline_transparent_huge_pages(void);

/// A descriptor that becomes readable when process `pid` exits
/// (pidfd_open(2), Linux 5.3), close-on-exec. Returns it or -errno.
int tether_pidfd_open(pid_t pid);

#ifdef __cplusplus
}
#endif
