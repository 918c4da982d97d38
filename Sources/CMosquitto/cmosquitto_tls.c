#include "cmosquitto_tls.h"
#include <dlfcn.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <pthread.h>
#include <stddef.h>

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
// libssl.so.3 for OpenSSL 3: the soname of the headers compiled against.
#define LIBSSL "libssl.so." STRINGIFY(OPENSSL_SHLIB_VERSION)

/// The two functions used, typed from OpenSSL's headers; both NULL when
/// libssl cannot be loaded (then no reason is ever told).
static __typeof__(SSL_get_verify_result) *get_verify_result;
static __typeof__(X509_verify_cert_error_string) *verify_text;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    void *library = dlopen(LIBSSL, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) return;
    // dlsym searches the library's dependencies too (libcrypto's function).
    __typeof__(SSL_get_verify_result) *result = (__typeof__(result))dlsym(library, "SSL_get_verify_result");
    __typeof__(X509_verify_cert_error_string) *text = (__typeof__(text))dlsym(library, "X509_verify_cert_error_string");
    if (result == NULL || text == NULL) return;
    get_verify_result = result;
    verify_text = text;
}

struct cmosquitto_verify_failure cmosquitto_tls_verify_failure(const void *ssl) {
    struct cmosquitto_verify_failure failure = { cmosquitto_verify_none, X509_V_OK, NULL };
    pthread_once(&once, load);
    if (get_verify_result == NULL || verify_text == NULL) return failure;
    long code = get_verify_result(ssl);
    if (code == X509_V_OK) return failure;
    switch (code) {
    case X509_V_ERR_CERT_NOT_YET_VALID:
    case X509_V_ERR_CRL_NOT_YET_VALID:
        failure.reason = cmosquitto_verify_not_yet_valid;
        break;
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CRL_HAS_EXPIRED:
        failure.reason = cmosquitto_verify_expired;
        break;
    default:
        failure.reason = cmosquitto_verify_other;
    }
    failure.code = code;
    failure.text = verify_text(code);
    return failure;
}
