#ifndef TRANSFERD_CMICROHTTPD_SHIM_H
#define TRANSFERD_CMICROHTTPD_SHIM_H
/* libmicrohttpd, GNU's embeddable HTTP server (Debian libmicrohttpd-dev): the control API's server. */
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <microhttpd.h>

/* Swift cannot call C's variadic functions: these two fix the options the control API passes.
   A thread per connection, so an event stream may wait for events in its reader callback
   without holding up other requests; the listening socket is bound to `address` only.
   `notify` hears of every connection opened and closed (MHD_OPTION_NOTIFY_CONNECTION). */
static inline struct MHD_Daemon *transferd_mhd_start(const struct sockaddr *address, int ipv6,
                                                     MHD_AccessHandlerCallback handler, void *handler_cls,
                                                     MHD_RequestCompletedCallback completed, void *completed_cls,
                                                     MHD_NotifyConnectionCallback notify, void *notify_cls,
                                                     unsigned int connection_limit, unsigned int timeout_seconds,
                                                     size_t memory_limit) {
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | (ipv6 ? MHD_USE_IPv6 : 0);
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_SOCK_ADDR, address,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                            MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit,
                            MHD_OPTION_END);
}

/* The port the daemon listens on (the one the kernel chose when asked for port 0). */
static inline uint16_t transferd_mhd_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}
/* MHD_CONNECTION_NOTIFY_STARTED under a name Swift imports as a value. */
static const enum MHD_ConnectionNotificationCode TRANSFERD_MHD_CONNECTION_STARTED = MHD_CONNECTION_NOTIFY_STARTED;

/* The connection's socket, or -1. */
static inline int transferd_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}
#endif
