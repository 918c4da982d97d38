#include "cmosquitto.h"
#include <dlfcn.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>

static struct cmosquitto_api api;
static const struct cmosquitto_api *_Atomic loaded;
static char failure[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int resolve(void *library, const char *name, void **slot) {
    *slot = dlsym(library, name);
    if (*slot == NULL) {
        snprintf(failure, sizeof failure, "libmosquitto.so.1 has no %s: %s", name, dlerror());
        return -1;
    }
    return 0;
}

#define RESOLVE(field, name) if (resolve(library, name, (void **)&api.field) != 0) return

static void load_once(void) {
    // RTLD_LOCAL: its symbols stay out of the global scope.
    void *library = dlopen("libmosquitto.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        snprintf(failure, sizeof failure, "cannot load libmosquitto.so.1 (Debian's libmosquitto1): %s", dlerror());
        return;
    }
    RESOLVE(lib_init, "mosquitto_lib_init");
    RESOLVE(strerror, "mosquitto_strerror");
    RESOLVE(connack_string, "mosquitto_connack_string");
    RESOLVE(new_client, "mosquitto_new");
    RESOLVE(destroy, "mosquitto_destroy");
    RESOLVE(user_data_set, "mosquitto_user_data_set");
    RESOLVE(connect_callback_set, "mosquitto_connect_callback_set");
    RESOLVE(disconnect_callback_set, "mosquitto_disconnect_callback_set");
    RESOLVE(publish_callback_set, "mosquitto_publish_callback_set");
    RESOLVE(log_callback_set, "mosquitto_log_callback_set");
    RESOLVE(int_option, "mosquitto_int_option");
    RESOLVE(max_inflight_messages_set, "mosquitto_max_inflight_messages_set");
    RESOLVE(username_pw_set, "mosquitto_username_pw_set");
    RESOLVE(tls_set, "mosquitto_tls_set");
    RESOLVE(will_set, "mosquitto_will_set");
    RESOLVE(connect_async, "mosquitto_connect_async");
    RESOLVE(reconnect_async, "mosquitto_reconnect_async");
    RESOLVE(disconnect, "mosquitto_disconnect");
    RESOLVE(publish, "mosquitto_publish");
    RESOLVE(socket, "mosquitto_socket");
    RESOLVE(ssl_get, "mosquitto_ssl_get");
    RESOLVE(want_write, "mosquitto_want_write");
    RESOLVE(loop_read, "mosquitto_loop_read");
    RESOLVE(loop_write, "mosquitto_loop_write");
    RESOLVE(loop_misc, "mosquitto_loop_misc");
    api.lib_init();
    loaded = &api;
}

const struct cmosquitto_api *cmosquitto_load(char *error, unsigned long size) {
    pthread_once(&once, load_once);
    if (loaded == NULL) snprintf(error, size, "%s", failure);
    return loaded;
}

const struct cmosquitto_api *cmosquitto_loaded(void) {
    return loaded;
}
