#pragma once

// The kernel's NTP status: <sys/timex.h> is not in Swift's Glibc module.

#ifdef __cplusplus
extern "C" {
#endif

/// 1 when adjtimex(2) says the system clock is synchronised (not
/// TIME_ERROR, i.e. STA_UNSYNC clear), 0 when it is not, -errno when the
/// call fails. Reads only: no mode bit is set.
int tether_clock_synchronised(void);

#ifdef __cplusplus
}
#endif
