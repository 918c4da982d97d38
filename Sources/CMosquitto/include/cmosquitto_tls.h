// Why OpenSSL rejected the broker's certificate. libmosquitto logs only
// OpenSSL's error queue ("certificate verify failed"), which cannot tell a
// certificate that is not valid yet because the gateway's clock reads 1970
// from one signed by another CA. The reason (X509_V_ERR_*) is the SSL
// object's verify result, which libmosquitto frees with the connection; it
// is still there while libmosquitto logs the failure (net__print_ssl_error
// comes before net__socket_close), so the log callback asks for it then.
//
// libssl is loaded with dlopen, like libmosquitto (which depends on it, so
// it is already mapped): `tether run` still never maps it. OpenSSL's
// headers stay in the .c file; Swift sees only this.
#ifndef TETHER_CMOSQUITTO_TLS_H
#define TETHER_CMOSQUITTO_TLS_H

/// Why OpenSSL rejected a certificate, from X509_V_ERR_*.
enum cmosquitto_verify_reason {
    /// No certificate was rejected (X509_V_OK), or libssl is not there.
    cmosquitto_verify_none = 0,
    /// A certificate of the chain is not valid yet at the system clock's
    /// reading (X509_V_ERR_CERT_NOT_YET_VALID, or its CRL's).
    cmosquitto_verify_not_yet_valid = 1,
    /// A certificate of the chain expired before the clock's reading.
    cmosquitto_verify_expired = 2,
    /// Any other reason (an unknown CA, a wrong host name, …).
    cmosquitto_verify_other = 3,
};

/// A rejection: its reason, OpenSSL's code and OpenSSL's words for it.
struct cmosquitto_verify_failure {
    enum cmosquitto_verify_reason reason;
    long code;
    /// X509_verify_cert_error_string's text; static, never freed.
    const char * _Nullable text;
};

/// The verify result of `ssl` (an `SSL *`, mosquitto_ssl_get's): what
/// the handshake's certificate check decided so far.
struct cmosquitto_verify_failure cmosquitto_tls_verify_failure(const void * _Nonnull ssl);

#endif
