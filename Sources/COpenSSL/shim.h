#ifndef LARDER_COPENSSL_SHIM_H
#define LARDER_COPENSSL_SHIM_H
// OpenSSL's libssl for Larder's TLS. Many of its calls are macros over SSL_CTX_ctrl and BIO_ctrl, which Swift cannot
// call: they are wrapped here, with the two callbacks that must be C functions.
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <string.h>

/// The ALPN protocol Larder speaks inside TLS, in the wire form (a length byte, then the name).
static const unsigned char larder_alpn_wire[] = {8, 'l', 'a', 'r', 'd', 'e', 'r', '/', '1'};

/// Chooses `larder/1` among a client's ALPN offers. A client that offers ALPN without it is refused with the
/// no_application_protocol alert; one that offers none is served (the protocol inside is checked by HELLO).
static int larder_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                              unsigned int inlen, void *arg) {
    (void)ssl;
    (void)arg;
    unsigned int i = 0;
    while (i < inlen) {
        unsigned int n = in[i];
        if (i + 1 + n > inlen) break;
        if (n == 8 && memcmp(in + i + 1, larder_alpn_wire + 1, 8) == 0) {
            *out = in + i + 1;
            *outlen = (unsigned char)n;
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + n;
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/// A context for either side: TLS 1.2 and 1.3 only, no renegotiation, no compression, partial writes from a buffer
/// that may move, and record buffers released whenever they are empty (an idle connection, or one that never finishes
/// its handshake, holds no 34 KB of them) until the owner says to keep them (`larder_ssl_keep_buffers`).
static inline SSL_CTX *larder_ctx_new(int server) {
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (ctx == NULL) return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (server) {
        SSL_CTX_set_alpn_select_cb(ctx, larder_alpn_select, NULL);
        // Session resumption by stateless tickets only: no server-side cache grows with the clients, a reconnecting
        // client skips the certificate exchange, and the ticket key is the context's own (a reload makes a new one,
        // and earlier tickets then fall back to a full handshake). The id context lets sessions that carried a client
        // certificate resume too.
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_num_tickets(ctx, 1);
        SSL_CTX_set_session_id_context(ctx, larder_alpn_wire + 1, 8);
    } else {
        SSL_CTX_set_alpn_protos(ctx, larder_alpn_wire, sizeof larder_alpn_wire);
    }
    return ctx;
}

/// Client certificates: required and verified against the CAs of `file`.
static inline int larder_ctx_require_client_certs(SSL_CTX *ctx, const char *file) {
    if (SSL_CTX_load_verify_locations(ctx, file, NULL) != 1) return 0;
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(file);
    if (names == NULL) return 0;
    SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    return 1;
}

/// The server's certificate is verified (against `file`, or the system's trust store when NULL) unless `verify` is 0.
static inline int larder_ctx_verify_server(SSL_CTX *ctx, const char *file, int verify) {
    if (!verify) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        return 1;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (file != NULL) return SSL_CTX_load_verify_locations(ctx, file, NULL) == 1;
    return SSL_CTX_set_default_verify_paths(ctx) == 1;
}

/// An SSL over two memory BIOs: the caller moves ciphertext between them and the socket.
static inline SSL *larder_ssl_new(SSL_CTX *ctx, int server) {
    SSL *ssl = SSL_new(ctx);
    if (ssl == NULL) return NULL;
    BIO *in = BIO_new(BIO_s_mem());
    BIO *out = BIO_new(BIO_s_mem());
    if (in == NULL || out == NULL) {
        BIO_free(in);
        BIO_free(out);
        SSL_free(ssl);
        return NULL;
    }
    // An empty input BIO means "wait for more", not the end of the stream.
    BIO_set_mem_eof_return(in, -1);
    BIO_set_mem_eof_return(out, -1);
    SSL_set_bio(ssl, in, out);
    if (server) SSL_set_accept_state(ssl); else SSL_set_connect_state(ssl);
    return ssl;
}

/// The name the server's certificate must carry (a DNS name, or an IP address), also sent as SNI when a DNS name.
static inline int larder_ssl_expect_name(SSL *ssl, const char *name, int is_ip) {
    if (is_ip) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
    if (SSL_set_tlsext_host_name(ssl, name) != 1) return 0;
    return SSL_set1_host(ssl, name) == 1;
}

static inline int larder_ssl_feed(SSL *ssl, const void *bytes, int count) {
    return BIO_write(SSL_get_rbio(ssl), bytes, count);
}

/// Keeps the record buffers between records (`keep` 1), for a busy session: releasing and allocating them again
/// around every record costs more than the encryption of a small answer. With `keep` 0 they are given back now when
/// empty, and after every record from then on.
static inline void larder_ssl_keep_buffers(SSL *ssl, int keep) {
    if (keep) {
        SSL_clear_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
    } else {
        SSL_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
        SSL_free_buffers(ssl);
    }
}

static inline size_t larder_ssl_pending_output(SSL *ssl) { return BIO_ctrl_pending(SSL_get_wbio(ssl)); }

static inline size_t larder_ssl_pending_input(SSL *ssl) {
    return BIO_ctrl_pending(SSL_get_rbio(ssl)) + (size_t)SSL_pending(ssl);
}

static inline int larder_ssl_take_output(SSL *ssl, void *into, int count) {
    return BIO_read(SSL_get_wbio(ssl), into, count);
}

/// A copy of the session once the server issued a ticket for it (the server keeps no session cache, so only a ticket
/// resumes; in TLS 1.3 it comes after the handshake, and the session before it only looks resumable by its legacy id);
/// NULL before. A copy, because OpenSSL marks a connection's own session not resumable when the connection ends
/// without close_notify, which is how a phone's connections usually end. The caller owns it.
static inline SSL_SESSION *larder_ssl_resumable_session(SSL *ssl) {
    SSL_SESSION *session = SSL_get0_session(ssl);
    if (session == NULL || !SSL_SESSION_is_resumable(session) || !SSL_SESSION_has_ticket(session)) return NULL;
    return SSL_SESSION_dup(session);
}

/// 1 when the handshake chose `larder/1` by ALPN, 0 when ALPN was not used.
static inline int larder_ssl_alpn_is_larder(SSL *ssl) {
    const unsigned char *chosen = NULL;
    unsigned int length = 0;
    SSL_get0_alpn_selected(ssl, &chosen, &length);
    return length == 8 && memcmp(chosen, larder_alpn_wire + 1, 8) == 0;
}

/// The oldest queued OpenSSL error as text (cleared from the queue), or an empty string.
static inline void larder_error_text(char *into, size_t size) {
    unsigned long code = ERR_get_error();
    unsigned long last = code;
    while (last != 0) {
        unsigned long next = ERR_get_error();
        if (next == 0) break;
        last = next;
    }
    if (code == 0) {
        into[0] = 0;
        return;
    }
    ERR_error_string_n(code, into, size);
}

/// The reason part of the oldest queued OpenSSL error (e.g. "wrong version number"), without clearing it.
static inline const char *larder_error_reason(void) {
    unsigned long code = ERR_peek_error();
    return code == 0 ? NULL : ERR_reason_error_string(code);
}
#endif
