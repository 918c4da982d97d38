#include "cclock.h"

#include <errno.h>
#include <sys/timex.h>

int tether_clock_synchronised(void) {
    struct timex status = {0};
    int state = adjtimex(&status);
    if (state < 0) return -errno;
    return state == TIME_ERROR ? 0 : 1;
}
