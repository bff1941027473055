/* Fuzz target: the simulator's HTTP front end, end to end: request parsing
 * (src/net/http_server.c on http_parser), routing and every REST handler
 * behind it (src/sim/server.c, KFP, Kubernetes, Argo, /metrics, /sim/v1).
 *
 * One kb_sim_server runs in-process for the whole fuzzing session (its own
 * thread and loop, "fast" profile, a high speed so simulated latencies are
 * negligible). Each input is sent raw over a fresh loopback connection; the
 * write side is then shut down and the response read until the server
 * closes or a short deadline passes (a watch stream stays open). A crash or
 * sanitizer report on the server thread takes the process down, which is
 * what libFuzzer reports. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kb/sim_server.h"

/* Read deadline per input, ms: long enough for any non-streaming answer. */
#define READ_DEADLINE_MS 300

static kb_sim_server *server;
static struct sockaddr_in addr;

static void stop_server(void) {
  kb_sim_server_stop(server);
  server = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  signal(SIGPIPE, SIG_IGN);
  kb_sim_server_opts o = {.profile = "fast", .seed = 1, .speed = 100000};
  kb_sim_error err = {0};
  server = kb_sim_server_start(&o, &err);
  if (!server) {
    fprintf(stderr, "fuzz_http_request: cannot start the simulator: %s\n", err.message);
    abort();
  }
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)kb_sim_server_port(server));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  atexit(stop_server);
  return 0;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void send_all(int fd, const uint8_t *data, size_t size) {
  while (size > 0) {
    ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return; /* the server answered early and closed: fine */
    data += n;
    size -= (size_t)n;
  }
}

static void drain(int fd) {
  char buf[16384];
  int64_t deadline = now_ms() + READ_DEADLINE_MS;
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0) return;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, (int)left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
  }
}

/* A new loopback connection to the server. libFuzzer's -timeout watchdog
 * is a SIGALRM every second, so a blocking connect may see EINTR: start
 * over then. Any other failure means the server stopped accepting. */
static int connect_server(void) {
  for (int attempt = 0; attempt < 10; attempt++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) abort();
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0) return fd;
    int e = errno;
    close(fd);
    if (e != EINTR) {
      fprintf(stderr, "fuzz_http_request: connect: %s\n", strerror(e));
      abort();
    }
  }
  fprintf(stderr, "fuzz_http_request: connect keeps being interrupted\n");
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = connect_server();
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  send_all(fd, data, size);
  shutdown(fd, SHUT_WR);
  drain(fd);
  close(fd);
  return 0;
}
