-- Retry-After on 503 (and 429) in kb.kfp, kb.k8s and kb.argo: loopback
-- kb.httpd servers answer 503 with a Retry-After (seconds, or an HTTP-date
-- in each of RFC 9110's three forms), then 200. No simulator runs here, so
-- the scenario clock is the real one and Retry-After: 1 must cost the
-- client a real second: waits are asserted from below only (a loaded
-- machine may take longer), attempts exactly.
local kb = require "kb"
local T = require "kb.testing"
local json = require "kb.json"
local metrics = require "kb.metrics"
local retry = require "kb.retry"
local kfp = require "kb.kfp"
local k8s = require "kb.k8s"
local argo = require "kb.argo"

-- A backoff of a millisecond: a client that ignored Retry-After would come
-- back after 1 ms, not after the second the server asked for.
local POLICY = { base = 0.001, max_delay = 10, jitter = "none" }

local IMF = "!%a, %d %b %Y %H:%M:%S GMT"
local RFC850 = "!%A, %d-%b-%y %H:%M:%S GMT"
local function asctime(t)
  -- "Sun Nov  6 08:49:37 1994": the day of the month padded with a space
  return os.date("!%a %b ", t) .. string.format("%2d", tonumber(os.date("!%d", t)))
    .. os.date("! %H:%M:%S %Y", t)
end

-- A server whose first `fails` answers are 503 with the headers of
-- retry_after(now) ({["Retry-After"] =, Date =}), then 200 with `ok_body`.
-- srv.times holds the scenario time of each request.
local function server(fails, retry_after, ok_body)
  local s = { times = {} }
  s.srv = kb.httpd.listen { handler = function()
    s.times[#s.times + 1] = kb.now()
    if #s.times <= fails then
      local h = retry_after(os.time())
      h["Content-Type"] = "application/json"
      return 503, json.encode({ code = 14, message = "unavailable (test)" }), h
    end
    return 200, json.encode(ok_body), { ["Content-Type"] = "application/json" }
  end }
  return s
end

local function count(name, labels)
  local m = metrics.get(name, labels)
  return m and m:value() or 0
end

-- The three clients, each with the call the test makes and its metric names.
local CLIENTS = {
  { name = "kfp", body = { commit_sha = "abc" }, op = "healthz.get", prefix = "ra.kfp.",
    date = IMF,
    make = function(url, policy) return kfp.client { host = url, retry = policy, metrics_prefix = "ra." } end,
    call = function(c) return c:request { op = "healthz.get", path = "/healthz" } end },
  { name = "k8s", body = { major = "1", minor = "30" }, op = "k8s.get.version", prefix = "k8s.",
    date = RFC850,
    make = function(url, policy) return k8s.client { server = url, retry = policy } end,
    call = function(c) return c:request { verb = "get", resource = "version", path = "/version" } end },
  { name = "argo", body = { version = "v3.5.0" }, op = "argo.version", prefix = "argo.",
    date = "asctime",
    make = function(url, policy) return argo.client { host = url, retry = policy } end,
    call = function(c) return c:request { op = "version", path = "/api/v1/version" } end },
}

local function fmt_date(form, t)
  if form == "asctime" then return asctime(t) end
  return os.date(form, t)
end

for _, cl in ipairs(CLIENTS) do
  T.case(cl.name .. ": 503 with Retry-After: 1 waits a second of the client's clock, then succeeds", function()
    local s = server(1, function() return { ["Retry-After"] = "1" } end, cl.body)
    local c = cl.make(s.srv.url, POLICY)
    local retries0 = count(cl.prefix .. "retries", { op = cl.op, reason = "503" })
    local t0 = kb.now()
    local doc, r = cl.call(c)
    local waited = kb.now() - t0
    s.srv:close()
    T.same(doc, cl.body)
    T.eq(#s.times, 2, "two requests reached the server")
    T.eq(r.attempts, 2)
    T.ok(s.times[2] - s.times[1] >= 1, string.format("the retry came %.3f s after the 503, "
      .. "not after the 1 s of Retry-After", s.times[2] - s.times[1]))
    T.ok(waited >= 1, string.format("the call took %.3f s", waited))
    T.ok(r.elapsed >= 1, "the logical call's time holds the delay")
    T.eq(count(cl.prefix .. "retries", { op = cl.op, reason = "503" }) - retries0, 1)
  end)

  T.case(cl.name .. ": 503 with Retry-After as an HTTP-date (" .. cl.date .. ")", function()
    -- Date and Retry-After from the server's clock, one second apart: the
    -- delay is measured from the answer's Date, whatever the client's clock.
    local s = server(1, function(now)
      return { ["Retry-After"] = fmt_date(cl.date, now + 1), Date = os.date(IMF, now) }
    end, cl.body)
    local c = cl.make(s.srv.url, POLICY)
    local _, r = cl.call(c)
    s.srv:close()
    T.eq(#s.times, 2)
    T.eq(r.attempts, 2)
    T.ok(s.times[2] - s.times[1] >= 1, string.format("the retry came %.3f s after the 503",
      s.times[2] - s.times[1]))
  end)

  T.case(cl.name .. ": Retry-After is capped by max_delay and the retry budget", function()
    -- The server asks for an hour; the policy waits max_delay, and with one
    -- budget token gives up after the second attempt.
    local s = server(100, function() return { ["Retry-After"] = "3600" } end, cl.body)
    local c = cl.make(s.srv.url, { base = 0.001, max_delay = 0.2, jitter = "none",
      budget = { min = 1, ratio = 0 } })
    local exhausted0 = count(cl.prefix .. "retry_budget_exhausted", { op = cl.op })
    local t0 = kb.now()
    local ok, err = pcall(cl.call, c)
    local waited = kb.now() - t0
    s.srv:close()
    T.eq(ok, false)
    T.eq(err.class, "server")
    T.eq(err.status, 503)
    T.eq(err.retry_after, 3600, "the server's delay is on the error")
    T.eq(err.attempts, 2)
    T.eq(err.budget_exhausted, true)
    T.eq(#s.times, 2)
    T.ok(s.times[2] - s.times[1] >= 0.2, "waited max_delay before the second attempt")
    T.ok(waited >= 0.2)
    T.eq(count(cl.prefix .. "retry_budget_exhausted", { op = cl.op }) - exhausted0, 1)
  end)
end

T.case("kfp: 429 with a Retry-After date in the past is retried at once", function()
  local s = server(1, function() return { ["Retry-After"] = "Sun, 06 Nov 1994 08:49:37 GMT" } end,
    { commit_sha = "x" })
  -- A backoff of an hour: were the past date not 0, the call would sleep an
  -- hour (kb.timeout's minute is a bound on a hang, not a timing check).
  local c = kfp.client { host = s.srv.url, retry = { base = 3600, max_delay = 3600, jitter = "none" } }
  local ok, _, r = pcall(kb.timeout, 60, c.request, c, { op = "healthz.get", path = "/healthz" })
  s.srv:close()
  T.eq(ok, true, "answered without the backoff's hour")
  T.eq(r.attempts, 2)
  T.eq(#s.times, 2)
end)

T.case("parse_retry_after and parse_http_date: RFC 9110's forms", function()
  local t = 784111777 -- Sun, 06 Nov 1994 08:49:37 GMT
  T.eq(retry.parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), t)
  T.eq(retry.parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", t), t)
  T.eq(retry.parse_http_date("Sun Nov  6 08:49:37 1994"), t)
  T.eq(retry.parse_http_date("  Sun, 06 Nov 1994 08:49:37 GMT "), t, "surrounding white space")
  -- a two-digit year more than 50 years ahead is in the last century
  local y2030 = retry.parse_http_date("Tue, 01 Jan 2030 00:00:00 GMT")
  T.eq(retry.parse_http_date("Tuesday, 01-Jan-30 00:00:00 GMT", y2030), y2030)
  T.eq(retry.parse_http_date("Thursday, 01-Jan-81 00:00:00 GMT", y2030),
    retry.parse_http_date("Thu, 01 Jan 1981 00:00:00 GMT"))
  T.eq(retry.parse_http_date("Monday, 01-Jan-80 00:00:00 GMT", y2030),
    retry.parse_http_date("Mon, 01 Jan 2080 00:00:00 GMT"), "50 years ahead is not more than 50")
  T.eq(retry.parse_http_date("Thu, 29 Feb 2024 12:00:00 GMT"), 1709208000, "a leap day")
  for _, bad in ipairs({ "Sun, 06 Nov 1994 08:49:37 UTC", "sun, 06 Nov 1994 08:49:37 GMT",
      "Sun, 06 nov 1994 08:49:37 GMT", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 30 Feb 1994 08:49:37 GMT",
      "Sun, 06 Nov 1994 24:00:00 GMT", "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun Nov 6 08:49:37 1994",
      "1994-11-06T08:49:37Z", "", "Sun, 06 Nov 1994" }) do
    T.eq(retry.parse_http_date(bad), nil, bad)
  end
  T.eq(retry.parse_http_date(nil), nil)
  local s, form = retry.parse_retry_after("120")
  T.eq(s, 120); T.eq(form, "seconds")
  T.eq(retry.parse_retry_after("0"), 0)
  T.eq(retry.parse_retry_after("0.5"), 0.5)
  for _, bad in ipairs({ "-1", "1e3", "soon", "", "0x10", "1 2" }) do
    T.eq(retry.parse_retry_after(bad), nil, bad)
  end
  s, form = retry.parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", nil, t)
  T.eq(s, 10); T.eq(form, "date")
  T.eq(retry.parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", "Sun, 06 Nov 1994 08:49:40 GMT", t), 7,
    "from the answer's Date when it has one")
  T.eq(retry.parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", "garbage", t), 10,
    "a Date that does not parse: from now")
  T.eq(retry.parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", nil, t + 50), 0, "past: 0")
  -- only 429 and 503 carry a delay for us
  T.eq(retry.retry_after(503, { ["retry-after"] = "3" }), 3)
  T.eq(retry.retry_after(429, { ["retry-after"] = "3" }), 3)
  T.eq(retry.retry_after(502, { ["retry-after"] = "3" }), nil)
  T.eq(retry.retry_after(301, { ["retry-after"] = "3" }), nil)
  T.eq(retry.retry_after(503, {}), nil)
  T.eq(retry.retry_after(503, nil), nil)
end)

return T.run()
