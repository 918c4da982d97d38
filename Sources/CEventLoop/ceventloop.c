// recvmmsg(2) is declared only under _GNU_SOURCE, which must not reach the
// header Swift imports (it would change declarations such as fd_set against
// the ones of Swift's Glibc module); this file alone defines it.
#define _GNU_SOURCE
#include <sys/socket.h>
#include <string.h>
#include "ceventloop.h"

int ceventloop_receive_datagrams(int fd, unsigned char *buffer, unsigned int slot, unsigned int count,
                                 unsigned int *lengths, int *truncated) {
    enum { maximum = 256 };
    struct mmsghdr headers[maximum];
    struct iovec vectors[maximum];
    if (count > maximum) count = maximum;
    memset(headers, 0, sizeof(struct mmsghdr) * count);
    for (unsigned int i = 0; i < count; i++) {
        vectors[i].iov_base = buffer + (size_t)i * slot;
        vectors[i].iov_len = slot;
        headers[i].msg_hdr.msg_iov = &vectors[i];
        headers[i].msg_hdr.msg_iovlen = 1;
    }
    int received = recvmmsg(fd, headers, count, MSG_DONTWAIT, NULL);
    for (int i = 0; i < received; i++) {
        lengths[i] = headers[i].msg_len;
        truncated[i] = (headers[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
    }
    return received;
}
