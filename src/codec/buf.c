/* kb_buf: a growable byte buffer (see include/kb/buf.h). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/buf.h"

#define KB_BUF_MIN_CAP 64

void kb_buf_init(kb_buf *b) {
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
}

void kb_buf_free(kb_buf *b) {
  free(b->data);
  kb_buf_init(b);
}

void kb_buf_clear(kb_buf *b) {
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

void kb_buf_reset(kb_buf *b, size_t keep) {
  if (b->cap > keep) kb_buf_free(b);
  else kb_buf_clear(b);
}

int kb_buf_reserve(kb_buf *b, size_t extra) {
  if (extra >= SIZE_MAX - b->len) return -1;
  size_t need = b->len + extra + 1; /* + NUL */
  if (need <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : KB_BUF_MIN_CAP;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) {
      cap = need;
      break;
    }
    cap *= 2;
  }
  char *p = realloc(b->data, cap);
  if (!p) return -1;
  b->data = p;
  b->cap = cap;
  return 0;
}

int kb_buf_append(kb_buf *b, const void *data, size_t n) {
  if (kb_buf_reserve(b, n)) return -1;
  if (n) memcpy(b->data + b->len, data, n);
  kb_buf_commit(b, n);
  return 0;
}

int kb_buf_appendf(kb_buf *b, const char *fmt, ...) {
  /* First try the spare capacity; format again only if it was too small. */
  if (kb_buf_reserve(b, 0)) return -1;
  size_t room = b->cap - b->len;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->data + b->len, room, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->data[b->len] = '\0';
    return -1;
  }
  if ((size_t)n >= room) {
    if (kb_buf_reserve(b, (size_t)n)) {
      b->data[b->len] = '\0';
      return -1;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  b->len += (size_t)n;
  return 0;
}

char *kb_buf_detach(kb_buf *b, size_t *len) {
  char *p = b->data;
  if (len) *len = b->len;
  kb_buf_init(b);
  return p;
}
