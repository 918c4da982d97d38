#include "cclock.h"

#include <errno.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <sys/timex.h>
#include <unistd.h>

int tether_clock_synchronised(void) {
    struct timex status = {0};
    int state = adjtimex(&status);
    if (state < 0) return -errno;
    return state == TIME_ERROR ? 0 : 1;
}

static int arm(int fd) {
    // An absolute expiry that never comes (the year 2^62 s): only a clock
    // set wakes it.
    struct itimerspec far = {.it_value = {.tv_sec = (time_t)1 << 62, .tv_nsec = 0}};
    return timerfd_settime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &far, NULL);
}

int tether_clock_set_fd(void) {
    int fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) return -errno;
    if (arm(fd) < 0) {
        int error = errno;
        close(fd);
        return -error;
    }
    return fd;
}

int tether_clock_set_consume(int fd) {
    uint64_t expirations;
    if (read(fd, &expirations, sizeof expirations) >= 0) return 0;
    if (errno == EAGAIN) return 0;
    if (errno != ECANCELED) return -errno;
    return arm(fd) < 0 ? -errno : 1;
}
