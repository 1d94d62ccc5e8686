// What one reading of a TCP socket's counters costs: getsockopt(TCP_INFO) on an established
// loopback connection, a million times (and clock_gettime for scale). BENCHMARKS.md quotes it.
//   gcc -O2 -o /tmp/tcp-info-cost scripts/tcp-info-cost.c && taskset -c 0 /tmp/tcp-info-cost
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>

static double ns_since(struct timespec a) {
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
}

int main(void) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    if (bind(listener, (void *)&addr, sizeof addr) || listen(listener, 1) || getsockname(listener, (void *)&addr, &len))
        return perror("listen"), 1;
    int client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client, (void *)&addr, sizeof addr)) return perror("connect"), 1;
    int server = accept(listener, 0, 0);
    const int n = 1000000;
    struct tcp_info info;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        socklen_t size = sizeof info;
        if (getsockopt(server, IPPROTO_TCP, TCP_INFO, &info, &size)) return perror("getsockopt"), 1;
    }
    printf("getsockopt(TCP_INFO): %.0f ns per call\n", ns_since(t0) / n);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) clock_gettime(CLOCK_MONOTONIC, &t);
    printf("clock_gettime(CLOCK_MONOTONIC): %.0f ns per call\n", ns_since(t0) / n);
    return 0;
}
