#ifndef LARDER_CGNUTLS_SHIM_H
#define LARDER_CGNUTLS_SHIM_H
// GnuTLS for Larder's TLS sessions. A session moves its records through two byte buffers in memory, filled and drained
// by the owner (the server's event loop, a client's I/O thread), through the transport callbacks below: they must be C
// functions, and keeping the buffers here keeps every record free of a call into Swift.
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/// The ALPN protocol Larder speaks inside TLS.
static const unsigned char larder_alpn_name[] = {'l', 'a', 'r', 'd', 'e', 'r', '/', '1'};

/// A growable byte queue: bytes from `start` to `end` are pending.
typedef struct {
    unsigned char *bytes;
    size_t start, end, capacity;
} larder_bytes;

/// A session with the ciphertext it was fed and not yet consumed (`input`) and the ciphertext it produced and the
/// owner has not yet taken (`output`).
typedef struct {
    gnutls_session_t session;
    larder_bytes input;
    larder_bytes output;
    /// The name the server's certificate must carry, which GnuTLS reads at the handshake (it does not copy it).
    char *name;
    unsigned char address[16];
    gnutls_typed_vdata_st expected;
} larder_tls;

/// The buffer a drained queue keeps: enough for a small request's or answer's record, so that a busy connection does
/// not allocate one per record, while an idle one holds no more than this (a larger buffer is given back).
#define LARDER_TLS_KEPT_BUFFER 1024

static inline void larder_bytes_drained(larder_bytes *q) {
    q->start = q->end = 0;
    if (q->capacity > LARDER_TLS_KEPT_BUFFER) {
        free(q->bytes);
        q->bytes = NULL;
        q->capacity = 0;
    }
}

static inline int larder_bytes_append(larder_bytes *q, const void *bytes, size_t count) {
    if (q->capacity - q->end < count) {
        size_t used = q->end - q->start;
        if (q->start > 0 && q->capacity - used >= count) {
            memmove(q->bytes, q->bytes + q->start, used);
        } else {
            size_t capacity = q->capacity < LARDER_TLS_KEPT_BUFFER ? LARDER_TLS_KEPT_BUFFER : q->capacity;
            while (capacity - used < count) capacity *= 2;
            unsigned char *grown = malloc(capacity);
            if (grown == NULL) return 0;
            if (used > 0) memcpy(grown, q->bytes + q->start, used);
            free(q->bytes);
            q->bytes = grown;
            q->capacity = capacity;
        }
        q->start = 0;
        q->end = used;
    }
    memcpy(q->bytes + q->end, bytes, count);
    q->end += count;
    return 1;
}

static inline size_t larder_bytes_take(larder_bytes *q, void *into, size_t count) {
    size_t available = q->end - q->start;
    if (count > available) count = available;
    memcpy(into, q->bytes + q->start, count);
    q->start += count;
    if (q->start == q->end) larder_bytes_drained(q);
    return count;
}

/// GnuTLS sends a record: it joins the output the owner takes.
static ssize_t larder_tls_push(gnutls_transport_ptr_t pointer, const void *bytes, size_t count) {
    larder_tls *tls = pointer;
    if (!larder_bytes_append(&tls->output, bytes, count)) {
        gnutls_transport_set_errno(tls->session, ENOMEM);
        return -1;
    }
    return (ssize_t)count;
}

/// GnuTLS reads ciphertext: what was fed, or EAGAIN ("feed more") when nothing is left.
static ssize_t larder_tls_pull(gnutls_transport_ptr_t pointer, void *into, size_t count) {
    larder_tls *tls = pointer;
    if (tls->input.start == tls->input.end) {
        gnutls_transport_set_errno(tls->session, EAGAIN);
        return -1;
    }
    return (ssize_t)larder_bytes_take(&tls->input, into, count);
}

/// A non-blocking session of either side over the two buffers, with `credentials` and `priorities`; the server side
/// also with the ticket key (stateless TLS 1.3 and 1.2 session tickets), ALPN `larder/1` (a client that offers ALPN
/// without it is refused with no_application_protocol; one that offers none is served) and, when `require_client`,
/// a client certificate verified against the credentials' trust. Returns a negative GnuTLS error on failure.
static inline int larder_tls_new(larder_tls **out, int server, gnutls_certificate_credentials_t credentials,
                                 gnutls_priority_t priorities, const gnutls_datum_t *ticket_key,
                                 int require_client) {
    larder_tls *tls = calloc(1, sizeof *tls);
    if (tls == NULL) return GNUTLS_E_MEMORY_ERROR;
    // A server sends its TLS 1.3 ticket itself, when the handshake completes (larder_tls_send_ticket): left to GnuTLS,
    // it waits for the first answer, and a client that sends its first request after its Finished in a segment of its
    // own (Nagle) then waits for a delayed ACK, 40 ms.
    int ret = gnutls_init(&tls->session, server ? GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_AUTO_SEND_TICKET
                                                : GNUTLS_CLIENT | GNUTLS_NONBLOCK);
    if (ret < 0) {
        free(tls);
        return ret;
    }
    gnutls_datum_t alpn = {(unsigned char *)larder_alpn_name, sizeof larder_alpn_name};
    if ((ret = gnutls_priority_set(tls->session, priorities)) < 0 ||
        (ret = gnutls_credentials_set(tls->session, GNUTLS_CRD_CERTIFICATE, credentials)) < 0 ||
        (ret = gnutls_alpn_set_protocols(tls->session, &alpn, 1, server ? GNUTLS_ALPN_MANDATORY : 0)) < 0 ||
        (server && ticket_key != NULL && (ret = gnutls_session_ticket_enable_server(tls->session, ticket_key)) < 0)) {
        gnutls_deinit(tls->session);
        free(tls);
        return ret;
    }
    if (server && require_client) {
        gnutls_certificate_server_set_request(tls->session, GNUTLS_CERT_REQUIRE);
        gnutls_session_set_verify_cert(tls->session, NULL, 0);
    }
    gnutls_transport_set_ptr(tls->session, tls);
    gnutls_transport_set_push_function(tls->session, larder_tls_push);
    gnutls_transport_set_pull_function(tls->session, larder_tls_pull);
    *out = tls;
    return 0;
}

/// A client checks the server's certificate, which must carry `name` when not NULL: an IP address (matched against
/// the certificate's IP address entries) or a DNS name (its DNS names; also sent as SNI).
static inline int larder_tls_verify_server(larder_tls *tls, const char *name) {
    if (name == NULL) {
        gnutls_session_set_verify_cert(tls->session, NULL, 0);
        return 0;
    }
    size_t length = strlen(name);
    tls->name = malloc(length + 1);
    if (tls->name == NULL) return GNUTLS_E_MEMORY_ERROR;
    memcpy(tls->name, name, length + 1);
    if (inet_pton(AF_INET, name, tls->address) == 1 || inet_pton(AF_INET6, name, tls->address) == 1) {
        tls->expected.type = GNUTLS_DT_IP_ADDRESS;
        tls->expected.data = tls->address;
        tls->expected.size = strchr(name, ':') ? 16 : 4;
        gnutls_session_set_verify_cert2(tls->session, &tls->expected, 1, 0);
        return 0;
    }
    int ret = gnutls_server_name_set(tls->session, GNUTLS_NAME_DNS, tls->name, length);
    if (ret < 0) return ret;
    gnutls_session_set_verify_cert(tls->session, tls->name, 0);
    return 0;
}

/// Sends SNI without checking the certificate (`--tls-insecure-skip-verify` with a DNS name).
static inline int larder_tls_send_name(larder_tls *tls, const char *name) {
    unsigned char address[16];
    if (inet_pton(AF_INET, name, address) == 1 || inet_pton(AF_INET6, name, address) == 1) return 0;
    return gnutls_server_name_set(tls->session, GNUTLS_NAME_DNS, name, strlen(name));
}

static inline void larder_tls_free(larder_tls *tls) {
    gnutls_deinit(tls->session);
    free(tls->name);
    free(tls->input.bytes);
    free(tls->output.bytes);
    free(tls);
}

static inline int larder_tls_feed(larder_tls *tls, const void *bytes, size_t count) {
    return larder_bytes_append(&tls->input, bytes, count);
}

static inline size_t larder_tls_pending_output(const larder_tls *tls) { return tls->output.end - tls->output.start; }

static inline size_t larder_tls_unread_input(const larder_tls *tls) { return tls->input.end - tls->input.start; }

/// Ciphertext fed and not yet consumed plus plaintext decrypted and not yet read.
static inline size_t larder_tls_pending_input(const larder_tls *tls) {
    return tls->input.end - tls->input.start + gnutls_record_check_pending(tls->session);
}

/// The pending output where it lies, and its length.
static inline const void *larder_tls_peek_output(const larder_tls *tls, long *count) {
    *count = (long)(tls->output.end - tls->output.start);
    return *count > 0 ? tls->output.bytes + tls->output.start : NULL;
}

static inline void larder_tls_consume_output(larder_tls *tls, size_t count) {
    tls->output.start += count;
    if (tls->output.start == tls->output.end) larder_bytes_drained(&tls->output);
}

static inline size_t larder_tls_take_output(larder_tls *tls, void *into, size_t count) {
    return larder_bytes_take(&tls->output, into, count);
}

/// A server's TLS 1.3 session ticket, queued at once (TLS 1.2 sends its ticket inside the handshake).
static inline int larder_tls_send_ticket(larder_tls *tls) {
    if (gnutls_protocol_get_version(tls->session) != GNUTLS_TLS1_3) return 0;
    return gnutls_session_ticket_send(tls->session, 1, 0);
}

/// Frees memory GnuTLS allocated (gnutls_free is a variable, which Swift 6 will not read from any thread).
static inline void larder_gnutls_free(void *pointer) { gnutls_free(pointer); }

/// 1 when ALPN chose `larder/1`, 0 when the peer offered no ALPN.
static inline int larder_tls_alpn_is_larder(const larder_tls *tls) {
    gnutls_datum_t chosen;
    if (gnutls_alpn_get_selected_protocol(tls->session, &chosen) < 0) return 0;
    return chosen.size == sizeof larder_alpn_name && memcmp(chosen.data, larder_alpn_name, chosen.size) == 0;
}

/// 1 when the session holds a ticket from the server, so that its data resumes it on a later connection.
static inline int larder_tls_has_ticket(const larder_tls *tls) {
    return (gnutls_session_get_flags(tls->session) & GNUTLS_SFLAGS_SESSION_TICKET) != 0;
}
#endif
