#pragma once

// The few socket calls systemd's protocols need that Swift cannot express
// comfortably: sockaddr_un with Linux's abstract namespace, and SCM_RIGHTS
// control messages. Everything here is synchronous, allocates nothing that
// outlives the call (except returned descriptors, which the caller owns), and
// reports failure as a negative errno instead of aborting, so a daemon that
// loses its journal or its service manager keeps running.
//
// An "address" is what NOTIFY_SOCKET holds: a filesystem path, or, when it
// starts with '@', a name in the abstract namespace (the '@' stands for the
// leading NUL byte the kernel expects there).

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Sends `length` bytes from `bytes` as one datagram to the AF_UNIX
/// SOCK_DGRAM socket at `address`, from a fresh unbound socket that is closed
/// before returning. Returns 0, or -errno (-EMSGSIZE when the datagram is
/// larger than the socket allows, -ENOENT/-ECONNREFUSED when nobody listens).
int tether_dgram_send(const char *address, const void *bytes, size_t length);

/// Sends an empty datagram carrying `descriptor` (SCM_RIGHTS) to `address`.
/// This is journald's path for entries too large for a datagram. The caller
/// keeps its own copy of `descriptor` and must close it. Returns 0 or -errno.
int tether_dgram_send_descriptor(const char *address, int descriptor);

/// Creates a memfd named `name`, writes `length` bytes into it and seals it
/// against writing, growing and shrinking: journald only accepts a descriptor
/// whose content can no longer change under it. Returns the descriptor
/// (close-on-exec, owned by the caller) or -errno.
int tether_sealed_memfd(const char *name, const void *bytes, size_t length);

/// Binds a new close-on-exec, non-blocking AF_UNIX SOCK_DGRAM socket to
/// `address`, for whoever plays the receiving side (tests stand in for
/// systemd and journald with it). Returns the socket or -errno.
int tether_dgram_bind(const char *address);

/// Receives one datagram from `socket` into `buffer` without waiting. Stores
/// a descriptor passed with SCM_RIGHTS in `*received_descriptor` (owned by
/// the caller), or -1 when none came. Returns the payload's length, -EAGAIN
/// when nothing is queued, -EMSGSIZE when the payload did not fit `capacity`,
/// or another -errno.
ssize_t tether_dgram_receive(int socket, void *buffer, size_t capacity, int *received_descriptor);

#ifdef __cplusplus
}
#endif
