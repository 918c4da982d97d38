// C shim over libbluetooth (BlueZ's HCI library).
//
// The HCI device ioctls are `_IOW` macros that Swift cannot import, so the
// two operations Tether needs are small inline functions here. Both return 0
// or a negated errno; on a kernel without Bluetooth, socket(AF_BLUETOOTH)
// fails with EAFNOSUPPORT and the caller reports the reset as unavailable.
#ifndef TETHER_CBLUETOOTH_SHIM_H
#define TETHER_CBLUETOOTH_SHIM_H

#include <errno.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
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

#endif
