#pragma once

// The kernel's NTP status: <sys/timex.h> is not in Swift's Glibc module.

#ifdef __cplusplus
extern "C" {
#endif

/// 1 when adjtimex(2) says the system clock is synchronised (not
/// TIME_ERROR, i.e. STA_UNSYNC clear), 0 when it is not, -errno when the
/// call fails. Reads only: no mode bit is set.
int tether_clock_synchronised(void);

/// A timerfd on CLOCK_REALTIME armed far in the future with
/// TFD_TIMER_CANCEL_ON_SET: it becomes readable when the clock is set
/// (a step: settimeofday, clock_settime, an NTP client's first jump), not
/// when it is slewed. Non-blocking, close-on-exec. Returns it or -errno.
int tether_clock_set_fd(void);

/// After the fd became readable: 1 when the clock was set (the read failed
/// with ECANCELED; the fd is armed again), 0 when it was not, -errno when
/// reading or arming again failed.
int tether_clock_set_consume(int fd);

#ifdef __cplusplus
}
#endif
