/* Error classes and messages of the HTTP client. A scenario branches on the
 * class; a person reads the message, which names the request (URL with its
 * credentials redacted), says what happened and suggests what to try. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "http_client_internal.h"
#include "kb/redact.h"

const char *kb_http_error_name(kb_http_error e) {
  switch (e) {
  case KB_HTTP_OK: return "ok";
  case KB_HTTP_ERR_CONNECT: return "connect";
  case KB_HTTP_ERR_TIMEOUT: return "timeout";
  case KB_HTTP_ERR_TLS: return "tls";
  case KB_HTTP_ERR_DNS: return "dns";
  case KB_HTTP_ERR_RESET: return "reset";
  case KB_HTTP_ERR_PROTOCOL: return "protocol";
  case KB_HTTP_ERR_TOO_MANY_REDIRECTS: return "too_many_redirects";
  case KB_HTTP_ERR_CANCELLED: return "cancelled";
  case KB_HTTP_ERR_RESOURCE: return "resource";
  case KB_HTTP_ERR_BODY_TOO_LARGE: return "body_too_large";
  case KB_HTTP_ERR_OTHER: break;
  }
  return "other";
}

static int out_of_descriptors(int e) { return e == EMFILE || e == ENFILE; }

kb_http_error kb__http_classify(CURLcode rc, int sock_errno) {
  switch (rc) {
  case CURLE_OK:
    return KB_HTTP_OK;
  case CURLE_COULDNT_CONNECT:
    if (out_of_descriptors(sock_errno) || sock_errno == ENOMEM || sock_errno == ENOBUFS)
      return KB_HTTP_ERR_RESOURCE;
    return KB_HTTP_ERR_CONNECT;
  case CURLE_OPERATION_TIMEDOUT:
    return KB_HTTP_ERR_TIMEOUT;
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
    return KB_HTTP_ERR_DNS;
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_ENGINE_NOTFOUND:
  case CURLE_SSL_ENGINE_SETFAILED:
  case CURLE_SSL_ENGINE_INITFAILED:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case CURLE_SSL_INVALIDCERTSTATUS:
  case CURLE_SSL_SHUTDOWN_FAILED:
  case CURLE_SSL_CLIENTCERT:
  case CURLE_USE_SSL_FAILED:
    return KB_HTTP_ERR_TLS;
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
    return KB_HTTP_ERR_RESET;
  case CURLE_WEIRD_SERVER_REPLY:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
  case CURLE_HTTP3:
  case CURLE_BAD_CONTENT_ENCODING:
    return KB_HTTP_ERR_PROTOCOL;
  case CURLE_TOO_MANY_REDIRECTS:
    return KB_HTTP_ERR_TOO_MANY_REDIRECTS;
  case CURLE_ABORTED_BY_CALLBACK:
    return KB_HTTP_ERR_CANCELLED;
  case CURLE_OUT_OF_MEMORY:
    return KB_HTTP_ERR_RESOURCE;
  default:
    return KB_HTTP_ERR_OTHER;
  }
}

/* "host:port" of the request URL, for hints. */
static void host_port(const char *url, char *out, size_t outsz) {
  snprintf(out, outsz, "the server");
  CURLU *u = curl_url();
  if (!u) return;
  char *host = NULL, *port = NULL;
  if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK)
    snprintf(out, outsz, "%s:%s", host, port);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
}

static void write_hint(char *out, size_t outsz, kb_http_error cls, CURLcode rc,
                       const char *url) {
  char hp[300];
  host_port(url, hp, sizeof hp);
  struct rlimit rl;
  switch (cls) {
  case KB_HTTP_ERR_CONNECT:
    snprintf(out, outsz, "is the server running and listening on %s?", hp);
    break;
  case KB_HTTP_ERR_TIMEOUT:
    snprintf(out, outsz, "%s did not answer in time: raise timeout/connect_timeout or "
             "check why the server is slow", hp);
    break;
  case KB_HTTP_ERR_TLS:
    /* a scenario's parameters (kb.connection) and kb.http's options share ca_file */
    snprintf(out, outsz, "give the server's CA with ca_file= (or SSL_CERT_FILE), a client "
             "certificate with client_cert=/client_key= (kb.http: cert_file/key_file), or "
             "insecure=true for testing; does %s speak TLS (https)?", hp);
    break;
  case KB_HTTP_ERR_DNS:
    snprintf(out, outsz, "check the host name in the URL, /etc/hosts and DNS");
    break;
  case KB_HTTP_ERR_RESET:
    snprintf(out, outsz, "%s closed the connection before a complete response: check "
             "the server's logs (crash, restart, connection limits)", hp);
    break;
  case KB_HTTP_ERR_PROTOCOL:
    snprintf(out, outsz, "%s did not answer valid HTTP: check http:// vs https:// and "
             "the http2 option", hp);
    break;
  case KB_HTTP_ERR_TOO_MANY_REDIRECTS:
    snprintf(out, outsz, "raise max_redirects or look for a redirect loop");
    break;
  case KB_HTTP_ERR_BODY_TOO_LARGE:
    snprintf(out, outsz, "raise the max_body option (bytes) if the body is meant to be "
             "this large, or read it piece by piece as a stream");
    break;
  case KB_HTTP_ERR_RESOURCE:
    if (rc == CURLE_OUT_OF_MEMORY) {
      snprintf(out, outsz, "out of memory: lower the concurrency");
    } else {
      getrlimit(RLIMIT_NOFILE, &rl);
      snprintf(out, outsz, "the run needs more file descriptors than allowed "
               "(ulimit -n is %llu): raise the limit (ulimit -n) or lower the "
               "concurrency or max_connections", (unsigned long long)rl.rlim_cur);
    }
    break;
  default:
    if (rc == CURLE_URL_MALFORMAT) snprintf(out, outsz, "check the URL");
    else if (rc == CURLE_UNSUPPORTED_PROTOCOL)
      snprintf(out, outsz, "only http:// and https:// URLs are supported");
    else if (rc == CURLE_READ_ERROR)
      snprintf(out, outsz, "could not read the request body: does every multipart file exist?");
    else out[0] = '\0';
    break;
  }
}

/* Lays out "safe_url\0detail\0hint\0message\0" in r->msg, then points the
 * response at the pieces (the buffer may move while it grows). */
void kb__http_describe_error(kb_http_request *r, CURLcode rc) {
  kb_http_response *resp = &r->resp;
  char hint[512], detail[CURL_ERROR_SIZE + 64];
  if (resp->error == KB_HTTP_ERR_RESOURCE && rc != CURLE_OUT_OF_MEMORY)
    snprintf(detail, sizeof detail, "cannot open a socket: %s", strerror(r->sock_errno));
  else { /* curl's text may quote what the server sent: redact it too */
    const char *text = r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc);
    kb_redact(text, strlen(text), detail, sizeof detail);
  }
  write_hint(hint, sizeof hint, resp->error, rc, r->url.data);

  kb_buf *b = &r->msg;
  b->len = 0;
  size_t ulen = kb_http_url_redact(r->url.data, NULL, 0);
  size_t dlen = strlen(detail), hlen = strlen(hint);
  size_t mlen = strlen(r->method) + 1 + ulen + 2 + dlen + (hlen ? hlen + 3 : 0);
  if (kb_buf_reserve(b, ulen + dlen + hlen + mlen + 4) != 0) {
    resp->message = resp->detail = resp->safe_url = curl_easy_strerror(rc);
    resp->hint = "";
    return;
  }
  char *p = b->data;
  kb_http_url_redact(r->url.data, p, ulen + 1);
  char *d = p + ulen + 1;
  memcpy(d, detail, dlen + 1);
  char *h = d + dlen + 1;
  memcpy(h, hint, hlen + 1);
  char *m = h + hlen + 1, *w = m;
  size_t methlen = strlen(r->method);
  memcpy(w, r->method, methlen);
  w += methlen;
  *w++ = ' ';
  memcpy(w, p, ulen);
  w += ulen;
  memcpy(w, ": ", 2);
  w += 2;
  memcpy(w, detail, dlen);
  w += dlen;
  if (hlen) {
    memcpy(w, " (", 2);
    memcpy(w + 2, hint, hlen);
    w += hlen + 2;
    *w++ = ')';
  }
  *w++ = '\0';
  b->len = (size_t)(w - p);
  resp->safe_url = p;
  resp->detail = d;
  resp->hint = h;
  resp->message = m;
}
