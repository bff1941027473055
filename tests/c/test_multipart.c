/* Tests of the multipart/form-data parser and builder (src/codec/multipart.c). */
#include <stdlib.h>
#include <string.h>

#include "kb/buf.h"
#include "kb/multipart.h"
#include "kbtest.h"

#define CT "multipart/form-data; boundary=XyZ"

static char err[KB_MULTIPART_ERRLEN];

/* Parses a NUL-free literal body. */
static int parse(kb_multipart *mp, const char *ct, const char *body) {
  return kb_multipart_parse(mp, ct, body, strlen(body), 0, err, sizeof err);
}

static int data_is(const kb_multipart_part *p, const char *want, size_t len) {
  return p->len == len && memcmp(p->data, want, len) == 0;
}

/* Expects the parse to fail with `code` and a message containing `msg`. */
static void expect_error(const char *ct, const char *body, size_t max_parts, int code,
                         const char *msg) {
  kb_multipart mp;
  int r = kb_multipart_parse(&mp, ct, body, body ? strlen(body) : 0, max_parts, err,
                             sizeof err);
  KB_CHECK(r == code);
  KB_CHECK(mp.nparts == 0 && mp.parts == NULL);
  if (!strstr(err, msg)) {
    fprintf(stderr, "  error \"%s\" lacks \"%s\"\n", err, msg);
    KB_CHECK(!"message");
  }
  KB_CHECK(strncmp(err, "multipart: ", 11) == 0);
}

static void test_form(void) {
  const char *body =
      "--XyZ\r\n"
      "Content-Disposition: form-data; name=\"title\"\r\n"
      "\r\n"
      "hello world\r\n"
      "--XyZ\r\n"
      "content-disposition: form-data; name=count\r\n"
      "\r\n"
      "3\r\n"
      "--XyZ\r\n"
      "Content-Disposition: form-data; name=\"upload\"; filename=\"pipe.yaml\"\r\n"
      "Content-Type:   application/x-yaml  \r\n"
      "X-Extra: 1\r\n"
      "\r\n"
      "a: 1\nb: 2\n\r\n"
      "--XyZ--\r\n";
  kb_multipart mp;
  KB_CHECK(parse(&mp, CT, body) == 0);
  KB_CHECK(mp.nparts == 3);
  if (mp.nparts != 3) return;
  KB_CHECK_STR(mp.parts[0].name, "title");
  KB_CHECK(mp.parts[0].filename == NULL);
  KB_CHECK(mp.parts[0].content_type == NULL);
  KB_CHECK(data_is(&mp.parts[0], "hello world", 11));
  KB_CHECK_STR(mp.parts[1].name, "count");
  KB_CHECK(data_is(&mp.parts[1], "3", 1));
  KB_CHECK_STR(mp.parts[2].name, "upload");
  KB_CHECK_STR(mp.parts[2].filename, "pipe.yaml");
  KB_CHECK_STR(mp.parts[2].content_type, "application/x-yaml");
  KB_CHECK(mp.parts[2].nheaders == 3);
  KB_CHECK_STR(mp.parts[2].headers[2].name, "X-Extra");
  KB_CHECK_STR(mp.parts[2].headers[2].value, "1");
  KB_CHECK(data_is(&mp.parts[2], "a: 1\nb: 2\n", 10));
  /* Data is not copied: it points into the body. */
  KB_CHECK(mp.parts[0].data > body && mp.parts[0].data < body + strlen(body));
  kb_multipart_free(&mp);
  KB_CHECK(mp.parts == NULL && mp.nparts == 0);
}

static void test_quoted_boundary(void) {
  const char *body =
      "--a:b=c?d (x)\r\n"
      "Content-Disposition: form-data; name=\"q\\\"uote\"\r\n"
      "\r\n"
      "v\r\n"
      "--a:b=c?d (x)--";
  kb_multipart mp;
  KB_CHECK(parse(&mp, "Multipart/Form-Data; charset=utf-8; BOUNDARY=\"a:b=c?d (x)\";", body) ==
           0);
  KB_CHECK(mp.nparts == 1);
  if (mp.nparts == 1) {
    KB_CHECK_STR(mp.parts[0].name, "q\"uote");
    KB_CHECK(data_is(&mp.parts[0], "v", 1));
  }
  kb_multipart_free(&mp);
}

static void test_binary(void) {
  /* CRLFs, NULs, "--" and a prefix of the delimiter inside the data. */
  static const char data[] = "\r\n--Xy\r\n\0\xff--XyZZ is not it\r\n\r\n";
  size_t dlen = sizeof data - 1;
  char body[512];
  size_t n = 0;
  const char *head =
      "preamble to ignore\r\n--XyZ  \t\r\n"
      "Content-Disposition: form-data; name=\"bin\"; filename=\"b.bin\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\n";
  memcpy(body + n, head, strlen(head));
  n += strlen(head);
  memcpy(body + n, data, dlen);
  n += dlen;
  const char *tail = "\r\n--XyZ--\r\nepilogue --XyZ junk";
  memcpy(body + n, tail, strlen(tail));
  n += strlen(tail);

  kb_multipart mp;
  KB_CHECK(kb_multipart_parse(&mp, CT, body, n, 0, err, sizeof err) == 0);
  KB_CHECK(mp.nparts == 1);
  if (mp.nparts == 1) {
    KB_CHECK(data_is(&mp.parts[0], data, dlen));
    KB_CHECK_STR(mp.parts[0].filename, "b.bin");
  }
  kb_multipart_free(&mp);
}

static void test_empty_parts(void) {
  kb_multipart mp;
  /* No parts at all. */
  KB_CHECK(parse(&mp, CT, "--XyZ--") == 0);
  KB_CHECK(mp.nparts == 0);
  kb_multipart_free(&mp);
  /* An empty value, and a part whose optional body is absent altogether. */
  const char *body =
      "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n\r\n"
      "--XyZ\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\n"
      "--XyZ--\r\n";
  KB_CHECK(parse(&mp, CT, body) == 0);
  KB_CHECK(mp.nparts == 2);
  if (mp.nparts == 2) {
    KB_CHECK(mp.parts[0].len == 0 && mp.parts[1].len == 0);
    KB_CHECK_STR(mp.parts[1].name, "b");
  }
  kb_multipart_free(&mp);
}

static void test_mixed(void) {
  /* Other multipart subtypes need no Content-Disposition. */
  const char *body = "--XyZ\r\n\r\nplain\r\n--XyZ\r\nContent-Type: text/x\r\n\r\nt\r\n--XyZ--";
  kb_multipart mp;
  KB_CHECK(parse(&mp, "multipart/mixed; boundary=XyZ", body) == 0);
  KB_CHECK(mp.nparts == 2);
  if (mp.nparts == 2) {
    KB_CHECK(mp.parts[0].name == NULL && mp.parts[0].nheaders == 0);
    KB_CHECK(data_is(&mp.parts[0], "plain", 5));
    KB_CHECK_STR(mp.parts[1].content_type, "text/x");
  }
  kb_multipart_free(&mp);
}

static void test_content_type_errors(void) {
  const char *body = "--XyZ--";
  expect_error(NULL, body, 0, KB_MULTIPART_ETYPE, "no Content-Type given");
  expect_error("text/plain", body, 0, KB_MULTIPART_ETYPE,
               "Content-Type is not multipart/...: \"text/plain\"");
  expect_error("multipart", body, 0, KB_MULTIPART_ETYPE, "is not multipart/");
  expect_error("multipart/form-data", body, 0, KB_MULTIPART_ETYPE,
               "Content-Type has no boundary");
  expect_error("multipart/form-data; charset=utf-8", body, 0, KB_MULTIPART_ETYPE,
               "Content-Type has no boundary");
  expect_error("multipart/form-data; boundary=\"\"", body, 0, KB_MULTIPART_ETYPE,
               "boundary is empty");
  expect_error("multipart/form-data; boundary", body, 0, KB_MULTIPART_ETYPE,
               "malformed Content-Type parameters");
  expect_error("multipart/form-data; boundary=\"XyZ", body, 0, KB_MULTIPART_ETYPE,
               "malformed Content-Type parameters");
  expect_error("multipart/form-data boundary=XyZ", body, 0, KB_MULTIPART_ETYPE,
               "malformed Content-Type parameters");
  expect_error("multipart/form-data; boundary=\"a@b\"", body, 0, KB_MULTIPART_ETYPE,
               "invalid character in boundary \"a@b\"");
  expect_error("multipart/form-data; boundary=\"ab \"", body, 0, KB_MULTIPART_ETYPE,
               "invalid character in boundary");
  char ct[200];
  snprintf(ct, sizeof ct, "multipart/form-data; boundary=%071d", 0);
  expect_error(ct, body, 0, KB_MULTIPART_ETYPE, "boundary is longer than 70 characters");
  snprintf(ct, sizeof ct, "multipart/form-data; boundary=%070d", 0); /* 70 is fine */
  char body70[100];
  snprintf(body70, sizeof body70, "--%070d--", 0);
  kb_multipart mp;
  KB_CHECK(parse(&mp, ct, body70) == 0);
  kb_multipart_free(&mp);
}

static void test_body_errors(void) {
  const char *disp = "Content-Disposition: form-data; name=\"a\"\r\n";
  char body[512];

  expect_error(CT, "", 0, KB_MULTIPART_ESYNTAX,
               "body does not contain the boundary delimiter \"--XyZ\"");
  expect_error(CT, "no delimiter --XyZ here", 0, KB_MULTIPART_ESYNTAX,
               "body does not contain the boundary delimiter");
  snprintf(body, sizeof body, "--XyZ\r\n%s\r\nvalue without end", disp);
  expect_error(CT, body, 0, KB_MULTIPART_ESYNTAX,
               "part 1 is not terminated by a boundary delimiter");
  snprintf(body, sizeof body, "--XyZ\r\n%s\r\nv\r\n--XyZ", disp);
  expect_error(CT, body, 0, KB_MULTIPART_ESYNTAX,
               "body ends after the delimiter of part 2 (no closing \"--XyZ--\")");
  snprintf(body, sizeof body, "--XyZ\r\n%s\r\nv\r\n--XyZxyz\r\n", disp);
  expect_error(CT, body, 0, KB_MULTIPART_ESYNTAX,
               "the delimiter before part 2 is not followed by CRLF or \"--\"");
  expect_error(CT, "--XyZ\r\nContent-Disposition: form-data; name=a\r\n--XyZ--", 0,
               KB_MULTIPART_ESYNTAX, "part 1: headers are not terminated by an empty line");
  expect_error(CT, "--XyZ\r\nContent-Disposition: form-data; name=a", 0, KB_MULTIPART_ESYNTAX,
               "part 1: headers are not terminated by an empty line");
  snprintf(body, sizeof body, "--XyZ\r\n%sFoo\r\n\r\nv\r\n--XyZ--", disp);
  expect_error(CT, body, 0, KB_MULTIPART_ESYNTAX, "part 1: malformed header line \"Foo");
  snprintf(body, sizeof body, "--XyZ\r\n%s: empty-name\r\n\r\nv\r\n--XyZ--", disp);
  expect_error(CT, body, 0, KB_MULTIPART_ESYNTAX, "part 1: malformed header line");
  snprintf(body, sizeof body, "--XyZ\r\n%sX-A: 1\r\n  folded\r\n\r\nv\r\n--XyZ--", disp);
  expect_error(CT, body, 0, KB_MULTIPART_ESYNTAX,
               "part 1: folded header lines are not supported");
  snprintf(body, sizeof body, "--XyZ\r\n%sX-A: a\rb\r\n\r\nv\r\n--XyZ--", disp);
  expect_error(CT, body, 0, KB_MULTIPART_ESYNTAX, "part 1: control character in header \"X-A\"");
  expect_error(CT, "--XyZ\r\nContent-Type: text/plain\r\n\r\nv\r\n--XyZ--", 0,
               KB_MULTIPART_ESYNTAX, "part 1: no Content-Disposition header");
  snprintf(body, sizeof body, "--XyZ\r\n%s\r\nv\r\n--XyZ\r\n\r\nno headers\r\n--XyZ--", disp);
  expect_error(CT, body, 0, KB_MULTIPART_ESYNTAX, "part 2: no Content-Disposition header");
  expect_error(CT, "--XyZ\r\nContent-Disposition: attachment; name=a\r\n\r\nv\r\n--XyZ--", 0,
               KB_MULTIPART_ESYNTAX,
               "part 1: Content-Disposition is not form-data: \"attachment; name=a\"");
  expect_error(CT, "--XyZ\r\nContent-Disposition: form-data; filename=a\r\n\r\nv\r\n--XyZ--",
               0, KB_MULTIPART_ESYNTAX, "part 1: Content-Disposition has no name");
  expect_error(CT, "--XyZ\r\nContent-Disposition: form-data; name=\"open\r\n\r\nv\r\n--XyZ--", 0,
               KB_MULTIPART_ESYNTAX,
               "part 1: malformed Content-Disposition \"form-data; name=\"open\"");
  expect_error(CT, "--XyZ\r\nContent-Disposition: form-data; name=a b\r\n\r\nv\r\n--XyZ--", 0,
               KB_MULTIPART_ESYNTAX, "part 1: malformed Content-Disposition");
}

static void test_limits(void) {
  const char *part = "--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n";
  char body[1024] = "";
  for (int i = 0; i < 3; i++) strcat(body, part);
  strcat(body, "--XyZ--");
  kb_multipart mp;
  KB_CHECK(kb_multipart_parse(&mp, CT, body, strlen(body), 3, err, sizeof err) == 0);
  KB_CHECK(mp.nparts == 3);
  kb_multipart_free(&mp);
  expect_error(CT, body, 2, KB_MULTIPART_ELIMIT, "multipart: more than 2 parts");

  /* Header lines and header bytes per part are bounded. */
  kb_buf b = KB_BUF_INIT;
  kb_buf_appendf(&b, "--XyZ\r\nContent-Disposition: form-data; name=a\r\n");
  for (int i = 0; i < KB_MULTIPART_MAX_HEADERS; i++) kb_buf_appendf(&b, "X-H%d: v\r\n", i);
  kb_buf_appendf(&b, "\r\nv\r\n--XyZ--");
  expect_error(CT, b.data, 0, KB_MULTIPART_ELIMIT, "part 1: more than 64 headers");
  kb_buf_clear(&b);
  kb_buf_appendf(&b, "--XyZ\r\nContent-Disposition: form-data; name=a\r\nX-Big: ");
  for (int i = 0; i < KB_MULTIPART_MAX_HEADER_BYTES; i++) kb_buf_putc(&b, 'x');
  kb_buf_appendf(&b, "\r\n\r\nv\r\n--XyZ--");
  expect_error(CT, b.data, 0, KB_MULTIPART_ELIMIT, "part 1: headers longer than 16384 bytes");
  kb_buf_free(&b);
}

static void test_build_roundtrip(void) {
  char bin[4096];
  for (size_t i = 0; i < sizeof bin; i++) bin[i] = (char)(i * 7 + (i >> 3));
  memcpy(bin + 100, "\r\n--kbrun-", 10); /* the builder's prefix in the data */
  kb_multipart_field f[] = {
    {"title", NULL, NULL, "hi", 2},
    {"we\"ird\r\nname", "a\"b.bin", NULL, bin, sizeof bin},
    {"doc", "p.yaml", "application/x-yaml", "a: 1\r\n", 6},
    {"empty", NULL, NULL, NULL, 0},
  };
  kb_multipart_body out;
  KB_CHECK(kb_multipart_build(f, 4, &out, err, sizeof err) == 0);
  KB_CHECK(strncmp(out.content_type, "multipart/form-data; boundary=kbrun-", 36) == 0);
  KB_CHECK(strlen(out.content_type) == 30 + 30);
  const char *bd = out.content_type + 30;
  KB_CHECK(memmem(bin, sizeof bin, bd, strlen(bd)) == NULL);
  KB_CHECK(memmem(out.data, out.len, "name=\"we%22ird%0D%0Aname\"; filename=\"a%22b.bin\"\r\n"
                  "Content-Type: application/octet-stream\r\n\r\n", 88) != NULL);

  kb_multipart mp;
  KB_CHECK(kb_multipart_parse(&mp, out.content_type, out.data, out.len, 0, err, sizeof err) == 0);
  KB_CHECK(mp.nparts == 4);
  if (mp.nparts == 4) {
    KB_CHECK_STR(mp.parts[0].name, "title");
    KB_CHECK(data_is(&mp.parts[0], "hi", 2));
    KB_CHECK(mp.parts[0].content_type == NULL);
    KB_CHECK_STR(mp.parts[1].name, "we%22ird%0D%0Aname");
    KB_CHECK_STR(mp.parts[1].filename, "a%22b.bin");
    KB_CHECK(data_is(&mp.parts[1], bin, sizeof bin));
    KB_CHECK_STR(mp.parts[2].content_type, "application/x-yaml");
    KB_CHECK(data_is(&mp.parts[2], "a: 1\r\n", 6));
    KB_CHECK(mp.parts[3].len == 0);
  }
  kb_multipart_free(&mp);

  /* Two builds pick different boundaries. */
  kb_multipart_body again;
  KB_CHECK(kb_multipart_build(f, 1, &again, err, sizeof err) == 0);
  KB_CHECK(strcmp(again.content_type, out.content_type) != 0);
  kb_multipart_body_free(&again);
  kb_multipart_body_free(&out);
  KB_CHECK(out.data == NULL);

  KB_CHECK(kb_multipart_build(NULL, 0, &out, err, sizeof err) == 0);
  KB_CHECK(out.len == 36 && memcmp(out.data, "--kbrun-", 8) == 0);
  KB_CHECK(kb_multipart_parse(&mp, out.content_type, out.data, out.len, 0, err, sizeof err) == 0);
  KB_CHECK(mp.nparts == 0);
  kb_multipart_free(&mp);
  kb_multipart_body_free(&out);
}

static void test_build_errors(void) {
  kb_multipart_body out;
  kb_multipart_field noname = {NULL, NULL, NULL, "x", 1};
  KB_CHECK(kb_multipart_build(&noname, 1, &out, err, sizeof err) == KB_MULTIPART_EINVAL);
  KB_CHECK_STR(err, "multipart: field 1 has no name");
  KB_CHECK(out.data == NULL);
  kb_multipart_field crlf = {"f", "f.txt", "text/plain\r\nX-Injected: 1", "x", 1};
  KB_CHECK(kb_multipart_build(&crlf, 1, &out, err, sizeof err) == KB_MULTIPART_EINVAL);
  KB_CHECK_STR(err, "multipart: field \"f\": content type contains a line break");
  kb_multipart_field nodata = {"f", NULL, NULL, NULL, 3};
  KB_CHECK(kb_multipart_build(&nodata, 1, &out, NULL, 0) == KB_MULTIPART_EINVAL);
}

int main(void) {
  KB_RUN(test_form);
  KB_RUN(test_quoted_boundary);
  KB_RUN(test_binary);
  KB_RUN(test_empty_parts);
  KB_RUN(test_mixed);
  KB_RUN(test_content_type_errors);
  KB_RUN(test_body_errors);
  KB_RUN(test_limits);
  KB_RUN(test_build_roundtrip);
  KB_RUN(test_build_errors);
  return kb_test_report();
}
