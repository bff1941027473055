/* kb_buf: a growable byte buffer.
 *
 *   kb_buf b = KB_BUF_INIT;
 *   if (kb_buf_append(&b, "id=", 3) || kb_buf_appendf(&b, "%d", 42)) ...ENOMEM
 *   use(b.data, b.len);
 *   kb_buf_free(&b);
 *
 * The buffer owns `data`. Capacity grows geometrically, so n appends cost
 * O(total bytes). Once anything was appended, data[len] is '\0' (the NUL is
 * not counted in len), so b.data can be used as a C string when the contents
 * have no embedded NUL. Functions return 0, or -1 when memory is exhausted
 * (the buffer is then unchanged). */
#ifndef KB_BUF_H
#define KB_BUF_H

#include <stddef.h>

typedef struct kb_buf {
  char *data;
  size_t len; /* bytes used */
  size_t cap; /* bytes allocated (always > len once allocated) */
} kb_buf;

#define KB_BUF_INIT {NULL, 0, 0}

void kb_buf_init(kb_buf *b);
void kb_buf_free(kb_buf *b);

/* Ensures room for `extra` more bytes plus the terminating NUL, so a caller
 * may write up to `extra` bytes at data + len and then kb_buf_commit(). */
int kb_buf_reserve(kb_buf *b, size_t extra);

int kb_buf_append(kb_buf *b, const void *data, size_t n);
int kb_buf_appendf(kb_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Forgets the contents but keeps the memory for reuse. */
void kb_buf_clear(kb_buf *b);

/* Forgets the contents; keeps the memory for reuse unless it grew beyond
 * `keep` bytes (a recycled buffer that once held a huge body gives it
 * back). */
void kb_buf_reset(kb_buf *b, size_t keep);

/* Hands the contents to the caller (who frees them with free()) and leaves
 * the buffer empty. Returns NULL for a buffer that never allocated. */
char *kb_buf_detach(kb_buf *b, size_t *len);

/* Marks n bytes written directly at data + len (after kb_buf_reserve) as used. */
static inline void kb_buf_commit(kb_buf *b, size_t n) {
  b->len += n;
  b->data[b->len] = '\0';
}

static inline int kb_buf_putc(kb_buf *b, char c) {
  if (b->len + 1 >= b->cap && kb_buf_reserve(b, 1)) return -1;
  b->data[b->len++] = c;
  b->data[b->len] = '\0';
  return 0;
}

#endif
