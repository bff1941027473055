/* Secret redaction; the rules are documented in include/kb/redact.h.
 *
 * One left-to-right scan over the bytes. At each position the matchers are
 * tried in turn; a match says how many bytes of the original to keep (the
 * "Authorization: " before a header value), which mark replaces the secret
 * and how far the scan skips. Positions inside an identifier are never
 * tried, so a key like "tokenizer" is looked at once, as a whole. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kb/redact.h"

#define MARK KB_REDACTED
#define QUOTED_MARK "\"" MARK "\""
#define USERINFO_MARK KB_REDACTED_USERINFO

typedef struct {
  char *out;
  size_t cap;
  size_t n; /* length of the redacted text so far, written or not */
} sink;

typedef struct {
  size_t keep;      /* bytes of the original copied before the mark */
  size_t skip;      /* bytes of the original consumed in total */
  const char *mark; /* replacement for the secret */
} match;

static void emit(sink *o, const void *p, size_t len) {
  size_t room = o->cap ? o->cap - 1 : 0;
  if (o->n < room) memcpy(o->out + o->n, p, room - o->n < len ? room - o->n : len);
  o->n += len;
}

/* ---- character classes (ASCII only: the C locale must not matter) -------- */

static bool is_alnum(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Identifier characters; also the base64url alphabet of JWT segments. */
static bool is_word(unsigned char c) { return is_alnum(c) || c == '_' || c == '-'; }

static bool is_token68(unsigned char c) {
  return is_alnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/';
}

static bool is_hspace(unsigned char c) { return c == ' ' || c == '\t'; }

static bool is_value_end(unsigned char c) {
  return c <= ' ' || c == 0x7f || strchr("&;,\"')]}<>\\", c) != NULL;
}

/* Characters of a URL authority (userinfo@host:port); stops at the path. */
#define MAX_AUTHORITY 2048 /* bounds the scan of text full of "://" */
static bool is_authority(unsigned char c) {
  return c > ' ' && c != 0x7f && strchr("/?#\"'<>\\`", c) == NULL;
}

static unsigned char lower(unsigned char c) {
  return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

static bool has_prefix(const unsigned char *s, size_t avail, const char *lit) {
  size_t n = strlen(lit);
  return avail >= n && memcmp(s, lit, n) == 0;
}

static bool has_prefix_ci(const unsigned char *s, size_t avail, const char *lit) {
  size_t n = strlen(lit);
  if (avail < n) return false;
  for (size_t i = 0; i < n; i++)
    if (lower(s[i]) != (unsigned char)lit[i]) return false;
  return true;
}

static size_t skip_hspace(const unsigned char *s, size_t len, size_t j) {
  while (j < len && is_hspace(s[j])) j++;
  return j;
}

/* ---- PEM private keys ---------------------------------------------------- */

static bool match_pem(const unsigned char *s, size_t len, size_t i, match *m) {
  static const char begin[] = "-----BEGIN ", end[] = "-----END ";
  if (!has_prefix(s + i, len - i, begin)) return false;
  size_t label = i + sizeof begin - 1, j = label;
  while (j < len && s[j] != '-' && s[j] != '\n' && j - label < 64) j++;
  static const char kind[] = "PRIVATE KEY";
  size_t klen = sizeof kind - 1;
  if (!has_prefix(s + j, len - j, "-----") || j - label < klen ||
      memcmp(s + j - klen, kind, klen) != 0)
    return false;
  const unsigned char *e = memmem(s + j, len - j, end, sizeof end - 1);
  size_t stop = len; /* a truncated block is redacted to the end */
  if (e) {
    stop = (size_t)(e - s) + sizeof end - 1;
    while (stop < len && s[stop] != '-' && s[stop] != '\n') stop++;
    if (has_prefix(s + stop, len - stop, "-----")) stop += 5;
  }
  *m = (match){0, stop - i, MARK};
  return true;
}

/* ---- JWTs ---------------------------------------------------------------- */

static size_t jwt_segment(const unsigned char *s, size_t len, size_t j) {
  while (j < len && is_word(s[j])) j++;
  return j;
}

static bool match_jwt(const unsigned char *s, size_t len, size_t i, match *m) {
  if ((i > 0 && is_word(s[i - 1])) || !has_prefix(s + i, len - i, "eyJ")) return false;
  size_t j = jwt_segment(s, len, i);
  if (j - i < 4 || j >= len || s[j] != '.') return false;
  size_t k = j + 1;
  if (!has_prefix(s + k, len - k, "eyJ")) return false;
  j = jwt_segment(s, len, k);
  if (j - k < 4 || j >= len || s[j] != '.') return false;
  j = jwt_segment(s, len, j + 1); /* the signature may be empty (alg none) */
  *m = (match){0, j - i, MARK};
  return true;
}

/* ---- URL userinfo -------------------------------------------------------- */

static bool match_userinfo(const unsigned char *s, size_t len, size_t i, match *m) {
  if (i == 0 || !is_alnum(s[i - 1]) || !has_prefix(s + i, len - i, "://")) return false;
  size_t start = i + 3, at = 0;
  for (size_t j = start; j < len && j - start < MAX_AUTHORITY && is_authority(s[j]); j++)
    if (s[j] == '@') at = j;
  if (at <= start) return false;
  *m = (match){3, at - i, USERINFO_MARK};
  return true;
}

/* ---- Bearer tokens in free text ------------------------------------------ */

static bool match_bearer(const unsigned char *s, size_t len, size_t i, match *m) {
  if ((i > 0 && is_alnum(s[i - 1])) || !has_prefix_ci(s + i, len - i, "bearer")) return false;
  size_t j = i + 6;
  if (j >= len || !is_hspace(s[j])) return false;
  size_t tok = skip_hspace(s, len, j);
  j = tok;
  while (j < len && is_token68(s[j])) j++;
  while (j < len && s[j] == '=') j++;
  if (j - tok < 8) return false;
  *m = (match){tok - i, j - i, MARK};
  return true;
}

/* ---- key = value, key: value, "key": "value" ----------------------------- */

static const char *const sensitive_keys[] = {
  "token", "password", "passwd", "passphrase", "secret", "apikey", "privatekey",
  "keydata",
  /* header-like: the value runs to the end of the line */
  "authorization", "cookie",
};
enum { FIRST_HEADER_KEY = 8, N_SENSITIVE = sizeof sensitive_keys / sizeof *sensitive_keys };

/* Query parameters (after '?' or '&') are redacted under more names: a
 * URL's query carries signatures and API keys under short names that would
 * redact too much in free text (key=, sig=, code=). Suffixes, compared as
 * sensitive_keys; "x-amz-" and "x-goog-" (pre-signed URLs) are prefixes. */
static const char *const query_keys[] = {
  "key", "sig", "signature", "credential", "credentials", "auth", "pass", "pwd", "session",
  "sessionid", "code",
};
enum { N_QUERY = sizeof query_keys / sizeof *query_keys };

/* Does key end with suffix, ignoring case, '-' and '_'? */
static bool key_ends_with(const unsigned char *key, size_t klen, const char *suffix) {
  size_t n = strlen(suffix), j = klen;
  while (n > 0) {
    while (j > 0 && (key[j - 1] == '_' || key[j - 1] == '-')) j--;
    if (j == 0 || lower(key[j - 1]) != (unsigned char)suffix[n - 1]) return false;
    j--;
    n--;
  }
  return true;
}

static int sensitive_key(const unsigned char *key, size_t klen) {
  for (int k = 0; k < N_SENSITIVE; k++)
    if (key_ends_with(key, klen, sensitive_keys[k])) return k;
  return -1;
}

/* Is s[i..) the name of a query parameter: after '?' or '&' (also "&amp;",
 * a URL inside HTML) and followed by '='? */
static bool in_query(const unsigned char *s, size_t len, size_t i, size_t keyend) {
  if (i == 0 || keyend >= len || s[keyend] != '=') return false;
  if (s[i - 1] == '?' || s[i - 1] == '&') return true;
  return i >= 5 && memcmp(s + i - 5, "&amp;", 5) == 0;
}

static bool query_key(const unsigned char *key, size_t klen) {
  if (has_prefix_ci(key, klen, "x-amz-") || has_prefix_ci(key, klen, "x-goog-")) return true;
  for (int k = 0; k < N_QUERY; k++)
    if (key_ends_with(key, klen, query_keys[k])) return true;
  return false;
}

/* The end of a quoted value starting after its opening quote (or at the end
 * of the line if unterminated: JSON strings hold no raw newlines). */
static size_t quoted_end(const unsigned char *s, size_t len, size_t j, unsigned char q) {
  while (j < len && s[j] != q && s[j] != '\n')
    j += (q == '"' && s[j] == '\\' && j + 1 < len) ? 2 : 1; /* skip \" in JSON */
  return j;
}

static size_t escaped_quote_end(const unsigned char *s, size_t len, size_t j) {
  while (j < len && s[j] != '\n' && !has_prefix(s + j, len - j, "\\\"")) j++;
  return j;
}

static bool is_json_literal(const unsigned char *s, size_t n) {
  return (n == 4 && (memcmp(s, "null", 4) == 0 || memcmp(s, "true", 4) == 0)) ||
         (n == 5 && memcmp(s, "false", 5) == 0);
}

static bool match_key_value(const unsigned char *s, size_t len, size_t i, size_t keyend,
                            match *m) {
  /* The separator first: most words are not followed by one, and then
   * their name need not be compared with every key. */
  size_t j = keyend;
  unsigned char key_quote = 0;
  if (j < len && (s[j] == '"' || s[j] == '\'')) {
    key_quote = s[j++];
  } else if (has_prefix(s + j, len - j, "\\\"")) {
    j += 2;
  }
  j = skip_hspace(s, len, j);
  if (j >= len || (s[j] != '=' && s[j] != ':')) return false;
  int which = sensitive_key(s + i, keyend - i);
  if (which < 0 && in_query(s, len, i, keyend) && query_key(s + i, keyend - i)) which = 0;
  if (which < 0) return false;
  unsigned char sep = s[j++];
  if (j < len && s[j] == sep) return false; /* "token == x", "a::b" */
  size_t v = skip_hspace(s, len, j);
  if (v >= len || has_prefix(s + v, len - v, MARK)) return false;

  if (s[v] == '"' || s[v] == '\'') {
    size_t e = quoted_end(s, len, v + 1, s[v]);
    if (e == v + 1 || has_prefix(s + v + 1, len - v - 1, MARK)) return false;
    *m = (match){v + 1 - i, e - i, MARK};
    return true;
  }
  if (has_prefix(s + v, len - v, "\\\"")) {
    size_t e = escaped_quote_end(s, len, v + 2);
    if (e == v + 2 || has_prefix(s + v + 2, len - v - 2, MARK)) return false;
    *m = (match){v + 2 - i, e - i, MARK};
    return true;
  }
  /* A nested document or a PEM block is left to the scan, which finds the
   * secrets inside it. */
  if (s[v] == '{' || s[v] == '[' || has_prefix(s + v, len - v, "-----BEGIN ")) return false;
  size_t e = v;
  if (which >= FIRST_HEADER_KEY) {
    while (e < len && s[e] != '\r' && s[e] != '\n') e++;
  } else {
    /* "token: Bearer abc": the scheme alone is no secret, the credential is */
    size_t scheme = has_prefix_ci(s + v, len - v, "bearer") ? 6
                    : has_prefix_ci(s + v, len - v, "basic") ? 5 : 0;
    if (scheme && v + scheme < len && is_hspace(s[v + scheme]))
      e = v = skip_hspace(s, len, v + scheme);
    if (has_prefix(s + v, len - v, MARK)) return false;
    while (e < len && !is_value_end(s[e])) e++;
  }
  if (e == v) return false;
  bool json = key_quote == '"' && sep == ':';
  if (json && is_json_literal(s + v, e - v)) return false;
  *m = (match){v - i, e - i, json ? QUOTED_MARK : MARK};
  return true;
}

/* ---- the scan ------------------------------------------------------------ */

size_t kb_redact(const char *in, size_t len, char *out, size_t outcap) {
  const unsigned char *s = (const unsigned char *)in;
  sink o = {out, outcap, 0};
  size_t plain = 0, i = 0; /* s[plain..i) is copied unchanged */
  while (i < len) {
    unsigned char c = s[i];
    bool word_start = is_word(c) && (i == 0 || !is_word(s[i - 1]));
    size_t keyend = i;
    if (word_start)
      while (keyend < len && is_word(s[keyend])) keyend++;
    match m;
    bool hit = (c == '-' && match_pem(s, len, i, &m)) ||
               (c == 'e' && match_jwt(s, len, i, &m)) ||
               (c == ':' && match_userinfo(s, len, i, &m)) ||
               ((c == 'b' || c == 'B') && match_bearer(s, len, i, &m)) ||
               (word_start && match_key_value(s, len, i, keyend, &m));
    if (!hit) {
      i = word_start ? keyend : i + 1;
      continue;
    }
    emit(&o, s + plain, i + m.keep - plain);
    emit(&o, m.mark, strlen(m.mark));
    i += m.skip;
    plain = i;
  }
  emit(&o, s + plain, len - plain);
  if (outcap) out[o.n < outcap ? o.n : outcap - 1] = '\0';
  return o.n;
}

char *kb_redact_dup(const char *in, size_t len, size_t *outlen) {
  size_t n = kb_redact(in, len, NULL, 0);
  char *buf = malloc(n + 1);
  if (!buf) return NULL;
  kb_redact(in, len, buf, n + 1);
  if (outlen) *outlen = n;
  return buf;
}
