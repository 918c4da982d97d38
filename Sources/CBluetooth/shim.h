// C shim over libbluetooth (BlueZ's HCI library).
//
// The HCI device ioctls are `_IOW` macros that Swift cannot import, and the
// socket addresses are Bluetooth's own, so the operations Tether needs are
// small inline functions here. They return 0 (or a descriptor) or a negated
// errno; on a kernel without Bluetooth, socket(AF_BLUETOOTH)
// fails with EAFNOSUPPORT and the caller reports the reset as unavailable.
#ifndef TETHER_CBLUETOOTH_SHIM_H
#define TETHER_CBLUETOOTH_SHIM_H

#include <errno.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <linux/capability.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <bluetooth/hci_lib.h>

/// Resolves "hci0" (or a bdaddr string) to a device index; negated errno on failure.
static inline int tether_hci_devid(const char *name) {
    int id = hci_devid(name);
    return id < 0 ? -(errno ? errno : ENODEV) : id;
}

/// Takes the controller down and up again, as `hciconfig hciN reset` does.
/// The kernel resets the controller on the way up (HCI_Reset), and bluetoothd
/// sees the power change through the management interface.
static inline int tether_hci_reset(int dev_id) {
    int ctl = socket(AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC, BTPROTO_HCI);
    if (ctl < 0) return -errno;
    int result = 0;
    if (ioctl(ctl, HCIDEVDOWN, dev_id) < 0 && errno != EALREADY) result = -errno;
    if (result == 0 && ioctl(ctl, HCIDEVUP, dev_id) < 0 && errno != EALREADY) result = -errno;
    close(ctl);
    return result;
}

/// Asks controller `dev_id` for its version (HCI Read Local Version
/// Information, an informational command any process may send on a raw HCI
/// socket) and waits up to `timeout_ms` for the answer: 0 when it came, a
/// negated errno otherwise (-ETIMEDOUT: the controller does not answer;
/// -ENETDOWN: it is down, so nothing was asked).
static inline int tether_hci_read_version(int dev_id, int timeout_ms) {
    int dd = hci_open_dev(dev_id);
    if (dd < 0) return -errno;
    struct hci_version version;
    errno = 0;
    int result = hci_read_local_version(dd, &version, timeout_ms) < 0 ? -(errno ? errno : ETIMEDOUT) : 0;
    hci_close_dev(dd);
    return result;
}

/// Opens the kernel's Bluetooth management interface (mgmt-api.txt): a raw
/// HCI socket bound to HCI_CHANNEL_CONTROL on no device, non-blocking. Any
/// process may bind it; the kernel sends the events that matter here (Device
/// Disconnected among them) only to sockets bound with CAP_NET_ADMIN.
/// Returns the descriptor or a negated errno.
static inline int tether_mgmt_open(void) {
    int fd = socket(AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, BTPROTO_HCI);
    if (fd < 0) return -errno;
    struct sockaddr_hci address = {0};
    address.hci_family = AF_BLUETOOTH;
    address.hci_dev = HCI_DEV_NONE;
    address.hci_channel = HCI_CHANNEL_CONTROL;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) < 0) {
        int code = errno;
        close(fd);
        return -code;
    }
    return fd;
}

/// Whether this process holds CAP_NET_ADMIN in its effective set (capget(2)),
/// which decides what the management socket is told.
static inline int tether_has_net_admin(void) {
    struct __user_cap_header_struct header = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    if (syscall(SYS_capget, &header, data) != 0) return 0;
    return (data[CAP_NET_ADMIN / 32].effective >> (CAP_NET_ADMIN % 32)) & 1;
}

/// The kernel's view of controller `dev_id` (HCIGETDEVINFO): its flags
/// (HCI_UP, HCI_INIT, HCI_RUNNING…), address and type (its low nibble the
/// bus: HCI_VIRTUAL, HCI_USB, HCI_UART…). 0 or a negated errno.
static inline int tether_hci_device_info(int dev_id, uint32_t *flags, uint8_t address[6], uint8_t *type) {
    int ctl = socket(AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC, BTPROTO_HCI);
    if (ctl < 0) return -errno;
    struct hci_dev_info info = {0};
    info.dev_id = dev_id;
    int result = ioctl(ctl, HCIGETDEVINFO, (void *)&info) < 0 ? -errno : 0;
    close(ctl);
    if (result == 0) {
        *flags = info.flags;
        *type = info.type;
        for (int i = 0; i < 6; i++) address[i] = info.bdaddr.b[i];
    }
    return result;
}

#endif
