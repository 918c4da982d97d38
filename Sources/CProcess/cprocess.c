#include "cprocess.h"

#include <errno.h>
#include <sys/prctl.h>

#ifndef PR_SET_THP_DISABLE
#define PR_SET_THP_DISABLE 41  /* Linux 3.15; older C libraries lack the name */
#endif

int tether_decline_transparent_huge_pages(void) {
    return prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 ? 0 : -errno;
}
