/* The C baseline of `make bench`: a line-echo server on a Unix stream socket, one thread,
 * level-triggered epoll, nonblocking sockets. Each complete line read is written back as it
 * came; a partial line waits for its '\n'. Output that the socket does not take at once waits
 * for EPOLLOUT (and reading pauses meanwhile). What a small C server in the usual style costs
 * per line: the agent's socket is measured against it.
 *
 *   cc -O2 -o echo-server-c echo-server.c && ./echo-server-c PATH
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_EVENTS 128
#define READ_SIZE 65536

struct conn {
    int fd;
    char *in;       /* the start of a line whose '\n' has not come */
    size_t in_len, in_cap;
    char *out;      /* written back, not yet taken by the socket */
    size_t out_start, out_len, out_cap;
};

static int epfd;

static void append(char **buf, size_t *len, size_t *cap, const char *bytes, size_t n) {
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n) c *= 2;
        *buf = realloc(*buf, c);
        if (!*buf) { perror("realloc"); exit(1); }
        *cap = c;
    }
    memcpy(*buf + *len, bytes, n);
    *len += n;
}

static void drop(struct conn *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

static void watch(struct conn *c, unsigned events) {
    struct epoll_event ev = { .events = events, .data.ptr = c };
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Writes what is pending; 0 when all of it left, 1 when the socket is full, -1 on error. */
static int flush(struct conn *c) {
    while (c->out_start < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_start, c->out_len - c->out_start, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
            return -1;
        }
        c->out_start += (size_t)n;
    }
    c->out_start = c->out_len = 0;
    return 0;
}

static void readable(struct conn *c, char *buf) {
    ssize_t n = read(c->fd, buf, READ_SIZE);
    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) return;
        drop(c);
        return;
    }
    if (n == 0) { drop(c); return; }
    /* The complete lines: from the start of the chunk (after a held partial line) to the last '\n'. */
    char *last = memrchr(buf, '\n', (size_t)n);
    if (!last) { append(&c->in, &c->in_len, &c->in_cap, buf, (size_t)n); return; }
    size_t upto = (size_t)(last - buf) + 1;
    if (c->in_len) {
        append(&c->out, &c->out_len, &c->out_cap, c->in, c->in_len);
        c->in_len = 0;
    }
    append(&c->out, &c->out_len, &c->out_cap, buf, upto);
    if (upto < (size_t)n) append(&c->in, &c->in_len, &c->in_cap, buf + upto, (size_t)n - upto);
    int r = flush(c);
    if (r < 0) drop(c);
    else if (r > 0) watch(c, EPOLLOUT);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s SOCKET_PATH\n", argv[0]); return 2; }
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen(argv[1]) >= sizeof addr.sun_path) { fprintf(stderr, "socket path too long\n"); return 2; }
    strcpy(addr.sun_path, argv[1]);
    unlink(argv[1]);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, 4096) < 0) {
        perror("echo-server: listen");
        return 1;
    }
    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev);
    static char buf[READ_SIZE];
    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int count = epoll_wait(epfd, events, MAX_EVENTS, -1);
        if (count < 0) {
            if (errno == EINTR) continue;
            perror("epoll_wait");
            return 1;
        }
        for (int i = 0; i < count; i++) {
            struct conn *c = events[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    struct conn *nc = calloc(1, sizeof *nc);
                    nc->fd = fd;
                    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = nc };
                    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
                }
                continue;
            }
            if (events[i].events & EPOLLOUT) {
                int r = flush(c);
                if (r < 0) { drop(c); continue; }
                if (r == 0) watch(c, EPOLLIN);
                continue;
            }
            if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) readable(c, buf);
        }
    }
}
