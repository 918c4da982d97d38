// The floor under `make bench`'s idle figure: what the keep-alive's two
// wake-ups a second cost on this machine with no work between them.
//
// Each second this process wakes from epoll_wait's timeout (the keep-alive
// timer), sends a few bytes on a Unix socket (the WriteValue call), sleeps in
// epoll_wait until the answer arrives and reads it (the reply): the same
// wake-ups and about the same system calls as `tether run` makes per keep-alive
// (strace: epoll_wait, sendmsg, epoll_wait, recvmsg), without libdbus, Swift
// or a state machine. A forked child stands in for dbus-daemon and
// bluetoothd, and its CPU is not counted, as theirs is not in the idle figure.
//
// Usage: wake_floor SECONDS. Prints the milliseconds of CPU per minute the
// waiting thread used (schedstat's run time, as bench/run.py reads Tether's).
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int seconds = argc > 1 ? atoi(argv[1]) : 0;
    if (seconds <= 0) {
        fprintf(stderr, "usage: wake_floor SECONDS\n");
        return 64;
    }
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        perror("socketpair");
        return 71;
    }
    pid_t peer = fork();
    if (peer < 0) {
        perror("fork");
        return 71;
    }
    if (peer == 0) {  // the far end: answers every message half a millisecond later
        close(pair[0]);
        char buffer[256];
        // Through dbus-daemon and bluetoothd the reply takes 0.2-1 ms (strace), so
        // the daemon sleeps before it: an answer sent at once could arrive first.
        struct timespec hop = {.tv_sec = 0, .tv_nsec = 500000};
        for (;;) {
            ssize_t n = read(pair[1], buffer, sizeof buffer);
            if (n > 0) {
                nanosleep(&hop, NULL);
            }
            if (n <= 0 || write(pair[1], buffer, 56) != 56) {
                _exit(0);
            }
        }
    }
    close(pair[1]);
    int poller = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event interest = {.events = EPOLLIN, .data.fd = pair[0]};
    if (poller < 0 || epoll_ctl(poller, EPOLL_CTL_ADD, pair[0], &interest) != 0) {
        perror("epoll");
        return 71;
    }
    // A WriteValue call's size on the wire (232 bytes), and its reply's (56).
    char call[232] = {0}, reply[256];
    double start = now_seconds(CLOCK_MONOTONIC);
    double cpu_start = now_seconds(CLOCK_THREAD_CPUTIME_ID);
    int answered = 0;
    for (int tick = 1; tick <= seconds; tick++) {
        struct epoll_event event;
        int timeout;  // until the tick: a millisecond timeout can end a little early
        while ((timeout = (int)((start + tick - now_seconds(CLOCK_MONOTONIC)) * 1000)) > 0
               && epoll_wait(poller, &event, 1, timeout) == 0) {
        }
        if (send(pair[0], call, sizeof call, MSG_NOSIGNAL) != (ssize_t)sizeof call) {
            perror("send");
            break;
        }
        if (epoll_wait(poller, &event, 1, -1) == 1 && recv(pair[0], reply, sizeof reply, 0) > 0) {
            answered++;
        }
    }
    double cpu = now_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu_start;
    double elapsed = now_seconds(CLOCK_MONOTONIC) - start;
    close(pair[0]);
    kill(peer, SIGTERM);
    waitpid(peer, NULL, 0);
    printf("{\"round_trips\": %d, \"seconds\": %.3f, \"cpu_ms_per_minute\": %.3f}\n", answered, elapsed,
           cpu * 1000 * 60 / elapsed);
    return answered == seconds ? 0 : 1;
}
