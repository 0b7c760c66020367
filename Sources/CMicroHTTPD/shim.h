#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/* MHD_get_daemon_info is variadic, which Swift does not import: the agent's HTTP
   interface needs libmicrohttpd's epoll descriptor to watch it on its own loop. */
static inline int pw_mhd_epoll_fd(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return info ? info->epoll_fd : -1;
}

/* MHD_get_connection_info is variadic too: the emulator's `reset` fault needs the
   connection's socket to close it with RST (SO_LINGER 0). */
static inline int pw_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}
