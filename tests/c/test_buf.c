/* kb_buf (src/codec/buf.c), the one growable buffer of the code base: the
 * HTTP client's request and response buffers and kb.http streams use it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kb/buf.h"
#include "kbtest.h"

static void test_append_keeps_a_terminator(void) {
  kb_buf b = KB_BUF_INIT;
  KB_CHECK(kb_buf_append(&b, "abc", 3) == 0);
  KB_CHECK(b.len == 3 && b.cap > 3);
  KB_CHECK_STR(b.data, "abc");
  KB_CHECK(kb_buf_append(&b, "\0x", 2) == 0); /* embedded NULs count */
  KB_CHECK(b.len == 5 && memcmp(b.data, "abc\0x", 6) == 0);
  KB_CHECK(kb_buf_appendf(&b, "-%d", 42) == 0);
  KB_CHECK(b.len == 8 && memcmp(b.data + 5, "-42", 4) == 0);
  kb_buf_free(&b);
  KB_CHECK(b.data == NULL && b.len == 0 && b.cap == 0);
}

static void test_growth(void) {
  kb_buf b = KB_BUF_INIT;
  char piece[1000];
  memset(piece, 'x', sizeof piece);
  for (int i = 0; i < 100; i++) KB_CHECK(kb_buf_append(&b, piece, sizeof piece) == 0);
  KB_CHECK(b.len == 100000 && b.cap > b.len && b.data[b.len] == '\0');
  KB_CHECK(b.data[0] == 'x' && b.data[99999] == 'x');
  KB_CHECK(kb_buf_reserve(&b, SIZE_MAX - b.len) == -1); /* refused, unchanged */
  KB_CHECK(b.len == 100000);
  kb_buf_free(&b);
}

static void test_clear_and_reset(void) {
  kb_buf b = KB_BUF_INIT;
  kb_buf_reset(&b, 0); /* on an empty buffer: nothing to give back */
  KB_CHECK(b.data == NULL && b.len == 0);
  KB_CHECK(kb_buf_append(&b, "hello", 5) == 0);
  char *mem = b.data;
  size_t cap = b.cap;
  kb_buf_clear(&b);
  KB_CHECK(b.len == 0 && b.data == mem && b.cap == cap && b.data[0] == '\0');
  KB_CHECK(kb_buf_append(&b, "hello", 5) == 0);
  kb_buf_reset(&b, cap); /* within the limit: the memory stays */
  KB_CHECK(b.len == 0 && b.data == mem && b.cap == cap && b.data[0] == '\0');
  KB_CHECK(kb_buf_append(&b, "hello", 5) == 0);
  kb_buf_reset(&b, cap - 1); /* grew beyond it: given back */
  KB_CHECK(b.len == 0 && b.data == NULL && b.cap == 0);
  KB_CHECK(kb_buf_append(&b, "again", 5) == 0); /* usable after */
  KB_CHECK_STR(b.data, "again");
  kb_buf_free(&b);
}

static void test_reserve_then_commit(void) {
  kb_buf b = KB_BUF_INIT;
  KB_CHECK(kb_buf_reserve(&b, 10) == 0);
  KB_CHECK(b.cap >= 11);
  memcpy(b.data, "0123456789", 10);
  kb_buf_commit(&b, 10);
  KB_CHECK_STR(b.data, "0123456789");
  size_t n = 0;
  char *p = kb_buf_detach(&b, &n);
  KB_CHECK(n == 10 && p && strcmp(p, "0123456789") == 0);
  KB_CHECK(b.data == NULL && b.len == 0);
  free(p);
}

int main(void) {
  KB_RUN(test_append_keeps_a_terminator);
  KB_RUN(test_growth);
  KB_RUN(test_clear_and_reset);
  KB_RUN(test_reserve_then_commit);
  return kb_test_report();
}
