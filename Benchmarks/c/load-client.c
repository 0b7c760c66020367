/* A C load client for the socket (a cross-check of pushwoosh-bench's own client, with no Swift
 * in the client's path): N connections to a Unix stream socket, D requests in flight on each,
 * spread over T threads (blocking send/recv for a thread with one connection, epoll for
 * several); each answer received ('\n'-counted) is replaced at once, all of one read's
 * replacements in one send. Prints one line: requests per second, p50 and p99 latency in µs,
 * and, given the server's pid, its CPU µs per request over the measured window.
 *
 *   load-client SOCKET CLIENTS DEPTH SECONDS [SERVER_PID [THREADS [METHOD]]]
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *socket_path;
static int depth;
static const char *suffix;
static uint64_t window_start, window_end;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct worker {
    pthread_t thread;
    int *fds, nfds;
    uint64_t *sent_at; int *head, *inflight; long *next_id;
    uint32_t *lat; size_t nlat, cap;
    long answers;
    const char *error;
};

static int send_requests(struct worker *w, int i, int count) {
    char out[256 * 64];
    size_t len = 0;
    for (int k = 0; k < count; k++)
        len += (size_t)snprintf(out + len, sizeof out - len, "{\"jsonrpc\":\"2.0\",\"id\":%ld%s\n", w->next_id[i]++, suffix);
    uint64_t t = now_ns();
    for (int k = 0; k < count; k++) {
        int tail = (w->head[i] + w->inflight[i]) % depth;
        w->sent_at[i * depth + tail] = t;
        w->inflight[i]++;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(w->fds[i], out + off, len - off, MSG_NOSIGNAL);
        if (n < 0) { if (errno == EINTR || errno == EAGAIN) continue; w->error = "send"; return -1; }
        off += (size_t)n;
    }
    return 0;
}

static int received(struct worker *w, int i, const char *buf, ssize_t n, uint64_t t) {
    int completed = 0;
    const char *p = buf, *end = buf + n;
    int in_window = t >= window_start && t < window_end;
    while ((p = memchr(p, '\n', (size_t)(end - p)))) {
        p++;
        completed++;
        int slot = i * depth + w->head[i];
        w->head[i] = (w->head[i] + 1) % depth;
        w->inflight[i]--;
        if (in_window) {
            w->answers++;
            if (w->nlat == w->cap) { w->cap = w->cap ? w->cap * 2 : 1 << 16; w->lat = realloc(w->lat, w->cap * 4); }
            uint64_t d = t - w->sent_at[slot];
            w->lat[w->nlat++] = d > 0xffffffffu ? 0xffffffffu : (uint32_t)d;
        }
    }
    return completed;
}

static void *run(void *arg) {
    struct worker *w = arg;
    static __thread char buf[65536];
    while (now_ns() < window_start - 500000000ull) usleep(1000);  /* common start */
    for (int i = 0; i < w->nfds; i++) if (send_requests(w, i, depth)) return NULL;
    if (w->nfds == 1) {
        for (;;) {
            ssize_t n = recv(w->fds[0], buf, sizeof buf, 0);
            if (n <= 0) { if (n < 0 && errno == EINTR) continue; w->error = n ? "recv" : "closed"; return NULL; }
            uint64_t t = now_ns();
            int c = received(w, 0, buf, n, t);
            if (t >= window_end) return NULL;
            if (c && send_requests(w, 0, c)) return NULL;
        }
    }
    int ep = epoll_create1(0);
    for (int i = 0; i < w->nfds; i++) {
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
        epoll_ctl(ep, EPOLL_CTL_ADD, w->fds[i], &ev);
    }
    struct epoll_event events[256];
    for (;;) {
        int count = epoll_wait(ep, events, 256, 20);
        uint64_t t = now_ns();
        if (t >= window_end) break;
        for (int k = 0; k < count; k++) {
            int i = (int)events[k].data.u32;
            ssize_t n = recv(w->fds[i], buf, sizeof buf, MSG_DONTWAIT);
            if (n <= 0) { if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue; w->error = n ? "recv" : "closed"; close(ep); return NULL; }
            t = now_ns();
            int c = received(w, i, buf, n, t);
            if (c && t < window_end && send_requests(w, i, c)) { close(ep); return NULL; }
        }
    }
    close(ep);
    return NULL;
}

static double cpu_seconds(int pid) {
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (!fgets(line, sizeof line, f)) { fclose(f); return 0; }
    fclose(f);
    char *p = strrchr(line, ')');
    unsigned long ut = 0, st = 0;
    if (p) sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: %s SOCKET CLIENTS DEPTH SECONDS [SERVER_PID [THREADS [isEnabled|get]]]\n", argv[0]); return 2; }
    socket_path = argv[1];
    int clients = atoi(argv[2]);
    depth = atoi(argv[3]);
    double seconds = atof(argv[4]);
    int pid = argc > 5 ? atoi(argv[5]) : 0;
    int threads = argc > 6 ? atoi(argv[6]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    suffix = argc > 7 && !strcmp(argv[7], "get") ? ",\"method\":\"get\",\"params\":{\"key\":\"new_checkout\"}}"
        : ",\"method\":\"isEnabled\",\"params\":{\"key\":\"new_checkout\",\"default\":false}}";
    if (threads > clients) threads = clients;
    if (threads < 1) threads = 1;
    struct worker *w = calloc((size_t)threads, sizeof *w);
    for (int t = 0; t < threads; t++) {
        w[t].fds = calloc((size_t)clients, sizeof(int));
        w[t].sent_at = calloc((size_t)(clients * depth), sizeof(uint64_t));
        w[t].head = calloc((size_t)clients, sizeof(int));
        w[t].inflight = calloc((size_t)clients, sizeof(int));
        w[t].next_id = calloc((size_t)clients, sizeof(long));
    }
    for (int c = 0; c < clients; c++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        strncpy(addr.sun_path, socket_path, sizeof addr.sun_path - 1);
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { perror("connect"); return 1; }
        struct worker *x = &w[c % threads];
        x->next_id[x->nfds] = 1;
        x->fds[x->nfds++] = fd;
    }
    window_start = now_ns() + 550000000ull;  /* 0.05 s to start, 0.5 s warm-up */
    window_end = window_start + (uint64_t)(seconds * 1e9);
    for (int t = 0; t < threads; t++) pthread_create(&w[t].thread, NULL, run, &w[t]);
    while (now_ns() < window_start) usleep(500);
    double cpu0 = pid ? cpu_seconds(pid) : 0;
    uint64_t wall0 = now_ns();
    while (now_ns() < window_end) usleep(1000);
    double cpu1 = pid ? cpu_seconds(pid) : 0;
    uint64_t wall1 = now_ns();
    long answers = 0; size_t nlat = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(w[t].thread, NULL);
        if (w[t].error) { fprintf(stderr, "load-client: %s failed\n", w[t].error); return 1; }
        answers += w[t].answers; nlat += w[t].nlat;
    }
    uint32_t *all = malloc((nlat ? nlat : 1) * 4);
    size_t k = 0;
    for (int t = 0; t < threads; t++) { memcpy(all + k, w[t].lat, w[t].nlat * 4); k += w[t].nlat; }
    qsort(all, nlat, 4, cmp);
    double p50 = nlat ? all[nlat / 2] / 1000.0 : 0, p99 = nlat ? all[(size_t)(nlat * 0.99)] / 1000.0 : 0;
    double rps = answers / seconds;
    double wall = (double)(wall1 - wall0) / 1e9;
    double cpu_us = pid && answers ? (cpu1 - cpu0) / wall * seconds / (double)answers * 1e6 : 0;
    printf("rps %.0f p50 %.0f p99 %.0f cpu_us %.3f\n", rps, p50, p99, cpu_us);
    return 0;
}
