#ifndef CEVENTLOOP_H
#define CEVENTLOOP_H
// The Linux interfaces the event loop is built on, which Swift's Glibc module
// does not export: epoll, eventfd, signalfd.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <signal.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <stdint.h>

// epoll's event bits as plain integers: glibc declares them in an enum (which
// Swift imports as a type with a rawValue), musl as macros (plain Int32).
static const uint32_t ceventloop_epoll_in = EPOLLIN;
static const uint32_t ceventloop_epoll_out = EPOLLOUT;
static const uint32_t ceventloop_epoll_hup = EPOLLHUP;
static const uint32_t ceventloop_epoll_err = EPOLLERR;

// glibc declares it only under _GNU_SOURCE, which would change other
// declarations (fd_set) against the ones Swift's Glibc module has.
extern int pthread_setname_np(pthread_t thread, const char *name);

/// Bytes waiting to be read on a socket (FIONREAD), 0 if unknown.
static inline int ceventloop_pending_bytes(int fd) {
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}
/// Receives up to `count` (at most 256) datagrams from `fd` in one
/// recvmmsg(2), without blocking: datagram i lands at `buffer + i * slot`,
/// its length in `lengths[i]`, and `truncated[i]` says it was longer than
/// `slot`. Returns how many arrived, or -1 with errno (EAGAIN: none).
int ceventloop_receive_datagrams(int fd, unsigned char *buffer, unsigned int slot, unsigned int count,
                                 unsigned int *lengths, int *truncated);
#endif
