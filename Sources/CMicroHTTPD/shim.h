#ifndef LARDER_CMICROHTTPD_SHIM_H
#define LARDER_CMICROHTTPD_SHIM_H
// GNU libmicrohttpd (LGPL 2.1+), for the server's /metrics and /healthz and the console's pages and WebSocket upgrade.
// MHD_start_daemon and MHD_upgrade_action are variadic, which Swift cannot call, and the access handler deals in upload
// buffers the endpoints never accept: these wrappers give Swift one plain call to start, one callback per request, one
// call to answer, and one callback with the socket of an upgraded connection.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// Called once per request, on the daemon's thread: answer with larder_http_respond and return its result.
typedef enum MHD_Result (*larder_http_handler)(void *context, struct MHD_Connection *connection, const char *method,
                                               const char *url);

/// What happens to a connection, for larder_http_observer.
enum larder_http_event {
    /// Accepted; `fd` is its socket, open until LARDER_HTTP_CLOSED has been reported.
    LARDER_HTTP_OPENED = 0,
    /// Its request arrived whole and is being answered.
    LARDER_HTTP_REQUEST = 1,
    /// Its answer went out; it waits for the next request.
    LARDER_HTTP_ANSWERED = 2,
    /// Closed: reported before the socket is closed, so a socket known open may be shut down until then.
    LARDER_HTTP_CLOSED = 3,
};

/// Called on the daemon's thread as a connection goes through `event`.
typedef void (*larder_http_observer)(void *context, struct MHD_Connection *connection, int event, int fd);

/// Called on the daemon's thread before a new client is taken on: nonzero takes it, 0 refuses it.
typedef int (*larder_http_admission)(void *context);

/// Called on the daemon's thread once the 101 answer of an upgrade was sent: `sock` is the connection's socket, which
/// libmicrohttpd no longer reads; `extra` holds the bytes it read past the request. Hand the socket back with
/// larder_http_upgrade_close, which closes it.
typedef void (*larder_http_upgraded)(void *context, struct MHD_Connection *connection, const char *extra,
                                     size_t extraSize, int sock, struct MHD_UpgradeResponseHandle *handle);

struct larder_http_server {
    larder_http_handler handler;
    larder_http_observer observer;
    larder_http_admission admit;
    /// NULL on a server that never upgrades.
    larder_http_upgraded upgraded;
    void *context;
};

static enum MHD_Result larder_http_access(void *cls, struct MHD_Connection *connection, const char *url,
                                          const char *method, const char *version, const char *upload_data,
                                          size_t *upload_data_size, void **request_state) {
    (void)version;
    (void)upload_data;
    // A request with a body (POST, PUT) is answered after it arrived, without reading it: the endpoints take none.
    if (*request_state == NULL) {
        *request_state = (void *)1;
        struct larder_http_server *observed = (struct larder_http_server *)cls;
        observed->observer(observed->context, connection, LARDER_HTTP_REQUEST, -1);
        if (*upload_data_size == 0) {
            struct larder_http_server *server = (struct larder_http_server *)cls;
            return server->handler(server->context, connection, method, url);
        }
    }
    if (*upload_data_size != 0) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    struct larder_http_server *server = (struct larder_http_server *)cls;
    return server->handler(server->context, connection, method, url);
}

static void larder_http_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                                   enum MHD_ConnectionNotificationCode code) {
    (void)socket_context;
    struct larder_http_server *server = (struct larder_http_server *)cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        server->observer(server->context, connection, LARDER_HTTP_OPENED, info == NULL ? -1 : (int)info->connect_fd);
    } else {
        server->observer(server->context, connection, LARDER_HTTP_CLOSED, -1);
    }
}

static void larder_http_completed(void *cls, struct MHD_Connection *connection, void **request_state,
                                  enum MHD_RequestTerminationCode code) {
    (void)request_state;
    (void)code;
    struct larder_http_server *server = (struct larder_http_server *)cls;
    server->observer(server->context, connection, LARDER_HTTP_ANSWERED, -1);
}

static enum MHD_Result larder_http_accept(void *cls, const struct sockaddr *address, socklen_t length) {
    (void)address;
    (void)length;
    struct larder_http_server *server = (struct larder_http_server *)cls;
    return server->admit(server->context) ? MHD_YES : MHD_NO;
}

/// Serves on `listener` (a bound, listening socket) with one internal epoll thread, each connection closed after
/// `timeoutSeconds` of silence. libmicrohttpd itself takes up to `connections` clients at once; `server->admit`
/// decides who is taken on below that, and `server->observer` follows every connection. With `certificate` and `key`
/// (PEM text, not paths) it speaks HTTPS; an upgraded connection's socket is then one end of a socket pair whose
/// other end libmicrohttpd encrypts.
static inline struct MHD_Daemon *larder_http_start(int listener, struct larder_http_server *server,
                                                   unsigned connections, unsigned timeoutSeconds,
                                                   const char *certificate, const char *key) {
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
    if (server->upgraded != NULL) flags |= MHD_ALLOW_UPGRADE;
    if (certificate != NULL && key != NULL) {
        return MHD_start_daemon(flags | MHD_USE_TLS, 0, larder_http_accept, server, larder_http_access, server,
                                MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listener, MHD_OPTION_CONNECTION_LIMIT,
                                connections, MHD_OPTION_CONNECTION_TIMEOUT, timeoutSeconds,
                                MHD_OPTION_NOTIFY_CONNECTION, larder_http_connection, server,
                                MHD_OPTION_NOTIFY_COMPLETED, larder_http_completed, server, MHD_OPTION_HTTPS_MEM_CERT,
                                certificate, MHD_OPTION_HTTPS_MEM_KEY, key, MHD_OPTION_END);
    }
    return MHD_start_daemon(flags, 0, larder_http_accept, server,
                            larder_http_access, server, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listener,
                            MHD_OPTION_CONNECTION_LIMIT, connections, MHD_OPTION_CONNECTION_TIMEOUT, timeoutSeconds,
                            MHD_OPTION_NOTIFY_CONNECTION, larder_http_connection, server,
                            MHD_OPTION_NOTIFY_COMPLETED, larder_http_completed, server, MHD_OPTION_END);
}

/// Queues an answer of `length` bytes (copied) with this status and content type.
static inline enum MHD_Result larder_http_respond(struct MHD_Connection *connection, unsigned status,
                                                  const char *contentType, const void *body, size_t length) {
    struct MHD_Response *response =
        MHD_create_response_from_buffer(length, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (response == NULL) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, contentType);
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return result;
}

/// Queues an answer like larder_http_respond, with `count` more headers: `headers` holds name, value, name, value...
/// (a `Cache-Control` among them replaces `no-store`).
static inline enum MHD_Result larder_http_respond_with(struct MHD_Connection *connection, unsigned status,
                                                       const char *contentType, const void *body, size_t length,
                                                       const char *const *headers, size_t count) {
    struct MHD_Response *response =
        MHD_create_response_from_buffer(length, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (response == NULL) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, contentType);
    int cacheControl = 0;
    for (size_t i = 0; i < count; i++) {
        if (strcasecmp(headers[2 * i], MHD_HTTP_HEADER_CACHE_CONTROL) == 0) cacheControl = 1;
        MHD_add_response_header(response, headers[2 * i], headers[2 * i + 1]);
    }
    if (!cacheControl) MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return result;
}

/// A request header's value (the first, when repeated), or NULL.
static inline const char *larder_http_header(struct MHD_Connection *connection, const char *name) {
    return MHD_lookup_connection_value(connection, MHD_HEADER_KIND, name);
}

static void larder_http_upgrade_handler(void *cls, struct MHD_Connection *connection, void *request_state,
                                        const char *extra_in, size_t extra_in_size, MHD_socket sock,
                                        struct MHD_UpgradeResponseHandle *handle) {
    (void)request_state;
    // An upgraded connection is the application's: libmicrohttpd's inactivity timeout no longer applies to it.
    MHD_set_connection_option(connection, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)0);
    struct larder_http_server *server = (struct larder_http_server *)cls;
    server->upgraded(server->context, connection, extra_in, extra_in_size, (int)sock, handle);
}

/// Answers 101 Switching Protocols with `Upgrade: <protocol>` and the given extra header (name and value, or NULLs);
/// libmicrohttpd adds `Connection: Upgrade` and then calls `server->upgraded` with the socket.
static inline enum MHD_Result larder_http_upgrade(struct MHD_Connection *connection, struct larder_http_server *server,
                                                  const char *protocol, const char *headerName,
                                                  const char *headerValue) {
    struct MHD_Response *response = MHD_create_response_for_upgrade(larder_http_upgrade_handler, server);
    if (response == NULL) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_UPGRADE, protocol);
    if (headerName != NULL) MHD_add_response_header(response, headerName, headerValue);
    enum MHD_Result result = MHD_queue_response(connection, MHD_HTTP_SWITCHING_PROTOCOLS, response);
    MHD_destroy_response(response);
    return result;
}

/// Hands an upgraded connection's socket back to libmicrohttpd, which closes it (any thread).
static inline void larder_http_upgrade_close(struct MHD_UpgradeResponseHandle *handle) {
    MHD_upgrade_action(handle, MHD_UPGRADE_ACTION_CLOSE);
}
#endif
