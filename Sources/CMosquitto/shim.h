// C shim over Debian's libmosquitto (libmosquitto-dev), the Eclipse
// reference MQTT client, driven from Tether's own event loop.
#ifndef TETHER_CMOSQUITTO_SHIM_H
#define TETHER_CMOSQUITTO_SHIM_H
#include <mosquitto.h>
#endif
