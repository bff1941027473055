/* Redaction of secrets in free text: log lines, error messages, reports.
 *
 * A pure function over bytes (no allocation in kb_redact, no global state,
 * safe from any thread). Each secret is replaced by KB_REDACTED; the text
 * around it is kept so a line stays readable:
 *
 *   Authorization: Bearer abc        -> Authorization: [REDACTED]
 *   Bearer eyJhbGciOi...             -> Bearer [REDACTED]
 *   ?access_token=abc&page=2         -> ?access_token=[REDACTED]&page=2
 *   {"token": "abc"}                 -> {"token": "[REDACTED]"}
 *   https://user:pass@host/x         -> https:// then "***@host/x"
 *   /f.tgz?X-Amz-Signature=ab&key=c -> /f.tgz?X-Amz-Signature=[REDACTED]&key=[REDACTED]
 *   eyJ...eyJ....sig (a JWT)         -> [REDACTED]
 *   -----BEGIN RSA PRIVATE KEY-----
 *   ...-----END RSA PRIVATE KEY----- -> [REDACTED]
 *
 * Rules, and where they stop (over-redacting a log line is cheap, leaking a
 * credential is not, so ambiguous cases lean towards redaction):
 *  - Sensitive keys: an identifier ([A-Za-z0-9_-]+, compared ignoring case,
 *    '_' and '-') ending in token, password, passwd, passphrase, secret,
 *    apikey, privatekey, keydata (kubeconfig client-key-data),
 *    authorization or cookie, followed by '=' or ':' (spaces allowed, the
 *    key may be quoted). The value is redacted: a quoted value up to its
 *    closing quote, an unquoted one up to a delimiter (space , ; & quote
 *    bracket), and for authorization / cookie headers (Authorization,
 *    Proxy-Authorization, Cookie, Set-Cookie) up to the end of the line.
 *    Only whole identifiers match: "tokenizer=x", "max_tokens=5" and
 *    "token_count=3" are left alone; "invalid token: expired" is redacted.
 *  - "Bearer" (any case) followed by a token of at least 8 characters from
 *    the RFC 6750 token68 alphabet: "Bearer of news" is left alone.
 *  - JWTs: "eyJ<b64url>.eyJ<b64url>.<b64url>" at a word boundary.
 *  - PEM private keys: from "-----BEGIN ...PRIVATE KEY-----" through the
 *    matching "-----END ...-----" (to the end of the text if truncated).
 *    Certificates and public keys are not secrets and are kept.
 *  - Query parameters (a key after '?', '&' or "&amp;", followed by '='):
 *    also keys ending in key, sig, signature, credential(s), auth, pass,
 *    pwd, session(id), code, and every x-amz-* / x-goog-* parameter of a
 *    pre-signed URL. Not in free text ("key=value" in a log line is kept).
 *  - URL userinfo: everything between "://" and the last '@' of the
 *    authority, with or without a password (a token used as the user name
 *    is as secret as a password), becomes "***".
 * Redacting already redacted text changes nothing. */
#ifndef KB_REDACT_H
#define KB_REDACT_H

#include <stddef.h>

#define KB_REDACTED "[REDACTED]"
#define KB_REDACTED_USERINFO "***" /* what a URL's user:password@ becomes */

/* Writes the redacted form of in[0..len) to out, snprintf-style: at most
 * outcap - 1 bytes plus a NUL (nothing if outcap is 0). Returns the length
 * of the complete redacted text; a result >= outcap means out was too
 * small. `in` may contain NUL bytes. */
size_t kb_redact(const char *in, size_t len, char *out, size_t outcap);

/* The redacted text in a malloc'ed, NUL-terminated buffer owned by the
 * caller (NULL if out of memory); its length is stored in *outlen if
 * outlen is not NULL. */
char *kb_redact_dup(const char *in, size_t len, size_t *outlen);

#endif
