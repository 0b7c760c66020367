// libmicrohttpd for Swift: its headers, the types of the functions the project calls, and
// typed wrappers for the variadic ones. libmicrohttpd is not linked: the MicroHTTPD module
// loads it with dlopen when an HTTP server first starts (MicroHTTPD.swift): an agent without
// an HTTP interface never maps it, and one with it maps it and the ~10 libraries it brings
// (GnuTLS, p11-kit, nettle, gmp, ...) after READY=1.
#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

// The type of each function called through a pointer (`__typeof__` of a declaration asks
// for no symbol).
typedef __typeof__(MHD_stop_daemon) *pw_mhd_stop_daemon_fn;
typedef __typeof__(MHD_run) *pw_mhd_run_fn;
typedef __typeof__(MHD_get_timeout) *pw_mhd_get_timeout_fn;
typedef __typeof__(MHD_is_feature_supported) *pw_mhd_is_feature_supported_fn;
typedef __typeof__(MHD_queue_response) *pw_mhd_queue_response_fn;
typedef __typeof__(MHD_create_response_from_buffer) *pw_mhd_create_response_from_buffer_fn;
typedef __typeof__(MHD_create_response_from_callback) *pw_mhd_create_response_from_callback_fn;
typedef __typeof__(MHD_add_response_header) *pw_mhd_add_response_header_fn;
typedef __typeof__(MHD_destroy_response) *pw_mhd_destroy_response_fn;
typedef __typeof__(MHD_suspend_connection) *pw_mhd_suspend_connection_fn;
typedef __typeof__(MHD_resume_connection) *pw_mhd_resume_connection_fn;
typedef __typeof__(MHD_get_connection_values) *pw_mhd_get_connection_values_fn;

/* MHD_start_daemon_va takes a va_list, which Swift cannot keep in a function pointer's type
   across modules (the compiler crashes reading it back): it is called here. `fn` is its address. */
static inline struct MHD_Daemon *pw_mhd_start_daemon_va(const void *fn, unsigned int flags, uint16_t port,
                                                        MHD_AcceptPolicyCallback apc, void *apc_cls,
                                                        MHD_AccessHandlerCallback dh, void *dh_cls, va_list ap) {
    return ((__typeof__(MHD_start_daemon_va) *)fn)(flags, port, apc, apc_cls, dh, dh_cls, ap);
}

/* MHD_get_daemon_info is variadic, which Swift does not import: the agent's HTTP
   interface needs libmicrohttpd's epoll descriptor to watch it on its own loop.
   `fn` is MHD_get_daemon_info's address. */
static inline int pw_mhd_epoll_fd(const void *fn, struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = ((__typeof__(MHD_get_daemon_info) *)fn)(daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return info ? info->epoll_fd : -1;
}

/* MHD_get_connection_info is variadic too: the connection's socket (the agent watches it
   for a peer that went away; the emulator's `reset` fault closes it with RST).
   `fn` is MHD_get_connection_info's address. */
static inline int pw_mhd_connection_fd(const void *fn, struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        ((__typeof__(MHD_get_connection_info) *)fn)(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}
