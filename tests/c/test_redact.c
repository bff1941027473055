/* Secret redaction (src/codec/redact.c) and the logger that applies it
 * (src/rt/log.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb/log.h"
#include "kb/redact.h"
#include "kbtest.h"

/* Checks redact(in) == want, and that redacting the result again changes
 * nothing (the marks are stable). */
#define EXPECT(in, want) expect_redacted(__FILE__, __LINE__, in, want)

static void expect_redacted(const char *file, int line, const char *in, const char *want) {
  size_t n;
  char *got = kb_redact_dup(in, strlen(in), &n);
  if (!got || strcmp(got, want) != 0 || n != strlen(want)) {
    fprintf(stderr, "%s:%d: redact(\"%s\")\n   got \"%s\"\n  want \"%s\"\n", file, line, in,
            got ? got : "(null)", want);
    kb_test_failed_checks++;
  }
  char *again = got ? kb_redact_dup(got, n, NULL) : NULL;
  if (!again || !got || strcmp(again, got) != 0) {
    fprintf(stderr, "%s:%d: not idempotent: \"%s\" -> \"%s\"\n", file, line, got ? got : "",
            again ? again : "(null)");
    kb_test_failed_checks++;
  }
  free(again);
  free(got);
}

static void test_ordinary_text_is_kept(void) {
  const char *keep[] = {
    "",
    "no secrets here",
    "tokenizer=bert max_tokens=512 token_count=3 tokens: 12",
    "passwords: 3 secrets: 2 secretName: db-creds kind: Secret",
    "Bearer of news",
    "bearer short",
    "Bearer [REDACTED]",
    "if token == nil then",
    "token",
    "https://example.com:8443/path?page=2&sort=name#top",
    "http://host/a@b (the @ is in the path)",
    "mail bob@example.com",
    "eyJ alone, eyJhbGciOi.notjwt",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYI\n-----END PUBLIC KEY-----",
    "{\"token\": null, \"password\": \"\"}",
    "2026-11-29T10:00:00.123Z run.create 201 in 0.25 s",
  };
  for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) EXPECT(keep[i], keep[i]);
}

static void test_bearer(void) {
  EXPECT("Bearer abcdefgh12345", "Bearer [REDACTED]");
  EXPECT("got bearer\tabc.def-ghi_jkl~+/== from env", "got bearer\t[REDACTED] from env");
  EXPECT("(BEARER sk-0123456789)", "(BEARER [REDACTED])");
}

static void test_headers(void) {
  EXPECT("Authorization: Bearer abc", "Authorization: [REDACTED]");
  EXPECT("> GET / HTTP/1.1\r\n> Authorization: Basic dXNlcjpwYXNz\r\n> Accept: */*\r\n",
         "> GET / HTTP/1.1\r\n> Authorization: [REDACTED]\r\n> Accept: */*\r\n");
  EXPECT("proxy-authorization:Basic abc", "proxy-authorization:[REDACTED]");
  EXPECT("Cookie: sid=abc; theme=dark", "Cookie: [REDACTED]");
  EXPECT("< Set-Cookie: sid=xyz; Path=/; HttpOnly\n< Server: x",
         "< Set-Cookie: [REDACTED]\n< Server: x");
  EXPECT("curl -H 'Authorization: Bearer abc' http://x", "curl -H 'Authorization: [REDACTED]");
}

static void test_key_value(void) {
  EXPECT("GET /api/v1/runs?access_token=abc123&page=2 200",
         "GET /api/v1/runs?access_token=[REDACTED]&page=2 200");
  EXPECT("token=abc", "token=[REDACTED]");
  EXPECT("password=hunter2 user=bob", "password=[REDACTED] user=bob");
  EXPECT("kbrun --password=hunter2 -v", "kbrun --password=[REDACTED] -v");
  EXPECT("GITHUB_TOKEN=ghp_abc123 HOME=/root", "GITHUB_TOKEN=[REDACTED] HOME=/root");
  EXPECT("client_secret: s3cr3t", "client_secret: [REDACTED]");
  EXPECT("x-api-key: k-123", "x-api-key: [REDACTED]");
  EXPECT("token: Bearer abcdef", "token: Bearer [REDACTED]");
  EXPECT("password = 'a b c', next", "password = '[REDACTED]', next");
  EXPECT("invalid token: expired", "invalid token: [REDACTED]");
  EXPECT("users:\n- user:\n    token: abc.def\n", "users:\n- user:\n    token: [REDACTED]\n");
  EXPECT("client-key-data: LS0tLS1CRUdJTi", "client-key-data: [REDACTED]");
}

static void test_json(void) {
  EXPECT("{\"token\": \"abc\", \"user\": \"bob\"}",
         "{\"token\": \"[REDACTED]\", \"user\": \"bob\"}");
  EXPECT("{\"access_token\":\"a\\\"b\",\"n\":1}", "{\"access_token\":\"[REDACTED]\",\"n\":1}");
  EXPECT("{\"password\": 12345}", "{\"password\": \"[REDACTED]\"}");
  EXPECT("{\"Authorization\": \"Bearer x\", \"Accept\": \"*/*\"}",
         "{\"Authorization\": \"[REDACTED]\", \"Accept\": \"*/*\"}");
  EXPECT("body={\\\"token\\\":\\\"abc\\\"}", "body={\\\"token\\\":\\\"[REDACTED]\\\"}");
  EXPECT("{\"auth\": {\"refreshToken\": \"r-1\"}}",
         "{\"auth\": {\"refreshToken\": \"[REDACTED]\"}}");
}

static void test_pem(void) {
  EXPECT("key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\ndef==\n"
         "-----END RSA PRIVATE KEY-----\ndone",
         "key:\n[REDACTED]\ndone");
  EXPECT("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk", "[REDACTED]");
  EXPECT("{\"key\": \"-----BEGIN PRIVATE KEY-----\\nMIIE\\n-----END PRIVATE KEY-----\\n\"}",
         "{\"key\": \"[REDACTED]\\n\"}");
  EXPECT("client-key-data: -----BEGIN EC PRIVATE KEY-----\nAB\n-----END EC PRIVATE KEY----- ok",
         "client-key-data: [REDACTED] ok");
}

static void test_jwt(void) {
  EXPECT("sa token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmN_Xg end",
         "sa token [REDACTED] end");
  EXPECT("[\"eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.\"]", "[\"[REDACTED]\"]");
}

static void test_url_userinfo(void) {
  EXPECT("https://user:pass@host/x", "https://***@host/x");
  EXPECT("git clone https://ghp_abc@github.com/o/r", "git clone https://***@github.com/o/r");
  EXPECT("postgres://u:p%40ss@db:5432/x?sslmode=off",
         "postgres://***@db:5432/x?sslmode=off");
  /* the HTTP client's own form of a redacted URL is redacted the same way */
  EXPECT("GET http://[REDACTED]@127.0.0.1:1/x", "GET http://***@127.0.0.1:1/x");
}

static void test_query_parameters(void) {
  EXPECT("GET https://b.s3.amazonaws.com/f.tgz?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKIA%2F1"
         "&X-Amz-Signature=abc123&v=2",
         "GET https://b.s3.amazonaws.com/f.tgz?X-Amz-Algorithm=[REDACTED]&X-Amz-Credential=[REDACTED]"
         "&X-Amz-Signature=[REDACTED]&v=2");
  EXPECT("https://h/p.yaml?key=k1&sig=s1&api-key=k2&code=c1&page=2",
         "https://h/p.yaml?key=[REDACTED]&sig=[REDACTED]&api-key=[REDACTED]&code=[REDACTED]&page=2");
  EXPECT("https://h/x?page=2&amp;signature=s1&amp;sort=a",
         "https://h/x?page=2&amp;signature=[REDACTED]&amp;sort=a");
  EXPECT("https://h/x?X-Goog-Signature=abc", "https://h/x?X-Goog-Signature=[REDACTED]");
  /* in free text these names are ordinary words */
  EXPECT("sort key=name code=200 sig=ok", "sort key=name code=200 sig=ok");
  EXPECT("https://h/x?monkey", "https://h/x?monkey");
}

static void test_several_in_one_line(void) {
  EXPECT("POST https://a:b@h/login?password=p1 Authorization: Bearer t",
         "POST https://***@h/login?password=[REDACTED] Authorization: [REDACTED]");
}

static void test_nul_bytes_and_buffer_limits(void) {
  static const char in[] = "a\0token=xyz";
  char out[64];
  size_t n = kb_redact(in, sizeof in - 1, out, sizeof out);
  KB_CHECK(n == 18);
  KB_CHECK(memcmp(out, "a\0token=[REDACTED]", 19) == 0);

  KB_CHECK(kb_redact("token=abc", 9, NULL, 0) == 16);
  char small[8];
  memset(small, 'z', sizeof small);
  KB_CHECK(kb_redact("token=abc", 9, small, sizeof small) == 16);
  KB_CHECK_STR(small, "token=[");
  char one[1] = {'z'};
  KB_CHECK(kb_redact("abc", 3, one, 1) == 3);
  KB_CHECK(one[0] == '\0');
}

/* Random text built from fragments that trip the matchers: the output
 * length agrees between a sizing call and a full one, a short buffer gets
 * a prefix of the full output, and (under ASan) nothing reads out of
 * bounds. Fixed seed, bounded loop. */
static void test_random_fragments(void) {
  static const char *const frags[] = {
    "token", "=", ":", " ", "\"", "'", "\\\"", "\n", "\r", "Bearer ", "abcdefgh12",
    "eyJhbGci", ".", "://", "@", "-----BEGIN ", "PRIVATE KEY", "-----", "-----END ",
    "Authorization", "Cookie", "{", "}", "[", "]", "x", "_", "-", "&", "\\", "[REDACTED]",
  };
  unsigned state = 7;
  char in[512], full[2048], part[64];
  for (int round = 0; round < 3000; round++) {
    size_t len = 0;
    int nfrag = (int)((state = state * 1103515245u + 12345u) >> 16) % 40;
    for (int f = 0; f < nfrag; f++) {
      state = state * 1103515245u + 12345u;
      const char *piece = frags[(state >> 16) % (sizeof frags / sizeof *frags)];
      size_t n = strlen(piece);
      if (len + n >= sizeof in) break;
      memcpy(in + len, piece, n);
      len += n;
    }
    size_t want = kb_redact(in, len, NULL, 0);
    size_t got = kb_redact(in, len, full, sizeof full);
    KB_CHECK(want == got && got < sizeof full && strlen(full) == got);
    size_t cut = kb_redact(in, len, part, sizeof part);
    KB_CHECK(cut == got);
    KB_CHECK(strncmp(part, full, sizeof part - 1) == 0 && strlen(part) < sizeof part);
  }
}

/* ---- the logger ---------------------------------------------------------- */

static int log_pipe[2];

static size_t read_log(char *buf, size_t cap) {
  ssize_t n = read(log_pipe[0], buf, cap - 1);
  buf[n > 0 ? n : 0] = '\0';
  return n > 0 ? (size_t)n : 0;
}

static void test_log_line_format_and_redaction(void) {
  char buf[256];
  kb_log_set_level(KB_LOG_INFO);
  kb_log(KB_LOG_WARN, "login with token=%s done", "hunter2");
  size_t n = read_log(buf, sizeof buf);
  /* 2026-11-29T10:00:00.123Z WARN login with token=[REDACTED] done\n */
  static const char tail[] = " WARN login with token=[REDACTED] done\n";
  KB_CHECK(n == 24 + sizeof tail - 1);
  KB_CHECK(buf[4] == '-' && buf[7] == '-' && buf[10] == 'T' && buf[13] == ':' &&
           buf[16] == ':' && buf[19] == '.' && buf[23] == 'Z');
  KB_CHECK(n > 24 && strcmp(buf + 24, tail) == 0);
  KB_CHECK(strstr(buf, "hunter2") == NULL);
  KB_CHECK(strchr(buf, '\033') == NULL); /* a pipe is no terminal: no color */
}

static void test_log_threshold(void) {
  char buf[256];
  kb_log_set_level(KB_LOG_ERROR);
  KB_CHECK(!kb_log_enabled(KB_LOG_WARN) && kb_log_enabled(KB_LOG_ERROR));
  kb_log(KB_LOG_WARN, "dropped");
  kb_log(KB_LOG_DEBUG, "dropped");
  KB_CHECK(read_log(buf, sizeof buf) == 0);
  kb_log(KB_LOG_ERROR, "kept\n");
  read_log(buf, sizeof buf);
  KB_CHECK(strlen(buf) > 24 && strcmp(buf + 24, " ERROR kept\n") == 0); /* one newline */
  kb_log_set_level(KB_LOG_OFF);
  kb_log(KB_LOG_ERROR, "dropped");
  KB_CHECK(read_log(buf, sizeof buf) == 0);
  kb_log_set_level(KB_LOG_DEBUG);
  kb_log(KB_LOG_DEBUG, "x");
  read_log(buf, sizeof buf);
  KB_CHECK(strlen(buf) > 24 && strcmp(buf + 24, " DEBUG x\n") == 0);
  kb_log_set_level(KB_LOG_INFO);
}

static void test_log_long_message(void) {
  size_t len = 3000;
  char *msg = malloc(len + 1);
  memset(msg, 'x', len);
  memcpy(msg + len - 20, " password=p4ssw0rd!!", 20);
  msg[len] = '\0';
  errno = ENOENT;
  kb_log(KB_LOG_INFO, "%s", msg);
  KB_CHECK(errno == ENOENT); /* logging keeps errno for the caller */
  char *buf = malloc(len + 128);
  size_t got = 0, n;
  while ((n = read_log(buf + got, len + 128 - got)) > 0) got += n;
  KB_CHECK(got == 24 + 6 + (len - 20) + strlen(" password=[REDACTED]") + 1);
  KB_CHECK(strstr(buf, "p4ssw0rd") == NULL);
  KB_CHECK(got > 21 && memcmp(buf + got - 21, " password=[REDACTED]\n", 21) == 0);
  free(buf);
  free(msg);
}

static void test_log_level_names(void) {
  kb_log_level l = KB_LOG_OFF;
  KB_CHECK(kb_log_level_parse("DEBUG", &l) == 0 && l == KB_LOG_DEBUG);
  KB_CHECK(kb_log_level_parse("warning", &l) == 0 && l == KB_LOG_WARN);
  KB_CHECK(kb_log_level_parse("off", &l) == 0 && l == KB_LOG_OFF);
  KB_CHECK(kb_log_level_parse("loud", &l) == -1 && l == KB_LOG_OFF);
  KB_CHECK_STR(kb_log_level_name(KB_LOG_WARN), "warn");
  KB_CHECK(kb_log_level_name((kb_log_level)42) == NULL);
}

int main(void) {
  KB_RUN(test_ordinary_text_is_kept);
  KB_RUN(test_bearer);
  KB_RUN(test_headers);
  KB_RUN(test_key_value);
  KB_RUN(test_json);
  KB_RUN(test_pem);
  KB_RUN(test_jwt);
  KB_RUN(test_url_userinfo);
  KB_RUN(test_query_parameters);
  KB_RUN(test_several_in_one_line);
  KB_RUN(test_nul_bytes_and_buffer_limits);
  KB_RUN(test_random_fragments);

  if (pipe(log_pipe) != 0) return 2;
  fcntl(log_pipe[0], F_SETFL, O_NONBLOCK);
  int old = kb_log_set_fd(log_pipe[1]);
  kb_log_set_color(true);
  KB_RUN(test_log_line_format_and_redaction);
  KB_RUN(test_log_threshold);
  KB_RUN(test_log_long_message);
  KB_RUN(test_log_level_names);
  kb_log_set_fd(old);
  close(log_pipe[0]);
  close(log_pipe[1]);
  return kb_test_report();
}
