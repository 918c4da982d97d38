// libmosquitto (Debian's libmosquitto-dev headers), loaded with dlopen the
// first time `tether forward` needs it rather than linked: `tether run`
// then never maps libmosquitto, libssl and libcrypto (1.8 MiB of resident
// pages it would never use).
#ifndef TETHER_CMOSQUITTO_H
#define TETHER_CMOSQUITTO_H
#include <mosquitto.h>

/// The functions Tether calls, typed from mosquitto.h itself. Every field is
/// set by a successful `cmosquitto_load`, and only read after one.
struct cmosquitto_api {
    __typeof__(mosquitto_lib_init) * _Nonnull lib_init;
    __typeof__(mosquitto_strerror) * _Nonnull strerror;
    __typeof__(mosquitto_connack_string) * _Nonnull connack_string;
    __typeof__(mosquitto_new) * _Nonnull new_client;
    __typeof__(mosquitto_destroy) * _Nonnull destroy;
    __typeof__(mosquitto_user_data_set) * _Nonnull user_data_set;
    __typeof__(mosquitto_connect_callback_set) * _Nonnull connect_callback_set;
    __typeof__(mosquitto_disconnect_callback_set) * _Nonnull disconnect_callback_set;
    __typeof__(mosquitto_publish_callback_set) * _Nonnull publish_callback_set;
    __typeof__(mosquitto_log_callback_set) * _Nonnull log_callback_set;
    __typeof__(mosquitto_int_option) * _Nonnull int_option;
    __typeof__(mosquitto_max_inflight_messages_set) * _Nonnull max_inflight_messages_set;
    __typeof__(mosquitto_username_pw_set) * _Nonnull username_pw_set;
    __typeof__(mosquitto_tls_set) * _Nonnull tls_set;
    __typeof__(mosquitto_will_set) * _Nonnull will_set;
    __typeof__(mosquitto_connect_async) * _Nonnull connect_async;
    __typeof__(mosquitto_reconnect_async) * _Nonnull reconnect_async;
    __typeof__(mosquitto_disconnect) * _Nonnull disconnect;
    __typeof__(mosquitto_publish) * _Nonnull publish;
    __typeof__(mosquitto_socket) * _Nonnull socket;
    __typeof__(mosquitto_ssl_get) * _Nonnull ssl_get;
    __typeof__(mosquitto_want_write) * _Nonnull want_write;
    __typeof__(mosquitto_loop_read) * _Nonnull loop_read;
    __typeof__(mosquitto_loop_write) * _Nonnull loop_write;
    __typeof__(mosquitto_loop_misc) * _Nonnull loop_misc;
};

/// Loads libmosquitto.so.1 and resolves every function, once (later calls
/// return the first outcome). Returns the table, or NULL with the reason
/// (dlerror's text) in `error`.
const struct cmosquitto_api * _Nullable cmosquitto_load(char * _Nonnull error, unsigned long size);

/// The table if a `cmosquitto_load` succeeded, else NULL (never loads).
const struct cmosquitto_api * _Nullable cmosquitto_loaded(void);

#endif
