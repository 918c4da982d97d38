#define _GNU_SOURCE
#include "csystemd.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

// Fills `address` from NOTIFY_SOCKET's notation and returns the length to
// pass to the kernel, or -errno. Abstract names are not NUL-terminated: their
// length is exactly what the address length says, so it must not include a
// terminator, or the name would differ from the one the receiver bound.
static int make_address(const char *text, struct sockaddr_un *address, socklen_t *length) {
    if (text == NULL || text[0] == '\0') {
        return -EINVAL;
    }
    memset(address, 0, sizeof(*address));
    address->sun_family = AF_UNIX;
    size_t text_length = strlen(text);
    if (text_length > sizeof(address->sun_path) - (text[0] == '@' ? 0 : 1)) {
        return -ENAMETOOLONG;
    }
    memcpy(address->sun_path, text, text_length);
    if (text[0] == '@') {
        address->sun_path[0] = '\0';
        *length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + text_length);
    } else {
        *length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + text_length + 1);
    }
    return 0;
}

// Sends `message` (its name filled in here) from a fresh socket. A socket per
// message costs two extra system calls but needs no state shared between
// threads, and a socket never outlives a restart of the receiver.
static int send_message(const char *text, struct msghdr *message) {
    struct sockaddr_un address;
    socklen_t address_length = 0;
    int result = make_address(text, &address, &address_length);
    if (result < 0) {
        return result;
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -errno;
    }
    message->msg_name = &address;
    message->msg_namelen = address_length;
    ssize_t sent;
    do {
        // MSG_NOSIGNAL: a vanished receiver must be an error code, not SIGPIPE.
        sent = sendmsg(fd, message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    result = sent < 0 ? -errno : 0;
    close(fd);
    return result;
}

int tether_dgram_send(const char *address, const void *bytes, size_t length) {
    if (bytes == NULL && length > 0) {
        return -EINVAL;
    }
    struct iovec part = {.iov_base = (void *)bytes, .iov_len = length};
    struct msghdr message = {0};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    return send_message(address, &message);
}

int tether_dgram_send_descriptor(const char *address, int descriptor) {
    if (descriptor < 0) {
        return -EBADF;
    }
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof(control));
    struct msghdr message = {0};
    message.msg_control = control.space;
    message.msg_controllen = sizeof(control.space);
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    if (header == NULL) {
        return -EINVAL;
    }
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &descriptor, sizeof(int));
    return send_message(address, &message);
}

int tether_sealed_memfd(const char *name, const void *bytes, size_t length) {
    if (bytes == NULL && length > 0) {
        return -EINVAL;
    }
    int fd = memfd_create(name != NULL ? name : "tether", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        return -errno;
    }
    const char *cursor = bytes;
    size_t left = length;
    while (left > 0) {
        ssize_t written = write(fd, cursor, left);
        if (written < 0 && errno == EINTR) {
            continue;
        }
        if (written <= 0) {
            int error = written < 0 ? errno : EIO;
            close(fd);
            return -error;
        }
        cursor += written;
        left -= (size_t)written;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
        int error = errno;
        close(fd);
        return -error;
    }
    return fd;
}

int tether_dgram_bind(const char *text) {
    struct sockaddr_un address;
    socklen_t address_length = 0;
    int result = make_address(text, &address, &address_length);
    if (result < 0) {
        return result;
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        return -errno;
    }
    if (bind(fd, (struct sockaddr *)&address, address_length) < 0) {
        int error = errno;
        close(fd);
        return -error;
    }
    return fd;
}

ssize_t tether_dgram_receive(int socket, void *buffer, size_t capacity, int *received_descriptor) {
    if (received_descriptor != NULL) {
        *received_descriptor = -1;
    }
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof(control));
    struct iovec part = {.iov_base = buffer, .iov_len = capacity};
    struct msghdr message = {0};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    message.msg_control = control.space;
    message.msg_controllen = sizeof(control.space);
    ssize_t received;
    do {
        received = recvmsg(socket, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    } while (received < 0 && errno == EINTR);
    if (received < 0) {
        return -errno;
    }
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header != NULL; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS &&
            header->cmsg_len == CMSG_LEN(sizeof(int))) {
            int descriptor;
            memcpy(&descriptor, CMSG_DATA(header), sizeof(int));
            if (received_descriptor != NULL) {
                *received_descriptor = descriptor;
            } else {
                close(descriptor);
            }
        }
    }
    if (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
        if (received_descriptor != NULL && *received_descriptor >= 0) {
            close(*received_descriptor);
            *received_descriptor = -1;
        }
        return -EMSGSIZE;
    }
    return received;
}
