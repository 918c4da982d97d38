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

// glibc declares it only under _GNU_SOURCE, which would change other
// declarations (fd_set) against the ones Swift's Glibc module has.
extern int pthread_setname_np(pthread_t thread, const char *name);

/// Bytes waiting to be read on a socket (FIONREAD), 0 if unknown.
static inline int ceventloop_pending_bytes(int fd) {
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}
#endif
